"""The cycle driver: snapshot in, decisions out.

``run_cycle(snapshot)`` opens a :class:`~scheduler_engine.state.CycleState` (fair shares are computed
there, once), runs ``config.actions`` in order through the action registry and collects a
:class:`~scheduler_engine.result.CycleResult`, with per-phase wall-clock timings for benchmarks.

``run_rounds(snapshot)`` implements the format's "Rounds": N cycles back to back, rewriting the
snapshot after each one (Binding -> Running, Pipelined/Releasing -> Pending without a node), then
``stableRounds`` more cycles.  The snapshot is never mutated; every rewrite builds a new one.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from .actions import get_action
from .budget import ALWAYS_RUN, TimeBudget
from .result import CycleResult, build_result
from .snapshot import Snapshot, TaskState
from .state import CycleState

__all__ = ["run_cycle", "run_cycle_with_state", "run_rounds", "rewrite_snapshot", "observe", "RoundsResult",
           "uses_rounds"]

_RUN = int(TaskState.RUNNING)
_PEND = int(TaskState.PENDING)
_REL = int(TaskState.RELEASING)
_BIND = int(TaskState.BINDING)
_PIPE = int(TaskState.PIPELINED)


def run_cycle_with_state(snapshot: Snapshot, actions: tuple[str, ...] | None = None, *,
                         time_budget: float | None = None, clock=time.monotonic):
    """One cycle; returns ``(state, result)`` (the state is needed to rewrite the snapshot).

    ``time_budget``: seconds the actions may take (see :mod:`scheduler_engine.budget`; counted from
    here, the state's opening included); None decides without looking at the clock.
    """
    timings: dict[str, float] = {}
    budget = TimeBudget(time_budget, clock=clock)
    t0 = time.perf_counter()
    state = CycleState(snapshot)
    state.budget = budget
    t1 = time.perf_counter()
    timings["open"] = t1 - t0
    for name in snapshot.config.actions if actions is None else actions:
        if name not in ALWAYS_RUN and budget.expired():
            budget.skip(name)
            continue
        run = get_action(name)
        ta = time.perf_counter()
        run(state)
        timings[name] = timings.get(name, 0.0) + (time.perf_counter() - ta)
    tr = time.perf_counter()
    result = build_result(snapshot, state, timings)
    result.budget = budget.summary()
    result.timings["result"] = time.perf_counter() - tr
    result.timings["total"] = time.perf_counter() - t0
    return state, result


def run_cycle(snapshot: Snapshot, actions: tuple[str, ...] | None = None, *,
              time_budget: float | None = None) -> CycleResult:
    """Run one scheduling cycle (``config.actions`` unless ``actions`` is given) on ``snapshot``;
    ``time_budget`` seconds at most for the evicting actions (None: no limit)."""
    return run_cycle_with_state(snapshot, actions, time_budget=time_budget)[1]


def observe(snapshot: Snapshot) -> CycleResult:
    """The snapshot as a result without running any action (statuses are the input states).

    Used after the last rewrite of a rounds scenario: ``expect`` is compared with the rewritten
    snapshot, with fair shares and allocations as a cycle would see them when it opens.
    """
    return run_cycle(snapshot, actions=())


def rewrite_snapshot(snapshot: Snapshot, state) -> Snapshot:
    """The snapshot the next round starts from (scenario-format "Rounds").

    Binding -> Running on the same node with its gpuGroups (and its claimed devices); Pipelined and Releasing -> Pending with
    no node (the pod is recreated); everything else unchanged; a job that gained a Running task
    counts as started 1 minute ago.
    """
    tasks, jobs = snapshot.tasks, snapshot.jobs
    end = np.asarray(state.task_state, dtype=np.int8)
    new_state = end.copy()
    new_node = np.asarray(state.task_node, dtype=np.int64).copy()
    groups = [list(g) for g in tasks.gpu_groups]
    bind = end == _BIND
    to_pending = (end == _PIPE) | (end == _REL)
    new_state[bind] = _RUN
    new_state[to_pending] = _PEND
    new_node[to_pending] = -1
    for t in np.flatnonzero(bind):
        groups[t] = list(state.task_gpu_groups[t])
    for t in np.flatnonzero(to_pending):
        groups[t] = []
    pins = list(tasks.devices)
    held = getattr(state, "task_dra", None)
    if held is not None and snapshot.device_classes.names:
        for t in np.flatnonzero(bind).tolist():
            if held[t]:
                pins[t] = {c: list(v) for c, v in held[t].items()}
        for t in np.flatnonzero(to_pending).tolist():
            pins[t] = None
    started = np.asarray(jobs.started_minutes_ago, dtype=np.float64).copy()
    if bind.any():
        started[np.unique(np.asarray(tasks.job)[bind])] = 1.0
    new_tasks = dataclasses.replace(tasks, state=new_state, node=new_node, gpu_groups=groups, index=tasks.index,
                                    devices=pins)
    new_jobs = dataclasses.replace(jobs, started_minutes_ago=started, index=jobs.index)
    return dataclasses.replace(snapshot, tasks=new_tasks, jobs=new_jobs)


def uses_rounds(snapshot: Snapshot) -> bool:
    """Whether ``expect`` is compared after the rewrite (the scenario sets rounds or stableRounds)."""
    cfg = snapshot.config
    return bool(cfg.rounds_given or cfg.rounds > 1 or cfg.stable_rounds > 0)


@dataclass
class RoundsResult:
    """Everything a rounds run produced.

    ``cycles``: each of the ``rounds`` cycles' own results; ``final_snapshot``: the snapshot after the
    rewrite that follows the last of them; ``final``: :func:`observe` of it (what ``expect`` is
    compared with); ``stable``: the results of the ``stableRounds`` extra cycles, in order.
    """

    cycles: list[CycleResult]
    final_snapshot: Snapshot
    final: CycleResult
    stable: list[CycleResult] = field(default_factory=list)
    stable_snapshots: list[Snapshot] = field(default_factory=list)


def run_rounds(snapshot: Snapshot, *, rounds: int | None = None, stable_rounds: int | None = None) -> RoundsResult:
    """Run ``rounds`` cycles with a rewrite after each, then ``stable_rounds`` more (defaults: config)."""
    cfg = snapshot.config
    n = cfg.rounds if rounds is None else rounds
    m = cfg.stable_rounds if stable_rounds is None else stable_rounds
    if n < 1:
        raise ValueError("rounds must be >= 1")
    cycles: list[CycleResult] = []
    snap = snapshot
    for _ in range(n):
        state, res = run_cycle_with_state(snap)
        cycles.append(res)
        snap = rewrite_snapshot(snap, state)
    final_snapshot = snap
    final = observe(final_snapshot)
    stable: list[CycleResult] = []
    stable_snaps: list[Snapshot] = []
    for _ in range(m):
        state, res = run_cycle_with_state(snap)
        stable.append(res)
        snap = rewrite_snapshot(snap, state)
        stable_snaps.append(snap)
    return RoundsResult(cycles=cycles, final_snapshot=final_snapshot, final=final, stable=stable,
                        stable_snapshots=stable_snaps)
