"""Every read of queues_app, for the API, the admin, the dashboard and the commands.  Each selector
takes the caller's tenant first: ``tenant=None`` means an operator (everything); a Tenant sees
only its own rows.  A new endpoint adds its reads here (writes go to ``services``).

Selectors return QuerySets with the joins their callers need already applied, so list
endpoints run a constant number of queries.  Object lookups go through the scoped
queryset, so an outsider gets DoesNotExist (404), never someone else's object.
"""
from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Iterable, Mapping

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Prefetch, Q, QuerySet

from queues_app.choices import (
    TASK_STATES_HOLDING,
    WORKLOAD_STATUSES_STARTED,
    PendingCategory,
    TaskState,
    WorkloadStatus,
)
from queues_app.cycle import rollup, usage as usage_provider
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


# ----------------------------------------------------------------------------- workload detail, queue figures, redaction (tenant API)


#: Event reasons that explain an eviction (the engine's and the cycle's names).
EVICTION_REASONS = ("Evicted", "Reclaimed", "Preempted", "StaleGang", "Consolidated")


def queue_workload_counts(*, tenant: Tenant | None, queue_ids: Iterable[int]) -> dict[int, dict[str, int]]:
    """{queue_id: {"pending": n, "running": m}} for queues the caller can see (one query).

    Counts cover every workload in the queue, whoever owns it: a queue's backlog is part of
    its fairness statement, and a count names nobody.
    """
    visible = queue_list(tenant=tenant).filter(pk__in=list(queue_ids)).values("pk")
    rows = (Workload.objects.filter(queue_id__in=visible)
            .values("queue_id")
            .annotate(pending=Count("id", filter=Q(status=WorkloadStatus.PENDING)),
                      running=Count("id", filter=Q(status__in=(*WORKLOAD_STATUSES_STARTED, WorkloadStatus.RELEASING)))))
    return {r["queue_id"]: {"pending": r["pending"], "running": r["running"]} for r in rows}


def workload_queue_position(*, tenant: Tenant | None, workload: Workload) -> int | None:
    """1-based position of a Pending workload among the Pending workloads of its queue, in the
    engine's in-queue order (higher priority first, then older first); None if not Pending.

    All workloads of the queue count (a count names nobody), so the number means what the
    scheduler sees.  ``workload`` must come from a scoped selector (workload_get).
    """
    if workload.status != WorkloadStatus.PENDING:
        return None
    ahead = Workload.objects.filter(queue_id=workload.queue_id, status=WorkloadStatus.PENDING).filter(
        Q(priority__gt=workload.priority)
        | Q(priority=workload.priority, created_at__lt=workload.created_at)
        | Q(priority=workload.priority, created_at=workload.created_at, pk__lt=workload.pk)
    ).count()
    return ahead + 1


def workload_events(*, tenant: Tenant | None, workload: Workload, limit: int = 20) -> list[SchedulingEvent]:
    """The latest scheduling events of one workload the caller can see, newest first."""
    return list(event_list(tenant=tenant, workload=workload)[:limit])


#: What each PendingCategory means for the tenant, and whether more nodes would help.
WAITING_FOR_NOTES = {
    PendingCategory.CAPACITY: ("Waiting for capacity: no node has room for it now. More nodes of a matching shape "
                               "would let it start (in Kubernetes mode its pods are marked Unschedulable, which a "
                               "cluster autoscaler acts on)."),
    PendingCategory.QUOTA: ("Waiting for quota: as a non-preemptible workload it would put its queue over the deserved "
                            "quota. More nodes would not help; a lower priority (preemptible) or a larger quota would."),
    PendingCategory.LIMIT: ("Waiting for its queue's limit: more nodes would not help. It starts when the queue uses "
                            "less or the limit is raised."),
    PendingCategory.GANG: "Waiting for the rest of its gang's pods (minAvailable). More nodes would not help.",
    PendingCategory.INVALID: "Not schedulable as configured (see the events). More nodes would not help.",
}


