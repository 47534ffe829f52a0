"""Writes the tenant API needs on top of the domain services: idempotent submission.

Kept apart from ``services/workloads.py`` (owned by the foundation) because the idempotency
record is an API concern: the domain service stays the one place that validates and stores
a workload, and this wrapper only decides whether to call it.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Callable

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction

from queues_app.errors import ApplicationError
from queues_app.models import IdempotencyKey, Workload
from queues_app.services.queues import queue_set_quota

MAX_IDEMPOTENCY_KEY_LENGTH = 255
IDEMPOTENCY_KEY_FIELD = "Idempotency-Key"
KEY_REUSED_MESSAGE = "This Idempotency-Key was already used for a different request."
KEY_ORPHANED_MESSAGE = "The workload created with this Idempotency-Key no longer exists; use a new key."


class IdempotencyConflict(ApplicationError):
    """A key reused with a different body (the API answers 422, not 400: the body itself is valid)."""


def request_fingerprint(payload: Any) -> str:
    """SHA-256 of the canonical JSON of the validated request (key order does not matter)."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def idempotency_scope(*, tenant_id: int | None, user_id: int | None) -> str:
    return f"tenant:{tenant_id}" if tenant_id is not None else f"user:{user_id}"


def validate_idempotency_key(key: str) -> str:
    key = key.strip()
    if not key or len(key) > MAX_IDEMPOTENCY_KEY_LENGTH or not key.isprintable():
        raise ApplicationError("Invalid Idempotency-Key.", extra={IDEMPOTENCY_KEY_FIELD: [
            f"Must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} printable characters."]})
    return key


@transaction.atomic
def workload_submit_idempotent(
    *,
    key: str,
    scope: str,
    fingerprint: str,
    submit: Callable[[], Workload],
    user: AbstractBaseUser | None = None,
) -> tuple[Workload, bool]:
    """Run ``submit`` (a closure over ``services.workload_submit``) at most once per key.

    Returns ``(workload, created)``; ``created`` is False when the key was seen before with the
    same fingerprint (the first result is returned).  The key row is inserted *before* the
    workload, inside the same transaction: a concurrent request with the same key blocks on
    the unique index until this one commits (PostgreSQL; SQLite serializes writers anyway),
    then sees the row and returns this workload, so two retries never create two workloads.
    If ``submit`` raises, the key row rolls back with everything else and a retry runs anew.
    """
    key = validate_idempotency_key(key)
    existing = IdempotencyKey.objects.select_related("workload").filter(scope=scope, key=key).first()
    if existing is None:
        try:
            with transaction.atomic():
                record = IdempotencyKey.objects.create(scope=scope, key=key, fingerprint=fingerprint, user=user)
        except IntegrityError:
            existing = IdempotencyKey.objects.select_related("workload").get(scope=scope, key=key)
        else:
            workload = submit()
            record.workload = workload
            record.save(update_fields=["workload"])
            return workload, True
    if existing.fingerprint != fingerprint:
        raise IdempotencyConflict("Idempotency-Key conflict.", extra={IDEMPOTENCY_KEY_FIELD: [KEY_REUSED_MESSAGE]})
    if existing.workload is None:
        raise IdempotencyConflict("Idempotency-Key conflict.", extra={IDEMPOTENCY_KEY_FIELD: [KEY_ORPHANED_MESSAGE]})
    return existing.workload, False


# ----------------------------------------------------------------------------- quotas and cycle triggers


@transaction.atomic
def queue_set_quotas(*, queue, quotas: dict[str, dict[str, Any]], actor: AbstractBaseUser | None = None,
                     source: str = "api") -> None:
    """Several ``queue_set_quota`` calls as one all-or-nothing edit (a PATCH of gpu and cpu
    either lands completely, with its audit rows, or not at all).  Errors are keyed
    ``<resource>.<field>``, the path in the request body ``{"gpu": {"limit": ...}}``."""
    errors: dict[str, list[str]] = {}
    for resource, values in quotas.items():
        try:
            with transaction.atomic():
                queue_set_quota(queue=queue, resource=resource, actor=actor, source=source, **values)
        except ApplicationError as exc:
            for k, v in exc.extra.items():
                errors[f"{resource}.{k}"] = v
    if errors:
        raise ApplicationError("Invalid quota.", extra=errors)


#: The scheduling cycle task (issue #4).  Enqueued by name so the API does not import it.
CYCLE_TASK_NAME = "queues_app.tasks.scheduling_cycle"


def cycle_trigger(*, actor: AbstractBaseUser | None = None, task_name: str = CYCLE_TASK_NAME) -> str:
    """Ask for a scheduling cycle now.  Enqueued after commit (never before the caller's
    writes are visible); the cycle itself is single-flight, so extra triggers are skipped."""
    from celery import current_app

    who = actor.get_username() if actor is not None else ""
    transaction.on_commit(lambda: current_app.send_task(task_name, kwargs={"trigger": f"api:{who}"[:64]}))
    return task_name


@transaction.atomic
def api_token_issue(*, user: AbstractBaseUser) -> str:
    """The user's API token (created on first use; one token per user, as DRF's authtoken)."""
    from rest_framework.authtoken.models import Token

    token, _ = Token.objects.get_or_create(user=user)
    return token.key
