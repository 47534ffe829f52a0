"""Roll-ups the cycle and the cluster confirmations both need: a workload's status from its tasks,
and what each queue's subtree holds.

Its own module because both ``apply`` (after writing decisions) and ``cluster`` (after the cluster
confirmed binds and releases) restate workloads and queues the same way, and ``apply`` already
depends on ``cluster``.  May import: queues_app models and choices only.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Mapping

from django.db.models import Sum

from queues_app.choices import TaskState, WorkloadStatus
from queues_app.models import Task

#: States counted in a queue's allocation (what the engine charges to the queue).
ALLOCATED = (TaskState.RUNNING, TaskState.BINDING, TaskState.PIPELINED)


def workload_status_of(states: Iterable[str], current: str, min_available: int = 1) -> str:
    """A workload's status from its tasks; Cancelled / Succeeded / Failed are final.

    ``Binding`` while binds are issued and fewer than ``min_available`` tasks are confirmed
    Running (a gang is not running until the cluster has confirmed the gang); once enough run,
    extra binds of an elastic workload leave it ``Running``.
    """
    if current in (WorkloadStatus.CANCELLED, WorkloadStatus.SUCCEEDED, WorkloadStatus.FAILED):
        return current
    states = list(states)
    running = states.count(TaskState.RUNNING)
    if TaskState.BINDING in states and running < max(1, min_available):
        return WorkloadStatus.BINDING
    states = set(states)
    if states & {TaskState.RUNNING, TaskState.BINDING}:
        return WorkloadStatus.RUNNING
    if states & {TaskState.RELEASING, TaskState.STUCK_RELEASING}:
        return WorkloadStatus.RELEASING
    if states and states <= {TaskState.SUCCEEDED}:
        return WorkloadStatus.SUCCEEDED
    if states and states <= {TaskState.SUCCEEDED, TaskState.FAILED}:
        return WorkloadStatus.FAILED
    return WorkloadStatus.PENDING


def allocation_by_queue(parents: Mapping[int, int | None]) -> dict[int, list[float]]:
    """``[gpu devices, cpu cores, memory bytes]`` held by each queue's subtree: the sum of its
    Running / Binding / Pipelined tasks (one grouped query), rolled up the tree (``parents``:
    queue id -> parent id).  The value ``QueueStatus.allocated_*`` must equal (invariant I5)."""
    alloc: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for qid, gpu, dra, cpu, mem in Task.objects.filter(state__in=ALLOCATED).values_list(
            "workload__queue_id").annotate(gpu=Sum("gpu"), dra=Sum("dra_gpus"), cpu=Sum("cpu_millis"),
                                           mem=Sum("memory_bytes")).values_list(
            "workload__queue_id", "gpu", "dra", "cpu", "mem"):
        # claimed devices of GPU classes are GPUs of the queue (scenario-format "Devices")
        roll_up(alloc, parents, qid, [float(gpu or 0) + float(dra or 0), float(cpu or 0) / 1000.0, float(mem or 0)])
    return alloc


def roll_up(acc: dict[int, list[float]], parents: Mapping[int, int | None], qid: int, vec: list[float]) -> None:
    cur, steps = qid, 0
    while cur is not None and steps < 1000:
        row = acc[cur]
        for i, v in enumerate(vec):
            row[i] += v
        cur, steps = parents.get(cur), steps + 1
