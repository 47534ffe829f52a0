"""Helpers shared by the services: validation into ApplicationError, generic update, locks."""
from __future__ import annotations

from typing import Any, Callable, Iterable, TypeVar

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import connection, models

from queues_app import constants
from queues_app.cycle.config import _num, cycle_config
from queues_app.errors import ApplicationError

M = TypeVar("M", bound=models.Model)


def validate(instance: models.Model, *, message: str, exclude: Iterable[str] | None = None,
             constraints: bool = True, unique: bool = True) -> None:
    """``full_clean()`` with errors re-raised as the one service error type.

    ``constraints=False`` leaves the model's constraints to the database: Django checks each one
    with a query of its own (a savepoint and a SELECT per constraint), which a hot path whose
    values are already bounded by the field validators and checked by the caller can skip;
    ``unique=False`` likewise skips the SELECT per unique field (a bulk write checks them once)."""
    try:
        instance.full_clean(exclude=list(exclude) if exclude else None, validate_unique=unique,
                            validate_constraints=constraints)
    except ValidationError as exc:
        raise ApplicationError.from_validation_error(exc, message) from exc


def model_update(*, instance: M, fields: Iterable[str], data: dict[str, Any], message: str,
                 check: Callable[[M], None] | None = None) -> tuple[M, bool]:
    """Copy the listed fields present in ``data``, validate (``full_clean``, then ``check``, e.g.
    the engine's rules), save only what changed.

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
    if check is not None:
        check(instance)
    if hasattr(instance, "version"):
        instance.version = (instance.version or 0) + 1
        changed.append("version")
    if any(f.name == "updated_at" for f in instance._meta.concrete_fields):
        changed.append("updated_at")
    instance.save(update_fields=changed)
    return instance, True


#: Ids per statement of a bulk write (well under PostgreSQL's 65,535 bind parameters).
ID_CHUNK = 5000


def id_chunks(ids: Iterable[int], size: int = ID_CHUNK) -> list[list[int]]:
    """Distinct ids in ascending order (the lock order of every bulk write), in runs of ``size``."""
    wanted = sorted({int(i) for i in ids})
    return [wanted[i:i + size] for i in range(0, len(wanted), size)]


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


def request_timeouts() -> tuple[float, float]:
    """``(lock_timeout, statement_timeout)`` of request transactions, in seconds.

    A request must never hold row locks as long as the cycle's apply waits for them
    (``KAI_CYCLE_LOCK_TIMEOUT``, default 10 s), or one tenant's cancel makes cycles fail:
    so its statements are cut at ``KAI_REQUEST_STATEMENT_TIMEOUT`` (default 4 s), below half
    of the cycle's, and it waits at most ``KAI_REQUEST_LOCK_TIMEOUT`` (default 2 s) for a lock
    the cycle holds (then the API answers 503 with Retry-After).
    """
    lock = _num("KAI_REQUEST_LOCK_TIMEOUT", 2.0, minimum=0.01)
    statement = _num("KAI_REQUEST_STATEMENT_TIMEOUT", 4.0, minimum=0.01)
    cycle = cycle_config().apply_lock_timeout
    if statement * 2 > cycle:
        raise ImproperlyConfigured(f"KAI_REQUEST_STATEMENT_TIMEOUT={statement:g} must be at most half of "
                                   f"KAI_CYCLE_LOCK_TIMEOUT={cycle:g}: a request's two write statements must not hold "
                                   "row locks longer than the cycle waits for them")
    return lock, statement


def bound_request_locks() -> None:
    """Bound how long the current (request) transaction waits for and holds row locks.

    PostgreSQL, for the rest of the transaction (``SET LOCAL``): ``lock_timeout``,
    ``statement_timeout`` (see :func:`request_timeouts`) and ``client_connection_check_interval``
    (1 s), so a statement whose client is gone (a web worker killed by its timeout) is cancelled
    within a second instead of running on for minutes with its locks.  Nothing on SQLite, where
    writers are serialized by BEGIN IMMEDIATE.
    """
    if connection.vendor != "postgresql":
        return
    lock, statement = request_timeouts()
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('lock_timeout', %s, true), set_config('statement_timeout', %s, true), "
                       "set_config('client_connection_check_interval', '1000ms', true)",
                       [f"{int(lock * 1000)}ms", f"{int(statement * 1000)}ms"])


#: Invalid items one refusal of a bulk import names (the first ones, in order).
IMPORT_ERRORS_SHOWN = 20


class ItemErrors(dict):
    """Field errors of a bulk write's items, keyed ``<label>[i].<field>`` (``jobs[12].tasks[0].node``):
    the first :data:`IMPORT_ERRORS_SHOWN` invalid items are named, so a file with thousands of bad
    rows still gets a readable answer."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label
        self._items: set[int] = set()

    def add(self, i: int, exc: ApplicationError) -> bool:
        """Record item ``i``'s error; False once enough items are named (the caller may stop)."""
        if len(self._items) < IMPORT_ERRORS_SHOWN:
            self._items.add(i)
            self.update((f"{self.label}[{i}].{field}", msgs) for field, msgs in exc.extra.items())
        return len(self._items) < IMPORT_ERRORS_SHOWN
