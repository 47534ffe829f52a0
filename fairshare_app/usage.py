"""Decayed, windowed usage sums from the history tables (the Django side of spec e.1).

    U[q, r] = sum_i a[q, r, i] * d_i  /  sum_i cap[r, i] * d_i,     d_i = 0.5 ** ((now - t_i) / h)

over the accounting intervals ``i`` inside the window, ``t_i`` the interval midpoint, ``a`` and
``cap`` resource-seconds.  Everything is a pure function of the stored history and ``now``:
there is no persisted "decayed so far" value that a duplicate, late or concurrent run could
decay twice, and a clock going backwards cannot make usage grow.  Decaying in k small steps is
therefore exactly one big step (tested), usage is never negative and never grows without new
samples.  Intervals entirely inside the window are summed in SQL (``POWER`` on both
PostgreSQL and SQLite) so a week of 1-minute history for 1000 queues is one aggregate query;
the at most two intervals crossing the window edges are pro-rated in Python.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from django.db.models import F, FloatField, Q, Sum, Value
from django.db.models.functions import Power

from fairshare_app.clock import from_epoch, to_epoch
from fairshare_app.models import AccountingInterval, UsageRecord

RESOURCES = ("gpu", "cpu", "memory")
MAX_HALF_LIVES = 1000


@dataclass
class UsageSums:
    """Decayed resource-seconds: ``by_queue[queue_id] = array([gpu, cpu, memory])``, ``capacity``."""

    by_queue: dict[int, np.ndarray] = field(default_factory=dict)
    capacity: np.ndarray = field(default_factory=lambda: np.zeros(3))
    window_start: datetime | None = None
    now: datetime | None = None

    def add(self, queue_id: int, values: np.ndarray) -> None:
        cur = self.by_queue.get(queue_id)
        self.by_queue[queue_id] = values.copy() if cur is None else cur + values

    def fractions(self, parents: dict[int, int | None] | None = None) -> dict[int, np.ndarray]:
        """U per queue in [0, 1]; with ``parents`` (id -> parent id) parent queues get the sum of
        their subtrees (KAI's queue metric includes descendants)."""
        totals: dict[int, np.ndarray] = {q: v.copy() for q, v in self.by_queue.items()}
        if parents:
            for qid, values in self.by_queue.items():
                seen, cur = {qid}, parents.get(qid)
                while cur is not None and cur not in seen:
                    seen.add(cur)
                    totals[cur] = totals.get(cur, np.zeros(3)) + values
                    cur = parents.get(cur)
        out = {}
        cap = self.capacity
        for qid, v in totals.items():
            with np.errstate(divide="ignore", invalid="ignore"):
                u = np.where(cap > 0, v / np.where(cap > 0, cap, 1.0), 0.0)
            out[qid] = np.clip(u, 0.0, 1.0)
        return out


def _weight_expr(mid: str, now_epoch: float, half_life_s: float):
    if half_life_s <= 0:
        return Value(1.0, output_field=FloatField())
    exponent = (F(mid) - Value(now_epoch, output_field=FloatField())) / Value(half_life_s, output_field=FloatField())
    return Power(Value(2.0, output_field=FloatField()), exponent, output_field=FloatField())


def _weight(t_epoch: float, now_epoch: float, half_life_s: float) -> float:
    return 1.0 if half_life_s <= 0 else float(2.0 ** ((t_epoch - now_epoch) / half_life_s))


def decayed_usage(*, now: datetime, window_start: datetime | None, half_life_s: float,
                  queue_ids: list[int] | None = None) -> UsageSums:
    """Decayed usage and capacity over ``[window_start, now]`` (``window_start=None``: empty window).

    ``half_life_s <= 0`` disables decay.  Intervals after ``now`` (a clock that went back)
    are ignored rather than weighted by factors above 1.
    """
    sums = UsageSums(window_start=window_start, now=now)
    if window_start is None or window_start >= now:
        return sums
    now_e = to_epoch(now)
    if half_life_s > 0:
        # Weights below 2**-MAX_HALF_LIVES are zero for any purpose, and PostgreSQL raises on
        # float underflow in POWER, so such old intervals are left out rather than computed.
        window_start = max(window_start, from_epoch(now_e - MAX_HALF_LIVES * half_life_s))
        if window_start >= now:
            return sums
    inside = Q(start__gte=window_start, end__lte=now)
    w = _weight_expr("mid_epoch", now_e, half_life_s)
    cap = AccountingInterval.objects.filter(inside).aggregate(
        g=Sum(F("capacity_gpu") * w, output_field=FloatField()),
        c=Sum(F("capacity_cpu") * w, output_field=FloatField()),
        m=Sum(F("capacity_memory") * w, output_field=FloatField()),
    )
    sums.capacity = np.array([cap["g"] or 0.0, cap["c"] or 0.0, cap["m"] or 0.0])
    records = UsageRecord.objects.filter(queue__isnull=False, interval__start__gte=window_start,
                                         interval__end__lte=now)
    if queue_ids is not None:
        records = records.filter(queue_id__in=queue_ids)
    wr = _weight_expr("interval__mid_epoch", now_e, half_life_s)
    for row in records.values("queue_id").annotate(
            g=Sum(F("gpu") * wr, output_field=FloatField()), c=Sum(F("cpu") * wr, output_field=FloatField()),
            m=Sum(F("memory") * wr, output_field=FloatField())):
        sums.add(row["queue_id"], np.array([row["g"] or 0.0, row["c"] or 0.0, row["m"] or 0.0]))

    # Intervals crossing a window edge: pro-rate by overlap, decay at the overlap's midpoint.
    edge = AccountingInterval.objects.filter(
        Q(start__lt=window_start, end__gt=window_start) | Q(start__lt=now, end__gt=now)).order_by("start")
    ws_e = to_epoch(window_start)
    for iv in edge:
        s, e = to_epoch(iv.start), to_epoch(iv.end)
        lo, hi = max(s, ws_e), min(e, now_e)
        if hi <= lo:
            continue
        frac = (hi - lo) / (e - s)
        factor = frac * _weight((lo + hi) / 2.0, now_e, half_life_s)
        sums.capacity = sums.capacity + factor * np.array([iv.capacity_gpu, iv.capacity_cpu, iv.capacity_memory])
        rec = iv.records.filter(queue__isnull=False)
        if queue_ids is not None:
            rec = rec.filter(queue_id__in=queue_ids)
        for row in rec.values("queue_id").annotate(g=Sum("gpu"), c=Sum("cpu"), m=Sum("memory")):
            sums.add(row["queue_id"], factor * np.array([row["g"] or 0.0, row["c"] or 0.0, row["m"] or 0.0]))
    return sums
