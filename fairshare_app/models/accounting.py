"""Usage history: accounting intervals, per-queue/tenant/user usage, per-queue share stats.

One :class:`AccountingInterval` row per accounted time range, unique by ``start``: that unique
key is what makes accounting idempotent (an interval can be recorded once).  Raw rows cover
``interval_seconds``; compaction merges old ones into hourly then daily buckets (``resolution``),
summing the resource-seconds, so a year of 1-minute accounting for 1000 queues stays a few
million rows.  Usage rows are sparse: only (queue, tenant, user) triples that held something.

Units: resource-*seconds* -- gpu device-seconds, cpu core-seconds, memory byte-seconds.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q


class AccountingState(models.Model):
    """Singleton (id=1) bookkeeping of the accounting task, locked by every run.

    ``accounted_until`` is the end of the last recorded interval: the next run accounts from
    there to the current grid boundary, whatever the number of triggers in between.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    accounted_until = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True, help_text="Clock value seen by the latest run.")
    max_clock_seen = models.DateTimeField(null=True, blank=True)
    runs = models.PositiveBigIntegerField(default=0)
    noop_runs = models.PositiveBigIntegerField(default=0, help_text="Duplicate or early triggers.")
    clock_regressions = models.PositiveBigIntegerField(default=0, help_text="Runs whose clock was behind.")
    skipped_seconds = models.FloatField(default=0.0, help_text="Missed time beyond the catch-up cap.")
    last_compacted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="accountingstate_singleton")]

    def __str__(self) -> str:
        return f"accounted until {self.accounted_until}"


class AccountingInterval(models.Model):
    """One accounted time range with the cluster capacity integrated over it."""

    start = models.DateTimeField(unique=True)
    end = models.DateTimeField(db_index=True)
    resolution = models.PositiveIntegerField(help_text="Nominal bucket size in seconds (raw interval, 3600, 86400).")
    covered_seconds = models.FloatField(help_text="Accounted seconds inside [start, end) (gaps excluded).")
    mid_epoch = models.FloatField(help_text="Midpoint (epoch seconds) where decay is evaluated.")
    samples = models.PositiveIntegerField(default=1, help_text="Raw intervals merged into this row.")
    capacity_gpu = models.FloatField(default=0.0)
    capacity_cpu = models.FloatField(default=0.0)
    capacity_memory = models.FloatField(default=0.0)
    recorded_at = models.DateTimeField()

    class Meta:
        ordering = ("start",)
        constraints = [
            models.CheckConstraint(condition=Q(end__gt=F("start")), name="accountinginterval_end_after_start"),
            models.CheckConstraint(
                condition=Q(capacity_gpu__gte=0) & Q(capacity_cpu__gte=0) & Q(capacity_memory__gte=0)
                & Q(covered_seconds__gte=0),
                name="accountinginterval_nonnegative"),
        ]
        indexes = [models.Index(fields=("resolution", "end"), name="fs_interval_res_end")]

    def __str__(self) -> str:
        return f"{self.start:%Y-%m-%d %H:%M:%S} +{self.resolution}s"


class UsageRecord(models.Model):
    """What one (queue, tenant, user) held during one interval, in resource-seconds.

    Names are copied so history survives a deleted queue or user.
    """

    interval = models.ForeignKey(AccountingInterval, on_delete=models.CASCADE, related_name="records")
    queue = models.ForeignKey("queues_app.Queue", null=True, on_delete=models.SET_NULL, related_name="+")
    queue_name = models.CharField(max_length=128)
    tenant = models.ForeignKey("queues_app.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    tenant_name = models.CharField(max_length=128, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    user_name = models.CharField(max_length=150, blank=True)
    gpu = models.FloatField(default=0.0, help_text="GPU device-seconds.")
    cpu = models.FloatField(default=0.0, help_text="CPU core-seconds.")
    memory = models.FloatField(default=0.0, help_text="Memory byte-seconds.")

    class Meta:
        ordering = ("interval_id", "queue_name", "tenant_name", "user_name")
        constraints = [
            models.CheckConstraint(condition=Q(gpu__gte=0) & Q(cpu__gte=0) & Q(memory__gte=0),
                                   name="usagerecord_nonnegative"),
        ]
        indexes = [
            models.Index(fields=("queue", "interval"), name="fs_record_queue_interval"),
            models.Index(fields=("tenant", "interval"), name="fs_record_tenant_interval"),
        ]

    def __str__(self) -> str:
        return f"{self.queue_name}/{self.user_name or '-'}@{self.interval_id}"


class QueueIntervalStat(models.Model):
    """Per-queue fair share (from the cycle's QueueStatus) and normalised usage at an interval,
    for the charts; compaction keeps time-weighted averages."""

    interval = models.ForeignKey(AccountingInterval, on_delete=models.CASCADE, related_name="stats")
    queue = models.ForeignKey("queues_app.Queue", null=True, on_delete=models.SET_NULL, related_name="+")
    queue_name = models.CharField(max_length=128)
    fair_share_gpu = models.FloatField(default=0.0)
    fair_share_cpu = models.FloatField(default=0.0)
    fair_share_memory = models.FloatField(default=0.0)
    usage_gpu = models.FloatField(default=0.0, help_text="Normalised usage U (0..1) at the interval end.")
    usage_cpu = models.FloatField(default=0.0)
    usage_memory = models.FloatField(default=0.0)

    class Meta:
        ordering = ("interval_id", "queue_name")
        constraints = [models.UniqueConstraint(fields=("interval", "queue_name"), name="queueintervalstat_unique")]

    def __str__(self) -> str:
        return f"{self.queue_name}@{self.interval_id}"


class NormalizedUsage(models.Model):
    """The normalised usage U per queue that the next cycles hand to the engine.

    Recomputed by every accounting run (KAI refreshes its usage cache every fetchInterval and
    keeps using stale data); the cycle reads this table with one query.
    """

    queue = models.OneToOneField("queues_app.Queue", on_delete=models.CASCADE, primary_key=True,
                                 related_name="normalized_usage")
    gpu = models.FloatField(default=0.0)
    cpu = models.FloatField(default=0.0)
    memory = models.FloatField(default=0.0)
    computed_at = models.DateTimeField()
    window_start = models.DateTimeField(null=True, blank=True)
    settings_version = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu__gte=0) & Q(gpu__lte=1) & Q(cpu__gte=0) & Q(cpu__lte=1)
                & Q(memory__gte=0) & Q(memory__lte=1),
                name="normalizedusage_fraction"),
        ]

    def __str__(self) -> str:
        return f"U({self.queue_id}) gpu={self.gpu:.4f}"
