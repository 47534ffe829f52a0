"""Operator admin.  Every save and delete goes through the services (so the admin enforces
exactly what the API enforces and quota edits are audited with the acting user).

The queue changelist is the tree: rows in depth-first order (``path``), names indented by
depth, parent and children visible, with each queue's quota, allocation and fair share.
"""
from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import Count, Prefetch, QuerySet, Sum
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from queues_app.admin_whatif import ScaleUpAdminMixin, WhatIfAdminMixin
from queues_app.choices import TASK_STATES_HOLDING
from queues_app.errors import ApplicationError
from queues_app.models import (
    Heartbeat,
    KubeAutoscaleState,
    Node,
    Queue,
    QueueResource,
    QueueStatus,
    QuotaChange,
    SchedulingCycle,
    SchedulingEvent,
    Task,
    Tenant,
    Workload,
)
from queues_app.services import (
    node_delete,
    node_set_schedulable,
    node_upsert,
    queue_create,
    queue_delete,
    queue_set_quota,
    queue_update,
    tenant_create,
    tenant_grant_queue,
    tenant_revoke_queue,
    tenant_set_members,
    tenant_update,
    workload_cancel,
)
from queues_app.services.nodes import NODE_FIELDS
from queues_app.services.queues import QUEUE_UPDATE_FIELDS


def _fmt(value: Any) -> str:
    """Quantities without trailing zeros; -1 shown as the word it means."""
    if value is None:
        return "—"
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    if f == -1:
        return "∞"
    return f"{f:.4f}".rstrip("0").rstrip(".")


class ServiceErrorsMixin:
    """Turn an ApplicationError escaping a service (e.g. a concurrent edit made the change
    invalid after the form validated) into an error message instead of a 500."""

    def changeform_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return super().changeform_view(request, *args, **kwargs)  # type: ignore[misc]
        except ApplicationError as exc:
            self.message_user(request, str(exc), level=messages.ERROR)  # type: ignore[attr-defined]
            return HttpResponseRedirect(request.get_full_path())

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: Any = None) -> HttpResponse:
        try:
            return super().delete_view(request, object_id, extra_context)  # type: ignore[misc]
        except ApplicationError as exc:
            self.message_user(request, str(exc), level=messages.ERROR)  # type: ignore[attr-defined]
            opts = self.model._meta  # type: ignore[attr-defined]
            return HttpResponseRedirect(reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[object_id]))

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        try:
            return super().changelist_view(request, extra_context)  # type: ignore[misc]
        except ApplicationError as exc:
            self.message_user(request, str(exc), level=messages.ERROR)  # type: ignore[attr-defined]
            return HttpResponseRedirect(request.get_full_path())


# ----------------------------------------------------------------------------- queues


class QueueResourceInline(admin.TabularInline):
    """Quotas edited inline, one row per resource; saved through queue_set_quota (audited)."""

    model = QueueResource
    fields = ("resource", "quota", "over_quota_weight", "limit")
    readonly_fields = ("resource",)
    extra = 0
    max_num = 3
    can_delete = False
    verbose_name = "quota"
    verbose_name_plural = "quotas (gpu devices, cpu cores, memory bytes; -1 = unlimited / unset weight)"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class QuotaChangeInline(admin.TabularInline):
    """Audit history on the queue page: who changed which quota when, old -> new."""

    model = QuotaChange
    fields = ("changed_at", "resource", "field", "old_value", "new_value", "changed_by_name", "source")
    readonly_fields = fields
    extra = 0
    can_delete = False
    verbose_name = "quota change"
    verbose_name_plural = "quota history"
    ordering = ("-changed_at", "-id")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class QueueAdminForm(forms.ModelForm):
    class Meta:
        model = Queue
        fields = ("name", "description", "parent", "priority", "reclaim_min_runtime", "preempt_min_runtime")


