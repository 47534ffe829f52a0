"""Usage window and reset boundaries for the current settings.

The reset-time arithmetic (tumbling windows, calendar resets, the exact-boundary rule) is the
engine's (``scheduler_engine.usage``), reached through ``queues_app.cycle.engine_io`` -- the only
Django module allowed to import the engine.  This module only combines the settings.
"""
from __future__ import annotations

import calendar
from datetime import datetime, timedelta

from fairshare_app.choices import BudgetPeriod, ResetPeriod, WindowType
from fairshare_app.models import FairshareSettings
from queues_app.cycle.engine_io import usage_period_reset, usage_window_start


def window_start(cfg: FairshareSettings, now: datetime) -> datetime | None:
    """Start of the usage window at ``now``; ``None`` = an empty window (tumbling start in the future).

    Sliding: ``now - window_size``, cut at the latest calendar reset if one is configured.
    Tumbling: the latest calendar reset if ``reset_period`` is set, else the latest
    ``tumbling_start + k * window_size``.  At an exact boundary the previous one is returned
    (spec e.1: the window that just ended is still current).
    """
    reset = None if cfg.reset_period == ResetPeriod.NONE else usage_period_reset(cfg.reset_period, now)
    if cfg.window_type == WindowType.TUMBLING:
        if reset is not None:
            return reset
        return usage_window_start("tumbling", now, window_size=cfg.window_size, tumbling_start=cfg.tumbling_start)
    start = usage_window_start("sliding", now, window_size=cfg.window_size)
    return start if reset is None else max(start, reset)


def reset_start(period: str, now: datetime) -> datetime | None:
    """Latest boundary of a Slurm-named period (``NONE`` -> None)."""
    return usage_period_reset(period, now)


def _add_months(t: datetime, months: int) -> datetime:
    index = t.month - 1 + months
    year, month = t.year + index // 12, index % 12 + 1
    day = min(t.day, calendar.monthrange(year, month)[1])
    return t.replace(year=year, month=month, day=day)


def period_bounds(period: str, now: datetime) -> tuple[datetime, datetime]:
    """``[start, end)`` of the budget period containing ``now`` (calendar periods, UTC).

    At an exact boundary the period that just ended is returned (the engine's rule), so a
    report run at 00:00 on the 1st still shows the month that just closed.
    """
    start = usage_period_reset(period, now)
    if start is None:
        raise ValueError(f"period: {period!r} has no boundaries")
    return start, start + _length(period, start)


def _length(period: str, start: datetime) -> timedelta:
    if period == BudgetPeriod.DAILY:
        return timedelta(days=1)
    if period == BudgetPeriod.WEEKLY:
        return timedelta(days=7)
    months = {BudgetPeriod.MONTHLY: 1, BudgetPeriod.QUARTERLY: 3, BudgetPeriod.YEARLY: 12}[period]
    return _add_months(start, months) - start
