"""Helpers shared by the services: validation into ApplicationError, generic update, locks."""
from __future__ import annotations

from typing import Any, Iterable, TypeVar

from django.core.exceptions import ValidationError
from django.db import connection, models

from queues_app import constants
from queues_app.errors import ApplicationError

M = TypeVar("M", bound=models.Model)


def validate(instance: models.Model, *, message: str, exclude: Iterable[str] | None = None) -> None:
    """``full_clean()`` with errors re-raised as the one service error type."""
    try:
        instance.full_clean(exclude=list(exclude) if exclude else None)
    except ValidationError as exc:
        raise ApplicationError.from_validation_error(exc, message) from exc


def model_update(*, instance: M, fields: Iterable[str], data: dict[str, Any], message: str) -> tuple[M, bool]:
    """Copy the listed fields present in ``data``, validate, save only what changed.

    Returns ``(instance, changed)``; bumps ``version`` when the model has one and something
    changed, so cycles holding an older snapshot notice.
    """
    changed: list[str] = []
    for name in fields:
        if name in data and getattr(instance, name) != data[name]:
            setattr(instance, name, data[name])
            changed.append(name)
    if not changed:
        return instance, False
    validate(instance, message=message)
    if hasattr(instance, "version"):
        instance.version = (instance.version or 0) + 1
        changed.append("version")
    if any(f.name == "updated_at" for f in instance._meta.concrete_fields):
        changed.append("updated_at")
    instance.save(update_fields=changed)
    return instance, True


def advisory_xact_lock(key_name: str) -> None:
    """Serialize a class of writes until the end of the current transaction.

    PostgreSQL: ``pg_advisory_xact_lock`` (released at commit/rollback, also if the process
    dies).  SQLite: nothing to do, because settings open every atomic block with BEGIN
    IMMEDIATE, which already serializes writers for the whole transaction.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [constants.ADVISORY_LOCK_KEYS[key_name]])


def bounded_int(value: Any, *, field: str, minimum: int, maximum: int) -> int:
    """Coerce to int for service arguments that are not model fields (e.g. ``replicas``)."""
    if isinstance(value, bool):
        raise ApplicationError("Invalid input.", extra={field: ["Must be an integer."]})
    try:
        as_int = int(value)
    except (TypeError, ValueError, OverflowError):
        raise ApplicationError("Invalid input.", extra={field: ["Must be an integer."]}) from None
    if isinstance(value, float) and value != as_int:
        raise ApplicationError("Invalid input.", extra={field: ["Must be a whole number."]})
    if not minimum <= as_int <= maximum:
        raise ApplicationError("Invalid input.", extra={field: [f"Must be between {minimum} and {maximum}."]})
    return as_int
