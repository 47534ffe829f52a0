"""What the cluster confirmed since the last cycle: binds that took effect, pods that are gone.

The scheduler decides ``Binding`` (a bind is issued) and ``Releasing`` (an eviction is issued);
only the cluster can say when those happened.  Two modes (``KAI_CLUSTER_MODE``):

* ``embedded`` (default): there is no Kubernetes; the database *is* the cluster.  Every bind
  issued by cycle *k* is confirmed at the start of cycle *k+1* (``Binding -> Running``) and
  every terminating pod is gone by then: ``Releasing``/``StuckInReleasing -> Pending`` with no
  node (the pod is recreated, scenario-format "Rounds"), or ``-> Failed`` when its workload
  was cancelled (nothing to recreate).  The confirmations are folded into the engine input
  before the engine runs and written in the same apply transaction as the decisions, so a
  cycle stays all-or-nothing (a crash never leaves "confirmed but not decided").
* ``kubernetes``: the cycle confirms nothing itself.  The Kubernetes reconciler reports what
  it observed through :func:`cluster_confirm_bound` and :func:`cluster_confirm_released`
  (each its own short transaction); the next snapshot sees the result.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from django.db import transaction
from django.utils import timezone

from queues_app.choices import TaskState, WorkloadStatus
from queues_app.cycle.rollup import allocation_by_queue, workload_status_of
from queues_app.errors import ApplicationError
from queues_app.models import Queue, QueueStatus, Task, Workload

RELEASING_STATES = (TaskState.RELEASING, TaskState.STUCK_RELEASING)


@dataclass
class Confirmations:
    """Task id -> the state the cluster confirmed: ``bound`` become Running on their node;
    ``released`` become Pending (no node) or Failed (workload cancelled)."""

    bound: set[int] = field(default_factory=set)
    released: dict[int, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.bound) + len(self.released)


def _released_state(workload_status: str | None) -> str:
    if workload_status in (WorkloadStatus.CANCELLED, WorkloadStatus.SUCCEEDED, WorkloadStatus.FAILED):
        return TaskState.FAILED
    return TaskState.PENDING


def embedded_confirmations(*, task_db_state: dict[int, str], task_workload: dict[int, int],
                           workload_status: dict[int, str]) -> Confirmations:
    """Everything in flight at snapshot time is confirmed (the embedded cluster is instant)."""
    conf = Confirmations()
    for tid, state in task_db_state.items():
        if state == TaskState.BINDING:
            conf.bound.add(tid)
        elif state in RELEASING_STATES:
            conf.released[tid] = _released_state(workload_status.get(task_workload.get(tid)))
    return conf


def cycle_confirmations(*, mode: str, task_db_state: dict[int, str], task_workload: dict[int, int],
                        workload_status: dict[int, str]) -> Confirmations:
    if mode == "embedded":
        return embedded_confirmations(task_db_state=task_db_state, task_workload=task_workload,
                                      workload_status=workload_status)
    return Confirmations()


def fold_into_input(data: dict[str, Any], *, task_id: dict[str, int], job_id: dict[str, int],
                    conf: Confirmations) -> None:
    """Rewrite the engine input as the cluster now is (scenario-format "Rounds" rules).

    Binding tasks are already exported as Running; a job whose bind is confirmed and that had
    never started counts as started now.  Released tasks lose their node and gpuGroups.
    """
    if not conf:
        return
    for job in data.get("jobs", ()):
        started = False
        for task in job.get("tasks", ()):
            tid = task_id.get(task["name"])
            if tid in conf.bound:
                started = True
            elif tid in conf.released:
                task["state"] = str(conf.released[tid])
                task["node"] = None
                task["gpuGroups"] = []
        if started and job.get("startedMinutesAgo") is None:
            job["startedMinutesAgo"] = 0


# ----------------------------------------------------------------------------- reconciler API


def _lock_tasks(task_ids: Iterable[int]) -> list[Task]:
    ids = sorted({int(t) for t in task_ids})
    if not ids:
        return []
    # Workloads first, then tasks: the same lock order as workload_cancel and the cycle apply.
    wids = sorted(set(Task.objects.filter(id__in=ids).values_list("workload_id", flat=True)))
    list(Workload.objects.select_for_update().filter(id__in=wids).order_by("id").values_list("id", flat=True))
    return list(Task.objects.select_for_update().filter(id__in=ids).order_by("id"))


@transaction.atomic
def cluster_confirm_bound(*, task_ids: Iterable[int]) -> int:
    """The cluster reports these pods bound and running: ``Binding -> Running``.

    Tasks no longer Binding (cancelled meanwhile, already confirmed) are left alone, so the
    reconciler may report the same pod twice.  Returns how many tasks changed.
    """
    now = timezone.now()
    tasks = [t for t in _lock_tasks(task_ids) if t.state == TaskState.BINDING]
    for t in tasks:
        t.state, t.version, t.updated_at = TaskState.RUNNING, t.version + 1, now
    Task.objects.bulk_update(tasks, ["state", "version", "updated_at"])
    wids = {t.workload_id for t in tasks}
    Workload.objects.filter(id__in=wids, started_at__isnull=True).update(started_at=now)
    refresh_workload_statuses(wids, now=now)
    return len(tasks)


@transaction.atomic
def cluster_confirm_released(*, task_ids: Iterable[int]) -> int:
    """The cluster reports these pods gone: ``Releasing -> Pending`` (recreated) or
    ``-> Failed`` (the workload was cancelled).  Idempotent like :func:`cluster_confirm_bound`."""
    now = timezone.now()
    tasks = [t for t in _lock_tasks(task_ids) if t.state in RELEASING_STATES]
    if not tasks:
        return 0
    status = dict(Workload.objects.filter(id__in={t.workload_id for t in tasks}).values_list("id", "status"))
    for t in tasks:
        t.state = _released_state(status.get(t.workload_id))
        t.node, t.gpu_groups, t.version, t.updated_at = None, [], t.version + 1, now
    Task.objects.bulk_update(tasks, ["state", "node", "gpu_groups", "version", "updated_at"])
    refresh_workload_statuses(set(status), now=now)
    return len(tasks)


def refresh_workload_statuses(workload_ids: Iterable[int], *, now, observed: bool = False) -> None:
    """Workload status from its tasks after tasks changed outside a cycle (same rule as the cycle).

    ``observed`` (the Kubernetes sync, which reports what the cluster did): a Succeeded / Failed
    workload reopens when a pod comes back (a controller recreating it; Cancelled stays), and the
    start / finish times are stamped. Confirmations of the cycle's own decisions only move the status.
    """

    ids = set(workload_ids)
    states: dict[int, list[str]] = {}
    for wid, st in Task.objects.filter(workload_id__in=ids).values_list("workload_id", "state"):
        states.setdefault(wid, []).append(st)
    finished = (WorkloadStatus.SUCCEEDED, WorkloadStatus.FAILED)
    for wl in Workload.objects.filter(id__in=ids):
        base = WorkloadStatus.PENDING if observed and wl.status in finished else wl.status
        new = workload_status_of(states.get(wl.id, []), base, wl.min_available)
        fields: dict = {}
        if new != wl.status:
            fields["status"] = new
            if observed:
                fields["finished_at"] = now if new in finished else None
        if observed and wl.started_at is None and TaskState.RUNNING in states.get(wl.id, []):
            fields["started_at"] = now
        if fields:
            Workload.objects.filter(id=wl.id).update(version=wl.version + 1, updated_at=now, **fields)


def ensure_mode(mode: str) -> None:
    if mode not in ("embedded", "kubernetes"):
        raise ApplicationError("Invalid cluster mode.", extra={"KAI_CLUSTER_MODE": [f"Unknown mode {mode!r}."]})


@transaction.atomic
def cluster_bind_failed(*, task_ids: Iterable[int]) -> int:
    """A bind could not be carried out (pod gone, node gone, retries exhausted, gang aborted):
    ``Binding -> Pending`` with no node, so the next cycle places the task again.

    Tasks no longer Binding are left alone (idempotent, like the confirmations).  Returns how
    many tasks changed.
    """
    now = timezone.now()
    tasks = [t for t in _lock_tasks(task_ids) if t.state == TaskState.BINDING]
    for t in tasks:
        t.state, t.node, t.gpu_groups, t.version, t.updated_at = TaskState.PENDING, None, [], t.version + 1, now
    Task.objects.bulk_update(tasks, ["state", "node", "gpu_groups", "version", "updated_at"])
    refresh_workload_statuses({t.workload_id for t in tasks}, now=now)
    if tasks:
        restate_queue_allocation(queue_ids=set(Workload.objects.filter(
            id__in={t.workload_id for t in tasks}).values_list("queue_id", flat=True)), now=now)
    return len(tasks)


def restate_queue_allocation(*, queue_ids: Iterable[int], now=None) -> None:
    """After tasks entered or left the allocated states outside a cycle (a bind that failed, a
    pod deleted in the cluster), set ``QueueStatus.allocated_*`` of those queues and their
    ancestors from the tasks, as the cycle does (invariant I5): a Pending or deleted task does
    not mark its queue as changed, so the status must not wait for the next cycle.  The other
    status fields (fair share, counts) stay the cycle's."""
    now = now or timezone.now()
    parents = dict(Queue.objects.values_list("id", "parent_id"))
    chain: set[int] = set()
    for qid in queue_ids:
        cur, steps = qid, 0
        while cur is not None and cur not in chain and steps < 1000:
            chain.add(cur)
            cur, steps = parents.get(cur), steps + 1
    if not chain:
        return
    alloc = allocation_by_queue(parents)
    for status in QueueStatus.objects.select_for_update().filter(queue_id__in=chain):
        gpu, cpu, mem = alloc.get(status.queue_id, (0.0, 0.0, 0.0))
        status.allocated_gpu, status.allocated_cpu, status.allocated_memory = round(gpu, 6), round(cpu, 6), mem
        status.updated_at = now
        status.save(update_fields=["allocated_gpu", "allocated_cpu", "allocated_memory", "updated_at"])


@transaction.atomic
def cluster_mark_stuck_releasing(*, older_than_seconds: float, now=None) -> list[int]:
    """Releasing tasks whose pod has not gone away for ``older_than_seconds``: ->
    ``StuckInReleasing`` (they still hold their node; the pod is reported, not forgotten).

    ``updated_at`` is when the task became Releasing (every state write stamps it).  Returns the
    ids that changed; the caller reports them (SchedulingEvent, Kubernetes Event).
    """
    from datetime import timedelta

    now = now or timezone.now()
    horizon = now - timedelta(seconds=float(older_than_seconds))
    ids = list(Task.objects.filter(state=TaskState.RELEASING, updated_at__lt=horizon).values_list("id", flat=True))
    tasks = [t for t in _lock_tasks(ids) if t.state == TaskState.RELEASING and t.updated_at < horizon]
    for t in tasks:
        t.state, t.version, t.updated_at = TaskState.STUCK_RELEASING, t.version + 1, now
    # bulk_update, not save(): Task.updated_at is auto_now and must be exactly ``now`` here
    Task.objects.bulk_update(tasks, ["state", "version", "updated_at"])
    return [t.id for t in tasks]
