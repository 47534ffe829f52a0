"""Which pods need their ``PodScheduled`` condition written, decided in the cycle's apply
transaction (kubernetes mode): one ``KubeOutbox`` row of kind ``status`` per pod whose wanted
condition differs from what the cluster shows (``KubePod.pod_scheduled``, kept by the sync and by
the dispatcher's replies) and from what an earlier row still has to write.

The wanted condition (``queues_app.kube.conditions``) follows the engine's machine-readable
category of each workload that stays Pending (``Unschedulable`` events), the cycle's own reasons
for workloads it could not hand to the engine (exclusions: a gang waiting for its pods, an
invalid configuration), and ``Pipelined`` for pods whose earlier ``False`` condition would
otherwise keep asking autoscalers for a node they do not need.  Bound pods need nothing: the
Binding subresource sets ``PodScheduled=True``.  The dispatcher carries the rows out
(``kube_dispatch._status_row``), with the pod's resourceVersion as precondition so that a
condition never lands on a pod bound meanwhile.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable, Mapping

from queues_app.choices import TaskState
from queues_app.kube import conditions
from queues_app.models import KubeOutbox, KubeOutboxKind, KubeOutboxStatus, KubePod, SchedulingCycle, Task

__all__ = ["wanted_conditions", "status_rows"]

CHUNK = 900
PIPELINED_MESSAGE = ("placed on resources that victims are still releasing; the pod is bound once they are free "
                     "(no new node is needed)")


def _chunks(ids: Iterable[int]) -> Iterable[list[int]]:
    ids = sorted(set(ids))
    for i in range(0, len(ids), CHUNK):
        yield ids[i:i + CHUNK]


def wanted_conditions(*, plan: Any, final: Mapping[int, str], index: Any,
                      exclusions: Mapping[int, tuple[str, str]] | None = None) -> tuple[
                          dict[int, conditions.Condition], set[int]]:
    """``(wanted, pipelined)``: task id -> the condition its Pending pod should show, and the ids
    of Pipelined tasks (whose pod should show ``Pipelined`` only if it shows another ``False``
    condition now).  ``exclusions``: workload id -> (PendingCategory, message) for workloads the
    cycle left out of the snapshot."""
    by_job: dict[int, conditions.Condition] = {}
    for ev in plan.events:
        if ev.reason != "Unschedulable" or not ev.category or ev.task:
            continue
        if ev.workload_id is not None:
            by_job[ev.workload_id] = conditions.waiting(str(ev.category), ev.message)
    wanted: dict[int, conditions.Condition] = {}
    pipelined: set[int] = set()
    for wid, tids in plan.workload_tasks.items():
        cond = by_job.get(wid)
        for tid in tids:
            state = final.get(tid, plan.final_state.get(tid))
            if state == TaskState.PENDING and cond is not None:
                wanted[tid] = cond
            elif state == TaskState.PIPELINED:
                pipelined.add(tid)
    if exclusions:
        ids = list(exclusions)
        for chunk in _chunks(ids):
            for tid, wid in Task.objects.filter(workload_id__in=chunk, state=TaskState.PENDING,
                                                kube_pod__isnull=False).values_list("id", "workload_id"):
                category, message = exclusions[wid]
                wanted[tid] = conditions.waiting(str(category), message)
    return wanted, pipelined


def status_rows(*, wanted: Mapping[int, conditions.Condition], pipelined: Iterable[int],
                pods: Mapping[int, KubePod], cycle: SchedulingCycle | None, now: datetime) -> list[KubeOutbox]:
    """The ``status`` rows to write (not saved), superseding pending rows that want something
    else.  ``pods``: task id -> KubePod for at least every task of ``wanted`` / ``pipelined``
    (tasks without one are not from the cluster and are skipped)."""
    targets: dict[int, conditions.Condition] = {}
    for tid, cond in wanted.items():
        if tid in pods:
            targets[tid] = cond
    for tid in pipelined:
        pod = pods.get(tid)
        if pod is not None and conditions.key_status(pod.pod_scheduled) == "False":
            targets[tid] = conditions.pipelined(PIPELINED_MESSAGE)
    if not targets:
        return []
    pending: dict[int, list[KubeOutbox]] = {}
    for chunk in _chunks(targets):
        for row in KubeOutbox.objects.filter(kind=KubeOutboxKind.STATUS, status=KubeOutboxStatus.PENDING,
                                             task_id__in=chunk):
            pending.setdefault(row.task_id, []).append(row)
    rows: list[KubeOutbox] = []
    stale: list[int] = []
    for tid, cond in sorted(targets.items()):
        pod = pods[tid]
        queued = pending.get(tid, [])
        same = [r for r in queued if (r.payload or {}).get("key") == cond.key and r.pod_uid == pod.uid]
        stale.extend(r.pk for r in queued if r not in same)
        if same or pod.pod_scheduled == cond.key:
            continue
        rows.append(KubeOutbox(kind=KubeOutboxKind.STATUS, cycle=cycle, task_id=tid, namespace=pod.namespace,
                               pod_name=pod.name, pod_uid=pod.uid, payload=cond.as_payload(),
                               next_attempt_at=now, created_at=now, updated_at=now))
    for chunk in _chunks(stale):
        KubeOutbox.objects.filter(pk__in=chunk, status=KubeOutboxStatus.PENDING).update(
            status=KubeOutboxStatus.SUPERSEDED, outcome="superseded by a newer condition", finished_at=now,
            updated_at=now)
    return rows
