"""Operator admin.  Every save and delete goes through the services (so the admin enforces
exactly what the API enforces and quota edits are audited with the acting user).

The queue changelist is the tree: rows in depth-first order (``path``), names indented by
depth, parent and children visible, with each queue's quota, allocation and fair share.
"""
from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.db.models import Case, Count, OuterRef, Prefetch, QuerySet, Subquery, Sum, Value, When
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from queues_app import admin_devices, quantities, selectors  # admin_devices also registers DeviceClassAdmin
from queues_app.admin_mixins import NoAddOrChangeMixin, ServiceErrorsMixin, ViewOnlyMixin
from queues_app.admin_whatif import ScaleUpAdminMixin, WhatIfAdminMixin
from queues_app.choices import TASK_STATES_HOLDING
from queues_app.cycle import contract
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
from queues_app.selectors import workload_why
from queues_app.services import (
    node_delete,
    nodes_delete,
    nodes_set_schedulable,
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
    workloads_cancel,
)
from queues_app.services.nodes import NODE_FIELDS
from queues_app.services.queues import QUEUE_UPDATE_FIELDS


def _fmt(value: Any) -> str:
    """Quantities without trailing zeros; -1 shown as the word it means."""
    return "unlimited" if quantities.is_unlimited(value) else quantities.number(value, 4)


# ----------------------------------------------------------------------------- queues


RESOURCE_ORDER = Case(When(resource="gpu", then=Value(0)), When(resource="cpu", then=Value(1)), default=Value(2))
RESOURCE_LABEL = {"gpu": "GPU", "cpu": "CPU", "memory": "Memory"}


def _add_engine_errors(form: forms.ModelForm, problems: dict[str, list[str]]) -> None:
    """The engine's verdict (cycle/contract.py: the same rules the API, the services and the cycle apply)
    as form errors on the named fields."""
    for field_name, messages_ in problems.items():
        form.add_error(field_name if field_name in form.fields else None, messages_)


class QueueResourceForm(forms.ModelForm):
    """One resource's quota row in the units people read (GPUs, cores, GiB, "unlimited");
    the model's validators and ``queue_set_quota`` still decide what is valid."""

    class Meta:
        model = QueueResource
        fields = ("quota", "over_quota_weight", "limit")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        res = self.instance.resource or "gpu"
        for name in self._meta.fields:
            model_field = QueueResource._meta.get_field(name)
            self.fields[name] = quantities.QuotaFormField(resource=res, kind=name, label=model_field.verbose_name,
                                                          help_text=model_field.help_text)
        self.resource_label = RESOURCE_LABEL.get(res, res)
        self.unit = quantities.UNIT.get(res, "")
        status = getattr(self.instance, "_status", None)
        self.allocated_now = quantities.queue_amount(res, getattr(status, f"allocated_{res}", None))
        self.fair_share_now = quantities.queue_amount(res, getattr(status, f"fair_share_{res}", None))

    def _post_clean(self) -> None:
        super()._post_clean()  # the model's own validation first
        row = self.instance
        if not self.errors and row.queue_id is not None:
            values = {f: getattr(row, f) for f in ("quota", "over_quota_weight", "limit")}
            _add_engine_errors(self, contract.queue_problems(name=row.queue.name, quotas={row.resource: values},
                                                             prefix=""))


class QuotaFormSet(forms.BaseInlineFormSet):
    """GPU, CPU, memory rows in that order, each knowing the queue's last status; evaluated once
    (Django asks for the formset's queryset many times while rendering)."""

    def get_queryset(self) -> QuerySet[QueueResource]:
        if not hasattr(self, "_ordered"):
            qs = super().get_queryset().annotate(o=RESOURCE_ORDER).order_by("o")
            status = QueueStatus.objects.filter(queue_id=self.instance.pk).first() if self.instance.pk else None
            for row in qs:  # fills the queryset's cache: later iterations run no query
                row.queue = self.instance
                row._status = status
            self._ordered = qs
        return self._ordered


