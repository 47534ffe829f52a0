"""GPU-hour budget writes (operators only: the API and the admin call these)."""
from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any, Mapping

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction

from fairshare_app.models import GpuBudget
from fairshare_app.services.common import validate
from queues_app.errors import ApplicationError
from queues_app.models import Queue

BUDGET_FIELDS = ("period", "gpu_hours", "policy", "is_active", "note")


def _decimal(value: Any, *, field: str) -> Decimal:
    if isinstance(value, bool) or value is None:
        raise ApplicationError("Invalid budget.", extra={field: ["Must be a number."]})
    try:
        return value if isinstance(value, Decimal) else Decimal(repr(value) if isinstance(value, float)
                                                                else str(value).strip())
    except (InvalidOperation, ValueError):
        raise ApplicationError("Invalid budget.", extra={field: ["Must be a number."]}) from None


DUPLICATE = "This queue already has a budget for that period."


def _save(budget: GpuBudget) -> GpuBudget:
    if budget.queue_id and GpuBudget.objects.filter(queue_id=budget.queue_id, period=budget.period).exclude(
            pk=budget.pk).exists():
        raise ApplicationError("Invalid budget.", extra={"period": [DUPLICATE]})
    validate(budget, message="Invalid budget.")
    try:
        with transaction.atomic():
            budget.save()
    except IntegrityError:
        raise ApplicationError("Invalid budget.", extra={"period": [DUPLICATE]}) from None
    return budget


@transaction.atomic
def budget_create(*, queue: Queue, gpu_hours: Any, period: str = "MONTHLY", policy: str = "deprioritize",
                  is_active: bool = True, note: str = "", actor: AbstractBaseUser | None = None) -> GpuBudget:
    budget = GpuBudget(queue=queue, gpu_hours=_decimal(gpu_hours, field="gpu_hours"), period=period, policy=policy,
                       is_active=is_active, note=note, created_by=actor)
    return _save(budget)


@transaction.atomic
def budget_update(*, budget: GpuBudget, data: Mapping[str, Any]) -> GpuBudget:
    unknown = sorted(set(data) - set(BUDGET_FIELDS))
    if unknown:
        raise ApplicationError("Invalid budget.", extra={k: ["Unknown or read-only field."] for k in unknown})
    for name, value in data.items():
        setattr(budget, name, _decimal(value, field=name) if name == "gpu_hours" else value)
    return _save(budget)


@transaction.atomic
def budget_delete(*, budget: GpuBudget) -> None:
    budget.delete()
