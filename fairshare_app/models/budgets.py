"""GPU-hour budgets per queue and period."""
from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from fairshare_app.choices import BudgetPeriod, BudgetPolicy

MAX_BUDGET_GPU_HOURS = Decimal(10**9)


class GpuBudget(models.Model):
    """At most ``gpu_hours`` GPU-hours per ``period`` for a queue (its whole subtree).

    When spent, ``policy`` decides what the cycle does: de-prioritise (over-quota weight 0:
    the queue keeps its deserved share, loses over-quota share and can be reclaimed down to
    it) or stop admitting over-quota work (GPU limit = quota for the engine).  Visible to the
    tenants granted the queue.
    """

    queue = models.ForeignKey("queues_app.Queue", on_delete=models.CASCADE, related_name="gpu_budgets")
    period = models.CharField(max_length=16, choices=BudgetPeriod.choices, default=BudgetPeriod.MONTHLY)
    gpu_hours = models.DecimalField(
        max_digits=16, decimal_places=3,
        validators=[MinValueValidator(Decimal("0.001")), MaxValueValidator(MAX_BUDGET_GPU_HOURS)],
        help_text="GPU-hours allowed per period.")
    policy = models.CharField(max_length=24, choices=BudgetPolicy.choices, default=BudgetPolicy.DEPRIORITIZE)
    is_active = models.BooleanField(default=True)
    note = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+", editable=False)

    class Meta:
        ordering = ("queue__path", "period")
        constraints = [
            models.UniqueConstraint(fields=("queue", "period"), name="gpubudget_unique_per_queue_period"),
            models.CheckConstraint(condition=Q(gpu_hours__gt=0), name="gpubudget_positive"),
            models.CheckConstraint(condition=Q(period__in=BudgetPeriod.values), name="gpubudget_period_valid"),
            models.CheckConstraint(condition=Q(policy__in=BudgetPolicy.values), name="gpubudget_policy_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.queue} {self.gpu_hours} GPU-h/{self.period.lower()}"

    def clean(self) -> None:
        super().clean()
        value = self.gpu_hours
        if value is not None and isinstance(value, Decimal) and not value.is_finite():
            raise ValidationError({"gpu_hours": "Must be a finite number."})
