"""The preempt action: inside one leaf queue, a higher-priority job evicts lower-priority ones.

Spec d. Pending, ready jobs outside their preemption delay are taken in queue/job order. A
non-preemptible preemptor whose next tasks would put a queue on its path over its deserved quota
for non-preemptible jobs is skipped (it may only use in-quota resources). Candidates are the
preemptible jobs of the **same leaf queue** with **strictly lower** job priority and an active task,
not protected by ``preemptMinRuntime`` (elastic ones are checked by the validator instead). No
fair-share validator applies; the shared solver (:mod:`.victims`) accumulates and simulates.
"""
from __future__ import annotations

import numpy as np

from ..ordering import JobQueue, next_tasks_to_allocate
from ..snapshot import NRES, UNLIMITED
from ..state import CycleState, RES_NAMES, fmt_amount
from .reclaim import _min_runtime_elastic
from .victims import (FailedShapes, VictimSolver, commit_events, job_ready, preempt_min_runtime,
                      protected_non_elastic, within_preemption_delay)


def run(state: CycleState) -> None:
    Preempt(state).run()


def nonpreemptible_over_quota(state: CycleState, j: int, tasks) -> str | None:
    """Upstream ``IsNonPreemptibleJobOverQueueQuota`` on the leaf and every ancestor, or ``None``."""
    if state.job_is_preemptible(j):
        return None
    req = state.task_quota_req[list(tasks)].sum(axis=0)
    for a in state.queue_path[state.job_queue(j)]:
        d = state.queue_deserved[a]
        anp = state.queue_alloc_np[a]
        for r in range(NRES):
            if req[r] > 0 and d[r] != UNLIMITED and anp[r] + req[r] > d[r] + 1e-9:
                return (f"non-preemptible job would put queue {state.queues.names[a]} over its deserved quota for "
                        f"{RES_NAMES[r]}: {fmt_amount(r, anp[r])} non-preemptible allocated + "
                        f"{fmt_amount(r, req[r])} requested > {fmt_amount(r, d[r])} deserved")
    return None


class Preempt:
    def __init__(self, state: CycleState) -> None:
        self.state = state

    def run(self) -> None:
        s = self.state
        jobs = [j for j in range(s.J)
                if s.queue_is_leaf[s.job_queue(j)] and s.job_pending_tasks(j) and job_ready(s, j)]
        if not jobs:
            return
        jq = JobQueue(s, jobs)
        failed: dict[int, FailedShapes] = {}
        while True:
            j = jq.pop()
            if j is None:
                break
            if within_preemption_delay(s, j):
                s.add_event(j, "NotPreempting",
                            f"job is within its preemption delay ({s.jobs.preemption_delay[j]:g}s) and may not "
                            f"cause evictions")
                continue
            tasks = next_tasks_to_allocate(s, j)
            if not tasks:
                continue
            leaf = s.job_queue(j)
            shapes = failed.setdefault(leaf, FailedShapes(s))
            rep = shapes.blocking(j)
            if rep is not None:
                s.add_event(j, "NotPreempting",
                            f"skipped: job {s.jobs.names[rep]} with the same scheduling constraints and no larger "
                            f"request failed to preempt in this cycle")
                continue
            why = nonpreemptible_over_quota(s, j, tasks)
            if why:
                shapes.record(j)  # upstream: a failed attempt like any other
                s.add_event(j, "NotPreempting", why)
                continue
            solver = self._solver(j, leaf)
            sol = solver.solve(j, tasks)
            if sol is None:
                shapes.record(j)
                s.add_event(j, "NotPreempting",
                            f"preemption failed (victims: lower-priority preemptible jobs of queue "
                            f"{s.queues.names[leaf]} below priority {int(s.jobs.priority[j])}): {solver.last_reason}")
                continue
            commit_events(s, sol, "Preempted",
                          detail=lambda t, j=j: f"priority {int(s.jobs.priority[int(s.task_job[t])])} < "
                                                f"{int(s.jobs.priority[j])} in queue {s.queues.names[leaf]}")
            jq.refresh_all()

    def _solver(self, j: int, leaf: int) -> VictimSolver:
        s = self.state
        prio = int(s.jobs.priority[j])

        def candidates():
            mask = (s.job_preemptible_arr & (s.job_num_active_arr > 0) & (s.job_queue_arr == leaf)
                    & (np.asarray(s.jobs.priority) < prio))
            mask[j] = False
            mr = preempt_min_runtime(s, leaf)
            if mr > 0:
                mask &= ~protected_non_elastic(s, mr)
            return np.flatnonzero(mask)

        def validator(sc):
            return _min_runtime_elastic(s, sc, lambda v: preempt_min_runtime(s, s.job_queue(v)))

        return VictimSolver(s, "preempt", candidates, validator)
