"""Input and output serializers of the fair-share API (plain Serializers, no model magic)."""
from __future__ import annotations

from rest_framework import serializers

from fairshare_app import sshare
from fairshare_app.choices import BudgetPeriod, BudgetPolicy
from fairshare_app.models.settings import MAX_INTERVAL_SECONDS, MIN_INTERVAL_SECONDS
from fairshare_app.selectors import BUCKETS, GROUP_BY
from queues_app.api.serializers import StrictSerializer


class CommaList(serializers.CharField):
    """``a,b,c`` -> ["a", "b", "c"] (at most 200 names)."""

    def to_internal_value(self, data):
        text = super().to_internal_value(data)
        items = [x.strip() for x in text.split(",") if x.strip()]
        if len(items) > 200:
            raise serializers.ValidationError("At most 200 names.")
        return items


class UsageQuery(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    group_by = serializers.ChoiceField(choices=GROUP_BY, default="queue")
    bucket = serializers.ChoiceField(choices=BUCKETS, default="none")
    queues = CommaList(required=False, max_length=20000)


class SeriesQuery(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    queues = CommaList(required=False, max_length=20000)


class SshareQuery(serializers.Serializer):
    algorithm = serializers.ChoiceField(choices=sshare.ALGORITHMS, required=False)
    long = serializers.BooleanField(default=False)
    kai = serializers.BooleanField(default=False, help_text="Add KAI columns (GPU deserved, fair share, allocated).")
    accounts = CommaList(required=False, max_length=20000)
    users = CommaList(required=False, max_length=20000)
    users_only = serializers.BooleanField(default=False)
    columns = CommaList(required=False, max_length=2000, help_text="Like sshare --format.")

    def validate_columns(self, value):
        bad = [c for c in value if c not in sshare.ALL_COLUMNS]
        if bad:
            raise serializers.ValidationError(f"Unknown column(s): {', '.join(bad)}; use {', '.join(sshare.ALL_COLUMNS)}.")
        return value


class BudgetCreate(StrictSerializer):
    queue = serializers.CharField(max_length=128, help_text="Queue name.")
    gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=3)
    period = serializers.ChoiceField(choices=BudgetPeriod.choices, default=BudgetPeriod.MONTHLY)
    policy = serializers.ChoiceField(choices=BudgetPolicy.choices, default=BudgetPolicy.DEPRIORITIZE)
    is_active = serializers.BooleanField(default=True)
    note = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class BudgetUpdate(StrictSerializer):
    gpu_hours = serializers.DecimalField(max_digits=16, decimal_places=3, required=False)
    period = serializers.ChoiceField(choices=BudgetPeriod.choices, required=False)
    policy = serializers.ChoiceField(choices=BudgetPolicy.choices, required=False)
    is_active = serializers.BooleanField(required=False)
    note = serializers.CharField(max_length=500, required=False, allow_blank=True)


class SettingsUpdate(StrictSerializer):
    """Unknown keys are refused (a typo is not silently ignored); the model's clean() has the
    bounds of every setting, the interval's are also here so a huge number is never arithmetic."""

    interval_seconds = serializers.IntegerField(required=False, min_value=MIN_INTERVAL_SECONDS,
                                                max_value=MAX_INTERVAL_SECONDS)
    window_type = serializers.CharField(required=False)
    window_size = serializers.DurationField(required=False)
    tumbling_start = serializers.DateTimeField(required=False)
    reset_period = serializers.CharField(required=False)
    half_life = serializers.DurationField(required=False)
    k_value = serializers.FloatField(required=False)
    max_catchup = serializers.DurationField(required=False)
    raw_retention = serializers.DurationField(required=False)
    hourly_retention = serializers.DurationField(required=False)
    billing_weight_gpu = serializers.FloatField(required=False)
    billing_weight_cpu = serializers.FloatField(required=False)
    billing_weight_memory_gib = serializers.FloatField(required=False)
    sshare_algorithm = serializers.CharField(required=False)


def settings_out(cfg) -> dict:
    return {
        "interval_seconds": cfg.interval_seconds, "window_type": cfg.window_type,
        "window_size_seconds": cfg.window_size.total_seconds(), "tumbling_start": cfg.tumbling_start,
        "reset_period": cfg.reset_period, "half_life_seconds": cfg.half_life.total_seconds(),
        "k_value": cfg.k_value, "max_catchup_seconds": cfg.max_catchup.total_seconds(),
        "raw_retention_seconds": cfg.raw_retention.total_seconds(),
        "hourly_retention_seconds": cfg.hourly_retention.total_seconds(),
        "billing_weights": {"gpu": cfg.billing_weight_gpu, "cpu": cfg.billing_weight_cpu,
                            "memory_gib": cfg.billing_weight_memory_gib},
        "sshare_algorithm": cfg.sshare_algorithm, "version": cfg.version, "updated_at": cfg.updated_at,
    }
