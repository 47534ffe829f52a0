"""Operator admin for fair share: the settings object (validated, versioned), GPU budgets with
their burn-down, the accounting history (read-only) and a charts page (allocation, fair share
and normalised usage over time).  Saves go through the services."""
from __future__ import annotations

import threading
from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone

from fairshare_app import charts, selectors
from fairshare_app.models import AccountingInterval, FairshareSettings, GpuBudget, NormalizedUsage
from fairshare_app.services import budget_create, budget_delete, budget_update, fairshare_settings_get
from fairshare_app.services.settings import EDITABLE_FIELDS, fairshare_settings_update
from queues_app.admin_mixins import ViewOnlyMixin
from queues_app.errors import ApplicationError
from queues_app.models import Queue

MAX_CHART_DAYS = 400
CHART_POINTS = 400  # per line: a 9-inch chart shows no more, and drawing 2,000 per queue takes seconds
_local = threading.local()


class FairshareSettingsForm(forms.ModelForm):
    class Meta:
        model = FairshareSettings
        fields = EDITABLE_FIELDS


@admin.register(FairshareSettings)
class FairshareSettingsAdmin(admin.ModelAdmin):
    """A singleton: the list redirects to the one row; the model's clean() reports every bad
    value on its field; saving calls ``fairshare_settings_update`` (version bump, who)."""

    form = FairshareSettingsForm
    readonly_fields = ("version", "updated_at", "updated_by")
    fieldsets = (
        ("Window and decay (KAI time-based fair share)", {"fields": (
            "window_type", "window_size", "tumbling_start", "reset_period", "half_life", "k_value")}),
        ("Accounting", {"fields": ("interval_seconds", "max_catchup", "raw_retention", "hourly_retention")}),
        ("Slurm-style reports", {"fields": ("sshare_algorithm", "billing_weight_gpu", "billing_weight_cpu",
                                            "billing_weight_memory_gib")}),
        ("Audit", {"fields": ("version", "updated_at", "updated_by")}),
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context=None):
        obj = fairshare_settings_get()
        return HttpResponseRedirect(reverse("admin:fairshare_app_fairsharesettings_change", args=[obj.pk]))

    def save_model(self, request, obj, form, change):
        data = {name: form.cleaned_data[name] for name in EDITABLE_FIELDS if name in form.changed_data}
        try:
            fairshare_settings_update(data=data, actor=request.user)
        except ApplicationError as exc:  # validated already by the form; a race is still reported
            messages.error(request, str(exc))

    def get_urls(self):
        extra = [path("charts/", self.admin_site.admin_view(self.charts_view), name="fairshare_charts")]
        return extra + super().get_urls()

    def charts_view(self, request: HttpRequest):
        """Allocation, fair share and normalised usage per queue over the last ``days``."""
        try:
            days = max(1, min(MAX_CHART_DAYS, int(request.GET.get("days", 7))))
        except ValueError:
            days = 7
        queues = [q.strip() for q in request.GET.get("queues", "").split(",") if q.strip()][:50]
        default_view = not queues
        if default_view:  # the top level: each line is its subtree's total, readable on a big tree
            queues = list(Queue.objects.filter(parent__isnull=True).order_by("path").values_list("name", flat=True))
        end = timezone.now()
        start = end - timedelta(days=days)
        series = selectors.usage_timeseries(tenant=None, start=start, end=end, queues=queues,
                                            max_points=CHART_POINTS)

        def pick(key):
            return {name: (d["t"], d[key]) for name, d in series.items()}

        budgets = selectors.budget_statuses(tenant=None, active_only=True, with_burn_down=True)
        burn = {f"{b.budget.queue.name} ({b.budget.period.lower()})": ([t for t, _ in b.burn_down],
                                                                       [r for _, r in b.burn_down])
                for b in budgets}
        context = {
            **self.admin_site.each_context(request),
            "title": "Fair share over time",
            "days": days,
            "queues": "" if default_view else ",".join(queues),
            "default_view": default_view,
            "charts": [
                charts.line_chart_svg("Allocated GPUs (mean per interval)", "GPUs", pick("allocated_gpu")),
                charts.line_chart_svg("GPU fair share (from the scheduling cycle)", "GPUs", pick("fair_share_gpu")),
                charts.line_chart_svg("Normalised GPU usage U (what the engine receives)", "fraction of cluster",
                                      pick("usage_gpu")),
                charts.line_chart_svg("GPU-hour budgets: remaining this period", "GPU-hours", burn),
            ],
            "budgets": budgets,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/fairshare_app/charts.html", context)


class GpuBudgetForm(forms.ModelForm):
    class Meta:
        model = GpuBudget
        fields = ("queue", "period", "gpu_hours", "policy", "is_active", "note")


@admin.register(GpuBudget)
class GpuBudgetAdmin(admin.ModelAdmin):
    form = GpuBudgetForm
    list_display = ("queue", "period", "gpu_hours", "policy", "is_active", "used", "remaining", "burn_rate",
                    "projected")
    list_filter = ("period", "policy", "is_active")
    list_select_related = ("queue",)

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("queue")

    def changelist_view(self, request, extra_context=None):
        """Burn-down of every budget computed once per page (a few grouped queries), not per cell."""
        _local.statuses = {st.budget.pk: st for st in selectors.budget_statuses(tenant=None)}
        try:
            response = super().changelist_view(request, extra_context)
            if hasattr(response, "render"):
                response.render()  # the cells are computed while rendering
            return response
        finally:
            _local.statuses = None

    def _status(self, obj):
        cached = getattr(_local, "statuses", None)
        if cached and obj.pk in cached:
            return cached[obj.pk]
        return selectors.budget_statuses(tenant=None, budgets=[obj])[0]

    @admin.display(description="used GPU-h")
    def used(self, obj):
        return f"{self._status(obj).used_gpu_hours:.1f}"

    @admin.display(description="remaining GPU-h")
    def remaining(self, obj):
        st = self._status(obj)
        return f"{st.remaining_gpu_hours:.1f}" + (" (exhausted)" if st.exhausted else "")

    @admin.display(description="burn rate (GPUs held now)")
    def burn_rate(self, obj):
        return f"{self._status(obj).burn_rate_gpu_per_hour:.1f} GPU-h/h"

    @admin.display(description="projected exhaustion")
    def projected(self, obj):
        st = self._status(obj)
        return st.projected_exhaustion.strftime("%Y-%m-%d %H:%M") if st.projected_exhaustion else "—"

    def save_model(self, request, obj, form, change):
        data = {k: form.cleaned_data[k] for k in ("period", "gpu_hours", "policy", "is_active", "note")}
        try:
            if change:
                budget_update(budget=obj, data=data)
            else:
                saved = budget_create(queue=form.cleaned_data["queue"], actor=request.user, **data)
                obj.pk = saved.pk
        except ApplicationError as exc:
            messages.error(request, str(exc))

    def delete_model(self, request, obj):
        budget_delete(budget=obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            budget_delete(budget=obj)


@admin.register(AccountingInterval)
class AccountingIntervalAdmin(ViewOnlyMixin, admin.ModelAdmin):
    """Read-only: history is written by the accounting task only."""

    list_display = ("start", "end", "resolution", "samples", "capacity_gpu_hours")
    list_filter = ("resolution",)
    date_hierarchy = "start"
    ordering = ("-start",)

    @admin.display(description="capacity GPU-h")
    def capacity_gpu_hours(self, obj):
        return f"{obj.capacity_gpu / 3600:.2f}"


@admin.register(NormalizedUsage)
class NormalizedUsageAdmin(ViewOnlyMixin, admin.ModelAdmin):
    list_display = ("queue", "gpu", "cpu", "memory", "computed_at", "window_start")
    list_select_related = ("queue",)
    ordering = ("queue__path",)