def workload_waiting_for(*, events: list[SchedulingEvent]) -> str | None:
    """The PendingCategory of the newest categorised event among ``events`` (newest first) of the
    latest cycle that explained the workload; None when that cycle gave no category."""
    if not events:
        return None
    latest = events[0].cycle_id
    for e in events:
        if e.cycle_id != latest:
            break
        if e.category:
            return e.category
    return None


def workload_last_eviction(*, tenant: Tenant | None, workload: Workload) -> SchedulingEvent | None:
    return event_list(tenant=tenant, workload=workload).filter(reason__in=EVICTION_REASONS).first()


def visible_names(*, tenant: Tenant | None, names: Iterable[str]) -> set[str]:
    """Which of ``names`` (workload or queue names quoted in an engine message) the caller may
    read: its own workloads, its queues and their ancestors.  Operators may read all."""
    names = set(names)
    if tenant is None or not names:
        return names
    own = set(workload_list(tenant=tenant).filter(name__in=names).values_list("name", flat=True))
    queues = list(queue_list(tenant=tenant))
    ancestor_ids = {int(seg) for q in queues for seg in q.path.split(".") if seg}
    queue_names = set(Queue.objects.filter(pk__in=ancestor_ids, name__in=names).values_list("name", flat=True))
    return own | queue_names


_NAMED = re.compile(r"\b(job|queue|workload)s? ([A-Za-z0-9][A-Za-z0-9._/-]*[A-Za-z0-9]|[A-Za-z0-9])")


#: Words that follow "job" / "queue" in engine prose without being a name ("job queue vision").
_NOT_NAMES = frozenset({"queue", "queues", "job", "jobs", "workload", "workloads", "is", "of", "the", "in", "with",
                        "has", "and", "for", "at", "on", "to", "a", "an", "may", "would", "can", "cannot"})


def redact_message(*, tenant: Tenant | None, message: str, allowed: set[str] | None = None) -> str:
    """Replace the names of other tenants' workloads and queues in an engine message.

    Engine messages are written for operators ("... to make room for job X of queue Y"); a
    tenant sees the reason and the numbers, with foreign names replaced.
    """
    if tenant is None or not message:
        return message
    found = {m.group(2).split("/")[-1] for m in _NAMED.finditer(message)}
    if allowed is None:
        allowed = visible_names(tenant=tenant, names=found)

    def sub(m: re.Match) -> str:
        name = m.group(2).split("/")[-1]
        if name in allowed or name.lower() in _NOT_NAMES:
            return m.group(0)
        return f"{m.group(1)} (another tenant's)"

    return _NAMED.sub(sub, message)


def latest_cycle_time(*, tenant: Tenant | None) -> datetime | None:
    cycle = cycle_list(tenant=tenant).filter(finished_at__isnull=False).first()
    return cycle.finished_at if cycle is not None else None


def queue_decayed_usage(*, tenant: Tenant | None, queues: Iterable[Queue]) -> tuple[dict[int, dict[str, float]], str]:
    """({queue_id: {resource: decayed usage}}, source) from the registered usage provider.

    fairshare_app registers ``fairshare_app.normalized_usage(*, tenant)`` ->
    {queue_name: {resource: 0..1 of the cluster}}, the value the last accounting run computed and
    the cycle feeds the engine (one query; a queue without usage is absent = 0).  Without a
    provider the source is ``"unavailable"`` and the API reports 0.
    """
    answer = usage_provider.normalized_usage(tenant=tenant)
    if answer is None:
        return {}, "unavailable"
    by_name, source = answer
    queues = list(queues)
    out = {q.pk: {k: float(v) for k, v in (by_name.get(q.name) or {}).items()} for q in queues}
    return out, source


