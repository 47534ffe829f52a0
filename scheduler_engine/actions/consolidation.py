"""The consolidation action: move running preemptible tasks so a pending job fits, losing none.

Spec i. Disabled when a placement strategy is ``spread`` (packing is the point). Pending, ready,
*preemptible* jobs are taken in queue/job order; a job is tried only if the cluster's free plus
releasing GPUs cover its next tasks. Candidates are every preemptible job (any queue) with an
active task. The shared solver (:mod:`scheduler_engine.solvers`) accumulates candidates and simulates; a scenario
is accepted only if **every** evicted task was placed again (validator ``allPodsReallocated``):
a moved task ends Pipelined on its new node while its old node's share shows as releasing; a task
that lands back where it was is simply left Running. Nothing is ever lost.
"""
from __future__ import annotations

import numpy as np

from ..collector import cyclic_gc_paused
from ..ordering import JobQueue, next_tasks_to_allocate
from ..snapshot import GPU
from ..solvers.job_solver import VictimSolver
from ..state import CycleState
from .common import FailedShapes, bind_what_waits_for_nothing, commit_events, pending_ready_jobs, stop_for_budget


def run(state: CycleState) -> None:
    Consolidation(state).run()


def consolidation_enabled(state: CycleState) -> bool:
    """Off with a ``spread`` placement strategy (packing is the point) or ``maxConsolidationPreemptees: 0``."""
    placement = state.config.placement or {}
    return state.config.max_consolidation_preemptees != 0 and all(v != "spread" for v in placement.values())


def enough_gpus(state: CycleState, tasks) -> tuple[bool, float, float]:
    """Upstream ``IsEnoughGPUsAllocatableForJob``: free + releasing GPUs of ready nodes cover the request."""
    have = float((state.node_idle_gpus() + state.node_releasing_gpus())[state.node_schedulable].sum())
    need = float(state.task_order_req[list(tasks), GPU].sum())
    return have >= need - 1e-9, have, need


class Consolidation:
    def __init__(self, state: CycleState) -> None:
        self.state = state

    def run(self) -> None:
        s = self.state
        if not consolidation_enabled(s):
            return
        # pending ready jobs of leaf queues (one pass over the tasks, :func:`pending_ready_jobs`: the
        # same jobs, ascending, as a per-job pending list and readiness test), the preemptible ones
        pre = s.job_preemptible_arr
        jobs = [j for j in pending_ready_jobs(s) if pre[j]]
        if not jobs:
            return
        # the cyclic collector is paused for the loop, as reclaim's and preempt's (run_evicting): the
        # searches allocate millions of small acyclic tuples, lists and sets; at 10,000 nodes the
        # collector ran two full collections of the live state here (~0.45 s CPU) and found nothing
        with cyclic_gc_paused():
            self._loop(jobs)

    def _loop(self, jobs: list[int]) -> None:
        """:meth:`run`'s job loop."""
        s = self.state
        jq = JobQueue(s, jobs)
        shapes = FailedShapes(s)
        popped: set[int] = set()
        while True:
            j = jq.pop()
            if j is None:
                break
            if s.budget.expired():  # consolidation explains nothing per job: only the cut is recorded
                stop_for_budget(s, "consolidation", "", jobs, popped)
                break
            popped.add(j)
            tasks = next_tasks_to_allocate(s, j)
            if not tasks:
                continue
            if shapes.blocking(j) is not None:
                continue
            ok, have, need = enough_gpus(s, tasks)
            if not ok:
                shapes.record(j)
                continue
            solver = VictimSolver(s, "consolidation", self._candidates(j), _all_reallocated,
                                  max_victim_jobs=s.config.max_consolidation_preemptees)
            sol = solver.solve(j, tasks)
            if sol is None and solver.out_of_time:
                popped.discard(j)
                stop_for_budget(s, "consolidation", "", jobs, popped, mid_search=True)
                break
            if sol is None:
                shapes.record(j)
                continue
            bind_what_waits_for_nothing(s, sol)
            commit_events(s, sol, "Consolidated")
            jq.refresh_all()

    def _candidates(self, j: int):
        s = self.state

        def candidates():
            mask = s.job_preemptible_arr & (s.job_num_active_arr > 0)
            mask[j] = False
            return np.flatnonzero(mask)

        return candidates


def _all_reallocated(sc) -> str | None:
    if sc.released:
        return f"{len(sc.released)} moved task(s) could not be placed again"
    return None
