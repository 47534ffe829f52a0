"""What one scheduling cycle decided, in scenario units, and its JSON form.

:class:`CycleResult` is the engine's one output type: the CLI prints it, ``check`` compares it with
a scenario's ``expect`` block, and the Django side (``queues_app/cycle/engine_io.py``) applies it.  It is
plain Python data (no numpy scalars) so it can be dumped as JSON directly.

Units are the scenario's: gpu devices, **cpu cores** and memory bytes (the golden files' ``expect``
blocks compare cpu fair shares in cores, e.g. ``cpu: 3.333`` for 3333 millicores).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .collector import cyclic_gc_paused
from .snapshot import CPU, RESOURCES, Snapshot, TaskState

__all__ = [
    "CycleResult",
    "PENDING_CAPACITY",
    "PENDING_CATEGORIES",
    "PENDING_GANG",
    "PENDING_LIMIT",
    "PENDING_QUOTA",
    "Reason",
    "build_result",
    "job_status",
    "reason_category",
    "to_scenario_units",
]

# ----------------------------------------------------------------------------- why a job is Pending
#
# Every ``Unschedulable`` event carries ``"category"``: what kind of obstacle kept the job Pending,
# so consumers (the Kubernetes PodScheduled condition, the tenant ``why``, cluster autoscaling)
# never parse the English message.  Only ``capacity`` can be fixed by adding nodes: the queue
# admission checks (spec a.7: limit, non-preemptible quota) and a gang short of pods hold whatever
# the cluster's size.  Fair share never refuses an allocation (spec a.7), so a job whose queue is
# past its fair share on a full cluster waits for capacity (its reclaim refusal is a second event).

#: no node (or topology domain) has room for the job's next tasks; more nodes of a matching shape
#: would let it start.
PENDING_CAPACITY = "capacity"
#: a non-preemptible job would put its queue (or an ancestor) over its deserved quota.
PENDING_QUOTA = "quota"
#: the job would put its queue (or an ancestor) over its limit.
PENDING_LIMIT = "limit"
#: a gang has fewer tasks (running + pending) than its minAvailable: it waits for its pods.
PENDING_GANG = "gang"
PENDING_CATEGORIES = (PENDING_CAPACITY, PENDING_QUOTA, PENDING_LIMIT, PENDING_GANG)


class Reason(str):
    """An explanation text that knows its category (one of :data:`PENDING_CATEGORIES`).

    A ``str`` so that every place that builds, caches or compares explanation texts keeps
    working unchanged; code that wraps a text in a longer one keeps the category with
    :meth:`wrap`.  A plain ``str`` explanation is a placement failure (:data:`PENDING_CAPACITY`).
    """

    category: str

    def __new__(cls, message: str, category: str) -> "Reason":
        if category not in PENDING_CATEGORIES:
            raise ValueError(f"unknown pending category {category!r}")
        obj = super().__new__(cls, message)
        obj.category = category
        return obj

    @staticmethod
    def wrap(text: str, inner: str) -> "Reason":
        """``text`` (which quotes ``inner``) with ``inner``'s category."""
        return Reason(text, reason_category(inner))