@admin.register(Queue)
class QueueAdmin(WhatIfAdminMixin, ServiceErrorsMixin, admin.ModelAdmin):
    form = QueueAdminForm
    list_display = ("tree_name", "parent_link", "children_list", "priority", "gpu_quota", "gpu_limit",
                    "gpu_allocated", "gpu_fair_share", "workload_count")
    list_select_related = ("parent", "status")
    ordering = ("path", "name")
    search_fields = ("name", "description")
    list_filter = ("depth",)
    list_per_page = 200
    readonly_fields = ("tree_position", "children_links", "status_summary", "created_at", "updated_at", "version")
    fieldsets = (
        (None, {"fields": ("name", "description", "parent", "priority")}),
        ("Min runtimes (empty = inherit from parent, then config)",
         {"fields": ("reclaim_min_runtime", "preempt_min_runtime")}),
        ("Tree and status", {"fields": ("tree_position", "children_links", "status_summary", "created_at",
                                        "updated_at", "version")}),
    )
    inlines = (QueueResourceInline, QuotaChangeInline)

    def get_inlines(self, request: HttpRequest, obj: Queue | None) -> tuple:
        # A new queue gets its three resource rows from queue_create; edit them afterwards.
        return self.inlines if obj is not None else ()

    def get_queryset(self, request: HttpRequest) -> QuerySet[Queue]:
        return (super().get_queryset(request)
                .annotate(n_workloads=Count("workloads", distinct=True))
                .prefetch_related(Prefetch("resources", queryset=QueueResource.objects.order_by("resource")),
                                  Prefetch("children", queryset=Queue.objects.order_by("path"))))

    # ---- changelist columns
    @admin.display(description="queue", ordering="path")
    def tree_name(self, obj: Queue) -> str:
        pad = (obj.depth - 1) * 1.5
        marker = "└ " if obj.depth > 1 else ""
        return format_html('<span style="padding-left:{}em">{}<strong>{}</strong></span>', pad, marker, obj.name)

    @admin.display(description="parent", ordering="parent__name")
    def parent_link(self, obj: Queue) -> str:
        if obj.parent is None:
            return "—"
        url = reverse("admin:queues_app_queue_change", args=[obj.parent_id])
        return format_html('<a href="{}">{}</a>', url, obj.parent.name)

    @admin.display(description="children")
    def children_list(self, obj: Queue) -> str:
        kids = list(obj.children.all())
        if not kids:
            return "leaf"
        return ", ".join(k.name for k in kids)

    def _res(self, obj: Queue, resource: str) -> QueueResource | None:
        return next((r for r in obj.resources.all() if r.resource == resource), None)

    @admin.display(description="gpu quota")
    def gpu_quota(self, obj: Queue) -> str:
        r = self._res(obj, "gpu")
        return _fmt(r.quota if r else None)

    @admin.display(description="gpu limit")
    def gpu_limit(self, obj: Queue) -> str:
        r = self._res(obj, "gpu")
        return _fmt(r.limit if r else None)

    def _status(self, obj: Queue) -> QueueStatus | None:
        try:
            return obj.status
        except QueueStatus.DoesNotExist:
            return None

    @admin.display(description="gpu allocated")
    def gpu_allocated(self, obj: Queue) -> str:
        s = self._status(obj)
        return _fmt(s.allocated_gpu if s else None)

    @admin.display(description="gpu fair share")
    def gpu_fair_share(self, obj: Queue) -> str:
        s = self._status(obj)
        return _fmt(s.fair_share_gpu if s else None)

    @admin.display(description="workloads", ordering="n_workloads")
    def workload_count(self, obj: Queue) -> int:
        return getattr(obj, "n_workloads", 0)

    # ---- change form read-only panels
    @admin.display(description="position in tree")
    def tree_position(self, obj: Queue) -> str:
        if obj.pk is None:
            return "—"
        names = dict(Queue.objects.values_list("id", "name"))
        chain = [obj.name] + [names.get(i, "?") for i in obj.ancestor_ids()]
        return " / ".join(reversed(chain))

    @admin.display(description="children")
    def children_links(self, obj: Queue) -> str:
        if obj.pk is None:
            return "—"
        kids = list(Queue.objects.filter(parent=obj).order_by("path"))
        if not kids:
            return "none (leaf queue: takes workloads)"
        return format_html_join(", ", '<a href="{}">{}</a>',
                                ((reverse("admin:queues_app_queue_change", args=[k.pk]), k.name) for k in kids))

    @admin.display(description="allocation and fair share (last cycle)")
    def status_summary(self, obj: Queue) -> str:
        s = self._status(obj) if obj.pk else None
        if s is None:
            return "no cycle has reported on this queue yet"
        rows = [("gpu", s.allocated_gpu, s.fair_share_gpu), ("cpu", s.allocated_cpu, s.fair_share_cpu),
                ("memory", s.allocated_memory, s.fair_share_memory)]
        body = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                                ((r, _fmt(a), _fmt(f)) for r, a, f in rows))
        return format_html("<table><tr><th>resource</th><th>allocated</th><th>fair share</th></tr>{}</table>"
                           "<p>{} pending, {} running workloads; updated {}</p>",
                           body, s.pending_workloads, s.running_workloads, s.updated_at)

    # ---- writes through services
    def save_model(self, request: HttpRequest, obj: Queue, form: forms.ModelForm, change: bool) -> None:
        data = {k: form.cleaned_data[k] for k in QUEUE_UPDATE_FIELDS if k in form.cleaned_data}
        if change:
            changed = {k: v for k, v in data.items() if k in form.changed_data}
            saved = queue_update(queue=obj, data=changed, actor=request.user)
        else:
            saved = queue_create(actor=request.user, source="admin", **data)
        obj.pk = saved.pk
        obj.refresh_from_db()

    def save_formset(self, request: HttpRequest, form: forms.ModelForm, formset: Any, change: bool) -> None:
        formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
        if formset.model is not QueueResource:
            return  # the history inline is read-only
        for f in formset.forms:
            if not f.has_changed():
                continue
            row = f.instance
            queue_set_quota(queue=form.instance, resource=row.resource, quota=f.cleaned_data["quota"],
                            over_quota_weight=f.cleaned_data["over_quota_weight"], limit=f.cleaned_data["limit"],
                            actor=request.user, source="admin")
            formset.changed_objects.append((row, f.changed_data))

    def delete_model(self, request: HttpRequest, obj: Queue) -> None:
        queue_delete(queue=obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        # Leaves first, so deleting a whole subtree in one action works.
        for q in sorted(queryset, key=lambda q: -q.depth):
            queue_delete(queue=q, actor=request.user)


@admin.register(QuotaChange)
class QuotaChangeAdmin(admin.ModelAdmin):
    """Read-only audit trail of every quota edit (admin, API, commands)."""

    list_display = ("changed_at", "queue_name", "resource", "field", "old_value", "new_value", "changed_by_name",
                    "source")
    list_filter = ("resource", "field", "source")
    search_fields = ("queue_name", "changed_by_name")
    date_hierarchy = "changed_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(QueueStatus)
class QueueStatusAdmin(admin.ModelAdmin):
    """Written by the scheduling cycle; read-only here."""

    list_display = ("queue", "allocated_gpu", "fair_share_gpu", "allocated_cpu", "fair_share_cpu",
                    "allocated_memory", "fair_share_memory", "pending_workloads", "running_workloads", "updated_at")
    list_select_related = ("queue",)
    ordering = ("queue__path",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# ----------------------------------------------------------------------------- nodes


@admin.register(Node)
class NodeAdmin(ScaleUpAdminMixin, ServiceErrorsMixin, admin.ModelAdmin):
    list_display = ("name", "gpus", "gpus_held", "gpu_memory_mib", "cpu_millis", "memory_bytes", "ready",
                    "unschedulable", "label_summary", "version")
    list_filter = ("ready", "unschedulable", "gpus")
    search_fields = ("name",)
    readonly_fields = ("created_at", "updated_at", "version")
    actions = ("cordon", "uncordon")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Node]:
        from django.db.models import Q

        return super().get_queryset(request).annotate(
            held=Sum("tasks__gpu", filter=Q(tasks__state__in=TASK_STATES_HOLDING)))

    @admin.display(description="gpus held", ordering="held")
    def gpus_held(self, obj: Node) -> str:
        return _fmt(getattr(obj, "held", None) or 0)

    @admin.display(description="labels")
    def label_summary(self, obj: Node) -> str:
        return ", ".join(f"{k}={v}" for k, v in sorted((obj.labels or {}).items()))

    def save_model(self, request: HttpRequest, obj: Node, form: forms.ModelForm, change: bool) -> None:
        fields = {k: form.cleaned_data[k] for k in NODE_FIELDS if k in form.cleaned_data}
        if change and "name" in form.changed_data:
            raise ApplicationError("Invalid node.", extra={"name": ["Nodes are identified by name; create a new one."]})
        saved, _ = node_upsert(name=form.cleaned_data.get("name", obj.name), **fields)
        obj.pk = saved.pk
        obj.refresh_from_db()

    def delete_model(self, request: HttpRequest, obj: Node) -> None:
        node_delete(node=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        for n in queryset:
            node_delete(node=n)

    @admin.action(description="Cordon (mark unschedulable)")
    def cordon(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        for n in queryset:
            node_set_schedulable(node=n, schedulable=False)

    @admin.action(description="Uncordon")
    def uncordon(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        for n in queryset:
            node_set_schedulable(node=n, schedulable=True)


# ----------------------------------------------------------------------------- workloads


class TaskInline(admin.TabularInline):
    model = Task
    fields = ("index", "name", "state", "node", "gpu", "gpu_memory_mib", "cpu_millis", "memory_bytes", "priority",
              "gpu_groups")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Workload)
class WorkloadAdmin(ServiceErrorsMixin, admin.ModelAdmin):
    """Workloads are submitted through the tenant API; operators browse and cancel them here."""

    list_display = ("name", "queue", "tenant", "status", "priority", "preemptible", "min_available", "n_tasks",
                    "created_at", "started_at")
    list_filter = ("status", "preemptible", "queue", "tenant")
    list_select_related = ("queue", "tenant")
    search_fields = ("name", "queue__name", "tenant__name")
    date_hierarchy = "created_at"
    inlines = (TaskInline,)
    actions = ("cancel",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Workload]:
        return super().get_queryset(request).annotate(task_total=Count("tasks"))

    @admin.display(description="tasks", ordering="task_total")
    def n_tasks(self, obj: Workload) -> int:
        return getattr(obj, "task_total", 0)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Cancel selected workloads", permissions=("view",))
    def cancel(self, request: HttpRequest, queryset: QuerySet[Workload]) -> None:
        for w in queryset:
            workload_cancel(workload=w, actor=request.user)
        self.message_user(request, f"Cancelled {len(queryset)} workload(s).")


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ("name", "workload", "state", "node", "gpu", "cpu_millis", "memory_bytes", "updated_at")
    list_filter = ("state", "node")
    list_select_related = ("workload", "node")
    search_fields = ("name", "workload__name")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# ----------------------------------------------------------------------------- tenants


class TenantAdminForm(forms.ModelForm):
    class Meta:
        model = Tenant
        fields = ("name", "display_name", "is_active", "members", "queues")

    def clean_queues(self) -> Any:
        queues = self.cleaned_data.get("queues")
        if queues is not None:
            inner = [q.name for q in queues if q.children.exists()]
            if inner:
                raise forms.ValidationError(f"Only leaf queues can be granted; {', '.join(inner)} has children.")
        return queues


@admin.register(Tenant)
class TenantAdmin(ServiceErrorsMixin, admin.ModelAdmin):
    form = TenantAdminForm
    list_display = ("name", "display_name", "is_active", "member_count", "granted_queues")
    list_filter = ("is_active",)
    search_fields = ("name", "display_name")
    filter_horizontal = ("members", "queues")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Tenant]:
        return super().get_queryset(request).annotate(n_members=Count("members", distinct=True)).prefetch_related(
            "queues")

    @admin.display(description="members", ordering="n_members")
    def member_count(self, obj: Tenant) -> int:
        return getattr(obj, "n_members", 0)

    @admin.display(description="queues")
    def granted_queues(self, obj: Tenant) -> str:
        return ", ".join(q.name for q in obj.queues.all())

    def save_model(self, request: HttpRequest, obj: Tenant, form: forms.ModelForm, change: bool) -> None:
        cd = form.cleaned_data
        if change:
            saved = tenant_update(tenant=obj, data={k: cd[k] for k in ("name", "display_name", "is_active")})
        else:
            saved = tenant_create(name=cd["name"], display_name=cd.get("display_name", ""))
            if not cd.get("is_active", True):
                tenant_update(tenant=saved, data={"is_active": False})
        obj.pk = saved.pk
        obj.refresh_from_db()

    def save_related(self, request: HttpRequest, form: forms.ModelForm, formsets: Any, change: bool) -> None:
        tenant = form.instance
        tenant_set_members(tenant=tenant, members=form.cleaned_data.get("members") or [])
        wanted = {q.pk: q for q in form.cleaned_data.get("queues") or []}
        current = {q.pk: q for q in tenant.queues.all()}
        for pk, q in wanted.items():
            if pk not in current:
                tenant_grant_queue(tenant=tenant, queue=q)
        for pk, q in current.items():
            if pk not in wanted:
                tenant_revoke_queue(tenant=tenant, queue=q)


# ----------------------------------------------------------------------------- cycles


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(SchedulingCycle)
class SchedulingCycleAdmin(ReadOnlyAdmin):
    list_display = ("id", "generation", "status", "trigger", "started_at", "finished_at", "bound_count",
                    "pipelined_count", "evicted_count", "tasks_count")
    list_filter = ("status", "trigger")
    date_hierarchy = "started_at"
    show_full_result_count = False


@admin.register(SchedulingEvent)
class SchedulingEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "reason", "category", "workload", "task", "cycle", "message")
    list_filter = ("reason", "category")
    list_select_related = ("workload", "task", "cycle")
    search_fields = ("workload__name", "message")
    show_full_result_count = False


@admin.register(KubeAutoscaleState)
class KubeAutoscaleStateAdmin(ReadOnlyAdmin):
    """What the scale adjuster (cluster autoscaling, Kubernetes mode) did last."""

    list_display = ("name", "last_run_at", "cooldown_until", "summary")
    readonly_fields = ("name", "last_run_at", "cooldown_until", "report")
    exclude = ("last_report",)

    @admin.display(description="last run")
    def summary(self, obj: KubeAutoscaleState) -> str:
        r = obj.last_report or {}
        return (f"{r.get('status', '-')}: {r.get('demand_pods', 0)} unschedulable shared-GPU pod(s), "
                f"{r.get('wanted', 0)} utility pod(s) wanted, {len(r.get('created') or [])} created, "
                f"{len(r.get('deleted') or [])} deleted, {len(r.get('errors') or [])} error(s)")

    @admin.display(description="last report")
    def report(self, obj: KubeAutoscaleState) -> str:
        import json

        return format_html("<pre>{}</pre>", json.dumps(obj.last_report or {}, indent=2, sort_keys=True))


@admin.register(Heartbeat)
class HeartbeatAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "source")
