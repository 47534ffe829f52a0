"""The preempt action: inside one leaf queue, a higher-priority job evicts lower-priority ones.

Spec d. Pending, ready jobs outside their preemption delay are taken in queue/job order. A
non-preemptible preemptor whose next tasks would put a queue on its path over its deserved quota
for non-preemptible jobs is skipped (it may only use in-quota resources). Candidates are the
preemptible jobs of the **same leaf queue** with **strictly lower** job priority and an active task,
not protected by ``preemptMinRuntime`` (elastic ones are checked by the validator instead). No
fair-share validator applies; the shared solver (:mod:`scheduler_engine.solvers`) accumulates and simulates.
"""
from __future__ import annotations

import numpy as np

from ..plugins.minruntime import min_runtime_elastic, preempt_min_runtime, protected_non_elastic
from ..snapshot import NRES, UNLIMITED
from ..state import CycleState, RES_NAMES, fmt_amount
from .common import EvictingAction, pending_ready_jobs, run_evicting


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


class Preempt(EvictingAction):
    """Preempt plugged into the shared job loop (:func:`~scheduler_engine.actions.common.run_evicting`)."""

    name = "preempt"
    refused = "NotPreempting"
    evicted = "Preempted"

    def __init__(self, state: CycleState) -> None:
        self.state = state
        # per cluster state (emptied on commit): candidates per (leaf, priority), interned candidate sets
        self._cands: dict[tuple, tuple] = {}
        self._set_keys: dict[bytes, int] = {}
        self._leaf_jobs: dict[int, np.ndarray] | None = None  # leaf -> its jobs (static)

    def run(self) -> None:
        run_evicting(self.state, pending_ready_jobs(self.state), self)

    def delay_text(self, j: int) -> str:
        return (f"job is within its preemption delay ({self.state.jobs.preemption_delay[j]:g}s) and may not "
                f"cause evictions")

    def skip_text(self, j: int, rep: int, leaf: int) -> str:
        return (f"skipped: job {self.state.jobs.names[rep]} with the same scheduling constraints and no larger "
                f"request failed to preempt in this cycle")

    def check(self, j: int, tasks: list[int], leaf: int) -> str | None:
        return nonpreemptible_over_quota(self.state, j, tasks)

    def fail_text(self, j: int, leaf: int, reason: str) -> str:
        s = self.state
        return (f"preemption failed (victims: lower-priority preemptible jobs of queue "
                f"{s.queues.names[leaf]} below priority {int(s.jobs.priority[j])}): {reason}")

    def detail(self, j: int, leaf: int):
        s = self.state
        return lambda t: (f"priority {int(s.jobs.priority[int(s.task_job[t])])} < "
                          f"{int(s.jobs.priority[j])} in queue {s.queues.names[leaf]}")

    def committed(self) -> None:
        self._cands = {}
        self._set_keys = {}

    def candidates(self, j: int, tasks: list[int], leaf: int) -> tuple:
        """Preemptible jobs of the same leaf with a lower priority and an active task.

        ``j`` itself is never one (its priority is not lower than its own).
        """
        s = self.state
        prio = int(s.jobs.priority[j])
        key = (leaf, prio)
        hit = self._cands.get(key)
        if hit is not None:
            return hit
        if self._leaf_jobs is None:
            order = np.argsort(s.job_queue_arr, kind="stable")
            qs = s.job_queue_arr[order]
            bounds = np.flatnonzero(np.diff(qs)) + 1
            self._leaf_jobs = {int(g[0]): order[i0:i1]
                               for g, i0, i1 in ((qs[a:b], a, b) for a, b in
                                                 zip(np.r_[0, bounds], np.r_[bounds, qs.size])) if g.size}
        mine = self._leaf_jobs.get(leaf, np.zeros(0, dtype=np.int64))
        keep = (s.job_preemptible_arr[mine] & (s.job_num_active_arr[mine] > 0)
                & (np.asarray(s.jobs.priority)[mine] < prio))
        mr = preempt_min_runtime(s, leaf)
        if mr > 0:
            keep &= ~protected_non_elastic(s, mr)[mine]
        cands = mine[keep]
        out = self._cands[key] = (lambda: cands, self._set_keys.setdefault(cands.tobytes(), len(self._set_keys)))
        return out

    def validator(self, j: int, tasks: list[int], leaf: int):
        s = self.state
        return lambda sc: min_runtime_elastic(s, sc.released, lambda v: preempt_min_runtime(s, s.job_queue(v)))
