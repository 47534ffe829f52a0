"""The reclaim action: a job below its queue's fair share takes resources back from other queues.

Spec c (and d, i). Pending, ready jobs outside their preemption delay are taken in queue/job
order. For each:

1. **Gate** ``CanReclaimResources``: the reclaimer's leaf must stay within its fair share with the
   job's next tasks (a non-preemptible job also within deserved for non-preemptible use).
2. **Scheduling signatures**: a job of a queue where a job with the same constraints failed, and
   that is not easier, is skipped.
3. **Candidates**: preemptible jobs of *other* leaf queues with an active task, that pass the
   proportion victim filter (leveled queues) and are not protected by ``reclaimMinRuntime``
   (elastic jobs always pass; their protected core is checked by the validator).
4. The shared :class:`~scheduler_engine.actions.victims.VictimSolver` accumulates victims and
   simulates; a scenario is accepted when the proportion validator (per-chunk MaintainFairShare /
   GuaranteeDeservedQuota, sibling saturation with ``reclaimerUtilizationMultiplier``) and the
   min-runtime validator accept it. Victims end Releasing, the reclaimer Pipelined.

The queue state the validator reads is copied when the job's attempt starts (upstream
``OnJobSolutionStart``); victims re-placed by the simulation do not count as reclaimed
(``allow-consolidating-reclaim``).
"""
from __future__ import annotations

from typing import Callable


import numpy as np

from ..proportion import (QueueShares, can_reclaim_resources, effective_multiplier, queue_paths_matrix,
                          validate_reclaim, victim_filter_many)
from ..snapshot import NRES, UNLIMITED
from ..state import CycleState, RES_NAMES, fmt_amount
from .victims import (EvictingAction, Scenario, is_elastic, job_ready, min_runtime_protected,
                      protected_non_elastic_by, reclaim_min_runtime, run_evicting)


_MAX_CANDIDATE_ARRAYS = 64


def run(state: CycleState) -> None:
    Reclaim(state).run()


def shares_now(state: CycleState, copy: bool = False) -> QueueShares:
    a, anp = state.queue_alloc, state.queue_alloc_np
    if copy:
        a, anp = a.copy(), anp.copy()
    return QueueShares(parent=np.asarray(state.queues.parent), deserved=state.queue_deserved,
                       limit=state.queue_limit, fair_share=state.fair_share, allocated=a, allocated_np=anp,
                       total=state.total)


def gate_failure(state: CycleState, leaf: int, req: np.ndarray, preemptible: bool) -> str:
    """Why ``CanReclaimResources`` refused, with numbers."""
    a = state.queue_alloc[leaf]
    f = state.fair_share[leaf]
    name = state.queues.names[leaf]
    for r in range(NRES):
        if f[r] != UNLIMITED and a[r] + req[r] > f[r] + 1e-9:
            return (f"queue {name} is at its fair share for {RES_NAMES[r]}: {fmt_amount(r, a[r])} allocated + "
                    f"{fmt_amount(r, req[r])} requested > {fmt_amount(r, f[r])} fair share")
    if not preemptible:
        anp = state.queue_alloc_np[leaf]
        d = state.queue_deserved[leaf]
        for r in range(NRES):
            if d[r] != UNLIMITED and anp[r] + req[r] > d[r] + 1e-9:
                return (f"queue {name} quota for non-preemptible jobs exceeded for {RES_NAMES[r]}: "
                        f"{fmt_amount(r, anp[r])} allocated + {fmt_amount(r, req[r])} requested > "
                        f"{fmt_amount(r, d[r])} deserved")
    return f"queue {name} may not reclaim"


