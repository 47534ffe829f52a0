"""Roll-ups the cycle and the cluster confirmations both need: a workload's status from its tasks,
what each queue's subtree holds, and a workload's subgroup tree by the engine's satisfaction rules
(``sub_group_status``: the API, the admin and the workload detail read it).

Its own module because both ``apply`` (after writing decisions) and ``cluster`` (after the cluster
confirmed binds and releases) restate workloads and queues the same way, and ``apply`` already
depends on ``cluster``.  May import: queues_app models and choices, ``engine_io`` (the engine's
subgroup rules).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Mapping

from django.db.models import Sum

from queues_app.choices import TaskState, WorkloadStatus
from queues_app.cycle.engine_io import subgroup_tree_status
from queues_app.models import SubGroup, Task, Workload

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


def sub_group_status(workload: Workload) -> list[dict[str, Any]]:
    """A workload's subgroup tree with what is placed and what is required, by the engine's rules:
    ``[{name, parent, depth, required, required_kind, placed, satisfied, topology_required}]`` in tree
    order (parents before children). Placed = Running, Binding or Pipelined tasks under it."""
    groups = list(SubGroup.objects.filter(workload=workload).order_by("index", "id").values(
        "id", "name", "parent_id", "min_available", "min_sub_groups", "topology_required"))
    if not groups:
        return []
    pos = {g["id"]: i for i, g in enumerate(groups)}
    placed = [0] * len(groups)
    for sid in Task.objects.filter(workload=workload, sub_group__isnull=False,
                                   state__in=(TaskState.RUNNING, TaskState.BINDING, TaskState.PIPELINED)
                                   ).values_list("sub_group_id", flat=True):
        placed[pos[sid]] += 1
    parents = [pos.get(g["parent_id"], -1) for g in groups]
    leaf = [i not in parents for i in range(len(groups))]
    under, sat, _ = subgroup_tree_status(parents, [int(g["min_available"] or 0) for g in groups],
                                [-1 if g["min_sub_groups"] is None else int(g["min_sub_groups"]) for g in groups],
                                -1 if workload.min_sub_groups is None else int(workload.min_sub_groups), placed)
    kids = [sum(1 for p in parents if p == i) for i in range(len(groups))]
    out: list[dict[str, Any]] = []

    def walk(p: int, depth: int) -> None:
        for i, g in enumerate(groups):
            if parents[i] == p:
                required = int(g["min_available"] or 0) if leaf[i] else (
                    kids[i] if g["min_sub_groups"] is None else int(g["min_sub_groups"]))
                out.append({"name": g["name"], "parent": groups[p]["name"] if p >= 0 else None, "depth": depth,
                            "required": required, "required_kind": "tasks" if leaf[i] else "subgroups",
                            "placed": under[i], "satisfied": sat[i], "topology_required": g["topology_required"]})
                walk(i, depth + 1)

    walk(-1, 0)
    return out