def reason_category(message: str) -> str:
    """The category of an explanation: its own for a :class:`Reason`, else ``capacity``."""
    return getattr(message, "category", PENDING_CAPACITY)


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
    ``{"idleGpus", "releasingGpus"}``; ``events``: list of ``{"job", "reason", "message", ...}``
    (``Unschedulable`` events also carry ``"category"``, one of :data:`PENDING_CATEGORIES`);
    ``timings``: phase -> seconds (not part of the JSON contract; for benchmarks); ``budget``: where
    the cycle's time budget ran out (:meth:`scheduler_engine.budget.TimeBudget.summary`), None if it
    did not or none was given.
    """

    name: str
    jobs: dict[str, dict[str, Any]]
    tasks: dict[str, dict[str, Any]]
    queues: dict[str, dict[str, dict[str, int | float]]]
    nodes: dict[str, dict[str, int | float]]
    events: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    budget: dict[str, Any] | None = None

    def to_json(self, *, timings: bool = False) -> dict[str, Any]:
        """The format's JSON shape: ``jobs``, ``tasks``, ``queues``, ``nodes``, ``events``."""
        out: dict[str, Any] = {
            "jobs": self.jobs,
            "tasks": self.tasks,
            "queues": self.queues,
            "nodes": self.nodes,
            "events": self.events,
        }
        if self.budget is not None:
            out["budget"] = dict(self.budget)
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

    def pending_categories(self) -> dict[str, str]:
        """Job -> why it is (still partly) Pending after this cycle, one of
        :data:`PENDING_CATEGORIES`: the category of its last ``Unschedulable`` event, for jobs
        that still have a Pending task (a job pipelined by reclaim after allocate failed is not
        Pending)."""
        out: dict[str, str] = {}
        for e in self.events:
            if e.get("reason") == "Unschedulable" and e.get("category"):
                job = self.jobs.get(e.get("job"))
                if job is not None and any(t["status"] == "Pending" for t in job["tasks"]):
                    out[e["job"]] = e["category"]
        return out

    def status_counts(self) -> dict[str, int]:
        """Tasks per status label (for the text summary)."""
        counts: dict[str, int] = {}
        for t in self.tasks.values():
            counts[t["status"]] = counts.get(t["status"], 0) + 1
        return counts


_PLAIN_SCALARS = (str, int, float, bool, type(None))


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


def _plain_event(e: dict) -> dict:
    """A copy of one event; ``_plain`` only when a value is not already a plain scalar (rare)."""
    for k, v in e.items():
        if type(v) not in _PLAIN_SCALARS or type(k) is not str:
            return _plain(e)
    return dict(e)


