"""The engine's one input type: a cluster snapshot as numpy arrays.

The scenario loader (``loader.py``) is one way to build a :class:`Snapshot`; the Django side
builds the same object from the database (through a scenario-format dict).  Everything an
action needs is here, already converted to KAI internal units, so the hot paths never parse
strings or walk dicts:

* resources are columns ``GPU, CPU, MEM`` of ``(n, 3)`` float64 arrays;
* gpu in devices (a float: 0.5 = half of one shared device), cpu in millicores, memory in bytes;
* durations in seconds (``nan`` = unset / inherit);
* the queue tree is a parent-index array (``-1`` for a top-level queue);
* tasks of a job are contiguous: ``jobs.task_start[j] : jobs.task_start[j] + jobs.task_count[j]``;
* a job's subgroup tree (KAI's hierarchical PodGroups) is a parent-index array like the queue tree,
  its subgroups contiguous in :class:`SubGroups` (``jobs.sg_start[j] : + jobs.sg_count[j]``), every
  task naming one leaf (``tasks.sub_group``, -1 for a job without subgroups);
* devices of dynamic resource allocation are counted per class: ``nodes.devices`` (N, D) offered,
  ``tasks.claims`` (T, D) claimed, the classes in :class:`DeviceClasses` (D may be 0).

Nothing in this module imports Django.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

RESOURCES: tuple[str, ...] = ("gpu", "cpu", "memory")
GPU, CPU, MEM = 0, 1, 2
NRES = 3
UNLIMITED = -1.0  # quota / limit value meaning "unlimited"

ACTION_NAMES: tuple[str, ...] = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")


class TaskState(enum.IntEnum):
    """Task states; the first six may appear in input, the last two are only produced by a cycle."""

    PENDING = 0
    RUNNING = 1
    RELEASING = 2
    STUCK_RELEASING = 3
    SUCCEEDED = 4
    FAILED = 5
    BINDING = 6
    PIPELINED = 7

    @property
    def label(self) -> str:
        return _STATE_LABELS[self]

    @classmethod
    def parse(cls, text: str) -> "TaskState":
        return _STATE_BY_LABEL[text]


_STATE_LABELS = {
    TaskState.PENDING: "Pending",
    TaskState.RUNNING: "Running",
    TaskState.RELEASING: "Releasing",
    TaskState.STUCK_RELEASING: "StuckInReleasing",
    TaskState.SUCCEEDED: "Succeeded",
    TaskState.FAILED: "Failed",
    TaskState.BINDING: "Binding",
    TaskState.PIPELINED: "Pipelined",
}
_STATE_BY_LABEL = {v: k for k, v in _STATE_LABELS.items()}
INPUT_STATES = ("Pending", "Running", "Releasing", "StuckInReleasing", "Succeeded", "Failed")


@dataclass
class Config:
    actions: tuple[str, ...] = ACTION_NAMES
    placement: dict[str, str] = field(default_factory=lambda: {"gpu": "binpack", "cpu": "binpack"})
    k_value: float = 0.0
    default_reclaim_min_runtime: float = 0.0  # seconds
    default_preempt_min_runtime: float = 0.0
    reclaim_min_runtime_resolution: str = "lca"  # lca | queue
    reclaimer_utilization_multiplier: float = 1.0
    now: datetime | None = None  # aware UTC; None = "now" of the caller
    rounds: int = 1
    staleness_grace_period: float = 60.0  # seconds; negative = never
    stable_rounds: int = 0
    # consolidation looks at most this many victim jobs per pending job, taken in victim order
    # (KAI's --max-consolidation-preemptees, default 16); -1 = unlimited, 0 = consolidation off
    max_consolidation_preemptees: int = 16
    # reclaim / preempt: victims examined + victims simulated (summed over its scenarios) for one
    # pending job before it is given up for this cycle; -1 = unlimited
    scenario_search_budget: int = 5000
    # True when the scenario sets `rounds` (even `rounds: 1`): `expect` is then compared with the
    # snapshot rewritten after the last cycle (scenario-format "Rounds"), not with the raw result.
    rounds_given: bool = False


@dataclass
class Nodes:
    names: list[str]
    capacity: np.ndarray  # (N, 3) allocatable, internal units
    reserved: np.ndarray  # (N, 3) used by pods of other schedulers
    gpus: np.ndarray  # (N,) int: whole devices on the node
    gpu_memory: np.ndarray  # (N,) float MiB per device (0 = unknown)
    labels: list[dict[str, str]]
    unschedulable: np.ndarray  # (N,) bool
    ready: np.ndarray  # (N,) bool
    index: dict[str, int] = field(default_factory=dict)
    devices: np.ndarray | None = None  # (N, D) int: devices of each class offered (None = no DRA devices)

    def __post_init__(self) -> None:
        if not self.index:
            self.index = {n: i for i, n in enumerate(self.names)}
        if self.devices is None:
            self.devices = np.zeros((len(self.names), 0), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.names)


@dataclass
class DeviceClasses:
    """Device classes of dynamic resource allocation (Kubernetes DeviceClasses).

    ``counts_as_gpu``: a claimed device of the class is also one GPU in quota, fair share and node
    GPU capacity (KAI's DRA GPUs; by default a class whose name contains "gpu", KAI
    ``IsGPUDeviceClass``); other classes only have to fit on the node.
    """

    names: list[str] = field(default_factory=list)
    counts_as_gpu: np.ndarray | None = None  # (D,) bool
    index: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.index:
            self.index = {n: i for i, n in enumerate(self.names)}
        if self.counts_as_gpu is None:
            self.counts_as_gpu = np.zeros(len(self.names), dtype=bool)

    def __len__(self) -> int:
        return len(self.names)


@dataclass
class SubGroups:
    """Subgroups of every job (KAI ``subgroup_info``), contiguous per job.

    ``parent`` is a global subgroup index, -1 for a direct child of the job (the job is the tree's
    root). A leaf (no children) holds tasks and has ``min_available`` (>= 0); a mid-level subgroup
    has ``min_sub_groups`` (-1 = all direct children) and ``min_available`` -1.
    """

    names: list[str] = field(default_factory=list)
    job: np.ndarray | None = None  # (S,) int
    parent: np.ndarray | None = None  # (S,) int, global index, -1 = child of the job root
    min_available: np.ndarray | None = None  # (S,) int, -1 on mid-level subgroups
    min_sub_groups: np.ndarray | None = None  # (S,) int, -1 = all direct children (mid-level only)
    topology_required: list[str | None] = field(default_factory=list)
    topology_preferred: list[str | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.names)
        for name in ("job", "parent", "min_available", "min_sub_groups"):
            if getattr(self, name) is None:
                setattr(self, name, np.full(n, -1, dtype=np.int64))
        if not self.topology_required:
            self.topology_required = [None] * n
        if not self.topology_preferred:
            self.topology_preferred = [None] * n

    def __len__(self) -> int:
        return len(self.names)


@dataclass
class Queues:
    names: list[str]
    parent: np.ndarray  # (Q,) int, -1 = top level
    priority: np.ndarray  # (Q,) int (over-quota priority; higher first)
    created_minutes_ago: np.ndarray  # (Q,) float
    deserved: np.ndarray  # (Q, 3) internal units, -1 = unlimited
    weight: np.ndarray  # (Q, 3) effective over-quota weight (input -1 already mapped to 1)
    limit: np.ndarray  # (Q, 3) internal units, -1 = unlimited
    reclaim_min_runtime: np.ndarray  # (Q,) seconds, nan = inherit
    preempt_min_runtime: np.ndarray  # (Q,) seconds, nan = inherit
    index: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.index:
            self.index = {n: i for i, n in enumerate(self.names)}

    def __len__(self) -> int:
        return len(self.names)

    @property
    def is_leaf(self) -> np.ndarray:
        leaf = np.ones(len(self.names), dtype=bool)
        par = self.parent[self.parent >= 0]
        leaf[par] = False
        return leaf

    def children(self, q: int) -> np.ndarray:
        return np.flatnonzero(self.parent == q)

    def path_to_root(self, q: int) -> list[int]:
        """``[q, parent(q), ..., top-level]``."""
        out = [q]
        while self.parent[out[-1]] >= 0:
            out.append(int(self.parent[out[-1]]))
        return out

    def order_rank(self) -> np.ndarray:
        """Tie-break rank: older first (larger createdMinutesAgo), then by name. 0 = first."""
        keys = sorted(range(len(self.names)), key=lambda i: (-self.created_minutes_ago[i], self.names[i]))
        rank = np.empty(len(self.names), dtype=np.int64)
        rank[keys] = np.arange(len(self.names))
        return rank


@dataclass
class Jobs:
    names: list[str]
    queue: np.ndarray  # (J,) int (a leaf queue)
    priority: np.ndarray  # (J,) int
    preemptible: np.ndarray  # (J,) bool
    min_available: np.ndarray  # (J,) int
    created_minutes_ago: np.ndarray  # (J,) float
    started_minutes_ago: np.ndarray  # (J,) float, nan = never started
    stale_for: np.ndarray  # (J,) seconds, nan = not stale
    staleness_grace_period: np.ndarray  # (J,) seconds, nan = use config
    preemption_delay: np.ndarray  # (J,) seconds, nan = none
    topology_required: list[str | None]
    topology_preferred: list[str | None]
    task_start: np.ndarray  # (J,) int
    task_count: np.ndarray  # (J,) int
    index: dict[str, int] = field(default_factory=dict)
    # subgroups: the job's range in ``Snapshot.sub_groups`` (count 0 = one flat gang of minAvailable)
    sg_start: np.ndarray | None = None  # (J,) int
    sg_count: np.ndarray | None = None  # (J,) int
    min_sub_groups: np.ndarray | None = None  # (J,) int, -1 = all direct children (jobs with subgroups)

    def __post_init__(self) -> None:
        if not self.index:
            self.index = {n: i for i, n in enumerate(self.names)}
        n = len(self.names)
        if self.sg_start is None:
            self.sg_start = np.zeros(n, dtype=np.int64)
        if self.sg_count is None:
            self.sg_count = np.zeros(n, dtype=np.int64)
        if self.min_sub_groups is None:
            self.min_sub_groups = np.full(n, -1, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.names)

    def tasks_of(self, j: int) -> range:
        s = int(self.task_start[j])
        return range(s, s + int(self.task_count[j]))


@dataclass
class Tasks:
    names: list[str]
    job: np.ndarray  # (T,) int
    request: np.ndarray  # (T, 3) internal units; gpu may be fractional (< 1 = share of one device)
    gpu_memory: np.ndarray  # (T,) MiB requested on one shared device, 0 = none
    state: np.ndarray  # (T,) int8 TaskState
    priority: np.ndarray  # (T,) float, nan = unset
    node: np.ndarray  # (T,) int, -1 = none
    gpu_groups: list[list[str]]
    node_selector: list[dict[str, str]]
    index: dict[str, int] = field(default_factory=dict)
    sub_group: np.ndarray | None = None  # (T,) int: global leaf subgroup index, -1 = none
    claims: np.ndarray | None = None  # (T, D) int: devices claimed per device class
    # (T,) per task: {class index: [device indices on its node]} pinned by the input (Running /
    # Releasing tasks holding claimed devices), or None
    devices: list[dict[int, list[int]] | None] | None = None

    def __post_init__(self) -> None:
        if not self.index:
            self.index = {n: i for i, n in enumerate(self.names)}
        n = len(self.names)
        if self.sub_group is None:
            self.sub_group = np.full(n, -1, dtype=np.int64)
        if self.claims is None:
            self.claims = np.zeros((n, 0), dtype=np.int64)
        if self.devices is None:
            self.devices = [None] * n

    def __len__(self) -> int:
        return len(self.names)


@dataclass
class Snapshot:
    """One cluster snapshot: the only input of :func:`scheduler_engine.cycle.run_cycle`."""

    name: str
    config: Config
    nodes: Nodes
    queues: Queues
    jobs: Jobs
    tasks: Tasks
    usage: np.ndarray  # (Q, 3) normalised historical usage in [0, 1]
    expect: dict | None = None  # the scenario's `expect` block, untouched
    # the validated scenario's blocks other than nodes / queues / jobs (those are the arrays above):
    # name, config, usage, expect, simulation, as JSON-able copies (for export and the simulator)
    source: dict | None = None
    sub_groups: SubGroups = field(default_factory=SubGroups)
    device_classes: DeviceClasses = field(default_factory=DeviceClasses)
