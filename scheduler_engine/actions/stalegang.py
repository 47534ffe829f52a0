"""The stale-gang-eviction action: evict gangs that stayed below ``minAvailable`` too long.

Spec g. A job is stale when it uses resources (Running, Binding, Pipelined or Releasing tasks) but
fewer than ``minAvailable`` of them, and none of its tasks Succeeded (a job that completed work is
never stale). It has been stale for ``staleFor`` before ``now`` (unset: it just became stale).
Once that reaches its grace period (the job's ``stalenessGracePeriod`` or the config's; negative
means never) every active task is evicted (Releasing) with a ``StaleGang`` event. A job with
subgroups is stale when its root is no longer satisfied by the tasks that use resources
(:func:`scheduler_engine.subgroups.is_stale`).
"""
from __future__ import annotations

import math

import numpy as np

from .. import subgroups
from ..snapshot import TaskState
from ..state import CycleState

_RUN = int(TaskState.RUNNING)
_BIND = int(TaskState.BINDING)
_PIPE = int(TaskState.PIPELINED)
_REL = int(TaskState.RELEASING)
_SUCC = int(TaskState.SUCCEEDED)
_USED = (_RUN, _BIND, _PIPE, _REL)
_ACTIVE = (_RUN, _BIND, _PIPE)


def run(state: CycleState) -> None:
    # evicting one job's tasks changes no other job's staleness: select the candidates up front
    for j in candidates(state).tolist():
        check_job(state, j)


def candidates(state: CycleState) -> np.ndarray:
    """Jobs that are stale (see :func:`is_stale`) and past their grace period, in job order.

    Vectorised over all jobs (a cycle with 100k jobs and no stale gang costs milliseconds); the
    per-job :func:`check_job` then decides and evicts only these.
    """
    if state.J == 0:
        return np.zeros(0, dtype=np.int64)
    st = state.task_state
    tj = state.task_job
    used = np.bincount(tj[np.isin(st, _USED)], minlength=state.J)
    succ = np.bincount(tj[st == _SUCC], minlength=state.J)
    stale = (succ == 0) & (used > 0) & (used < state.job_min_available)
    if state.any_sg:
        sg = np.flatnonzero(state.job_has_sg)
        stale[sg] = [subgroups.is_stale(state, j) for j in sg.tolist()]
    if not stale.any():
        return np.zeros(0, dtype=np.int64)
    grace = np.asarray(state.jobs.staleness_grace_period, dtype=float)
    grace = np.where(np.isnan(grace), float(state.config.staleness_grace_period), grace)
    stale_for = np.asarray(state.jobs.stale_for, dtype=float)
    stale_for = np.where(np.isnan(stale_for), 0.0, stale_for)
    return np.flatnonzero(stale & (grace >= 0) & (stale_for >= grace))


def grace_period(state: CycleState, j: int) -> float:
    g = float(state.jobs.staleness_grace_period[j])
    if math.isnan(g):
        g = float(state.config.staleness_grace_period)
    return g


def is_stale(state: CycleState, j: int) -> bool:
    if state._sg_list[j]:
        return subgroups.is_stale(state, j)
    st = [int(state.task_state[t]) for t in state.job_task_range(j)]
    if any(x == _SUCC for x in st):
        return False
    used = sum(1 for x in st if x in _USED)
    if used == 0:
        return False
    return used < int(state.job_min_available[j])


def check_job(state: CycleState, j: int) -> bool:
    """Evict job j if it is stale past its grace period; returns whether it was evicted."""
    if not is_stale(state, j):
        return False
    grace = grace_period(state, j)
    if grace < 0:
        return False
    stale_for = float(state.jobs.stale_for[j])
    if math.isnan(stale_for):
        stale_for = 0.0
    if stale_for < grace:
        return False
    active = [t for t in state.job_task_range(j) if int(state.task_state[t]) in _ACTIVE]
    if not active:
        return False
    used = sum(1 for t in state.job_task_range(j) if int(state.task_state[t]) in _USED)
    m = int(state.job_min_available[j])
    short = f"the gang has {used} of minAvailable={m} tasks"
    if state._sg_list[j]:
        short = f"the gang of subgroups is no longer satisfied ({subgroups.unsatisfied_text(state, j)})"
    for t in active:
        node = state.nodes.names[int(state.task_node[t])] if state.task_node[t] >= 0 else "?"
        state.evict(t, reason="StaleGang",
                    message=(f"task {state.tasks.names[t]} on node {node} evicted: {short} and has been below it "
                             f"for {stale_for:g}s (grace period {grace:g}s)"))
    return True
