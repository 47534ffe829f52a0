"""The operator-edited fair-share settings object (a singleton row)."""
from __future__ import annotations

import math
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from fairshare_app.choices import ResetPeriod, SshareAlgorithm, WindowType

#: Bounds: absurd values are field errors, not overflows inside the decay math.
MIN_INTERVAL_SECONDS = 1
MAX_INTERVAL_SECONDS = 3600
MAX_WINDOW = timedelta(days=366)
MAX_HALF_LIFE = timedelta(days=3650)
MAX_K_VALUE = 100.0
MAX_CATCHUP = timedelta(days=31)
MAX_RETENTION = timedelta(days=3660)
MAX_BILLING_WEIGHT = 1e6
DEFAULT_TUMBLING_START = datetime(2026, 1, 1, tzinfo=dt_timezone.utc)


class FairshareSettings(models.Model):
    """Window, decay, kValue, accounting interval and retention (one row, id=1).

    Edited by operators in the admin through ``fairshare_settings_update`` (validation +
    ``version`` bump).  The accounting task and the usage selectors read it; the cycle gets
    ``kValue`` and the normalised usage from ``fairshare_app.selectors.engine_inputs``.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    interval_seconds = models.PositiveIntegerField(
        default=60, help_text="Accounting interval: usage is recorded per interval of this many seconds "
                              f"({MIN_INTERVAL_SECONDS}..{MAX_INTERVAL_SECONDS}), aligned to the epoch.")
    window_type = models.CharField(max_length=16, choices=WindowType.choices, default=WindowType.SLIDING)
    window_size = models.DurationField(
        default=timedelta(days=7), help_text="Sliding: how far back usage counts. Tumbling: the period between "
                                             "resets, counted from the tumbling start (unless a reset period is set).")
    tumbling_start = models.DateTimeField(default=DEFAULT_TUMBLING_START,
                                          help_text="First reset of a tumbling window; later resets every window size.")
    reset_period = models.CharField(
        max_length=16, choices=ResetPeriod.choices, default=ResetPeriod.NONE,
        help_text="Calendar reset (Slurm PriorityUsageResetPeriod): usage before the latest boundary is ignored. "
                  "For a tumbling window it replaces tumbling start + window size.")
    half_life = models.DurationField(default=timedelta(0),
                                     help_text="Decay half-life; 0 disables decay (KAI default: unset).")
    k_value = models.FloatField(default=1.0, help_text=f"Weight of historical usage in the over-quota division "
                                                         f"(KAI kValue, 0..{MAX_K_VALUE:g}; 0 = classic division).")
    max_catchup = models.DurationField(
        default=timedelta(days=1), help_text="Longest gap accounted after an outage; older missed time is "
                                             "logged and skipped (reliability 2.5: cap the step).")
    raw_retention = models.DurationField(default=timedelta(days=8),
                                         help_text="Raw intervals older than this are merged into hourly buckets.")
    hourly_retention = models.DurationField(default=timedelta(days=92),
                                            help_text="Hourly buckets older than this are merged into daily buckets.")
    billing_weight_gpu = models.FloatField(default=1.0, help_text="Slurm-style billing weight per GPU-second.")
    billing_weight_cpu = models.FloatField(default=0.0, help_text="Billing weight per CPU core-second.")
    billing_weight_memory_gib = models.FloatField(default=0.0, help_text="Billing weight per GiB-second of memory.")
    sshare_algorithm = models.CharField(max_length=16, choices=SshareAlgorithm.choices,
                                        default=SshareAlgorithm.FAIR_TREE)
    version = models.PositiveBigIntegerField(default=1, editable=False)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(django_settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+", editable=False)

    class Meta:
        verbose_name = "fair-share settings"
        verbose_name_plural = "fair-share settings"
        constraints = [
            models.CheckConstraint(condition=Q(id=1), name="fairsharesettings_singleton"),
            models.CheckConstraint(condition=Q(k_value__gte=0) & Q(k_value__lte=MAX_K_VALUE),
                                   name="fairsharesettings_k_value_bounded"),
            models.CheckConstraint(
                condition=Q(interval_seconds__gte=MIN_INTERVAL_SECONDS) & Q(interval_seconds__lte=MAX_INTERVAL_SECONDS),
                name="fairsharesettings_interval_bounded"),
        ]

    def __str__(self) -> str:
        return f"fair-share settings v{self.version}"

    def clean(self) -> None:
        """Every bound with the field's name: the admin and the service show these messages."""
        super().clean()
        errors: dict[str, str] = {}
        if self.interval_seconds is not None and not (
                MIN_INTERVAL_SECONDS <= self.interval_seconds <= MAX_INTERVAL_SECONDS):
            errors["interval_seconds"] = f"Must be between {MIN_INTERVAL_SECONDS} and {MAX_INTERVAL_SECONDS} seconds."
        if self.window_size is not None and not (timedelta(0) < self.window_size <= MAX_WINDOW):
            errors["window_size"] = f"Must be positive and at most {MAX_WINDOW.days} days."
        if self.half_life is not None and not (timedelta(0) <= self.half_life <= MAX_HALF_LIFE):
            errors["half_life"] = f"Must be between 0 (no decay) and {MAX_HALF_LIFE.days} days."
        k = self.k_value
        if k is not None and (not math.isfinite(k) or not (0.0 <= k <= MAX_K_VALUE)):
            errors["k_value"] = f"Must be a finite number between 0 and {MAX_K_VALUE:g}."
        # (an out-of-range interval is reported above; timedelta() of 2**63 seconds would overflow)
        if self.max_catchup is not None and self.interval_seconds and "interval_seconds" not in errors and not (
                timedelta(seconds=self.interval_seconds) <= self.max_catchup <= MAX_CATCHUP):
            errors["max_catchup"] = f"Must be between one interval and {MAX_CATCHUP.days} days."
        if self.raw_retention is not None and not (timedelta(hours=2) <= self.raw_retention <= MAX_RETENTION):
            errors["raw_retention"] = f"Must be between 2 hours and {MAX_RETENTION.days} days."
        if self.raw_retention is not None and self.max_catchup is not None and self.raw_retention <= self.max_catchup:
            errors.setdefault("raw_retention", "Must be longer than the catch-up cap (late intervals must not "
                                               "land in compacted history).")
        if self.hourly_retention is not None and self.raw_retention is not None and not (
                self.raw_retention <= self.hourly_retention <= MAX_RETENTION):
            errors["hourly_retention"] = f"Must be between the raw retention and {MAX_RETENTION.days} days."
        for name in ("billing_weight_gpu", "billing_weight_cpu", "billing_weight_memory_gib"):
            w = getattr(self, name)
            if w is not None and (not math.isfinite(w) or not (0.0 <= w <= MAX_BILLING_WEIGHT)):
                errors[name] = f"Must be a finite number between 0 and {MAX_BILLING_WEIGHT:g}."
        if errors:
            raise ValidationError(errors)
