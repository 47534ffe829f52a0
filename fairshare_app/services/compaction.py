"""Merge old accounting intervals into hourly, then daily buckets (keeps the history compact).

Raw intervals older than ``raw_retention`` become one row per UTC hour, hourly rows older than
``hourly_retention`` one row per UTC day.  Resource-seconds are summed, so every report and
undecayed total is unchanged; decay is then evaluated at the bucket's (covered-time weighted)
midpoint, an error of order (ln 2 * bucket / half-life)^2 / 24 relative -- 1e-7 for hourly
buckets and a one-week half-life.  Chart stats keep their time-weighted average.
Runs under the accounting lock, so it never races an accounting run; bounded per call.
"""
from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Sum

from fairshare_app.clock import db_now, floor_to_grid
from fairshare_app.models import AccountingInterval, AccountingState, QueueIntervalStat, UsageRecord
from fairshare_app.services.settings import fairshare_settings_get

HOUR, DAY = 3600, 86400
STAT_FIELDS = ("fair_share_gpu", "fair_share_cpu", "fair_share_memory", "usage_gpu", "usage_cpu", "usage_memory")


@transaction.atomic
def usage_compact(*, now: datetime | None = None, max_buckets: int = 500) -> int:
    """Merge what is old enough; returns the number of buckets written (0 = nothing to do)."""
    cfg = fairshare_settings_get()
    AccountingState.objects.get_or_create(pk=1)
    state = AccountingState.objects.select_for_update().get(pk=1)
    now = now or db_now()
    written = 0
    for target, retention in ((HOUR, cfg.raw_retention), (DAY, cfg.hourly_retention)):
        cutoff = now - retention
        written += _compact_level(target=target, cutoff=cutoff, budget=max_buckets - written)
        if written >= max_buckets:
            break
    state.last_compacted_at = now
    state.save(update_fields=["last_compacted_at"])
    return written


def _compact_level(*, target: int, cutoff: datetime, budget: int) -> int:
    if budget <= 0:
        return 0
    candidates = list(AccountingInterval.objects.filter(resolution__lt=target, end__lte=cutoff)
                      .order_by("start")[: budget * (target // 60 + 1)])
    groups: dict[datetime, list[AccountingInterval]] = defaultdict(list)
    for iv in candidates:
        groups[floor_to_grid(iv.start, target)].append(iv)
    written = 0
    for bucket_start in sorted(groups):
        if written >= budget:
            break
        if bucket_start + timedelta(seconds=target) > cutoff:
            continue  # the bucket is not complete yet
        members = groups[bucket_start]
        if any(floor_to_grid(iv.end - timedelta(microseconds=1), target) != bucket_start for iv in members):
            continue  # an interval straddles the bucket edge (changed interval setting): leave it raw
        _merge(members, target)
        written += 1
    return written


def _merge(members: list[AccountingInterval], target: int) -> AccountingInterval:
    ids = [iv.pk for iv in members]
    covered = sum(iv.covered_seconds for iv in members)
    mid = (sum(iv.mid_epoch * iv.covered_seconds for iv in members) / covered) if covered > 0 else \
        sum(iv.mid_epoch for iv in members) / len(members)
    records = list(UsageRecord.objects.filter(interval_id__in=ids)
                   .values("queue_id", "queue_name", "tenant_id", "tenant_name", "user_id", "user_name")
                   .annotate(g=Sum("gpu"), c=Sum("cpu"), m=Sum("memory")).order_by())
    weight = {iv.pk: iv.covered_seconds for iv in members}
    stat_acc: dict[str, dict] = {}
    for st in QueueIntervalStat.objects.filter(interval_id__in=ids):
        acc = stat_acc.setdefault(st.queue_name, {"queue_id": st.queue_id, "w": 0.0, **{f: 0.0 for f in STAT_FIELDS}})
        w = weight[st.interval_id]
        acc["w"] += w
        for f in STAT_FIELDS:
            acc[f] += getattr(st, f) * w
    merged = AccountingInterval(
        start=min(iv.start for iv in members), end=max(iv.end for iv in members), resolution=target,
        covered_seconds=covered, mid_epoch=mid, samples=sum(iv.samples for iv in members),
        capacity_gpu=sum(iv.capacity_gpu for iv in members), capacity_cpu=sum(iv.capacity_cpu for iv in members),
        capacity_memory=sum(iv.capacity_memory for iv in members), recorded_at=max(iv.recorded_at for iv in members),
    )
    AccountingInterval.objects.filter(pk__in=ids).delete()  # cascades records and stats
    merged.save()
    UsageRecord.objects.bulk_create([
        UsageRecord(interval=merged, queue_id=r["queue_id"], queue_name=r["queue_name"], tenant_id=r["tenant_id"],
                    tenant_name=r["tenant_name"], user_id=r["user_id"], user_name=r["user_name"],
                    gpu=r["g"] or 0.0, cpu=r["c"] or 0.0, memory=r["m"] or 0.0) for r in records])
    QueueIntervalStat.objects.bulk_create([
        QueueIntervalStat(interval=merged, queue_id=acc["queue_id"], queue_name=name,
                          **{f: (acc[f] / acc["w"] if acc["w"] > 0 else 0.0) for f in STAT_FIELDS})
        for name, acc in sorted(stat_acc.items())])
    return merged
