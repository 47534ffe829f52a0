"""The stale-gang-eviction action: evict gangs that stayed below ``minAvailable`` too long.

Spec g. A job is stale when it uses resources (Running, Binding, Pipelined or Releasing tasks) but
fewer than ``minAvailable`` of them, and none of its tasks Succeeded (a job that completed work is
never stale). It has been stale for ``staleFor`` before ``now`` (unset: it just became stale).
Once that reaches its grace period (the job's ``stalenessGracePeriod`` or the config's; negative
means never) every active task is evicted (Releasing) with a ``StaleGang`` event.
"""
from __future__ import annotations

import math

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
    for j in range(state.J):
        check_job(state, j)


def grace_period(state: CycleState, j: int) -> float:
    g = float(state.jobs.staleness_grace_period[j])
    if math.isnan(g):
        g = float(state.config.staleness_grace_period)
    return g


def is_stale(state: CycleState, j: int) -> bool:
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
    for t in active:
        node = state.nodes.names[int(state.task_node[t])] if state.task_node[t] >= 0 else "?"
        state.evict(t, reason="StaleGang",
                    message=(f"task {state.tasks.names[t]} on node {node} evicted: the gang has {used} of "
                             f"minAvailable={m} tasks and has been below it for {stale_for:g}s "
                             f"(grace period {grace:g}s)"))
    return True
