"""Every read of queues_app.  Each selector takes the caller's tenant first:
``tenant=None`` means an operator (everything); a Tenant sees only its own rows.

Selectors return QuerySets with the joins their callers need already applied, so list
endpoints run a constant number of queries.  Object lookups go through the scoped
queryset, so an outsider gets DoesNotExist (404), never someone else's object.
"""
from __future__ import annotations

from typing import Any, Mapping

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Prefetch, Q, QuerySet

from queues_app.choices import TASK_STATES_HOLDING
from queues_app.filters import NodeFilter, QueueFilter, TaskFilter, WorkloadFilter, apply_filterset
from queues_app.models import (
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

# ----------------------------------------------------------------------------- tenants


def tenant_list_for_user(*, user: AbstractBaseUser) -> QuerySet[Tenant]:
    """Active tenants the user is a member of (the API picks one, e.g. from a header)."""
    if not getattr(user, "is_authenticated", False):
        return Tenant.objects.none()
    return Tenant.objects.filter(members=user, is_active=True)


def tenant_list(*, tenant: Tenant | None) -> QuerySet[Tenant]:
    qs = Tenant.objects.all()
    return qs if tenant is None else qs.filter(pk=tenant.pk)


# ----------------------------------------------------------------------------- queues


def queue_list(*, tenant: Tenant | None, filters: Mapping[str, Any] | None = None) -> QuerySet[Queue]:
    """Queues in depth-first tree order with parent, resources and status preloaded.

    A tenant sees the leaf queues granted to it.
    """
    qs = Queue.objects.select_related("parent", "status").prefetch_related(
        Prefetch("resources", queryset=QueueResource.objects.order_by("resource"))
    )
    if tenant is not None:
        qs = qs.filter(tenants=tenant)
    return apply_filterset(QueueFilter, qs, filters).order_by("path", "name")


def queue_get(*, tenant: Tenant | None, pk: int | None = None, name: str | None = None) -> Queue:
    """One queue visible to the caller; raises Queue.DoesNotExist otherwise."""
    if (pk is None) == (name is None):
        raise ValueError("give exactly one of pk or name")
    lookup = {"pk": pk} if pk is not None else {"name": name}
    return queue_list(tenant=tenant).get(**lookup)


def queue_children(*, queue: Queue) -> QuerySet[Queue]:
    return Queue.objects.filter(parent=queue).order_by("path")


def queue_resources(*, queue: Queue) -> dict[str, QueueResource]:
    """{resource: QueueResource}; uses the prefetch of queue_list when present."""
    return {r.resource: r for r in queue.resources.all()}


def queue_status(*, queue: Queue) -> QueueStatus | None:
    try:
        return queue.status
    except QueueStatus.DoesNotExist:
        return None


def quota_history(*, tenant: Tenant | None, queue: Queue | None = None) -> QuerySet[QuotaChange]:
    qs = QuotaChange.objects.select_related("changed_by")
    if queue is not None:
        qs = qs.filter(Q(queue=queue) | Q(queue__isnull=True, queue_name=queue.name))
    if tenant is not None:
        qs = qs.filter(queue__tenants=tenant)
    return qs.order_by("-changed_at", "-id")


# ----------------------------------------------------------------------------- workloads


def workload_list(*, tenant: Tenant | None, filters: Mapping[str, Any] | None = None) -> QuerySet[Workload]:
    """Workloads of the tenant (all for operators), newest first, with queue / tenant / owner
    joined and the task count annotated."""
    qs = Workload.objects.select_related("queue", "tenant", "owner").annotate(task_count=Count("tasks"))
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    return apply_filterset(WorkloadFilter, qs, filters).order_by("-created_at", "-id")


def workload_get(*, tenant: Tenant | None, pk: int) -> Workload:
    """One workload visible to the caller, tasks prefetched; raises Workload.DoesNotExist."""
    return workload_list(tenant=tenant).prefetch_related(
        Prefetch("tasks", queryset=Task.objects.select_related("node").order_by("index"))
    ).get(pk=pk)


def task_list(*, tenant: Tenant | None, filters: Mapping[str, Any] | None = None) -> QuerySet[Task]:
    qs = Task.objects.select_related("workload", "workload__queue", "node")
    if tenant is not None:
        qs = qs.filter(workload__tenant=tenant)
    return apply_filterset(TaskFilter, qs, filters).order_by("workload_id", "index")


def event_list(*, tenant: Tenant | None, workload: Workload | None = None) -> QuerySet[SchedulingEvent]:
    qs = SchedulingEvent.objects.select_related("workload", "task", "cycle")
    if workload is not None:
        qs = qs.filter(workload=workload)
    if tenant is not None:
        qs = qs.filter(workload__tenant=tenant)
    return qs.order_by("-created_at", "-id")


# ----------------------------------------------------------------------------- nodes and cycles


def node_list(*, tenant: Tenant | None, filters: Mapping[str, Any] | None = None) -> QuerySet[Node]:
    """Nodes are cluster-wide; a tenant sees them too (capacity planning), not their tasks."""
    qs = Node.objects.all()
    return apply_filterset(NodeFilter, qs, filters).order_by("name")


def node_allocated(*, tenant: Tenant | None) -> dict[int, dict[str, float]]:
    """{node_id: {gpu, cpu_millis, memory_bytes}} held by tasks on each node (one query)."""
    from django.db.models import Sum

    rows = (Task.objects.filter(state__in=TASK_STATES_HOLDING, node__isnull=False)
            .values("node_id").annotate(gpu=Sum("gpu"), cpu=Sum("cpu_millis"), mem=Sum("memory_bytes")))
    return {r["node_id"]: {"gpu": float(r["gpu"] or 0), "cpu_millis": float(r["cpu"] or 0),
                           "memory_bytes": float(r["mem"] or 0)} for r in rows}


def cycle_list(*, tenant: Tenant | None) -> QuerySet[SchedulingCycle]:
    return SchedulingCycle.objects.order_by("-started_at", "-id")
