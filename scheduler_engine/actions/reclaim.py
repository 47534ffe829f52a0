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


import numpy as np

from ..ordering import JobQueue, next_tasks_to_allocate
from ..proportion import QueueShares, can_reclaim_resources, effective_multiplier, validate_reclaim, victim_filter
from ..snapshot import NRES, UNLIMITED
from ..state import CycleState, RES_NAMES, fmt_amount
from .victims import (FailedShapes, Scenario, VictimSolver, commit_events, is_elastic, job_ready,
                      min_runtime_protected, protected_non_elastic, reclaim_min_runtime, within_preemption_delay)


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


class Reclaim:
    def __init__(self, state: CycleState) -> None:
        self.state = state
        self.multiplier = effective_multiplier(state.config.reclaimer_utilization_multiplier)
        # victim_filter verdicts per (reclaimer leaf, victim leaf, request): they depend only on the
        # queue state, which changes only when a solution is committed; keyed on that state's bytes
        self._vf_state: bytes | None = None
        self._vf: dict[tuple, bool] = {}

    def _filter_cache(self) -> dict[tuple, bool]:
        """The victim_filter memo for the current queue state (emptied when the state changed)."""
        s = self.state
        state_key = (np.ascontiguousarray(s.queue_alloc).tobytes() +
                     np.ascontiguousarray(s.fair_share).tobytes())
        if state_key != self._vf_state:
            self._vf_state = state_key
            self._vf = {}
        return self._vf

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
        s = self.state
        jobs = self.candidate_jobs()
        if not jobs:
            return
        jq = JobQueue(s, jobs)
        failed: dict[int, FailedShapes] = {}
        while True:
            j = jq.pop()
            if j is None:
                break
            if within_preemption_delay(s, j):
                s.add_event(j, "NotReclaiming",
                            f"job is within its preemption delay ({s.jobs.preemption_delay[j]:g}s since creation "
                            f"{s.jobs.created_minutes_ago[j] * 60:g}s ago) and may not cause evictions")
                continue
            tasks = next_tasks_to_allocate(s, j)
            if not tasks:
                continue
            leaf = s.job_queue(j)
            req = s.task_order_req[tasks].sum(axis=0)
            pre = s.job_is_preemptible(j)
            if not can_reclaim_resources(shares_now(s), leaf, req, pre):
                s.add_event(j, "NotReclaiming", gate_failure(s, leaf, req, pre))
                continue
            shapes = failed.setdefault(leaf, FailedShapes(s))
            rep = shapes.blocking(j)
            if rep is not None:
                s.add_event(j, "NotReclaiming",
                            f"skipped: job {s.jobs.names[rep]} of queue {s.queues.names[leaf]} with the same "
                            f"scheduling constraints and no larger request failed to reclaim in this cycle")
                continue
            solver = self._solver(j, leaf, req, pre)
            sol = solver.solve(j, tasks)
            if sol is None:
                shapes.record(j)
                s.add_event(j, "NotReclaiming", f"reclaim failed: {solver.last_reason}")
                continue
            commit_events(s, sol, "Reclaimed", detail=self._detail(j))
            jq.refresh_all()

    def _detail(self, j: int):
        s = self.state

        def detail(t: int) -> str:
            vq = s.job_queue(int(s.task_job[t]))
            rq = s.job_queue(j)
            f, a = s.fair_share[vq], s.queue_alloc[vq]
            return (f"queue {s.queues.names[vq]} now holds gpu={fmt_amount(0, a[0])} of fair share "
                    f"{fmt_amount(0, f[0]) if f[0] != UNLIMITED else 'unlimited'}; reclaimer queue "
                    f"{s.queues.names[rq]}")

        return detail

    def _solver(self, j: int, leaf: int, full_req: np.ndarray, preemptible: bool) -> VictimSolver:
        s = self.state
        start = shares_now(s, copy=True)  # OnJobSolutionStart

        def candidates():
            live = shares_now(s)
            mask = s.job_preemptible_arr & (s.job_num_active_arr > 0) & (s.job_queue_arr != leaf)
            mask[j] = False
            leaves = s.job_queue_arr
            memo = self._filter_cache()
            req_key = np.asarray(full_req, dtype=np.float64).tobytes()
            for vq in np.unique(leaves[mask]):
                vq = int(vq)
                key = (leaf, vq, req_key)
                keep = memo.get(key)
                if keep is None:
                    keep = memo[key] = bool(victim_filter(live, leaf, vq, full_req))
                if not keep:
                    mask &= leaves != vq
                    continue
                mr = reclaim_min_runtime(s, leaf, vq)
                if mr > 0:
                    mask &= ~((leaves == vq) & protected_non_elastic(s, mr))
            return np.flatnonzero(mask)

        def validator(sc: Scenario) -> str | None:
            req = s.task_order_req[sc.tasks].sum(axis=0)
            victims = _victim_vectors(s, sc)
            verdict = validate_reclaim(start, reclaimer_leaf=leaf, req=req, reclaimer_preemptible=preemptible,
                                       victims=victims, multiplier=self.multiplier)
            if not verdict:
                return _verdict_text(s, verdict, start, leaf, req)
            return _min_runtime_elastic(s, sc, lambda v: reclaim_min_runtime(s, leaf, s.job_queue(v)))

        return VictimSolver(s, "reclaim", candidates, validator)


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
