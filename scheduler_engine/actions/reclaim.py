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
4. The shared :class:`~scheduler_engine.solvers.job_solver.VictimSolver` accumulates victims and
   simulates; a scenario is accepted when the proportion validator (per-chunk MaintainFairShare /
   GuaranteeDeservedQuota, sibling saturation with ``reclaimerUtilizationMultiplier``) and the
   min-runtime validator accept it. Victims end Releasing, the reclaimer Pipelined.

The queue state the validator reads is copied when the job's attempt starts (upstream
``OnJobSolutionStart``); victims re-placed by the simulation do not count as reclaimed
(``allow-consolidating-reclaim``).
"""
from __future__ import annotations

from functools import partial
from typing import Callable

import numpy as np

from ..plugins.minruntime import min_runtime_elastic, protected_non_elastic_by, reclaim_min_runtime
from ..kernels import reclaim_check as _check_k
from ..kernels.victim_run import EntryCall
from ..plugins.proportion import (RESOURCES, QueueShares, ShareRows, StaticRows, Verdict, can_reclaim_resources,
                                  effective_multiplier, gate_failure, queue_paths_matrix, shares_now, validate_reclaim,
                                  verdict_text, victim_filter_many, victim_vectors)
from ..snapshot import UNLIMITED
from ..solvers.simulation import Scenario
from ..solvers.victim_order import LeafRuns
from ..state import CycleState, fmt_amount
from .allocate import rows_sum
from .common import EvictingAction, pending_ready_jobs, run_evicting


_MAX_CANDIDATE_ARRAYS = 64

#: candidates from per-leaf runs kept across the job loop and patched per commit
#: (:class:`~scheduler_engine.solvers.victim_order.LeafRuns`); ``False``: a mask over every job per commit
#: and candidate set, and the victim queue sorts them (the tests compare both)
USE_LEAF_RUNS = True

#: the proportion validator of a scenario the solver hands over with its victims as arrays in one compiled
#: call (:class:`ReclaimCheck`); ``False``: :func:`victim_vectors` and :func:`validate_reclaim` in Python
#: (the tests compare both)
COMPILED_VALIDATOR = True


def run(state: CycleState) -> None:
    Reclaim(state).run()


def _request(state: CycleState, tasks: list[int]) -> np.ndarray:
    """What tasks ``tasks`` request together (a single task's row is its own sum: ``add.reduce``
    starts from the first row; read only)."""
    if len(tasks) == 1:
        return state.task_order_req[tasks[0]]
    return rows_sum(state.task_order_req, tasks)  # (``task_order_req[tasks].sum(axis=0)``, a range summed as a slice)


class Reclaim(EvictingAction):
    """Reclaim plugged into the shared job loop (:func:`~scheduler_engine.actions.common.run_evicting`)."""

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
        self._gates: dict[tuple, str | None] = {}  # (leaf, request, preemptible) -> the gate's refusal or None
        self._reqs: dict[int, tuple] = {}  # job -> (job_version, request of its next tasks, its bytes)
        self._active: np.ndarray | None = None  # (J,) preemptible with an active task
        self._active_q: np.ndarray | None = None  # (Q,) leaves holding such a job
        self._set_keys: dict[bytes, int] = {}
        self._set_jobs: dict[int, np.ndarray] = {}  # set key -> its candidate jobs (bounded)
        self._mr: dict[int, dict[int, float]] = {}  # reclaimer leaf -> victim leaf -> reclaimMinRuntime
        self._any_mr: bool | None = None
        self._runs: LeafRuns | None | bool = None  # per-leaf runs of the candidates (False: not used)
        self._static_rows: StaticRows | None = None  # the validator's static queue rows (made on first use)
        self._check: ReclaimCheck | None = None  # the compiled validator's arrays (made on first use)
        self._view: QueueShares | None = None  # shares_now(state) (:meth:`_shares`)

    def _shares(self) -> QueueShares:
        """``shares_now(state)``: views of the state's queue arrays, which are updated in place and
        never replaced during the cycle, so one view serves every gate and candidate filter (made
        on first use; ~5 us each time otherwise)."""
        sh = self._view
        if sh is None:
            sh = self._view = shares_now(self.state)
        return sh

    def candidate_jobs(self) -> list[int]:
        return pending_ready_jobs(self.state)

    def run(self) -> None:
        try:
            run_evicting(self.state, self.candidate_jobs(), self)
        finally:
            self.state._victim_leaf_runs = None  # (victim queues of later actions build their own runs)

    def _leaf_runs(self) -> LeafRuns | None:
        """The per-leaf runs of preemptible jobs with an active task (made on first use; they need
        the undo journal, and jobs without subgroups: a subgroup job's elastic state is its tree's)."""
        if self._runs is None:
            s = self.state
            ok = USE_LEAF_RUNS and not s.any_sg and s._journal is not None and s.J > 0
            self._runs = LeafRuns(s) if ok else False
            s._victim_leaf_runs = self._runs or None
        return self._runs or None

    # ---------------------------------------------------------------- the loop's hooks
    def delay_text(self, j: int) -> str:
        s = self.state
        return (f"job is within its preemption delay ({s.jobs.preemption_delay[j]:g}s since creation "
                f"{s.jobs.created_minutes_ago[j] * 60:g}s ago) and may not cause evictions")

    def _job_request(self, j: int, tasks: list[int]) -> tuple[np.ndarray, bytes]:
        """``_request(tasks)`` and its bytes, kept per job and ``job_version``: the loop passes the
        job's next tasks (``next_tasks_to_allocate``), which its version determines, to the gate and
        to the candidates; a gang's sum was ~5 us of each."""
        ver = int(self.state.job_version[j])
        hit = self._reqs.get(j)
        if hit is None or hit[0] != ver:
            req = _request(self.state, tasks)
            hit = self._reqs[j] = (ver, req, np.asarray(req, dtype=np.float64).tobytes())
        return hit[1], hit[2]

    def gate(self, j: int, tasks: list[int], leaf: int) -> str | None:
        s = self.state
        req, rb = self._job_request(j, tasks)
        pre = bool(s.job_preemptible_arr[j])
        # the gate reads the leaf's row of the queue state and the request only: the same verdict
        # (and text) for every job of the leaf asking the same until the next commit
        key = (leaf, rb, pre)
        hit = self._gates.get(key, self)
        if hit is not self:
            return hit
        why = None
        if not can_reclaim_resources(self._shares(), leaf, req, pre):
            why = gate_failure(s, leaf, req, pre)
        self._gates[key] = why
        return why

    def skip_text(self, j: int, rep: int, leaf: int) -> str:
        s = self.state
        return (f"skipped: job {s.jobs.names[rep]} of queue {s.queues.names[leaf]} with the same "
                f"scheduling constraints and no larger request failed to reclaim in this cycle")

    def fail_text(self, j: int, leaf: int, reason: str) -> str:
        return f"reclaim failed: {reason}"

    def committed(self) -> None:
        self._gates = {}
        self._cands = {}
        self._active = None
        self._set_keys = {}
        self._set_jobs = {}
        if self._runs:
            self._runs.sets.clear()

    def candidates(self, j: int, tasks: list[int], leaf: int) -> tuple[Callable[[], np.ndarray], int]:
        """Preemptible jobs with an active task in other leaves that pass the victim filter.

        The filter's inputs are the queue pair and the request, so it is evaluated once per victim
        leaf (vectorised over leaves) per (reclaimer leaf, request) and cluster state. The set is
        named by its victim leaves and their min-runtimes (O(queues)); the job array itself is only
        built when a solve needs it. ``j`` is never a candidate (its own leaf is excluded).
        """
        s = self.state
        full_req, rb = self._job_request(j, tasks)
        key = (leaf, rb)
        hit = self._cands.get(key)
        if hit is not None:
            return hit
        runs = self._leaf_runs()
        if self._active is None:
            if runs is not None:  # (patched on what the commits since the last call changed)
                runs.sync()
                self._active = runs.member
                self._active_q = runs.n > 0
            else:
                self._active = s.job_preemptible_arr & (s.job_num_active_arr > 0)
                self._active_q = np.zeros(s.queue_alloc.shape[0], dtype=bool)
                self._active_q[s.job_queue_arr[self._active]] = True
        keep_q = self._active_q.copy()
        keep_q[leaf] = False
        vqs = np.flatnonzero(keep_q)
        mr_q = None
        if vqs.size:
            keep_q[vqs] = victim_filter_many(self._shares(), leaf, vqs, full_req, paths=self._paths)
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
                if len(arrays) >= _MAX_CANDIDATE_ARRAYS:
                    arrays.clear()
                    if runs is not None:
                        runs.sets.clear()
                if runs is not None and mr_q is None:
                    # every member of the victim leaves: their runs, leaf by leaf, named by the leaves
                    # (the victim queue starts from the runs; the job array is made only if read)
                    out = runs.candidates(keep_q)
                else:
                    leaves = s.job_queue_arr
                    mask = active & keep_q[leaves]
                    if mr_q is not None:
                        mask &= ~protected_non_elastic_by(s, mr_q[leaves])
                    out = np.flatnonzero(mask)
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
        if self._static_rows is None:  # (the tree and the static rows: the same for the whole cycle)
            self._static_rows = StaticRows(start)
        rows: list[ShareRows] = []  # the start copy's rows, read by every scenario's Python check (made on first use)
        preemptible = s.job_is_preemptible(j)
        check = None
        if COMPILED_VALIDATOR:
            check = self._check
            if check is None:
                check = self._check = ReclaimCheck(s, self._paths, self._static_rows, self.multiplier)

        reqs: dict[tuple, np.ndarray] = {}  # per prefix of the job's tasks (the scenario's beneficiaries)

        def validator(sc: Scenario) -> str | Callable[[], str] | None:
            key = tuple(sc.tasks)
            req = reqs.get(key)
            if req is None:
                req = reqs[key] = _request(s, sc.tasks)
            if check is not None and sc.varr is not None:
                verdict = check.verdict(sc.varr, sc.valloc, start, leaf, req, preemptible)
            else:
                if not rows:
                    rows.append(ShareRows(start, self._static_rows))
                victims = victim_vectors(s, sc)
                verdict = validate_reclaim(start, reclaimer_leaf=leaf, req=req, reclaimer_preemptible=preemptible,
                                           victims=victims, multiplier=self.multiplier, rows=rows[0])
            if not verdict:
                sc.blocked = verdict.taken_from
                # the text is written only if it is shown (the last refusal of a failed solve): about
                # half of the validated scenarios are refused, and every input of the text is fixed
                # by now (the attempt's start copy, the verdict, the prefix's request)
                return partial(verdict_text, s, verdict, start, leaf, req)
            return min_runtime_elastic(s, sc.released, lambda v: reclaim_min_runtime(s, leaf, s.job_queue(v)))

        return validator


