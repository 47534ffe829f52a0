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
from .common import (FailedShapes, _pending_entry, _signature, bind_what_waits_for_nothing, commit_events,
                     pending_ready_jobs, prime_job_entries, stop_for_budget)


#: end the job loop once every job left is passed over (``Consolidation._loop``; False: pop them all,
#: the tests compare both)
END_WHEN_INERT = True
_INERT_RUN = 64  # passed-over jobs in a row before the first check


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
        """:meth:`run`'s job loop.

        A job with no next tasks or blocked by a failed one of its signature (:class:`FailedShapes`)
        is passed over without a trace: consolidation writes no event for it, changes nothing and
        records nothing. So once every job left in the queue is such a job, the rest of the loop
        would only pop them (and read the budget once per pop): :meth:`_rest_inert` checks that
        after a run of passed-over jobs (doubling the run between two checks; reset by a record or
        a commit), and the loop ends there, reading the budget as those pops would have
        (:meth:`_tail_budget`). At 2,000 nodes mixed two jobs are tried and ~7,300 popped, ~20 us each."""
        s = self.state
        jq = JobQueue(s, jobs)
        shapes = FailedShapes(s)
        popped: set[int] = set()
        idle, check_at = 0, _INERT_RUN
        while True:
            j = jq.pop()
            if j is None:
                break
            if s.budget.expired():  # consolidation explains nothing per job: only the cut is recorded
                stop_for_budget(s, "consolidation", "", jobs, popped)
                break
            popped.add(j)
            tasks = next_tasks_to_allocate(s, j)
            if not tasks or shapes.blocking(j) is not None:
                idle += 1
                if idle >= check_at and END_WHEN_INERT:
                    if self._rest_inert(jq, shapes):
                        self._tail_budget(jq, jobs, popped)
                        break
                    check_at = 2 * idle
                continue
            idle, check_at = 0, _INERT_RUN
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

    def _rest_inert(self, jq: JobQueue, shapes: FailedShapes) -> bool:
        """Every job still in ``jq`` has no next tasks or is blocked (the loop's two pass-over tests,
        on the current state: nothing changes while jobs are passed over). Blocking reads the job's
        signature and pending shape alone (given the failed jobs recorded), so it is asked once per
        (signature, shape id)."""
        s = self.state
        memo: dict[tuple, bool] = {}
        prime_job_entries(s, [j for h in jq.heaps for _, j in h])  # (the two look-ups below, made together)
        for h in jq.heaps:
            for _, j in h:
                key = (_signature(s, j), _pending_entry(s, j)[3])
                blocked = memo.get(key)
                if blocked is None:
                    blocked = memo[key] = shapes.blocking(j) is not None
                if not blocked and next_tasks_to_allocate(s, j):
                    return False
        return True

    def _tail_budget(self, jq: JobQueue, jobs: list[int], popped: set[int]) -> None:
        """The budget readings of the passed-over jobs left in ``jq``: one per pop, the cut recorded
        where one of them finds the budget spent, with the counts :func:`stop_for_budget` records
        there (consolidation writes no event for the jobs not reached)."""
        s = self.state
        if s.budget.seconds is None:  # (no budget: no reading)
            return
        left = sum(len(h) for h in jq.heaps)
        for i in range(left):
            if s.budget.expired():
                s.budget.cut("consolidation", tried=len(popped) + i, untried=len(jobs) - len(popped) - i)
                return

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
