"""Settings of the scheduling cycle, read from Django settings with environment defaults.

Kept here (not in kaiplatform/settings.py) so the cycle's knobs live next to the code that
interprets them; any of them can still be overridden in settings.  The relations between the
limits are what keeps one worker from blocking the others (reliability.md 2.1, T-R21):

    engine budget < soft time limit < hard time limit < lease TTL < broker visibility timeout
    beat ``expires`` <= beat interval
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

CLUSTER_MODES = ("embedded", "kubernetes")


def _num(name: str, default: float, *, minimum: float) -> float:
    raw = getattr(settings, name) if hasattr(settings, name) else (os.environ.get(name, "").strip() or default)
    try:
        value = float(raw)
    except (TypeError, ValueError) as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from exc
    if not value == value or value in (float("inf"), float("-inf")) or value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be a finite number >= {minimum}")
    return value


@dataclass(frozen=True)
class CycleConfig:
    interval: float  # beat period (KAI_CYCLE_SECONDS)
    soft_time_limit: float  # the task gets SoftTimeLimitExceeded, the cycle is abandoned
    time_limit: float  # the worker child is killed
    lease_seconds: float  # a dead or frozen holder blocks other cycles at most this long
    event_retention_cycles: int  # SchedulingEvents of older applied cycles are deleted
    cycle_retention_hours: float  # SchedulingCycle rows older than this are deleted
    cluster_mode: str  # embedded | kubernetes
    apply_lock_timeout: float  # seconds an apply statement waits for a row lock (PostgreSQL)
    # seconds from the cycle's start after which the engine's evicting actions stop (the decisions
    # so far are applied; see scheduler_engine.budget); below the soft limit, leaving time to apply
    engine_budget: float = 25.0


def cycle_config() -> CycleConfig:
    interval = float(getattr(settings, "KAI_CYCLE_SECONDS", 5))
    soft = _num("KAI_CYCLE_SOFT_TIME_LIMIT", 50, minimum=1)
    hard = _num("KAI_CYCLE_TIME_LIMIT", 60, minimum=1)
    lease = _num("KAI_CYCLE_LEASE_SECONDS", 90, minimum=0.1)
    mode = str(getattr(settings, "KAI_CLUSTER_MODE", os.environ.get("KAI_CLUSTER_MODE", "embedded"))).strip().lower()
    if mode not in CLUSTER_MODES:
        raise ImproperlyConfigured(f"KAI_CLUSTER_MODE={mode!r} must be one of {', '.join(CLUSTER_MODES)}")
    return CycleConfig(
        interval=interval,
        soft_time_limit=soft,
        time_limit=hard,
        lease_seconds=lease,
        event_retention_cycles=int(_num("KAI_EVENT_RETENTION_CYCLES", 20, minimum=1)),
        cycle_retention_hours=_num("KAI_CYCLE_RETENTION_HOURS", 168, minimum=0.01),
        cluster_mode=mode,
        apply_lock_timeout=_num("KAI_CYCLE_LOCK_TIMEOUT", 10, minimum=0.1),
        engine_budget=_num("KAI_CYCLE_ENGINE_BUDGET", soft / 2, minimum=0),
    )


def broker_visibility_timeout() -> float:
    """Seconds the broker waits before it hands an unacknowledged task to another worker (the
    ``visibility_timeout`` transport option; Redis and SQS default to one hour)."""
    options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None) or {}
    return float(options.get("visibility_timeout", 3600.0))


def validate_cycle_config(cfg: CycleConfig | None = None, *, visibility_timeout: float | None = None) -> list[str]:
    """Problems with the limit relations above (empty = fine).

    Refused when a Celery worker or beat starts (it exits with the problems, see
    kaiplatform/celery.py), so a budget at or above the soft limit is refused at start instead of
    showing up as cycles abandoned with nothing applied; the ``queues_app.W002`` system check warns
    about them in ``manage.py check`` / ``migrate`` / ``runserver``."""
    cfg = cfg or cycle_config()
    if visibility_timeout is None:
        visibility_timeout = broker_visibility_timeout()
    problems = []
    if not cfg.soft_time_limit < cfg.time_limit:
        problems.append(f"soft time limit {cfg.soft_time_limit}s must be below the hard limit {cfg.time_limit}s")
    if not cfg.engine_budget < cfg.soft_time_limit:
        problems.append(f"engine time budget {cfg.engine_budget}s must be below the soft time limit "
                        f"{cfg.soft_time_limit}s (the decisions still have to be applied)")
    if not cfg.time_limit < cfg.lease_seconds:
        problems.append(f"hard time limit {cfg.time_limit}s must be below the lease TTL {cfg.lease_seconds}s")
    if not cfg.lease_seconds < visibility_timeout:
        problems.append(f"lease TTL {cfg.lease_seconds}s must be below the broker visibility timeout "
                        f"{visibility_timeout}s")
    return problems


def cycle_config_problems() -> list[str]:
    """Everything wrong with the cycle's settings: a value that cannot be read (not a number,
    negative, ...) or a broken relation between the limits; empty = fine."""
    try:
        cfg = cycle_config()
    except ImproperlyConfigured as exc:
        return [str(exc)]
    return validate_cycle_config(cfg)