class QueueResourceInline(admin.TabularInline):
    """Quotas edited inline as a small table (GPU, CPU, memory rows); saved through
    queue_set_quota (audited)."""

    model = QueueResource
    form = QueueResourceForm
    formset = QuotaFormSet
    template = "admin/queues_app/queue/quota_inline.html"
    fields = ("quota", "over_quota_weight", "limit")
    extra = 0
    max_num = 3
    can_delete = False
    verbose_name = "quota"
    verbose_name_plural = "quotas"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class QuotaChangeInline(NoAddOrChangeMixin, admin.TabularInline):
    """Audit history on the queue page: who changed which quota when, old -> new."""

    model = QuotaChange
    fields = ("changed_at", "resource_name", "field", "old", "new", "changed_by_name", "source")
    readonly_fields = fields
    template = "admin/queues_app/readonly_inline.html"
    extra = 0
    can_delete = False
    verbose_name = "quota change"
    verbose_name_plural = "quota history"
    ordering = ("-changed_at", "-id")

    def get_queryset(self, request: HttpRequest) -> QuerySet[QuotaChange]:
        return super().get_queryset(request).order_by("-changed_at", "-id")

    @admin.display(description="resource")
    def resource_name(self, obj: QuotaChange) -> str:
        return RESOURCE_LABEL.get(obj.resource, obj.resource)

    @admin.display(description="old")
    def old(self, obj: QuotaChange) -> str:
        return _quota_value(obj.resource, obj.field, obj.old_value)

    @admin.display(description="new")
    def new(self, obj: QuotaChange) -> str:
        return _quota_value(obj.resource, obj.field, obj.new_value)


