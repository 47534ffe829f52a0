"""Every read of queues_app.  Each selector takes the caller's tenant first:
``tenant=None`` means an operator (everything); a Tenant sees only its own rows.

Selectors return QuerySets with the joins their callers need already applied, so list
endpoints run a constant number of queries.  Object lookups go through the scoped
queryset, so an outsider gets DoesNotExist (404), never someone else's object.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

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


# ----------------------------------------------------------------------------- quota warnings


def quota_overcommit(*, tenant: Tenant | None, parent_ids: Iterable[int] | None = None) -> dict[int, list[str]]:
    """``{parent queue id: [warning, ...]}`` where the children's quotas of a resource add up to
    more than the parent's own quota (a child with an unlimited quota under a finite parent too).

    KAI accepts such a tree (the children then compete for the parent's deserved share, and
    not every child gets its quota), so this is a warning shown next to the edit, never a
    refusal.  ``parent_ids`` limits the answer to those parents; two queries.  A tenant only
    gets warnings about queues it can see, and sibling names stay out of them.
    """
    from queues_app.quantities import queue_amount

    queues = list(Queue.objects.values_list("id", "parent_id", "name"))
    names = {qid: name for qid, _, name in queues}
    children: dict[int, list[int]] = {}
    for qid, pid, _ in queues:
        if pid is not None:
            children.setdefault(pid, []).append(qid)
    wanted = set(children) if parent_ids is None else set(parent_ids) & set(children)
    if tenant is not None:
        wanted &= set(queue_list(tenant=tenant).values_list("pk", flat=True))
    if not wanted:
        return {}
    ids = set(wanted) | {c for p in wanted for c in children[p]}
    quota = {(qid, res): q for qid, res, q in
             QueueResource.objects.filter(queue_id__in=ids).values_list("queue_id", "resource", "quota")}
    out: dict[int, list[str]] = {}
    for pid in sorted(wanted, key=lambda q: names[q]):
        for res in ("gpu", "cpu", "memory"):
            own = quota.get((pid, res))
            if own is None or own == -1:
                continue
            kids = sorted(children[pid], key=lambda q: names[q])
            values = [(names[k], quota.get((k, res), 0)) for k in kids]
            unlimited = [n for n, v in values if v == -1]
            total = sum(v for _, v in values if v != -1)
            if not unlimited and total <= own:
                continue
            if tenant is None:
                parts = " + ".join(f"{n} {queue_amount(res, v, unit=False)}" for n, v in values)
            else:
                parts = f"{len(values)} child queues"
            summed = "unlimited" if unlimited else queue_amount(res, total)
            out.setdefault(pid, []).append(
                f"{res}: the child queues' quotas add up to {summed} ({parts}), more than {names[pid]}'s own "
                f"quota of {queue_amount(res, own)}. Allowed (as in KAI), but the children cannot all get their "
                "quota at once: they share the parent's.")
    return out