def _task_order(jobs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Task indices job by job (``jobs.tasks_of`` concatenated), and each job's slice in that order."""
    start = np.asarray(jobs.task_start, dtype=np.int64)
    count = np.asarray(jobs.task_count, dtype=np.int64)
    ends = np.cumsum(count)
    first = ends - count
    total = int(ends[-1]) if count.size else 0
    if total == 0:
        return np.zeros(0, dtype=np.int64), first, count
    if np.array_equal(start, first):
        return np.arange(total, dtype=np.int64), first, count
    return np.repeat(start - first, count) + np.arange(total, dtype=np.int64), first, count


def build_result(snapshot: Snapshot, state: Any, timings: dict[str, float] | None = None) -> CycleResult:
    """Collect a :class:`CycleResult` from a cycle state after its actions ran.

    ``state`` provides ``task_state``, ``task_node``, ``task_gpu_groups``, ``fair_share``,
    ``queue_alloc``, ``node_idle_devices()``, ``node_releasing_devices()`` and ``events``
    (the :class:`~scheduler_engine.state.CycleState` contract).

    Per-task values are looked up with numpy (state labels and node names as object arrays), job
    statuses come from a min/max reduction of each job's task states, and the dicts are built in
    comprehensions with the garbage collector paused: about 0.2 s at 134k tasks instead of 2-8 s.
    """
    nodes, queues, jobs, tasks = snapshot.nodes, snapshot.queues, snapshot.jobs, snapshot.tasks
    with cyclic_gc_paused():  # hundreds of thousands of acyclic dicts (2.4 s vs 0.6 s at 134k tasks)
        order, jfirst, jcount = _task_order(jobs)
        st = np.asarray(state.task_state)[order].astype(np.int64)
        tn = np.asarray(state.task_node)[order]
        node_names = nodes.names
        n_nodes = len(node_names)
        node_obj = np.empty(n_nodes + 1, dtype=object)
        node_obj[:n_nodes] = node_names
        node_obj[n_nodes] = None
        task_node = node_obj[np.where(tn >= 0, tn, n_nodes)].tolist()
        task_status = _LABELS[st].tolist()
        tnames = tasks.names
        names = [tnames[t] for t in order.tolist()] if not _is_identity(order, len(tnames)) else tnames
        groups = state.task_gpu_groups
        ordered_groups = groups if names is tnames else [groups[t] for t in order.tolist()]
        out_tasks = {tname: {"status": s, "node": n} for tname, s, n in zip(names, task_status, task_node)}
        entries = [
            {"name": tname, "status": s, "node": n, "gpuGroups": list(g) if n is not None else []}
            for tname, s, n, g in zip(names, task_status, task_node, ordered_groups)
        ]
        jstatus = np.full(len(jobs.names), "Pending", dtype=object)
        busy = np.flatnonzero(jcount > 0)
        if busy.size:
            lo = np.minimum.reduceat(st, jfirst[busy])
            hi = np.maximum.reduceat(st, jfirst[busy])
            jstatus[busy] = np.where(lo == hi, _LABELS[lo], "Mixed")
        _add_devices(snapshot, state, order, names, out_tasks, entries)
        out_jobs = {
            jname: {"status": js, "tasks": entries[a:a + c]}
            for jname, js, a, c in zip(jobs.names, jstatus.tolist(), jfirst.tolist(), jcount.tolist())
        }
        _add_sub_groups(snapshot, state, out_jobs)
        fs = _units_rows(np.asarray(state.fair_share, dtype=float))
        alloc = _units_rows(np.asarray(state.queue_alloc, dtype=float))
        out_queues = {qname: {"fairShare": f, "allocated": a} for qname, f, a in zip(queues.names, fs, alloc)}
        idle = np.asarray(state.node_idle_devices(), dtype=float).tolist()
        rel = np.asarray(state.node_releasing_devices(), dtype=float).tolist()
        out_nodes = {n: {"idleGpus": _num(round(i, 9)), "releasingGpus": _num(round(r, 9))}
                     for n, i, r in zip(node_names, idle, rel)}
        events = [_plain_event(e) for e in state.events]
    return CycleResult(
        name=snapshot.name,
        jobs=out_jobs,
        tasks=out_tasks,
        queues=out_queues,
        nodes=out_nodes,
        events=events,
        timings=dict(timings or {}),
    )


_LABELS = np.array([TaskState(i).label for i in range(max(TaskState) + 1)], dtype=object)


def _add_devices(snapshot: Snapshot, state: Any, order: np.ndarray, names: list[str], out_tasks: dict,
                 entries: list[dict]) -> None:
    """``devices: {class: [device indices]}`` on every task (job entry and task map) that holds claimed
    devices on a node (scenario-format "Devices")."""
    held = getattr(state, "task_dra", None)
    if not snapshot.device_classes.names or held is None:
        return
    cls = snapshot.device_classes.names
    pos = {t: i for i, t in enumerate(order.tolist())}
    node = np.asarray(state.task_node)
    for t in np.flatnonzero(np.asarray(state.task_has_claims)).tolist():
        dra = held[t]
        if not dra or node[t] < 0:
            continue
        devices = {cls[c]: list(ds) for c, ds in sorted(dra.items())}
        i = pos[t]
        entries[i]["devices"] = devices
        out_tasks[names[i]]["devices"] = {k: list(v) for k, v in devices.items()}


def _add_sub_groups(snapshot: Snapshot, state: Any, out_jobs: dict) -> None:
    """``subGroups: {name: {placed, satisfied}}`` on every job that has subgroups."""
    if not len(snapshot.sub_groups):
        return
    from .subgroups import job_sub_group_status  # the tree model (no cycle: it needs no result)

    for j in np.flatnonzero(np.asarray(snapshot.jobs.sg_count) > 0).tolist():
        out_jobs[snapshot.jobs.names[j]]["subGroups"] = job_sub_group_status(snapshot, np.asarray(state.task_state), j)


def _is_identity(order: np.ndarray, n: int) -> bool:
    return order.size == n and (n == 0 or (int(order[0]) == 0 and int(order[-1]) == n - 1
                                           and bool(np.all(np.diff(order) == 1))))


def _units_rows(m: np.ndarray) -> list[dict[str, int | float]]:
    """:func:`to_scenario_units` of every row of an (n, 3) array."""
    rows = m.tolist()
    out = []
    for row in rows:
        d = {}
        for k, res in enumerate(RESOURCES):
            v = row[k]
            if v != -1.0 and k == CPU:
                v = v / 1000.0
            d[res] = _num(v)
        out.append(d)
    return out