def _quota_value(resource: str, field: str, value: Any) -> str:
    if value is None:
        return "—"
    if field == "over_quota_weight":
        return quantities.weight(value)
    return quantities.queue_amount(resource, value)


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
    readonly_fields = ("tree_position", "children_links", "status_summary", "quota_warnings", "created_at",
                       "updated_at", "version")
    fieldsets = (
        (None, {"fields": ("name", "description", "parent", "priority")}),
        ("Min runtimes (empty = inherit from parent, then config)",
         {"fields": ("reclaim_min_runtime", "preempt_min_runtime")}),
        ("Tree and status", {"fields": ("tree_position", "children_links", "status_summary", "quota_warnings",
                                        "created_at", "updated_at", "version")}),
    )
    inlines = (QueueResourceInline, QuotaChangeInline)

    def get_inlines(self, request: HttpRequest, obj: Queue | None) -> tuple:
        # A new queue gets its three resource rows from queue_create; edit them afterwards.
        return self.inlines if obj is not None else ()

    def get_queryset(self, request: HttpRequest) -> QuerySet[Queue]:
        return (super().get_queryset(request)
                .annotate(n_workloads=_count_of(Workload.objects.filter(queue=OuterRef("pk")), "queue"))
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

    @admin.display(description="GPU quota")
    def gpu_quota(self, obj: Queue) -> str:
        r = self._res(obj, "gpu")
        return _fmt(r.quota if r else None)

    @admin.display(description="GPU limit")
    def gpu_limit(self, obj: Queue) -> str:
        r = self._res(obj, "gpu")
        return _fmt(r.limit if r else None)

    def _status(self, obj: Queue) -> QueueStatus | None:
        try:
            return obj.status
        except QueueStatus.DoesNotExist:
            return None

    @admin.display(description="GPUs allocated")
    def gpu_allocated(self, obj: Queue) -> str:
        s = self._status(obj)
        return _fmt(s.allocated_gpu if s else None)

    @admin.display(description="GPU fair share")
    def gpu_fair_share(self, obj: Queue) -> str:
        s = self._status(obj)
        return _fmt(s.fair_share_gpu if s else None)

    @admin.display(description="workloads", ordering="n_workloads")
    def workload_count(self, obj: Queue) -> int:
        return getattr(obj, "n_workloads", None) or 0

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
        body = format_html_join("", "<tr><th>{}</th><td>{}</td><td>{}</td></tr>",
                                ((RESOURCE_LABEL[r], quantities.queue_amount(r, a), quantities.queue_amount(r, f))
                                 for r, a, f in rows))
        return format_html('<table class="status-table"><tr><th>resource</th><th>allocated (subtree)</th>'
                           "<th>fair share</th></tr>{}</table>"
                           "<p>{} pending, {} running workloads (subtree); updated {}</p>",
                           body, s.pending_workloads, s.running_workloads, s.updated_at)

    @admin.display(description="quota warnings")
    def quota_warnings(self, obj: Queue) -> str:
        if obj.pk is None:
            return "—"
        ids = [obj.pk] + ([obj.parent_id] if obj.parent_id else [])
        found = [w for msgs in selectors.quota_overcommit(tenant=None, parent_ids=ids).values() for w in msgs]
        if not found:
            return "none: the child queues' quotas fit in their parents' quotas"
        return format_html_join("", '<p class="quota-warning">{}</p>', ((w,) for w in found))

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

    def save_related(self, request: HttpRequest, form: forms.ModelForm, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        queue = form.instance
        ids = [queue.pk] + ([queue.parent_id] if queue.parent_id else [])
        for messages_ in selectors.quota_overcommit(tenant=None, parent_ids=ids).values():
            for text in messages_:
                self.message_user(request, text, level=messages.WARNING)

    def delete_model(self, request: HttpRequest, obj: Queue) -> None:
        queue_delete(queue=obj, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        # Leaves first, so deleting a whole subtree in one action works.
        for q in sorted(queryset, key=lambda q: -q.depth):
            queue_delete(queue=q, actor=request.user)


@admin.register(QuotaChange)
class QuotaChangeAdmin(ViewOnlyMixin, admin.ModelAdmin):
    """Read-only audit trail of every quota edit (admin, API, commands)."""

    list_display = ("changed_at", "queue_name", "resource", "field", "old_value", "new_value", "changed_by_name",
                    "source")
    list_filter = ("resource", "field", "source")
    search_fields = ("queue_name", "changed_by_name")
    date_hierarchy = "changed_at"


@admin.register(QueueStatus)
class QueueStatusAdmin(NoAddOrChangeMixin, admin.ModelAdmin):
    """Written by the scheduling cycle; read-only here."""

    list_display = ("queue", "gpus_allocated", "gpu_fair_share", "cpu_allocated", "cpu_fair_share",
                    "memory_allocated", "memory_fair_share", "pending_workloads", "running_workloads", "updated_at")
    list_select_related = ("queue",)
    ordering = ("queue__path",)

    @admin.display(description="GPUs allocated", ordering="allocated_gpu")
    def gpus_allocated(self, obj: QueueStatus) -> str:
        return quantities.number(obj.allocated_gpu)

    @admin.display(description="GPU fair share", ordering="fair_share_gpu")
    def gpu_fair_share(self, obj: QueueStatus) -> str:
        return quantities.number(obj.fair_share_gpu)

    @admin.display(description="CPU allocated", ordering="allocated_cpu")
    def cpu_allocated(self, obj: QueueStatus) -> str:
        return quantities.queue_amount("cpu", obj.allocated_cpu)

    @admin.display(description="CPU fair share", ordering="fair_share_cpu")
    def cpu_fair_share(self, obj: QueueStatus) -> str:
        return quantities.queue_amount("cpu", obj.fair_share_cpu)

    @admin.display(description="memory allocated", ordering="allocated_memory")
    def memory_allocated(self, obj: QueueStatus) -> str:
        return quantities.queue_amount("memory", obj.allocated_memory)

    @admin.display(description="memory fair share", ordering="fair_share_memory")
    def memory_fair_share(self, obj: QueueStatus) -> str:
        return quantities.queue_amount("memory", obj.fair_share_memory)


# ----------------------------------------------------------------------------- nodes


class NodeAdminForm(forms.ModelForm):
    """Capacity typed as people read it: CPU in cores, memory and GPU memory in GiB (or
    quantities such as 500m, 512Mi); cleaned to the stored millicores / bytes / MiB."""

    cpu_millis = quantities.node_cpu_field(label="CPU", required=True)
    memory_bytes = quantities.node_memory_field(label="Memory", required=True)
    gpu_memory_mib = quantities.node_gpu_memory_field(label="Memory per GPU", required=False,
                                                      help_text="GiB per device (0 or empty = unknown)")
    reserved_cpu_millis = quantities.node_cpu_field(label="Reserved CPU", required=False,
                                                    help_text="cores used by pods of other schedulers")
    reserved_memory_bytes = quantities.node_memory_field(label="Reserved memory", required=False,
                                                         help_text="GiB used by pods of other schedulers")

    class Meta:
        model = Node
        fields = ("name", "gpus", "gpu_memory_mib", "cpu_millis", "memory_bytes", "labels", "unschedulable", "ready",
                  "reserved_gpus", "reserved_cpu_millis", "reserved_memory_bytes")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        for name in ("gpu_memory_mib", "reserved_cpu_millis", "reserved_memory_bytes"):
            if data.get(name) is None:
                data[name] = 0
        return data

    def _post_clean(self) -> None:
        super()._post_clean()  # the model's own validation first
        if not self.errors:
            node = self.instance
            _add_engine_errors(self, contract.node_problems({"name": node.name,
                                                             **{f: getattr(node, f) for f in NODE_FIELDS}}))


@admin.register(Node)
class NodeAdmin(ScaleUpAdminMixin, ServiceErrorsMixin, admin.ModelAdmin):
    list_display = ("name", "gpus", "gpus_held", "gpu_memory", "cpu", "memory", "ready", "unschedulable",
                    "label_summary", "devices_list", "version")
    list_filter = ("ready", "unschedulable", "gpus")
    search_fields = ("name",)
    form = NodeAdminForm
    readonly_fields = ("tasks_here", "created_at", "updated_at", "version")
    actions = ("cordon", "uncordon")

    @admin.display(description="tasks on this node")
    def tasks_here(self, obj: Node) -> str:
        if obj.pk is None:
            return "—"
        held = (Task.objects.filter(node=obj, state__in=TASK_STATES_HOLDING)
                .aggregate(n=Count("id"), g=Sum("gpu")))
        url = reverse("admin:queues_app_task_changelist") + f"?node__id__exact={obj.pk}"
        return format_html('{} tasks hold {} of {} GPUs (<a href="{}">list them</a>)', held["n"],
                           quantities.number(held["g"] or 0), obj.gpus, url)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Node]:
        # a correlated subquery (tasks on this node now), computed for the page's rows only: a
        # join over every task ever placed, grouped by node, costs seconds on a large cluster
        held = (Task.objects.filter(node=OuterRef("pk"), state__in=TASK_STATES_HOLDING).order_by()
                .values("node").annotate(g=Sum("gpu")).values("g"))
        return super().get_queryset(request).annotate(held=Subquery(held))

    @admin.display(description="gpus held", ordering="held")
    def gpus_held(self, obj: Node) -> str:
        return _fmt(getattr(obj, "held", None) or 0)

    @admin.display(description="GPU memory", ordering="gpu_memory_mib")
    def gpu_memory(self, obj: Node) -> str:
        return quantities.mib_as_gib(obj.gpu_memory_mib)

    @admin.display(description="CPU", ordering="cpu_millis")
    def cpu(self, obj: Node) -> str:
        return quantities.cores(obj.cpu_millis)

    @admin.display(description="memory", ordering="memory_bytes")
    def memory(self, obj: Node) -> str:
        return quantities.gib(obj.memory_bytes)

    @admin.display(description="labels")
    def label_summary(self, obj: Node) -> str:
        return ", ".join(f"{k}={v}" for k, v in sorted((obj.labels or {}).items()))

    @admin.display(description="DRA devices")
    def devices_list(self, obj: Node) -> str:
        return admin_devices.devices_summary(obj)

    def save_model(self, request: HttpRequest, obj: Node, form: forms.ModelForm, change: bool) -> None:
        fields = {k: form.cleaned_data[k] for k in NODE_FIELDS if k in form.cleaned_data}
        if change and "name" in form.changed_data:
            raise ApplicationError("Invalid node.", extra={"name": ["Nodes are identified by name; create a new one."]})
        saved, _ = node_upsert(name=form.cleaned_data.get("name", obj.name), **fields)
        obj.pk = saved.pk
        obj.refresh_from_db()

    def delete_model(self, request: HttpRequest, obj: Node) -> None:
        node_delete(node=obj)

    @admin.action(description="Cordon (mark unschedulable)")
    def cordon(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        names = nodes_set_schedulable(node_ids=queryset.values_list("pk", flat=True), schedulable=False)
        self.message_user(request, f"Cordoned {_count_names(names, 'node')}: the next cycles place nothing new "
                                   "there; tasks already running stay until they end or are evicted.",
                          level=messages.SUCCESS)

    @admin.action(description="Uncordon (mark schedulable)")
    def uncordon(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        names = nodes_set_schedulable(node_ids=queryset.values_list("pk", flat=True), schedulable=True)
        self.message_user(request, f"Uncordoned {_count_names(names, 'node')}: the next cycle may place tasks "
                                   "there again.", level=messages.SUCCESS)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        nodes_delete(node_ids=queryset.values_list("pk", flat=True))


# ----------------------------------------------------------------------------- workloads


class TaskInline(NoAddOrChangeMixin, admin.TabularInline):
    """A workload's tasks: state, node (a link) and the GPU devices they hold."""

    model = Task
    fields = ("index", "name", "state", "node", "gpus", "cpu", "memory", "devices_held", "priority", "subgroup",
              "claims_list")
    readonly_fields = fields
    extra = 0
    can_delete = False
    template = "admin/queues_app/readonly_inline.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Task]:
        return super().get_queryset(request).select_related("node", "sub_group")

    @admin.display(description="GPUs")
    def gpus(self, obj: Task) -> str:
        return _task_gpus(obj)

    @admin.display(description="CPU")
    def cpu(self, obj: Task) -> str:
        return quantities.cores(obj.cpu_millis)

    @admin.display(description="memory")
    def memory(self, obj: Task) -> str:
        return quantities.gib(obj.memory_bytes)

    # (names unlike the model's fields: a readonly field that names a model field shows its raw value)
    @admin.display(description="devices")
    def devices_held(self, obj: Task) -> str:
        """Shared GPU groups, and the DRA devices its claims hold (``gpu.nvidia.com 0,1``)."""
        parts = list(obj.gpu_groups or [])
        parts += [f"{cls} {','.join(str(d) for d in idx)}" for cls, idx in sorted((obj.devices or {}).items())]
        return ", ".join(parts) or "—"

    @admin.display(description="subgroup")
    def subgroup(self, obj: Task) -> str:
        return obj.sub_group.name if obj.sub_group_id else "—"

    @admin.display(description="claims")
    def claims_list(self, obj: Task) -> str:
        return ", ".join(f"{c.get('count', 1)} x {c.get('device_class')}" for c in obj.claims or []) or "—"


def _count_of(qs: QuerySet, fk: str) -> Subquery:
    """COUNT of a queryset correlated through ``fk`` (an OuterRef filter), as an annotation."""
    return Subquery(qs.order_by().values(fk).annotate(n=Count("pk")).values("n"),
                    output_field=models.IntegerField())


def _task_gpus(task: Task) -> str:
    if task.gpu_memory_mib:
        return f"{quantities.mib_as_gib(task.gpu_memory_mib)} of one GPU"
    return quantities.number(task.gpu, 4)


def _count_names(names: list[str], noun: str) -> str:
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return f"{len(names)} {noun}{'' if len(names) == 1 else 's'} ({shown})"


@admin.register(Workload)
class WorkloadAdmin(ViewOnlyMixin, ServiceErrorsMixin, admin.ModelAdmin):
    """Workloads are submitted through the tenant API; operators browse and cancel them here."""

    list_display = ("name", "queue", "tenant", "status", "priority", "preemptible", "min_available", "n_tasks",
                    "created_at", "started_at", "status_message")
    list_filter = ("status", "preemptible", "queue", "tenant")
    list_select_related = ("queue", "tenant")
    ordering = ("-created_at", "-id")  # newest first; a total order, so no extra sort key on 50,000 rows
    search_fields = ("name", "queue__name", "tenant__name")
    date_hierarchy = "created_at"
    inlines = (TaskInline,)
    actions = ("cancel",)
    fieldsets = (
        ("Why", {"fields": ("status_badge", "why_summary", "queue_position", "estimated_start", "latest_events",
                            "last_eviction")}),
        ("Workload", {"fields": ("name", "queue", "tenant", "owner", "priority", "preemptible", "min_available",
                                 "created_at", "started_at", "finished_at")}),
        ("Subgroups", {"fields": ("min_sub_groups", "subgroup_tree")}),
        ("Placement and eviction settings, history", {
            "classes": ("collapse",),
            "fields": ("topology_required", "topology_preferred", "node_selector", "preemption_delay",
                       "staleness_grace_period", "stale_since", "updated_at", "version")}),
    )
    readonly_fields = ("status_badge", "why_summary", "queue_position", "estimated_start", "latest_events",
                       "last_eviction", "subgroup_tree")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Workload]:
        # a subquery rather than Count("tasks"): the paginator's count then skips it (a GROUP BY
        # over every workload and task took seconds at 50,000 workloads)
        tasks = Task.objects.filter(workload=OuterRef("pk"))
        return super().get_queryset(request).annotate(task_total=_count_of(tasks, "workload"))

    # ---- the "why" panel: the same answer as the API's GET /workloads/<id>/why/
    def _why(self, obj: Workload) -> dict[str, Any]:
        if not hasattr(obj, "_why_cache"):
            obj._why_cache = workload_why(tenant=None, workload=obj, limit=10)
        return obj._why_cache

    @admin.display(description="status")
    def status_badge(self, obj: Workload) -> str:
        return format_html('<span class="st st-wl-{}">{}</span>', obj.status.lower(), obj.status)

    @admin.display(description="reason")
    def why_summary(self, obj: Workload) -> str:
        why = self._why(obj)
        pending = " why-pending" if obj.status == "Pending" else ""
        summary = format_html('<p class="why-summary{}" id="why-summary">{}</p>', pending, why["summary"])
        if why.get("waiting_for_note"):  # what would help: more nodes, or a quota / limit change
            summary += format_html('<p class="why-waiting" id="why-waiting">{}</p>', why["waiting_for_note"])
        return summary

    @admin.display(description="position in queue")
    def queue_position(self, obj: Workload) -> str:
        why = self._why(obj)
        if why["position_in_queue"] is None:
            return f"not pending ({why['pending_in_queue']} pending in {obj.queue.name})"
        return f"{why['position_in_queue']} of {why['pending_in_queue']} pending in {obj.queue.name}"

    @admin.display(description="estimated start")
    def estimated_start(self, obj: Workload) -> str:
        why = self._why(obj)
        if why["estimated_start"]:
            return f"{why['estimated_start']:%Y-%m-%d %H:%M:%S} UTC"
        return why["estimated_start_note"]

    @admin.display(description="latest events")
    def latest_events(self, obj: Workload) -> str:
        """The API's events, newest first; one row per distinct (reason, task, message) with the
        cycles that repeated it, since a pending workload gets the same verdict every cycle."""
        why = self._why(obj)
        link = reverse("admin:queues_app_schedulingevent_changelist") + f"?workload__id__exact={obj.pk}"
        if not why["events"]:
            return format_html('none yet (<a href="{}">all events</a>)', link)
        groups: dict[tuple, dict[str, Any]] = {}
        for e in why["events"]:
            g = groups.setdefault((e["reason"], e["task"], e["message"]), {**e, "cycles": []})
            if e["cycle"]:
                g["cycles"].append(e["cycle"])
        rank = {r: i for i, r in enumerate(selectors.REASON_PREFERENCE)}
        ordered = sorted(groups.values(), key=lambda g: (-(max(g["cycles"]) if g["cycles"] else 0),
                                                         rank.get(g["reason"], len(rank))))

        def cycles(g: dict[str, Any]) -> str:
            c = sorted(g["cycles"])
            if not c:
                return "—"
            return f"#{c[0]}" if len(c) == 1 else f"#{c[0]}–#{c[-1]} ({len(c)} cycles)"

        rows = format_html_join("", '<tr><td class="nowrap">{}</td><td><span class="reason-code">{}</span></td>'
                                    '<td>{}</td><td class="nowrap">{}</td><td>{}</td></tr>',
                                ((f"{g['created_at']:%Y-%m-%d %H:%M:%S}", g["reason"], g["task"] or "—", cycles(g),
                                  g["message"]) for g in ordered))
        return format_html('<table class="why-events" id="why-events"><tr><th>latest (UTC)</th><th>reason</th>'
                           '<th>task</th><th>cycles</th><th>message</th></tr>{}</table>'
                           '<p><a href="{}">all events of this workload</a></p>', rows, link)

    @admin.display(description="last eviction")
    def last_eviction(self, obj: Workload) -> str:
        e = self._why(obj)["last_eviction"]
        if e is None:
            return "never evicted"
        return format_html('{} <span class="reason-code">{}</span> {}', f"{e['created_at']:%Y-%m-%d %H:%M:%S}",
                           e["reason"], e["message"])

    @admin.display(description="subgroups (placed / required)")
    def subgroup_tree(self, obj: Workload) -> str:
        return admin_devices.sub_group_tree(obj)

    @admin.display(description="tasks", ordering="task_total")
    def n_tasks(self, obj: Workload) -> int:
        return getattr(obj, "task_total", None) or 0

    @admin.action(description="Cancel selected workloads", permissions=("view",))
    def cancel(self, request: HttpRequest, queryset: QuerySet[Workload]) -> None:
        try:
            n = workloads_cancel(workload_ids=queryset.values_list("pk", flat=True), actor=request.user)
        except ApplicationError as exc:  # nothing written: the error names the finished workloads
            self.message_user(request, str(exc), level=messages.ERROR)
            return
        self.message_user(request, f"Cancelled {n} workload(s).")


@admin.register(Task)
class TaskAdmin(ViewOnlyMixin, admin.ModelAdmin):
    list_display = ("name", "workload", "state", "node", "gpus", "cpu", "memory", "updated_at")
    list_filter = ("state",)  # by node: the "tasks on this node" link of a node page (?node__id__exact=)
    list_select_related = ("workload", "node")
    search_fields = ("name", "workload__name")

    @admin.display(description="GPUs", ordering="gpu")
    def gpus(self, obj: Task) -> str:
        return _task_gpus(obj)

    @admin.display(description="CPU", ordering="cpu_millis")
    def cpu(self, obj: Task) -> str:
        return quantities.cores(obj.cpu_millis)

    @admin.display(description="memory", ordering="memory_bytes")
    def memory(self, obj: Task) -> str:
        return quantities.gib(obj.memory_bytes)


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


class ReadOnlyAdmin(NoAddOrChangeMixin, admin.ModelAdmin):
    """Cycle records, events, autoscale state, heartbeats: written by the cycle and the workers."""


@admin.register(SchedulingCycle)
class SchedulingCycleAdmin(ReadOnlyAdmin):
    list_display = ("id", "generation", "status", "trigger", "started_at", "duration", "bound_count",
                    "pipelined_count", "evicted_count", "tasks_count", "quarantined_count")
    list_filter = ("status", "trigger")
    date_hierarchy = "started_at"
    show_full_result_count = False
    exclude = ("scenario_gz", "decisions_gz")

    def get_queryset(self, request: HttpRequest) -> QuerySet[SchedulingCycle]:
        # the replay record is megabytes per cycle on a large cluster: never load it for a page
        return super().get_queryset(request).defer("scenario_gz", "decisions_gz")

    @admin.display(description="took")
    def duration(self, obj: SchedulingCycle) -> str:
        if obj.finished_at is None:
            return "—"
        return f"{(obj.finished_at - obj.started_at).total_seconds():.2f} s"


@admin.register(SchedulingEvent)
class SchedulingEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "reason", "category", "workload", "task", "cycle_id", "message")
    list_filter = ("reason", "category")
    list_select_related = ("workload", "task")
    search_fields = ("workload__name", "message")
    show_full_result_count = False

    @admin.display(description="cycle", ordering="cycle_id")
    def cycle_id(self, obj: SchedulingEvent) -> str:
        if obj.cycle_id is None:
            return "—"
        return format_html('<a href="{}">#{}</a>', reverse("admin:queues_app_schedulingcycle_change",
                                                           args=[obj.cycle_id]), obj.cycle_id)


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