class Reclaim(EvictingAction):
    """Reclaim plugged into the shared job loop (:func:`~scheduler_engine.actions.victims.run_evicting`)."""

    name = "reclaim"
    refused = "NotReclaiming"
    evicted = "Reclaimed"

    def __init__(self, state: CycleState) -> None:
        self.state = state
        self.multiplier = effective_multiplier(state.config.reclaimer_utilization_multiplier)
        self._paths = queue_paths_matrix(np.asarray(state.queues.parent))
        # per cluster state (emptied on commit): candidate jobs per (reclaimer leaf, request), the
        # preemptible-and-active job mask, and interned candidate sets (equal sets, one key)
        self._cands: dict[tuple, tuple[np.ndarray, int]] = {}
        self._active: np.ndarray | None = None  # (J,) preemptible with an active task
        self._active_q: np.ndarray | None = None  # (Q,) leaves holding such a job
        self._set_keys: dict[bytes, int] = {}
        self._set_jobs: dict[int, np.ndarray] = {}  # set key -> its candidate jobs (bounded)
        self._mr: dict[int, dict[int, float]] = {}  # reclaimer leaf -> victim leaf -> reclaimMinRuntime
        self._any_mr: bool | None = None

    def candidate_jobs(self) -> list[int]:
        s = self.state
        out = []
        for j in range(s.J):
            if not s.queue_is_leaf[s.job_queue(j)]:
                continue
            if not s.job_pending_tasks(j) or not job_ready(s, j):
                continue
            out.append(j)
        return out

    def run(self) -> None:
        run_evicting(self.state, self.candidate_jobs(), self)

    # ---------------------------------------------------------------- the loop's hooks
    def delay_text(self, j: int) -> str:
        s = self.state
        return (f"job is within its preemption delay ({s.jobs.preemption_delay[j]:g}s since creation "
                f"{s.jobs.created_minutes_ago[j] * 60:g}s ago) and may not cause evictions")

    def gate(self, j: int, tasks: list[int], leaf: int) -> str | None:
        s = self.state
        req = s.task_order_req[tasks].sum(axis=0)
        pre = s.job_is_preemptible(j)
        if not can_reclaim_resources(shares_now(s), leaf, req, pre):
            return gate_failure(s, leaf, req, pre)
        return None

    def skip_text(self, j: int, rep: int, leaf: int) -> str:
        s = self.state
        return (f"skipped: job {s.jobs.names[rep]} of queue {s.queues.names[leaf]} with the same "
                f"scheduling constraints and no larger request failed to reclaim in this cycle")

    def fail_text(self, j: int, leaf: int, reason: str) -> str:
        return f"reclaim failed: {reason}"

    def committed(self) -> None:
        self._cands = {}
        self._active = None
        self._set_keys = {}
        self._set_jobs = {}

    def candidates(self, j: int, tasks: list[int], leaf: int) -> tuple[Callable[[], np.ndarray], int]:
        """Preemptible jobs with an active task in other leaves that pass the victim filter.

        The filter's inputs are the queue pair and the request, so it is evaluated once per victim
        leaf (vectorised over leaves) per (reclaimer leaf, request) and cluster state. The set is
        named by its victim leaves and their min-runtimes (O(queues)); the job array itself is only
        built when a solve needs it. ``j`` is never a candidate (its own leaf is excluded).
        """
        s = self.state
        full_req = s.task_order_req[tasks].sum(axis=0)
        key = (leaf, np.asarray(full_req, dtype=np.float64).tobytes())
        hit = self._cands.get(key)
        if hit is not None:
            return hit
        if self._active is None:
            self._active = s.job_preemptible_arr & (s.job_num_active_arr > 0)
            self._active_q = np.zeros(s.queue_alloc.shape[0], dtype=bool)
            self._active_q[s.job_queue_arr[self._active]] = True
        keep_q = self._active_q.copy()
        keep_q[leaf] = False
        vqs = np.flatnonzero(keep_q)
        mr_q = None
        if vqs.size:
            keep_q[vqs] = victim_filter_many(shares_now(s), leaf, vqs, full_req, paths=self._paths)
            mr_q = self._min_runtimes(leaf, np.flatnonzero(keep_q))
        ident = keep_q.tobytes() + (b"" if mr_q is None else mr_q.tobytes())
        set_key = self._set_keys.setdefault(ident, len(self._set_keys))
        active = self._active
        arrays = self._set_jobs

        def jobs() -> np.ndarray:
            # one array per distinct set (O(jobs) each), a bounded number kept: at 10,000 nodes a
            # per-(leaf, request) copy held gigabytes between two commits
            out = arrays.get(set_key)
            if out is None:
                leaves = s.job_queue_arr
                mask = active & keep_q[leaves]
                if mr_q is not None:
                    mask &= ~protected_non_elastic_by(s, mr_q[leaves])
                out = np.flatnonzero(mask)
                if len(arrays) >= _MAX_CANDIDATE_ARRAYS:
                    arrays.clear()
                arrays[set_key] = out
            return out

        out = self._cands[key] = (jobs, set_key)
        return out

    def _min_runtimes(self, leaf: int, vqs: np.ndarray) -> np.ndarray | None:
        """(Q,) ``reclaimMinRuntime`` of each victim leaf in ``vqs`` seen from ``leaf`` (others 0).

        ``None`` when no queue and no default sets a positive value: then no job is protected.
        """
        s = self.state
        if self._any_mr is None:
            fields = np.asarray(s.queues.reclaim_min_runtime, dtype=float)
            self._any_mr = (float(s.config.default_reclaim_min_runtime or 0.0) > 0
                            or bool(np.any(np.nan_to_num(fields, nan=0.0) > 0)))
        if not self._any_mr:
            return None
        known = self._mr.setdefault(leaf, {})  # static: queue fields and config only
        out = np.zeros(s.queue_alloc.shape[0])
        for vq in vqs.tolist():
            v = known.get(vq)
            if v is None:
                v = known[vq] = reclaim_min_runtime(s, leaf, vq)
            out[vq] = v
        return out

    def detail(self, j: int, leaf: int):
        s = self.state

        def detail(t: int) -> str:
            vq = s.job_queue(int(s.task_job[t]))
            rq = s.job_queue(j)
            f, a = s.fair_share[vq], s.queue_alloc[vq]
            return (f"queue {s.queues.names[vq]} now holds gpu={fmt_amount(0, a[0])} of fair share "
                    f"{fmt_amount(0, f[0]) if f[0] != UNLIMITED else 'unlimited'}; reclaimer queue "
                    f"{s.queues.names[rq]}")

        return detail

    def validator(self, j: int, tasks: list[int], leaf: int):
        s = self.state
        start = shares_now(s, copy=True)  # OnJobSolutionStart
        preemptible = s.job_is_preemptible(j)

        def validator(sc: Scenario) -> str | None:
            req = s.task_order_req[sc.tasks].sum(axis=0)
            victims = _victim_vectors(s, sc)
            verdict = validate_reclaim(start, reclaimer_leaf=leaf, req=req, reclaimer_preemptible=preemptible,
                                       victims=victims, multiplier=self.multiplier)
            if not verdict:
                sc.blocked = verdict.taken_from
                return _verdict_text(s, verdict, start, leaf, req)
            return _min_runtime_elastic(s, sc, lambda v: reclaim_min_runtime(s, leaf, s.job_queue(v)))

        return validator


