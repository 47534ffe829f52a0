"""Elastic jobs (KAI ``plugins/elastic`` and ``PodGroupInfo.GetTasksToEvict``).

A job is elastic when it has more tasks than its ``minAvailable``; above ``minAvailable`` a victim
gives up one surplus task at a time, at or below it the whole remaining gang goes.
"""
from __future__ import annotations

from typing import Sequence

from .. import subgroups
from ..ordering import task_order
from ..state import ACTIVE_STATES, CycleState


def is_elastic(state: CycleState, j: int) -> bool:
    """KAI ``IsElastic``: fewer tasks are required (minAvailable) than the job has."""
    if state._sg_list[j]:  # some leaf subgroup has more tasks than its minAvailable
        return subgroups.is_elastic(state, j)
    return int(state.job_min_available[j]) < int(state.job_count[j])


def tasks_to_evict(state: CycleState, tasks: Sequence[int], min_available: int) -> tuple[list[int], bool]:
    """KAI ``GetTasksToEvict`` on a victim representative holding ``tasks`` (its active tasks).

    Above ``minAvailable`` only one surplus task goes (the last in task order: lowest task
    priority, unlabelled before labelled, newest); at or below it the whole remaining gang goes.
    Returns ``(tasks, more)`` where ``more`` says the job keeps tasks that may be taken later.
    """
    active = [t for t in tasks if state.task_state[t] in ACTIVE_STATES]
    if not active:
        return [], False
    if len(active) == 1:  # the usual single-task victim: task order of one is itself
        return active, min_available < 1
    rev = list(reversed(task_order(state, active)))
    if min_available < len(rev):
        return [rev[0]], True
    return rev, False