_ACCEPT = Verdict(True)


class ReclaimCheck:
    """The arrays of :func:`kernels.reclaim_check.reclaim_verdict` for one reclaim action's cycle: the
    tree (top-down paths, parents), the static (Q, 3) rows of the validator (allocatable, deserved, fair
    share: :class:`StaticRows`' values), the state's task / job arrays, a copy of the attempt's start
    allocations (refreshed when another attempt's start copy is validated against), the scenario's
    victims and their previous allocations, and the kernel's scratch. One argument tuple for every call
    (rebuilt only when the victim buffers grow), so the calls after the first go through the compiled
    version's entry point (:class:`~scheduler_engine.kernels.victim_run.EntryCall`)."""

    #: ``False``: every call goes through the dispatcher (tests)
    use_entry_point = True

    def __init__(self, state: CycleState, paths: tuple[np.ndarray, np.ndarray], static: StaticRows,
                 multiplier: float) -> None:
        self.state = state
        Q = state.Q
        sh = static.shares
        self.pmat = np.ascontiguousarray(paths[0], dtype=np.int64)
        self.plen = np.ascontiguousarray(paths[1], dtype=np.int64)
        self.parent = np.ascontiguousarray(sh.parent, dtype=np.int64)
        # (the rows the Python validator reads through StaticRows, so both compare the very same values)
        self.allocatable = np.array([static.allocatable(q) for q in range(Q)], dtype=np.float64).reshape(Q, 3)
        self.deserved = np.array([static.deserved(q) for q in range(Q)], dtype=np.float64).reshape(Q, 3)
        self.fair = np.array([static.fair(q) for q in range(Q)], dtype=np.float64).reshape(Q, 3)
        self.both = np.zeros((Q, 2, 3))  # the start copy's allocated / allocated_np rows
        self.start: QueueShares | None = None  # the shares copied into ``both``
        self.io = np.zeros(_check_k.IO_SIZE, dtype=np.int64)
        self.fl = np.zeros(4)
        self.fl[_check_k.FL_MULT] = multiplier
        self.out = np.zeros(4, dtype=np.int64)
        self.outv = np.zeros(3)
        self.jloc = np.full(len(state.job_start), -1, dtype=np.int64)
        self.qloc = np.full(Q, -1, dtype=np.int64)
        self.rmark = np.full(Q, -1, dtype=np.int64)
        self.rorder = np.zeros(Q, dtype=np.int64)
        self.rem = np.zeros((Q, 3))
        self.inv = np.zeros((Q, 3), dtype=np.bool_)
        self.invset = np.zeros(Q, dtype=np.bool_)
        self._call = EntryCall()
        self._grow(64)

    def _grow(self, cap: int) -> None:
        s = self.state
        self.vt = np.zeros(cap, dtype=np.int64)
        self.va = np.zeros((cap, 3))
        self.wi = np.zeros((_check_k.W_ROWS, cap), dtype=np.int64)
        self.wv = np.zeros((cap, 3))
        self.args = (self.io, self.fl, self.out, self.outv, self.vt, self.va, s.task_state, s.task_job,
                     s.job_min_available, s.job_queue_arr, self.pmat, self.plen, self.parent, self.both,
                     self.allocatable, self.deserved, self.fair, self.jloc, self.qloc, self.rmark,
                     self.rorder, self.rem, self.inv, self.invset, self.wi, self.wv)
        self._call.forget()

    def verdict(self, victims: np.ndarray, allocs: np.ndarray, start: QueueShares, leaf: int, req,
                preemptible: bool) -> Verdict:
        """:func:`validate_reclaim` over :func:`victim_vectors` of the scenario whose victims (in the
        order they were added) held ``allocs`` before it, validated against ``start``."""
        if self.start is not start:
            both = start.allocated.base  # (shares_now's copy: one (Q, 2, 3) array both rows view)
            if both is not None and both.shape == self.both.shape and start.allocated_np.base is both:
                np.copyto(self.both, both)
            else:
                np.copyto(self.both[:, 0], start.allocated)
                np.copyto(self.both[:, 1], start.allocated_np)
            self.start = start
        nv = victims.shape[0]
        if nv > self.vt.shape[0]:
            self._grow(max(nv, 2 * self.vt.shape[0]))
        self.vt[:nv] = victims
        self.va[:nv] = allocs
        io = self.io
        io[_check_k.IO_NV] = nv
        io[_check_k.IO_LEAF] = leaf
        io[_check_k.IO_PRE] = 1 if preemptible else 0
        self.fl[:3] = req
        code = self._call(_check_k.reclaim_verdict, self.args, self.use_entry_point)
        if code == _check_k.OK:
            return _ACCEPT
        q, taken, res = self.out[1:].tolist()
        if code == _check_k.STRATEGY:
            return Verdict(False, f"strategy: queue {q} may not give up {self.outv.tolist()}", queue=q, taken_from=q)
        if code == _check_k.SATURATION:
            return Verdict(False, f"saturation: queue {q} would be more saturated than sibling {taken}", queue=q,
                           taken_from=taken)
        return Verdict(False, f"non-preemptible over quota: queue {q} for {RESOURCES[res]}", queue=q, resource=res)
