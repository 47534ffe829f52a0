"""Reads the tenant API needs beyond ``queues_app.selectors`` (tenant first, None = operator).

Kept in its own module so the foundation's selectors stay as they are; everything here is
built on those selectors' scoped querysets or on aggregate numbers that name nothing.
"""
from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Iterable

from django.db.models import Count, Q, QuerySet

from queues_app import selectors
from queues_app.choices import WORKLOAD_STATUSES_STARTED, PendingCategory, WorkloadStatus
from queues_app.cycle import rollup, usage as usage_provider
from queues_app.models import Queue, SchedulingEvent, Tenant, Workload

#: Event reasons that explain an eviction (the engine's and the cycle's names).
EVICTION_REASONS = ("Evicted", "Reclaimed", "Preempted", "StaleGang", "Consolidated")


def queue_workload_counts(*, tenant: Tenant | None, queue_ids: Iterable[int]) -> dict[int, dict[str, int]]:
    """{queue_id: {"pending": n, "running": m}} for queues the caller can see (one query).

    Counts cover every workload in the queue, whoever owns it: a queue's backlog is part of
    its fairness statement, and a count names nobody.
    """
    visible = selectors.queue_list(tenant=tenant).filter(pk__in=list(queue_ids)).values("pk")
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
    return list(selectors.event_list(tenant=tenant, workload=workload)[:limit])


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
    return selectors.event_list(tenant=tenant, workload=workload).filter(reason__in=EVICTION_REASONS).first()


def visible_names(*, tenant: Tenant | None, names: Iterable[str]) -> set[str]:
    """Which of ``names`` (workload or queue names quoted in an engine message) the caller may
    read: its own workloads, its queues and their ancestors.  Operators may read all."""
    names = set(names)
    if tenant is None or not names:
        return names
    own = set(selectors.workload_list(tenant=tenant).filter(name__in=names).values_list("name", flat=True))
    queues = list(selectors.queue_list(tenant=tenant))
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
    cycle = selectors.cycle_list(tenant=tenant).filter(finished_at__isnull=False).first()
    return cycle.finished_at if cycle is not None else None


def queue_decayed_usage(*, tenant: Tenant | None, queues: Iterable[Queue]) -> tuple[dict[int, dict[str, float]], str]:
    """({queue_id: {resource: decayed usage}}, source) from the registered usage provider.

    fairshare_app registers ``fairshare_app.selectors.normalized_usage(*, tenant)`` ->
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
    qs = selectors.workload_list(tenant=tenant, filters=filters)
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
    rank = {r: i for i, r in enumerate(selectors.REASON_PREFERENCE)}
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
