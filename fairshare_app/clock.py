"""One clock for accounting and decay: the database's (reliability.md 2.5).

Workers on different machines disagree about ``now()``; the database server is the one
clock they share.  PostgreSQL: ``clock_timestamp()`` (wall time, also inside a long
transaction, read after the accounting lock is taken).  SQLite is embedded, so the process
clock *is* the database clock.
"""
from __future__ import annotations

import math
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.db import connection
from django.utils import timezone

EPOCH = datetime(1970, 1, 1, tzinfo=dt_timezone.utc)


def db_now() -> datetime:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT clock_timestamp()")
            value = cursor.fetchone()[0]
        return value.astimezone(dt_timezone.utc)
    return timezone.now()


def to_epoch(t: datetime) -> float:
    """Seconds since the epoch, exact to the microsecond (no float detour through timestamp())."""
    delta = t - EPOCH
    return delta.days * 86400.0 + delta.seconds + delta.microseconds / 1e6


def from_epoch(seconds: float) -> datetime:
    whole = math.floor(seconds)
    micros = round((seconds - whole) * 1e6)
    return EPOCH + timedelta(seconds=whole, microseconds=micros)


def floor_to_grid(t: datetime, step_seconds: int) -> datetime:
    """The latest multiple of ``step_seconds`` since the epoch that is <= ``t`` (integer math)."""
    delta = t - EPOCH
    micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    step = int(step_seconds) * 1_000_000
    return EPOCH + timedelta(microseconds=(micros // step) * step)
