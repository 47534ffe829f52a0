"""The engine's one input type: a cluster snapshot as numpy arrays.

The scenario loader (``loader.py``) is one way to build a :class:`Snapshot`; the Django side
builds the same object from the database (through a scenario-format dict).  Everything an
action needs is here, already converted to KAI internal units, so the hot paths never parse
strings or walk dicts:

* resources are columns ``GPU, CPU, MEM`` of ``(n, 3)`` float64 arrays;
* gpu in devices (a float: 0.5 = half of one shared device), cpu in millicores, memory in bytes;
* durations in seconds (``nan`` = unset / inherit);
* the queue tree is a parent-index array (``-1`` for a top-level queue);
* tasks of a job are contiguous: ``jobs.task_start[j] : jobs.task_start[j] + jobs.task_count[j]``.

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

    def __post_init__(self) -> None:
        if not self.index:
            self.index = {n: i for i, n in enumerate(self.names)}

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

    def __post_init__(self) -> None:
        if not self.index:
            self.index = {n: i for i, n in enumerate(self.names)}

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

    def __post_init__(self) -> None:
        if not self.index:
            self.index = {n: i for i, n in enumerate(self.names)}

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
    source: dict | None = None  # the validated scenario dict it was built from (for export / rounds)