def workload_list_ordered(*, tenant: Tenant | None, filters: dict[str, Any] | None, ordering: str | None) -> QuerySet:
    qs = workload_list(tenant=tenant, filters=filters)
    if ordering:
        qs = qs.order_by(ordering, "-id" if ordering.startswith("-") else "id")
    return qs


NO_ESTIMATE = ("No estimate: workloads declare no run time, so when the resources blocking this one are freed "
               "cannot be predicted; the position and the reason say what it waits for.")


def _pending_summary(events: list[dict[str, Any]]) -> str:
    """The reason of the latest cycle that explains the wait best: the allocation verdict
    (Unschedulable ...) before what reclaim and preempt tried next, whatever order they were
    written in."""
    if not events:
        return "Waiting for the next scheduling cycle."
    latest = [e for e in events if e["cycle"] == events[0]["cycle"]] or events[:1]
    rank = {r: i for i, r in enumerate(REASON_PREFERENCE)}
    best = min(range(len(latest)), key=lambda i: (rank.get(latest[i]["reason"], len(rank)), i))
    return latest[best]["message"]


def workload_why(*, tenant: Tenant | None, workload: Workload, limit: int = 20) -> dict[str, Any]:
    """Why a workload is where it is: a one-sentence summary, the latest events (reasons with
    the engine's numbers), the last eviction, its position among the queue's pending workloads.

    One answer for every door: the API's ``why`` and the admin's workload page show this same
    text.  Messages are redacted for a tenant (other tenants' names replaced), not for operators.
    ``workload`` must come from a scoped selector (workload_get).
    """
    events = workload_events(tenant=tenant, workload=workload, limit=limit)
    eviction = workload_last_eviction(tenant=tenant, workload=workload)
    found = {m.group(2).split("/")[-1] for e in events + ([eviction] if eviction else [])
             for m in _NAMED.finditer(e.message)}
    allowed = visible_names(tenant=tenant, names=found)

    def ev(e: SchedulingEvent) -> dict[str, Any]:
        return {"reason": e.reason, "message": redact_message(tenant=tenant, message=e.message, allowed=allowed),
                "task": e.task.name if e.task_id else None, "cycle": e.cycle_id, "created_at": e.created_at}

    counts = queue_workload_counts(tenant=None, queue_ids=[workload.queue_id])
    position = workload_queue_position(tenant=tenant, workload=workload)
    rendered = [ev(e) for e in events]
    if workload.status == WorkloadStatus.PENDING:
        summary = _pending_summary(rendered)
    elif workload.status == WorkloadStatus.BINDING:
        summary = ("Binding: the scheduler placed the workload and issued its binds; waiting for the cluster to "
                   "confirm that its pods run on their nodes.")
    elif workload.status in (WorkloadStatus.RUNNING, WorkloadStatus.RELEASING):
        summary = f"{workload.status} since {workload.started_at:%Y-%m-%d %H:%M:%S}Z." if workload.started_at \
            else f"{workload.status}."
    else:
        summary = workload.status_message or f"{workload.status}."
    started = workload.started_at if workload.status != WorkloadStatus.PENDING else None
    waiting_for = workload_waiting_for(events=events) if workload.status == WorkloadStatus.PENDING else None
    return {
        "workload": workload.pk, "status": workload.status, "summary": summary,
        "position_in_queue": position,
        "pending_in_queue": counts.get(workload.queue_id, {}).get("pending", 0),
        "estimated_start": started,
        "estimated_start_note": "Started." if started else (
            NO_ESTIMATE if workload.status == WorkloadStatus.PENDING else "Not pending."),
        "last_cycle_at": latest_cycle_time(tenant=tenant),
        "waiting_for": waiting_for,
        "waiting_for_note": WAITING_FOR_NOTES.get(waiting_for, "") if waiting_for else "",
        "last_eviction": ev(eviction) if eviction is not None else None,
        "events": rendered,
        # hierarchical gangs: each subgroup's placed / required, by the engine's rules
        "sub_groups": rollup.sub_group_status(workload),
    }