def _victim_vectors(state: CycleState, sc: Scenario) -> list[tuple[int, list[np.ndarray]]]:
    """Per victim leaf, per victim job: elastic tasks one by one, then the core summed (re-placed left out)."""
    by_job: dict[int, list[int]] = {}
    for t in sc.victims:
        by_job.setdefault(int(state.task_job[t]), []).append(t)
    replaced = set(sc.moved) | set(sc.kept)
    by_leaf: dict[int, list[np.ndarray]] = {}
    order: list[int] = []
    for vj, ts in by_job.items():
        m = int(state.job_min_available[vj])
        if m >= len(ts):
            core, elastic = ts, []
        else:
            core, elastic = ts[:m], ts[m:]
        vecs = []
        for t in elastic:
            if t not in replaced:
                vecs.append(sc.orig_alloc[t])
        core_kept = [sc.orig_alloc[t] for t in core if t not in replaced]
        if core_kept:
            vecs.append(np.sum(core_kept, axis=0))
        if not vecs:
            continue
        q = state.job_queue(vj)
        if q not in by_leaf:
            by_leaf[q] = []
            order.append(q)
        by_leaf[q].extend(vecs)
    return [(q, by_leaf[q]) for q in order]


def _verdict_text(state: CycleState, verdict, start: QueueShares, leaf: int, req: np.ndarray) -> str:
    """The proportion validator's refusal in words, with the numbers it compared."""
    import re

    q = verdict.queue
    name = state.queues.names[q] if q is not None and q >= 0 else "?"
    text = verdict.reason
    asked = [r for r in range(NRES) if req[r] > 0] or [0]

    def trio(x: int, r: int) -> str:
        f = start.fair_share[x, r]
        d = start.deserved[x, r]
        return (f"{fmt_amount(r, start.allocated[x, r])} allocated, deserved "
                f"{'unlimited' if d == UNLIMITED else fmt_amount(r, d)}, fair share "
                f"{'unlimited' if f == UNLIMITED else fmt_amount(r, f)}")

    if text.startswith("strategy"):
        r = asked[0]
        d_a = start.deserved[leaf, r]
        a_a = start.allocated[leaf, r]
        fits = d_a == UNLIMITED or a_a + req[r] <= d_a + 1e-9
        if fits:
            return (f"queue {name} is not above its deserved quota or fair share for {RES_NAMES[r]} "
                    f"({trio(q, r)}), so it keeps what it holds")
        return (f"queue {name} is not above its fair share for {RES_NAMES[r]} ({trio(q, r)}) and reclaimer queue "
                f"{state.queues.names[leaf]} would exceed its deserved quota: {fmt_amount(r, a_a)} allocated + "
                f"{fmt_amount(r, req[r])} requested > {fmt_amount(r, d_a)} deserved")
    if text.startswith("saturation"):
        m = re.search(r"sibling (\d+)", text)
        sib = int(m.group(1)) if m else -1
        r = asked[0]
        x_alloc = start.allocated[q, r] + req[r]
        fx = start.fair_share[q, r]
        ratio = (x_alloc / fx) if fx > 0 else float("inf")
        other = f" than sibling {state.queues.names[sib]} (before the reclaim: {trio(sib, r)})" if sib >= 0 else ""
        return (f"queue {name} would end more saturated{other}: {fmt_amount(r, x_alloc)} allocated with the job / "
                f"{fmt_amount(r, fx)} fair share = {ratio:.3g} for {RES_NAMES[r]}")
    if text.startswith("non-preemptible"):
        r = verdict.resource if verdict.resource >= 0 else asked[0]
        d = start.deserved[q, r]
        return (f"queue {name} would hold non-preemptible jobs above its deserved quota for {RES_NAMES[r]}: "
                f"{fmt_amount(r, start.allocated_np[q, r])} + {fmt_amount(r, req[r])} requested > "
                f"{fmt_amount(r, d)} deserved")
    return text


def _min_runtime_elastic(state: CycleState, sc: Scenario, min_runtime_of) -> str | None:
    """Min-runtime validator: a protected elastic victim keeps at least ``minAvailable`` active tasks."""
    jobs = {int(state.task_job[t]) for t in sc.released}
    for vj in jobs:
        if not is_elastic(state, vj):
            continue
        mr = min_runtime_of(vj)
        if not min_runtime_protected(state, vj, mr):
            continue
        if state.job_num_active(vj) < int(state.job_min_available[vj]):
            return (f"job {state.jobs.names[vj]} is protected by a min-runtime of {mr:g}s and would keep fewer "
                    f"than minAvailable={int(state.job_min_available[vj])} tasks")
    return None
