"""What one scheduling cycle decided, in scenario units, and its JSON form.

:class:`CycleResult` is the engine's one output type: the CLI prints it, ``check`` compares it with
a scenario's ``expect`` block, and the Django side (``queues_app/engine_io.py``) applies it.  It is
plain Python data (no numpy scalars) so it can be dumped as JSON directly.

Units are the scenario's: gpu devices, **cpu cores** and memory bytes (the golden files' ``expect``
blocks compare cpu fair shares in cores, e.g. ``cpu: 3.333`` for 3333 millicores).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .snapshot import CPU, RESOURCES, Snapshot, TaskState

__all__ = ["CycleResult", "build_result", "job_status", "to_scenario_units"]


def _num(x: float) -> int | float:
    """A JSON-friendly number: integral values as int, others as float."""
    x = float(x)
    if math.isfinite(x) and x.is_integer() and abs(x) < 2**63:
        return int(x)
    return x


def to_scenario_units(vec: np.ndarray) -> dict[str, int | float]:
    """An internal (3,) resource vector as ``{"gpu": devices, "cpu": cores, "memory": bytes}``."""
    out = {}
    for k, res in enumerate(RESOURCES):
        v = float(vec[k])
        if v != -1.0 and k == CPU:
            v = v / 1000.0
        out[res] = _num(v)
    return out


def job_status(labels: list[str]) -> str:
    """The common status of a job's tasks, or ``Mixed`` when they differ (``Pending`` for none)."""
    if not labels:
        return "Pending"
    first = labels[0]
    return first if all(s == first for s in labels) else "Mixed"


@dataclass
class CycleResult:
    """Decisions of one cycle.

    ``jobs``: job -> ``{"status", "tasks": [{"name", "status", "node", "gpuGroups"}]}``;
    ``tasks``: task -> ``{"status", "node"}``; ``queues``: queue -> ``{"fairShare", "allocated"}``
    (each ``{"gpu", "cpu", "memory"}`` in scenario units); ``nodes``: node ->
    ``{"idleGpus", "releasingGpus"}``; ``events``: list of ``{"job", "reason", "message", ...}``;
    ``timings``: phase -> seconds (not part of the JSON contract; for benchmarks).
    """

    name: str
    jobs: dict[str, dict[str, Any]]
    tasks: dict[str, dict[str, Any]]
    queues: dict[str, dict[str, dict[str, int | float]]]
    nodes: dict[str, dict[str, int | float]]
    events: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    def to_json(self, *, timings: bool = False) -> dict[str, Any]:
        """The format's JSON shape: ``jobs``, ``tasks``, ``queues``, ``nodes``, ``events``."""
        out: dict[str, Any] = {
            "jobs": self.jobs,
            "tasks": self.tasks,
            "queues": self.queues,
            "nodes": self.nodes,
            "events": self.events,
        }
        if timings:
            out["timings"] = dict(self.timings)
        return out

    def job_nodes(self, job: str) -> list[str]:
        """Distinct nodes of the job's tasks that have one, in task order."""
        seen: list[str] = []
        for t in self.jobs[job]["tasks"]:
            n = t.get("node")
            if n is not None and n not in seen:
                seen.append(n)
        return seen

    def status_counts(self) -> dict[str, int]:
        """Tasks per status label (for the text summary)."""
        counts: dict[str, int] = {}
        for t in self.tasks.values():
            counts[t["status"]] = counts.get(t["status"], 0) + 1
        return counts


def _plain(x: Any) -> Any:
    """Event payloads as JSON-safe Python values (numpy scalars and arrays converted)."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return x


def build_result(snapshot: Snapshot, state: Any, timings: dict[str, float] | None = None) -> CycleResult:
    """Collect a :class:`CycleResult` from a cycle state after its actions ran.

    ``state`` provides ``task_state``, ``task_node``, ``task_gpu_groups``, ``fair_share``,
    ``queue_alloc``, ``node_idle_gpus()``, ``node_releasing_gpus()`` and ``events``
    (the :class:`~scheduler_engine.state.CycleState` contract).
    """
    nodes, queues, jobs, tasks = snapshot.nodes, snapshot.queues, snapshot.jobs, snapshot.tasks
    labels = {int(s): s.label for s in TaskState}
    st = np.asarray(state.task_state)
    tn = np.asarray(state.task_node)
    groups = state.task_gpu_groups
    node_names = nodes.names
    task_status = [labels[int(s)] for s in st]
    task_node = [node_names[int(n)] if n >= 0 else None for n in tn]

    out_tasks: dict[str, dict[str, Any]] = {}
    out_jobs: dict[str, dict[str, Any]] = {}
    for j, jname in enumerate(jobs.names):
        entries = []
        for t in jobs.tasks_of(j):
            tname = tasks.names[t]
            out_tasks[tname] = {"status": task_status[t], "node": task_node[t]}
            entries.append({
                "name": tname,
                "status": task_status[t],
                "node": task_node[t],
                "gpuGroups": list(groups[t]) if task_node[t] is not None else [],
            })
        out_jobs[jname] = {"status": job_status([e["status"] for e in entries]), "tasks": entries}

    fs = np.asarray(state.fair_share, dtype=float)
    alloc = np.asarray(state.queue_alloc, dtype=float)
    out_queues = {
        qname: {"fairShare": to_scenario_units(fs[q]), "allocated": to_scenario_units(alloc[q])}
        for q, qname in enumerate(queues.names)
    }
    idle = np.asarray(state.node_idle_gpus(), dtype=float)
    rel = np.asarray(state.node_releasing_gpus(), dtype=float)
    out_nodes = {
        n: {"idleGpus": _num(round(float(idle[i]), 9)), "releasingGpus": _num(round(float(rel[i]), 9))}
        for i, n in enumerate(node_names)
    }
    return CycleResult(
        name=snapshot.name,
        jobs=out_jobs,
        tasks=out_tasks,
        queues=out_queues,
        nodes=out_nodes,
        events=[_plain(e) for e in state.events],
        timings=dict(timings or {}),
    )
