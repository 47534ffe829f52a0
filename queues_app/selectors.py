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

from queues_app.choices import TASK_STATES_HOLDING, TaskState
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
from queues_app.quantities import queue_amount

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
        Prefetch("tasks", queryset=Task.objects.select_related("node", "sub_group").order_by("index"))
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
    refusal.  ``parent_ids`` limits the answer to those parents; two queries.
    """
    if tenant is not None:
        return {}  # a tenant sees leaf queues only; its parent's warning would describe sibling queues
    queues = list(Queue.objects.values_list("id", "parent_id", "name"))
    names = {qid: name for qid, _, name in queues}
    children: dict[int, list[int]] = {}
    for qid, pid, _ in queues:
        if pid is not None:
            children.setdefault(pid, []).append(qid)
    wanted = set(children) if parent_ids is None else set(parent_ids) & set(children)
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
            parts = " + ".join(f"{n} {queue_amount(res, v, unit=False)}" for n, v in values)
            summed = "unlimited" if unlimited else queue_amount(res, total)
            out.setdefault(pid, []).append(
                f"{res}: the child queues' quotas add up to {summed} ({parts}), more than {names[pid]}'s own "
                f"quota of {queue_amount(res, own)}. Allowed (as in KAI), but the children cannot all get their "
                "quota at once: they share the parent's.")
    return out


# ----------------------------------------------------------------------------- operator dashboard
#
# Every read below is a handful of grouped queries whose cost grows with the number of nodes and
# queues, never with the number of workloads or events listed (the dashboard must stay fast at
# 2,000 nodes / 50,000 workloads: ``manage.py bench_admin`` measures it).

#: Node labels that name a node's rack, in order of preference (the first one a node has).
RACK_LABELS = ("kai.scheduler/rack", "topology.kubernetes.io/rack", "topology.kubernetes.io/zone")


def node_gpu_holdings(*, tenant: Tenant | None) -> dict[int, dict[str, float]]:
    """``{node_id: {"in_use", "releasing", "pipelined"}}`` GPU devices per node: held by Running /
    Binding tasks, by Releasing / StuckInReleasing tasks, by Pipelined tasks (waiting for a release).

    Whole devices, as KAI counts them and the engine reports them (contract "Statuses", KAI
    ``node_info.addSharedGPUTaskResourcesPerPodGroup``): a shared device (fractions, GPU memory) is
    in use while any of its tasks runs, releasing only once every task on it is releasing, so one
    0.5 task releasing beside a running one leaves a whole device in use, not half of one.  Two
    grouped queries over the tasks that are on a node now (whole-GPU tasks summed; shared devices
    grouped by node, gpuGroup and state)."""
    from django.db.models import Count, Q, Sum
    from django.db.models.fields.json import KT


    group = {TaskState.RUNNING: "in_use", TaskState.BINDING: "in_use", TaskState.RELEASING: "releasing",
             TaskState.STUCK_RELEASING: "releasing", TaskState.PIPELINED: "pipelined"}
    shared = (Q(gpu__gt=0) & Q(gpu__lt=1)) | (Q(gpu=0) & Q(gpu_memory_mib__gt=0))
    on_nodes = Task.objects.filter(state__in=list(group), node__isnull=False)
    out: dict[int, dict[str, float]] = {}
    rows = (on_nodes.exclude(shared).values("node_id", "state").annotate(g=Sum("gpu"))
            .values_list("node_id", "state", "g"))
    for node_id, state, g in rows:
        slot = out.setdefault(node_id, {"in_use": 0.0, "releasing": 0.0, "pipelined": 0.0})
        slot[group[state]] += float(g or 0)
    devices: dict[tuple[int, str], set[str]] = {}
    rows = (on_nodes.filter(shared).annotate(dev=KT("gpu_groups__0")).values("node_id", "dev", "state")
            .annotate(c=Count("id")).values_list("node_id", "dev", "state"))
    for node_id, dev, state in rows:
        devices.setdefault((node_id, dev or ""), set()).add(group[state])
    for (node_id, _dev), kinds in devices.items():
        slot = out.setdefault(node_id, {"in_use": 0.0, "releasing": 0.0, "pipelined": 0.0})
        if "in_use" in kinds:
            slot["in_use"] += 1.0
        elif "releasing" in kinds:
            slot["releasing"] += 1.0
        if "pipelined" in kinds and "in_use" not in kinds:
            slot["pipelined"] += 1.0
    return out


def cluster_nodes(*, tenant: Tenant | None, rack_labels: Iterable[str] = RACK_LABELS) -> list[dict[str, Any]]:
    """Every node with its GPU holdings and rack, ordered by rack then name (two queries)."""
    held = node_gpu_holdings(tenant=tenant)
    labels = tuple(rack_labels)
    out = []
    for pk, name, gpus, reserved, ready, cordoned, node_labels in Node.objects.order_by("name").values_list(
            "id", "name", "gpus", "reserved_gpus", "ready", "unschedulable", "labels"):
        h = held.get(pk, {"in_use": 0.0, "releasing": 0.0, "pipelined": 0.0})
        node_labels = node_labels or {}
        rack = next((node_labels[k] for k in labels if node_labels.get(k)), "")
        out.append({"id": pk, "name": name, "gpus": gpus, "reserved": float(reserved or 0), "ready": ready,
                    "cordoned": cordoned, "rack": rack, **h})
    out.sort(key=lambda n: (n["rack"] == "", n["rack"], n["name"]))
    return out


def cluster_gpu_summary(nodes: Iterable[dict[str, Any]]) -> dict[str, float]:
    """GPUs of the cluster in five disjoint parts that add up to ``total``: ``in_use`` (held by
    Running / Binding tasks), ``releasing`` (held by tasks being evicted), ``idle`` (free on
    ready, schedulable nodes), ``cordoned_idle`` (free on cordoned nodes: nothing new lands
    there), ``not_ready`` (on nodes that are not ready, whatever their tasks), plus the
    ``pipelined`` GPUs waiting for releases and ``reserved`` GPUs held by other schedulers."""
    s = {"total": 0.0, "in_use": 0.0, "releasing": 0.0, "idle": 0.0, "cordoned_idle": 0.0, "not_ready": 0.0,
         "reserved": 0.0, "pipelined": 0.0, "nodes": 0, "nodes_not_ready": 0, "nodes_cordoned": 0}
    for n in nodes:
        g = float(n["gpus"])
        s["total"] += g
        s["nodes"] += 1
        s["pipelined"] += n["pipelined"]
        if not n["ready"]:
            s["not_ready"] += g
            s["nodes_not_ready"] += 1
            continue
        in_use = min(g, n["in_use"])
        releasing = min(g - in_use, n["releasing"])
        reserved = min(g - in_use - releasing, n["reserved"])
        free = g - in_use - releasing - reserved
        s["in_use"] += in_use
        s["releasing"] += releasing
        s["reserved"] += reserved
        if n["cordoned"]:
            s["cordoned_idle"] += free
            s["nodes_cordoned"] += 1
        else:
            s["idle"] += free
    return s


def cluster_capacity(nodes: Iterable[dict[str, Any]] | None = None) -> dict[str, float]:
    """Schedulable capacity in queue units (gpu devices, cpu cores, memory bytes): ready and
    uncordoned nodes minus what other schedulers reserve (what fair share divides).  One query."""
    from django.db.models import F, Sum

    agg = Node.objects.filter(ready=True, unschedulable=False).aggregate(
        gpu=Sum(F("gpus") - F("reserved_gpus")), cpu=Sum(F("cpu_millis") - F("reserved_cpu_millis")),
        memory=Sum(F("memory_bytes") - F("reserved_memory_bytes")))
    return {"gpu": float(agg["gpu"] or 0), "cpu": float(agg["cpu"] or 0) / 1000.0, "memory": float(agg["memory"] or 0)}


def last_applied_cycle(*, tenant: Tenant | None) -> SchedulingCycle | None:
    return (SchedulingCycle.objects.filter(status="applied").defer("scenario_gz", "decisions_gz")
            .order_by("-started_at", "-id").first())


def recent_cycles(*, tenant: Tenant | None, limit: int = 8) -> list[SchedulingCycle]:
    """The latest cycles without their replay blobs (megabytes each on a large cluster)."""
    return list(cycle_list(tenant=tenant).defer("scenario_gz", "decisions_gz")[:limit])


#: When a pending workload has several reasons in one cycle, the one shown first: the
#: allocation verdict explains the wait, reclaim and preempt tell what was tried next.
REASON_PREFERENCE = ("Unschedulable", "NotScheduled", "Invalid", "NotReclaiming", "NotPreempting")


def pending_by_queue(*, tenant: Tenant | None, cycle: SchedulingCycle | None) -> dict[int, dict[str, Any]]:
    """Per leaf queue with pending workloads: how many, the oldest, and the reasons the given
    (last applied) cycle gave, most frequent first, each with a sample message and workload.

    Three queries: pending counts (status index), reason counts over the cycle's events (cycle
    index), the sample events by id.
    """
    from django.db.models import Min

    out: dict[int, dict[str, Any]] = {}
    pending = Workload.objects.filter(status="Pending")
    if tenant is not None:
        pending = pending.filter(tenant=tenant)
    for qid, n, oldest in pending.values("queue_id").annotate(n=Count("id"), oldest=Min("created_at")).values_list(
            "queue_id", "n", "oldest"):
        out[qid] = {"pending": n, "oldest": oldest, "reasons": []}
    if cycle is None or not out:
        return out
    events = SchedulingEvent.objects.filter(cycle=cycle, workload__status="Pending")
    if tenant is not None:
        events = events.filter(workload__tenant=tenant)
    # one event per (workload, reason) and cycle, as the engine writes them: rows count workloads
    rows = list(events.values("workload__queue_id", "reason").annotate(n=Count("id"), sample=Min("id")).values_list(
        "workload__queue_id", "reason", "n", "sample"))
    samples = {e.pk: e for e in SchedulingEvent.objects.filter(pk__in=[r[3] for r in rows]).select_related(
        "workload").only("id", "message", "reason", "workload__id", "workload__name")}
    rank = {r: i for i, r in enumerate(REASON_PREFERENCE)}
    for qid, reason, n, sample in rows:
        if qid not in out:
            continue
        ev = samples.get(sample)
        out[qid]["reasons"].append({"reason": reason, "workloads": n, "message": ev.message if ev else "",
                                    "workload_id": ev.workload_id if ev else None,
                                    "workload": ev.workload.name if ev and ev.workload_id else ""})
    for qid, item in out.items():
        item["reasons"].sort(key=lambda r: (-r["workloads"], rank.get(r["reason"], len(rank)), r["reason"]))
    return out
