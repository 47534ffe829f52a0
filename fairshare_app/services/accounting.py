"""Usage accounting: record what each queue / tenant / user held, per interval, exactly once.

``usage_account()`` is the whole accounting step (the beat task calls it):

1. lock the :class:`AccountingState` row (``SELECT ... FOR UPDATE``; SQLite serialises
   writers with BEGIN IMMEDIATE), then read the one clock (the database's, :mod:`clock`);
2. the intervals to record are the epoch-aligned grid of ``interval_seconds`` from
   ``accounted_until`` up to the last boundary not after the clock.  A duplicate or early
   trigger finds none (no-op); a clock behind ``accounted_until`` finds none and is counted
   (``clock_regressions``); after an outage *every* missed interval is recorded from
   timestamps (task holding time = overlap of [workload start, finish or now) with each
   interval), up to ``max_catchup``, older missed time is logged and counted as skipped;
3. insert the intervals and their usage rows (``AccountingInterval.start`` is unique: a
   second writer that somehow got past the lock fails on the index and rolls back whole);
4. recompute the normalised usage the engine reads (:class:`NormalizedUsage`) and the
   per-queue chart stats at the new boundary.

Usage of a task is counted on its leaf queue; parents get their subtree's sum when U is
computed.  Capacity is the schedulable capacity (ready, not cordoned nodes minus what other
schedulers reserve), as the engine divides it; it is read at accounting time, so during a
caught-up outage the current node list stands for the whole gap.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
from django.db import transaction
from django.db.models import DecimalField, F, Sum

from fairshare_app.clock import db_now, floor_to_grid, to_epoch
from fairshare_app.models import (
    AccountingInterval,
    AccountingState,
    FairshareSettings,
    NormalizedUsage,
    QueueIntervalStat,
    UsageRecord,
)
from fairshare_app.services.settings import fairshare_settings_get
from fairshare_app.usage import decayed_usage
from fairshare_app.windows import window_start
from queues_app.choices import TASK_STATES_HOLDING, TaskState
from queues_app.models import Node, Queue, QueueStatus, Task

logger = logging.getLogger(__name__)

STATUS_ACCOUNTED = "accounted"
STATUS_UP_TO_DATE = "up_to_date"
STATUS_CLOCK_BEHIND = "clock_behind"


@dataclass(frozen=True)
class AccountingResult:
    status: str
    intervals: int
    accounted_from: datetime | None
    accounted_until: datetime | None
    skipped_seconds: float = 0.0


# ----------------------------------------------------------------------------- inputs


def cluster_capacity() -> np.ndarray:
    """Schedulable capacity now: [gpu devices, cpu cores, memory bytes]."""
    total = np.zeros(3)
    for g, dra, rg, c, rc, m, rm in Node.objects.filter(ready=True, unschedulable=False).values_list(
            "gpus", "dra_gpus", "reserved_gpus", "cpu_millis", "reserved_cpu_millis", "memory_bytes",
            "reserved_memory_bytes"):
        # DRA devices of GPU classes are GPUs of the cluster (scenario-format "Devices")
        total += [max(0.0, float(g) - float(rg)) + float(dra), max(0.0, float(c) - float(rc)) / 1000.0,
                  max(0.0, float(m) - float(rm))]
    return total


#: a task's GPUs: classic ones plus claimed devices of GPU classes
_GPU = DecimalField(max_digits=24, decimal_places=4)
_GROUP = ("workload__queue_id", "workload__queue__name", "workload__tenant_id", "workload__tenant__name",
          "workload__owner_id", "workload__owner__username")


@dataclass
class _Holding:
    key: tuple
    start: float
    end: float
    amount: np.ndarray  # gpu devices, cpu cores, memory bytes


def holdings(*, start: datetime, end: datetime) -> list[_Holding]:
    """Who held what during ``[start, end)``, from task states and workload timestamps.

    Tasks holding node resources now held them since their workload started (or ``start``);
    tasks that ended (Succeeded/Failed on a node) after ``start`` held them from the workload
    start to its finish.  Two grouped queries, whatever the number of tasks.
    """
    s_e, e_e = to_epoch(start), to_epoch(end)
    out: list[_Holding] = []
    current = (Task.objects.filter(state__in=TASK_STATES_HOLDING)
               .values(*_GROUP, "workload__started_at")
               .annotate(g=Sum(F("gpu") + F("dra_gpus"), output_field=_GPU), c=Sum("cpu_millis"), m=Sum("memory_bytes")))
    for row in current:
        began = row["workload__started_at"]
        hs = s_e if began is None else max(s_e, to_epoch(began))
        out.append(_Holding(tuple(row[k] for k in _GROUP), hs, e_e, _amount(row)))
    ended = (Task.objects.filter(state__in=(TaskState.SUCCEEDED, TaskState.FAILED), node__isnull=False,
                                 workload__started_at__isnull=False, workload__started_at__lt=end,
                                 workload__finished_at__gt=start)
             .values(*_GROUP, "workload__started_at", "workload__finished_at")
             .annotate(g=Sum(F("gpu") + F("dra_gpus"), output_field=_GPU), c=Sum("cpu_millis"), m=Sum("memory_bytes")))
    for row in ended:
        hs = max(s_e, to_epoch(row["workload__started_at"]))
        he = min(e_e, to_epoch(row["workload__finished_at"]))
        out.append(_Holding(tuple(row[k] for k in _GROUP), hs, he, _amount(row)))
    return [h for h in out if h.end > h.start and np.any(h.amount > 0)]


def _amount(row) -> np.ndarray:
    return np.array([float(row["g"] or 0), float(row["c"] or 0) / 1000.0, float(row["m"] or 0)])


def interval_bounds(start: datetime, end: datetime, step_seconds: int) -> list[tuple[datetime, datetime]]:
    """``[start, end)`` cut at the epoch grid of ``step_seconds`` (the first piece may be short
    when the interval setting changed)."""
    out, cur = [], start
    step = timedelta(seconds=step_seconds)
    while cur < end:
        nxt = min(end, floor_to_grid(cur, step_seconds) + step)
        out.append((cur, nxt))
        cur = nxt
    return out


# ----------------------------------------------------------------------------- the service


def _state_for_update() -> AccountingState:
    AccountingState.objects.get_or_create(pk=1)
    return AccountingState.objects.select_for_update().get(pk=1)


@transaction.atomic
def usage_account(*, now: datetime | None = None) -> AccountingResult:
    """Record every complete interval not yet recorded (see the module docstring).

    ``now`` is for tests and simulations (a clock they control); production passes nothing
    and the database clock is read after the lock is taken.
    """
    cfg = fairshare_settings_get()
    state = _state_for_update()
    now = now or db_now()
    step = int(cfg.interval_seconds)
    boundary = floor_to_grid(now, step)
    state.runs += 1
    behind = state.max_clock_seen is not None and now < state.max_clock_seen
    if behind:
        state.clock_regressions += 1
        logger.warning("usage accounting: clock %s is behind the latest clock seen %s; nothing decays or "
                       "accrues until it catches up", now.isoformat(), state.max_clock_seen.isoformat())
    state.last_run_at = now
    state.max_clock_seen = now if state.max_clock_seen is None else max(state.max_clock_seen, now)
    start = state.accounted_until if state.accounted_until is not None else boundary - timedelta(seconds=step)
    if boundary <= start:
        state.noop_runs += 1
        state.save()
        return AccountingResult(STATUS_CLOCK_BEHIND if now < start else STATUS_UP_TO_DATE, 0, None,
                                state.accounted_until)
    skipped = 0.0
    if boundary - start > cfg.max_catchup:
        new_start = floor_to_grid(boundary - cfg.max_catchup, step)
        if new_start < boundary - cfg.max_catchup:
            new_start += timedelta(seconds=step)
        skipped = (new_start - start).total_seconds()
        logger.warning("usage accounting: %.0f s missed between %s and %s exceed the catch-up cap %s; "
                       "that time is not accounted", skipped, start.isoformat(), new_start.isoformat(),
                       cfg.max_catchup)
        state.skipped_seconds += skipped
        start = new_start

    bounds = interval_bounds(start, boundary, step)
    _record(bounds, step=step, recorded_at=now)
    state.accounted_until = boundary
    state.save()
    usage = normalized_usage_refresh(cfg=cfg, now=boundary)
    _record_stats(bounds[-1][0], usage)
    return AccountingResult(STATUS_ACCOUNTED, len(bounds), bounds[0][0], boundary, skipped)


def _record(bounds: list[tuple[datetime, datetime]], *, step: int, recorded_at: datetime) -> None:
    cap = cluster_capacity()
    starts = np.array([to_epoch(s) for s, _ in bounds])
    ends = np.array([to_epoch(e) for _, e in bounds])
    intervals = AccountingInterval.objects.bulk_create([
        AccountingInterval(
            start=s, end=e, resolution=step,
            covered_seconds=float(ends[i] - starts[i]), mid_epoch=float((starts[i] + ends[i]) / 2.0), samples=1,
            capacity_gpu=float(cap[0] * (ends[i] - starts[i])), capacity_cpu=float(cap[1] * (ends[i] - starts[i])),
            capacity_memory=float(cap[2] * (ends[i] - starts[i])), recorded_at=recorded_at,
        ) for i, (s, e) in enumerate(bounds)
    ])
    if any(iv.pk is None for iv in intervals):  # backends without RETURNING
        by_start = dict(AccountingInterval.objects.filter(start__in=[s for s, _ in bounds]).values_list("start", "id"))
        ids = [by_start[s] for s, _ in bounds]
    else:
        ids = [iv.pk for iv in intervals]
    per_interval: dict[tuple[int, tuple], np.ndarray] = defaultdict(lambda: np.zeros(3))
    for h in holdings(start=bounds[0][0], end=bounds[-1][1]):
        overlap = np.clip(np.minimum(ends, h.end) - np.maximum(starts, h.start), 0.0, None)
        for i in np.nonzero(overlap > 0)[0]:
            per_interval[(int(i), h.key)] += h.amount * overlap[i]
    UsageRecord.objects.bulk_create([
        UsageRecord(interval_id=ids[i], queue_id=key[0], queue_name=key[1] or "", tenant_id=key[2],
                    tenant_name=key[3] or "", user_id=key[4], user_name=key[5] or "",
                    gpu=float(v[0]), cpu=float(v[1]), memory=float(v[2]))
        for (i, key), v in sorted(per_interval.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))
    ], batch_size=2000)


def normalized_usage_refresh(*, cfg: FairshareSettings | None = None, now: datetime | None = None
                             ) -> dict[int, np.ndarray]:
    """Recompute U for every queue at ``now`` and store it for the engine; returns {queue_id: U}."""
    cfg = cfg or fairshare_settings_get()
    now = now or db_now()
    ws = window_start(cfg, now)
    sums = decayed_usage(now=now, window_start=ws, half_life_s=cfg.half_life.total_seconds())
    parents = dict(Queue.objects.values_list("id", "parent_id"))
    usage = {q: u for q, u in sums.fractions(parents).items() if q in parents}
    NormalizedUsage.objects.exclude(queue_id__in=list(usage)).delete()
    existing = set(NormalizedUsage.objects.values_list("queue_id", flat=True))
    rows = [NormalizedUsage(queue_id=q, gpu=float(u[0]), cpu=float(u[1]), memory=float(u[2]), computed_at=now,
                            window_start=ws, settings_version=cfg.version) for q, u in usage.items()]
    NormalizedUsage.objects.bulk_create([r for r in rows if r.queue_id not in existing])
    NormalizedUsage.objects.bulk_update([r for r in rows if r.queue_id in existing],
                                        ["gpu", "cpu", "memory", "computed_at", "window_start", "settings_version"])
    return usage


def _record_stats(interval_start: datetime, usage: dict[int, np.ndarray]) -> None:
    interval = AccountingInterval.objects.get(start=interval_start)
    statuses = {s["queue_id"]: s for s in QueueStatus.objects.values(
        "queue_id", "fair_share_gpu", "fair_share_cpu", "fair_share_memory")}
    names = dict(Queue.objects.values_list("id", "name"))
    rows = []
    for qid in sorted(set(statuses) | set(usage)):
        if qid not in names:
            continue
        s = statuses.get(qid, {})
        u = usage.get(qid, np.zeros(3))
        rows.append(QueueIntervalStat(
            interval=interval, queue_id=qid, queue_name=names[qid],
            fair_share_gpu=float(s.get("fair_share_gpu", 0.0)), fair_share_cpu=float(s.get("fair_share_cpu", 0.0)),
            fair_share_memory=float(s.get("fair_share_memory", 0.0)),
            usage_gpu=float(u[0]), usage_cpu=float(u[1]), usage_memory=float(u[2])))
    QueueIntervalStat.objects.bulk_create(rows)

