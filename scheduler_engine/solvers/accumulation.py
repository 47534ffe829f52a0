"""Victim accumulation for one prefix of the beneficiary's tasks (KAI ``pod_scenario_builder``,
``sub_scenario_emitter`` and the by-node scenarios).

The recorded victims (those that solved the previous prefix) are tried alone first. Then victims
accumulate in victim order (:class:`~.victim_order.VictimQueue`); an elastic victim gives up one
surplus task per step and goes back into the queue with the rest. After each addition the
scenarios emitted are, in order: for each node of the newest victim, the recorded victims plus the
accumulated victims of every job present on that node (node-local: no unrelated eviction
elsewhere), then all accumulated victims (the fallback for placements that need several nodes).
Identical victim sets are simulated once; sets that cannot fit by GPU count
(:mod:`.idle_gpus`) are skipped, and a prefix for which even evicting every candidate could not
fit fails at once.

The loop runs compiled (:mod:`~scheduler_engine.kernels.victim_run`) for as long as Python has
nothing to decide: plain victims (evicted whole: one active task, or a gang at or below
minAvailable; no subgroups) are popped and accumulated there, and every victim's scenarios are
emitted there (tried sets as a hash table of position sets, the GPU-count filters). A set to
simulate is simulated there too when its scenario kernel can (:mod:`~scheduler_engine.kernels.search`:
the scenario, its rollback and the pruning after it, when the beneficiary does not fit); Python takes
over for a scenario that places the beneficiary (the validator), a set the scenario kernel does not
simulate, an elastic surplus, a subgroup job, and the explanations. The accumulated victims are kept
once, in the kernel's arrays (:meth:`PrefixSearch._arrays`), which Python's loop writes and reads too.

Pruning (reclaim and preempt; see :mod:`.job_solver`): after a failed scenario, victims the
simulation served before the beneficiary, and victims under a queue the validator refused to take
from, leave the accumulated set, and later candidates of those leaves / queues are passed over.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import numpy as np

from .. import subgroups
from ..plugins.elastic import tasks_to_evict
from ..snapshot import GPU, TaskState
from ..state import EPS, CycleState
from ..kernels import scenario as _scenario_k
from ..kernels import search as _search_k
from ..kernels import victim_run, victim_rows
from ..ordering import kernel_static
from .idle_gpus import demand, fit_base, may_fit
from .victim_order import RunCandidates, VictimQueue

if TYPE_CHECKING:  # the solver drives the search; annotations only
    from .job_solver import VictimSolver

_ACTIVE_LUT = np.zeros(max(int(x) for x in TaskState) + 1, dtype=bool)
_ACTIVE_LUT[[int(TaskState.RUNNING), int(TaskState.BINDING), int(TaskState.PIPELINED)]] = True
_NO_NODES = np.zeros(0, dtype=np.int64)

#: (the fields the loop's driver reads and writes on every call, as module constants)
_IS_NEXT, _IS_STEPS, _IS_GOOD, _IS_EMPTIED = (victim_run.IS_NEXT, victim_run.IS_STEPS, victim_run.IS_GOOD,
                                              victim_run.IS_EMPTIED)
_FS_BEST = victim_run.FS_BEST

#: pop and accumulate plain victims with the compiled loop (:mod:`~scheduler_engine.kernels.victim_run`);
#: ``False``: every victim through the Python loop below (the reference the kernel is tested against)
USE_KERNEL = True

#: the compiled loop simulates, rolls back and prunes the scenarios that do not place the beneficiary
#: itself (:func:`~scheduler_engine.kernels.search.run_search`); ``False``: each one through Python's
#: ``VictimSolver._try`` (the tests compare both, search by search)
USE_SEARCH_KERNEL = True

#: with a wall-clock budget (``state.budget.seconds`` set), the most scenarios the compiled search keeps
#: before Python reads the clock again (Python's loop reads it before every call, i.e. between two
#: scenarios): 16 failed scenarios are ~0.2-1 ms of compiled work at 2,000-10,000 nodes, so a spent budget
#: is seen at most ~1 ms later than by Python's loop, against budgets of tens of seconds, while a return
#: to Python (~5-10 us) stays a few % of them. Without a budget the clock decides nothing: no limit.
SEARCH_YIELD = 16

#: the bound of reclaim's many candidates from its leaf mask and membership (:func:`_candidate_gpu`);
#: ``False``: :func:`~scheduler_engine.kernels.victim_run.candidate_gpu` on their job array (tests compare)
USE_RUNS_BOUND = True


def _fit_base(state: CycleState) -> np.ndarray:
    """:func:`.idle_gpus.fit_base` kept on the state across the job loop's commits and brought up to
    date on the nodes ``state.node_log`` names since (every change of a node's resources, rollbacks
    included, is logged): a commit changes the beneficiary's and the victims' nodes only, so the
    next search recomputes those rows (the same per-row sums) instead of every node. A new array
    each time a value changes (a caller may hold the previous one); the same array when none did.
    The rows are summed in one compiled pass (:func:`~scheduler_engine.kernels.victim_rows.fit_rows`,
    numpy's per-row sums term for term) but on a state whose DRA devices count as GPUs.

    The rows are the *distinct* logged nodes: every failed scenario logs its nodes twice (applied,
    rolled back) and a job loop simulates tens of scenarios between two commits, so the raw count
    passed N / 8 at nearly every commit at 2,000 and 10,000 nodes (a full recomputation each time)
    while the distinct nodes are a few hundred."""
    log = state.node_log
    end = len(log)
    N = state.N
    hit = getattr(state, "_victims_fit_base", None)
    if hit is None:
        base = fit_base(state)
    else:
        base, pos = hit
        rb = _fit_rows_buffers(state) if pos < end and USE_FIT_ROWS else None
        if rb is not None:  # (compiled: the same rows, the same sums)
            mark, buf, vals = rb
            m = victim_rows.fit_rows(log.buf, pos, end, mark, buf, vals, state.dev_free, state.dev_rel,
                                     state.dev_valid, state.node_schedulable, base)
            if m < 0:  # (many: all rows, the same values)
                old = base
                base = fit_base(state)
                state._victims_base_delta = (old, base, None)
            elif m:
                old = base
                ch = buf[:m].copy()
                base = base.copy()
                base[ch] = vals[:m]
                state._victims_base_delta = (old, base, ch)
            # (no value changed: the same array, and the last delta still leads to it)
        elif pos < end:
            seg = np.asarray(log[pos:end], dtype=np.int64)
            if seg.shape[0] <= N // 8:
                rows = np.unique(seg)
            else:  # (a mark per node: O(entries + N), where sorting many entries would cost more)
                mark = np.zeros(N, dtype=np.bool_)
                mark[seg] = True
                rows = np.flatnonzero(mark)
            old = base
            if 8 * rows.shape[0] > N:  # (many: all rows, the same values)
                base = fit_base(state)
                rows = None
            else:
                base = base.copy()
                base[rows] = fit_base(state, rows)
            # (which rows changed value: the packing filters' sorted base follows them, _sorted_base)
            state._victims_base_delta = (old, base, None if rows is None else rows[old[rows] != base[rows]])
    state._victims_fit_base = (base, end)
    return base


#: :func:`_fit_base` patches the logged rows with :func:`~scheduler_engine.kernels.victim_rows.fit_rows`;
#: ``False``: with ``fit_base`` on those rows in numpy (tests compare)
USE_FIT_ROWS = True


def _fit_rows_buffers(state: CycleState) -> tuple | None:
    """The scratch rows of :func:`~scheduler_engine.kernels.victim_rows.fit_rows` (a clean (N,) mark,
    (N,) nodes and values), kept on the state; None when the kernel does not compute that state's base:
    GPU classes of DRA devices (their term stays numpy's, ``CycleState._node_gpus``), or rows longer
    than numpy sums in one pairwise block."""
    hit = state.__dict__.get("_victims_fit_rows")
    if hit is None:
        s = state
        ok = (not (s.D and s.M and bool(s.dc_gpu.any())) and s.dev_free.shape[1] <= victim_rows.PW_BLOCK
              and s.dev_valid.dtype == np.bool_)
        hit = state._victims_fit_rows = (np.zeros(s.N, dtype=np.bool_), np.empty(s.N, dtype=np.int64),
                                         np.empty(s.N)) if ok else False
    return hit or None


#: the packing filters on the sorted base (:func:`~scheduler_engine.kernels.victim_run.sorted_pack`);
#: ``False``: their pass over every node (tests compare)
USE_SORTED_PACK = True


def _sorted_base(state: CycleState, base: np.ndarray, skey: np.ndarray, snode: np.ndarray, tag: object) -> object:
    """Bring the lent rows ``skey`` / ``snode`` to ``base`` in ascending (value, node) order (what
    the packing filters search, :func:`~scheduler_engine.kernels.victim_run.sorted_pack`); ``tag``:
    the base array they sort now (returns the new one). From one commit to the next the base changes
    on a few rows (:func:`_fit_base` says which): those nodes leave the order and come back at their
    new value's place, O(N) memory moves instead of a sort (~0.5 ms at 10,000 nodes) per commit."""
    if tag is base:
        return base
    delta = getattr(state, "_victims_base_delta", None)
    if delta is not None and delta[0] is tag and delta[1] is base and delta[2] is not None:
        ch = delta[2]
        if ch.shape[0]:
            gone = np.zeros(base.shape[0], dtype=np.bool_)
            gone[ch] = True
            kept = ~gone[snode]
            k2, n2 = skey[kept], snode[kept]
            vals = base[ch]
            o = np.lexsort((ch, vals))
            vals, ch = vals[o], ch[o]
            lo = np.searchsorted(k2, vals, side="left")
            hi = np.searchsorted(k2, vals, side="right")
            at = lo + np.array([int(np.searchsorted(n2[a:b], v)) for a, b, v in
                                zip(lo.tolist(), hi.tolist(), ch.tolist())], dtype=np.int64)
            skey[:] = np.insert(k2, at, vals)
            snode[:] = np.insert(n2, at, ch)
        return base
    order = np.argsort(base, kind="stable")  # (equal values: ascending nodes)
    skey[:] = base[order]
    snode[:] = order
    return base


def _candidate_gpu(state: CycleState, cands: np.ndarray | RunCandidates, out: np.ndarray) -> None:
    """Add to ``out`` the bound's per-node GPUs of every candidate's active, placed tasks, in task
    order (:func:`~scheduler_engine.kernels.victim_run.candidate_gpu`). Reclaim's candidates named by
    their leaves (:class:`.victim_order.RunCandidates`), when many (``candidate_gpu`` would take its
    pass over every task too), are summed by that pass reading the leaves and the membership
    (:meth:`.victim_order.LeafRuns.bound`: the same terms in the same order), without their job array."""
    s = state
    if isinstance(cands, RunCandidates):
        if USE_RUNS_BOUND and 8 * cands.size > s.J:
            cands.runs.bound(cands.keep, _ACTIVE_LUT, out)
            return
        cands = cands.jobs()
    victim_run.candidate_gpu(cands, s.job_start, s.job_count, s.task_state, _ACTIVE_LUT, s.task_job,
                             s.task_node, s.task_alloc[:, GPU], out)


def _scratch_of(state: CycleState) -> list:
    """The rows :func:`_scratch` lent to the running search."""
    return state._victims_scratch


def _scratch(state: CycleState) -> list:
    """The per-job and per-task rows of the accumulated victims (``ji``: all -1, ``ti``: recorded 0,
    position -1), kept on the state and lent to one prefix search at a time: the last search's
    entries (its accumulated victims' tasks and jobs, its recorded tasks) are reset here, O(victims),
    instead of new (J,) and (T,) rows per search. The per-victim columns ``pi`` (room for every task:
    a task is accumulated at most once per search, and every column is written when its victim is
    accumulated, so nothing is reset) are lent too. The compiled loop's tried-set table and its pool
    (:func:`~scheduler_engine.kernels.victim_run.tried_add`) are lent the same way: each search
    gets a new generation, which empties every slot at once. Searches run one after another (the solvers are
    sequential and a search's rows are not read after the next one starts).

    The per-node rows ``nf`` / ``ni`` are lent *clean* (:func:`.victim_rows.reset_search` after a search,
    :func:`_clean_rows` before one; slot 11 says what they hold): at 10,000 nodes writing seven (N,) rows
    per search was ~40-60 us of each of the ~14,000 searches of a cycle, while a search writes them only
    at its accumulated victims' nodes and its recorded victims' nodes. Between two searches ``NF_ALL_GPU`` / ``NF_REC_GPU`` are 0.0 and
    ``NI_NODE_HEAD`` is -1 everywhere, ``NF_BASE`` and ``NF_CAP`` both hold the filter base array named
    ``tag`` (patched on the rows :func:`_fit_base` changed from one commit to the next), ``NI_GOOD``
    holds ``NF_BASE >= thr`` for the single-task threshold ``thr`` (with ``cnt`` of them; ``thr`` None:
    not made), ``NI_TSTAMP`` holds only stamps below ``stamp`` (the last search's ``IS_STAMP``: each
    search numbers on from there, so no stamp is reused and the row is never reset). The rest of
    ``nf`` / ``ni`` is scratch, written before it is read, but for two kinds of rows that outlive a
    search on purpose: the packing filters' sorted base (``NF_SKEY`` / ``NI_SNODE``, sorting the base
    array held in slot 9, :func:`_sorted_base`) and their marks (``NI_OVL``: each filter call takes the
    next number, slot 10 carries it from one search to the next, so no mark is ever reused and the row
    is never reset)."""
    vr = victim_run
    sc = getattr(state, "_victims_scratch", None)
    if sc is None:
        ti = np.empty((2, state.T), dtype=np.int64)
        ti[vr.TI_REC] = 0
        ti[vr.TI_POS] = -1
        sc = state._victims_scratch = [np.full((2, state.J), -1, dtype=np.int64), ti, None,
                                       np.zeros((4, 4096), dtype=np.int64), np.empty(2 * state.T + 2, dtype=np.int64), 0,
                                       np.empty((8, state.T + 1), dtype=np.int64), np.zeros((7, state.N)),
                                       np.zeros((8, state.N), dtype=np.int64), None, 0,
                                       {"tag": None, "max": 0.0, "thr": None, "cnt": 0, "stamp": 0, "recn": _NO_NODES}]
        sc[8][vr.NI_NODE_HEAD] = -1
        sc[8][vr.NI_TSTAMP] = -1
    else:
        kept = sc[11]
        p = 0
        rec = _NO_NODES
        if sc[2] is not None:
            k, rec = sc[2]
            sc[10] = int(k["ist"][vr.IS_OSTAMP])  # (the packing filters' marks go on from there: never reset)
            kept["stamp"] = int(k["ist"][vr.IS_STAMP])  # (so do the node-local sums' stamps)
            p = int(k["ist"][vr.IS_POT])
        if p or rec.shape[0] or kept["recn"].shape[0]:
            # (recorded nodes without arrays: a search that ended before them, at its bound)
            thr = kept["thr"]
            victim_rows.reset_search(p, sc[6], sc[0], sc[1], rec, kept["recn"], sc[7], sc[8], thr is not None,
                                     0.0 if thr is None else float(thr))
            kept["recn"] = _NO_NODES
    sc[2] = None
    sc[5] += 1  # the tried-set table's generation: the last search's entries are empty slots now
    return sc


def _mark_good(good: np.ndarray, rows: np.ndarray, values: np.ndarray, thr: float) -> int:
    """Set the good marks of ``rows`` to ``values >= thr``; returns how the count of good nodes changed
    (the clean row patched on a base's changed rows, and a search's recorded nodes on top of it)."""
    now = values >= thr
    change = int(np.count_nonzero(now)) - int(np.count_nonzero(good[rows]))
    good[rows] = now
    return change


def _clean_rows(state: CycleState, sc: list, base: np.ndarray) -> dict:
    """Bring the clean rows ``NF_BASE`` / ``NF_CAP`` (and ``NI_GOOD``, its count) to the filter base
    ``base`` (:func:`_scratch`): nothing when they hold it, its changed rows when they hold the base
    :func:`_fit_base` patched into it (the job loop's, one commit earlier), else every kept row (a base
    made for one search, consolidation's; the first search; ``tag`` None: rows of unknown content). Also the base's largest value (the best node
    of a search without recorded victims). Returns slot 11."""
    vr = victim_run
    kept = sc[11]
    tag = kept["tag"]
    if tag is base:
        return kept
    nf, ni = sc[7], sc[8]
    delta = getattr(state, "_victims_base_delta", None)
    if tag is not None and delta is not None and delta[0] is tag and delta[1] is base and delta[2] is not None:
        rows = delta[2]
        if rows.shape[0]:
            v = base[rows]
            nf[vr.NF_BASE, rows] = v
            nf[vr.NF_CAP, rows] = v
            if kept["thr"] is not None:
                kept["cnt"] += _mark_good(ni[vr.NI_GOOD], rows, v, kept["thr"])
    else:  # (another base, or rows of unknown content: every kept row)
        nf[vr.NF_BASE] = base
        nf[vr.NF_CAP] = base
        nf[vr.NF_ALL_GPU] = 0.0
        nf[vr.NF_REC_GPU] = 0.0
        ni[vr.NI_NODE_HEAD] = -1
        ni[vr.NI_TSTAMP] = -1
        kept["thr"] = None
    kept["tag"] = base
    kept["max"] = float(base.max()) if base.shape[0] else 0.0
    return kept


def _queues_under(state: CycleState, b: int) -> np.ndarray:
    """The queues whose path holds queue ``b`` (``b`` and its subtree), kept on the state per ``b`` (the
    tree is static for the cycle): a blocked queue's subtree was a pass over every queue's padded path
    per block, ~10 us at 1,000 queues, for the few queues a cycle's validators refuse again and again."""
    memo = state.__dict__.get("_victims_queues_under")
    if memo is None:
        memo = state._victims_queues_under = {}
    hit = memo.get(b)
    if hit is None:
        hit = memo[b] = np.flatnonzero((kernel_static(state)[1] == b).any(axis=1))
    return hit


class PrefixSearch:
    """One prefix's search: accumulate victims, emit scenarios, let the solver simulate them.

    The incremental GPU-count filter of the all-accumulated scenario:

    * ``fast`` (a single whole task without a node selector): "some node has free + releasing +
      victims >= need", kept as the set of such nodes (``good``/``n_good``) instead of an O(nodes)
      pass per victim; adding victims' GPUs never lowers a node's sum (rounding is monotone).
    * ``pack`` (several tasks with GPUs, ``multi``, or one GPU task with a node selector): the
      best-fit packing of :func:`.idle_gpus.may_fit` on the nodes that could hold the smallest GPU
      task (in the compiled loop for every victim it settles).
    """

    def __init__(self, solver: VictimSolver, j: int, partial: list[int], recorded: list[int]) -> None:
        self.solver = solver
        self.state: CycleState = solver.state
        self.j = j
        self.partial = partial
        self.recorded = recorded
        self.recorded_set = set(recorded)
        self.own = int(self.state.job_queue_arr[j])
        self.blocked: set[int] = set()  # queues whose subtree gives no more victims (solver.prune)
        self.retook: set[int] = set()  # leaves whose victims were served before the beneficiary (solver.prune)
        self.all_gpu: np.ndarray | None = None  # per node: recorded + accumulated (not dropped) victims' GPUs
        self.fast = self.multi = self.pack = False
        self.thr = self.mthr = 0.0
        self.base: np.ndarray = np.zeros(0)  # per node: the GPU-count filter's base (idle_gpus.fit_base)
        self.good_l: np.ndarray = np.zeros(0, dtype=np.bool_)
        self.n_good = 0
        self._skip_stale = True  # the kernel's per-leaf skip row lags behind retook / blocked
        self._skipped: tuple[set[int], set[int]] = (set(), set())  # retook / blocked already in that row
        # the accumulated victims as arrays (:meth:`_arrays`, the compiled loop's layout); ``drop_seq``:
        # per accumulated victim when it was dropped (-1: kept)
        self.kst: dict | None = None
        self.tried_sets: set[frozenset] = set()
        self._kernel_mode = False  # the compiled loop pops and emits (run)
        self.drop_seq: np.ndarray | None = None

    # ---------------------------------------------------------------- incremental filter
    def track(self, n: int) -> None:
        """Node n's accumulated victims changed: update the incremental GPU-count filter."""
        ok = float(self.base[n]) + float(self.all_gpu[n]) >= self.thr
        if ok != self.good_l[n]:
            self.good_l[n] = ok
            self.n_good += 1 if ok else -1

    def drop(self, ts: Iterable[int]) -> None:
        """Take potential victims ``ts`` out of the accumulated set (numbered in drop order: how
        many were dropped is ``ist[IS_DROPPED]``)."""
        s = self.state
        all_gpu, task_gpu = self.all_gpu, s.task_alloc[:, GPU]
        seq, tpos = self.drop_seq, self.kst["ti"][victim_run.TI_POS]
        ist = self.kst["ist"]
        for t in ts:
            u = int(tpos[t])
            if u >= 0 and seq[u] < 0:
                seq[u] = ist[victim_run.IS_DROPPED]
                ist[victim_run.IS_DROPPED] += 1
                n = int(s.task_node[t])
                if n >= 0:
                    all_gpu[n] -= task_gpu[t]
                    if self.fast:
                        self.track(n)

    def prune(self) -> None:
        """After a failed scenario (module docstring, "Pruning")."""
        s = self.state
        b = self.solver._blocked_fail
        if self._kernel_mode:
            # the same in one compiled call, which also marks their leaves in the kernel's skip row;
            # after a validator refusal (nothing served: the scenario placed) the victims under the
            # queue it refused to take from, in the same call (victim_run.drop_under)
            served = self.solver._served_arr
            k, vr = self.kst, victim_run
            ist = k["ist"]
            if served.shape[0] or (b >= 0 and ist[vr.IS_POT]):
                ist[vr.IS_GOOD] = self.n_good
                m = vr.drop_served(served, *k["dargs"], b, k["path"])
                self.n_good = int(ist[vr.IS_GOOD])
                if m:
                    new = k["qbuf"][:m].tolist()
                    self.retook.update(new)
                    self._skipped[0].update(new)
        else:
            kept = [t for t in self.solver._served_first if t not in self.recorded_set]
            self.drop(kept)
            # their leaves are served before the beneficiary's: the rest of their candidates
            # would take their own resources back just the same
            own = self.own
            self.retook.update(q for q in (int(s.job_queue_arr[int(s.task_job[t])]) for t in kept) if q != own)
            self._skip_stale = True  # the kernel's row is brought up to date at its next run
        if b >= 0:
            self.blocked.add(b)
            self._skip_stale = True
            p = int(self.kst["ist"][victim_run.IS_POT])
            if p and not self._kernel_mode:  # (compiled: in drop_served above)
                # the accumulated victims (in accumulation order) whose leaf's path holds b
                pi = self.kst["pi"]
                under = (kernel_static(s)[1][s.job_queue_arr[pi[victim_run.PI_JOB, :p]]] == b).any(axis=1)
                self.drop(pi[victim_run.PI_POT, :p][under].tolist())

    # ---------------------------------------------------------------- the search
    def run(self):
        """The first scenario that fits and validates, as ``(scenario, checkpoint)``, or ``None``
        (``solver.last_reason`` then says why when the search ended early)."""
        solver, s = self.solver, self.state
        j, partial, recorded, recorded_set = self.j, self.partial, self.recorded, self.recorded_set
        if recorded:
            res = solver._try(j, partial, list(recorded))
            if res is not None:
                return res
        cands = solver.candidates()
        if not isinstance(cands, RunCandidates):  # (reclaim's, named by leaves: read as such below)
            cands = np.asarray(list(cands) if not isinstance(cands, np.ndarray) else cands, dtype=np.int64)
        memo = solver.memo
        if memo is None:
            base = fit_base(s)
        else:
            base = memo.get("base")
            if base is None:
                base = memo["base"] = _fit_base(s)
        self.base = base
        if cands.size == 0:
            return None
        # the per-node rows lent clean (_scratch): the base in NF_BASE / NF_CAP, the recorded victims'
        # GPUs written on their nodes only (rec_gpu: the row, 0.0 elsewhere)
        scratch = _scratch(s)
        kept = _clean_rows(s, scratch, base)
        nf, ni = scratch[7], scratch[8]
        vr = victim_run
        rec_gpu = nf[vr.NF_REC_GPU]
        recn = _NO_NODES
        if recorded:
            task_node, task_gpu = s.task_node, s.task_alloc[:, GPU]
            for t in recorded:
                if task_node[t] >= 0:
                    rec_gpu[int(task_node[t])] += task_gpu[t]
            recn = np.unique(task_node[recorded])
            if recn.shape[0] and recn[0] < 0:
                recn = recn[recn >= 0]
            kept["recn"] = recn  # (reset by the next search, whether or not this one gets to its arrays)
            rv = rec_gpu[recn]
            nf[vr.NF_ALL_GPU, recn] = rv
            cap_rec = base[recn] + rv
            nf[vr.NF_CAP, recn] = cap_rec
        # the best capacity: base + rec_gpu's largest value, i.e. the base's or a recorded node's (there
        # base + rec >= base); one task without a node selector fits the recorded victims' room when it does
        best_all = kept["max"] if s.N > 0 else 0.0
        if recn.shape[0]:
            best_all = max(best_all, float(cap_rec.max()))
        # bound: even evicting every candidate must leave room somewhere, else no scenario can fit
        # (per node: the recorded victims, then every candidate's active tasks in task order).
        # For one task the filter is "some node's base + victims' GPUs >= its need", monotone in
        # the victims' GPUs, and every candidate's sum is the recorded one plus non-negative
        # terms: when the recorded victims alone pass, the bound passes (no O(tasks) sum)
        dem = demand(s, partial) if len(partial) > 1 else None  # the kernel's input, once per prefix
        rec_fits = False
        if len(partial) == 1:
            if s.task_selector_key[partial[0]] or s.N == 0:
                rec_fits = may_fit(s, partial, base, rec_gpu)
            else:  # (may_fit's test without its (N,) sum: the largest base + rec_gpu is best_all)
                need0 = float(s.task_order_req[partial[0], GPU])
                rec_fits = need0 <= EPS or best_all >= need0 - 1e-9
        if rec_fits:
            passes = True
        else:
            hit = memo.get(("every", id(cands))) if memo is not None and not recorded else None
            if hit is not None and hit[0] is cands:  # (the memo holds the array: its id is not reused)
                every = hit[1]
            else:
                every = rec_gpu.copy() if recorded else np.zeros(s.N)
                _candidate_gpu(s, cands, every)
                if memo is not None and not recorded:
                    memo[("every", id(cands))] = (cands, every)
            passes = may_fit(s, partial, base, every, dem)
        if not passes:
            solver.last_reason = ("even evicting every eligible victim would not free enough GPUs on the nodes "
                                  f"({len(cands)} eligible jobs)")
            return None
        single = len(partial) == 1 and not s.task_selector_key[partial[0]]
        need1 = float(s.task_order_req[partial[0], GPU]) if single else 0.0
        fast = self.fast = single and need1 > EPS and s.N > 0
        if fast:
            thr = self.thr = need1 - 1e-9
            rec_best = best_all
            # the good nodes (base + rec_gpu >= thr): the clean row's when made for this threshold, made
            # otherwise (_scratch), then the recorded nodes' marks
            good = ni[vr.NI_GOOD]
            if kept["thr"] != thr:
                np.greater_equal(nf[vr.NF_BASE], thr, out=good)
                kept["thr"] = thr
                kept["cnt"] = int(np.count_nonzero(good))
            n_good = kept["cnt"]
            if recn.shape[0]:
                n_good += _mark_good(good, recn, cap_rec, thr)
            self.good_l = good
            self.n_good = n_good
        sel1 = False
        if not fast:  # (the single-task filter needs neither)
            gneed = s.task_order_req[partial, GPU]
            self.multi = len(partial) > 1 and bool(np.any(gneed > EPS)) and s.N > 0
            # one GPU task with a node selector: the same best-fit packing (one request, its nodes)
            sel1 = len(partial) == 1 and float(gneed[0]) > EPS and s.N > 0
            if self.multi or sel1:
                self.mthr = float(gneed[gneed > EPS].min()) - 1e-9
        self.pack = self.multi or sel1
        # the same candidates on the same cluster (memo): the queue starts as the last one did
        proto = memo.get(("vq", id(cands))) if memo is not None else None
        proto = proto[1] if proto is not None and proto[0] is cands else None  # (held: its id is not reused)
        vq = VictimQueue(s, cands, proto)
        # the accumulated victims live in the compiled loop's arrays, whoever pops them
        # (:meth:`_arrays`): Python's loop below writes them too and its emissions read them
        self._arrays(scratch, base, recn, need1, fast and rec_best < thr, demand(s, partial) if sel1 else dem)
        k = self.kst
        nf, ni, pi, ji, ist = k["nf"], k["ni"], k["pi"], k["ji"], k["ist"]
        all_gpu, cap = self.all_gpu, nf[vr.NF_CAP]
        pot, drop_seq, loc = pi[vr.PI_POT], pi[vr.PI_DROP], pi[vr.PI_LOC]
        job_first, node_head = ji[vr.JI_FIRST], ni[vr.NI_NODE_HEAD]
        task_gpu = s.task_alloc[:, GPU]
        retook, blocked = self.retook, self.blocked
        tried: set[frozenset] = {frozenset(recorded)} if recorded else set()
        self.tried_sets = tried  # (tests read it, with the compiled loop's: tried_all)
        track = self.track
        rec_key = frozenset(recorded)
        local_filter = fast and rec_best < thr  # (else every node-local set passes the single-task filter)
        use_kernel = USE_KERNEL and bool(vq) and s.N > 0 and vq.run_ready()
        self._kernel_mode = use_kernel
        if use_kernel:
            self._kernel_args(vq)
            if memo is not None and proto is None:
                memo[("vq", id(cands))] = (cands, vq.proto())
            pending = ist[vr.IS_PHASE:vr.IS_PHASE + 1]  # >= 0: the kernel is emitting a victim's scenarios
        # (the limits are checked between two victims: after all the scenarios of the last one)
        while (use_kernel and pending[0] >= 0) or vq:
            emitting = use_kernel and pending[0] >= 0
            if not emitting:
                if solver.tried >= solver.max_scenarios:
                    solver.last_reason = f"gave up after {solver.tried} scenarios"
                    return None
                if s.budget.expired():  # between two scenarios: the state is back where the search began
                    solver.out_of_time = True
                    solver.last_reason = "the cycle's time budget ran out during this job's search"
                    return None
            if use_kernel:
                # a victim's emission in the kernel ends with DONE when a limit above is reached
                ist[vr.IS_STOP] = emitting and (solver.tried >= solver.max_scenarios or s.budget.expired())
                code = self._kernel_step(vq, best_all)
                best_all = float(k["fst"][vr.FS_BEST])
                while code == vr.SIM and k["drive"] is not None and self._learn(k["drive"]):
                    # the set's jobs looked at: the compiled search simulates it now (nothing between,
                    # as Python's _try would simulate it now)
                    code = self._kernel_step(vq, best_all)
                    best_all = float(k["fst"][vr.FS_BEST])
                if code == vr.SIM:
                    sel = pot[loc[:int(ist[vr.IS_SETLEN])]]  # (a new array: the set's tasks)
                    res = solver._try(j, partial, recorded + sel.tolist(), None if recorded else sel)
                    if res is not None:
                        return res
                    if solver.prune:
                        self.prune()
                    continue
                if code == _search_k.SIMULATED:  # (simulated there: placed, or an object half to write)
                    res = solver.finish_simulated(j, partial, int(k["drive"]["ds"][_search_k.D_R]))
                    if res is not None:
                        return res
                    if solver.prune:
                        self.prune()
                    continue
                if code == vr.DONE or code == _search_k.YIELD:
                    continue
                if code == vr.ROOM:
                    self._grow()
                    continue
                if code == vr.BUDGET:
                    solver.last_reason = (f"search budget exhausted after {solver.tried} scenarios (victims "
                                          f"examined plus victims simulated > scenarioSearchBudget "
                                          f"{solver.search_budget})")
                    return None
                if code == vr.END or code == vr.JOBS:
                    break
            # Python pops the victim: every one without the kernel, else those it hands back (PY)
            solver.steps += 1
            if 0 <= solver.search_budget < solver.steps:
                solver.last_reason = (f"search budget exhausted after {solver.tried} scenarios (victims examined "
                                      f"plus victims simulated > scenarioSearchBudget {solver.search_budget})")
                return None
            popped = vq.pop()
            if popped is None:
                break
            vj, vtasks = popped
            if retook or blocked:
                vleaf = int(s.job_queue_arr[vj])
                if vleaf in retook or not blocked.isdisjoint(s.queue_path_list[vleaf]):
                    continue
            if s._sg_list[vj]:  # subgroups: surplus tasks of leaves, then surplus members, then all
                evict, more = subgroups.tasks_to_evict(s, vj, vtasks)
            else:
                evict, more = tasks_to_evict(s, vtasks, int(s.job_min_available[vj]))
            if not evict:
                continue
            if any(t in recorded_set for t in evict):
                rest = [t for t in vtasks if t not in recorded_set]
                if rest:
                    vq.push(vj, rest)
                continue
            if job_first[vj] < 0 and 0 <= solver.max_victim_jobs <= int(ist[vr.IS_JOBS]):
                break  # the victim-job budget is spent
            if more:
                ev = set(evict)
                vq.push(vj, [t for t in vtasks if t not in ev])
            self._accumulate(vj, evict)
            hosts = []
            for t in evict:
                n = int(s.task_node[t])
                if n >= 0:
                    g = float(task_gpu[t])
                    all_gpu[n] += g
                    if fast:
                        track(n)
                    c = cap[n] = cap[n] + g
                    if c > best_all:
                        best_all = c
                    if n not in hosts:
                        hosts.append(n)
            if single and best_all < need1 - 1e-9:
                continue  # no node can hold the task yet, whatever subset is evicted
            if use_kernel:
                # the kernel emits this victim's scenarios (tried sets, filters) at its next call
                hosts.sort()
                ni[vr.NI_HOSTS, :len(hosts)] = hosts
                ist[vr.IS_HOSTS] = len(hosts)
                ist[vr.IS_PHASE] = 0
                ist[vr.IS_SAME] = 0
                continue
            # (without the compiled loop: the reference filters, idle_gpus.may_fit's sums)
            # node-local emissions (small), then all accumulated victims; the latter is only
            # listed (O(accumulated)) once it passes the GPU-count filter, so a long run of
            # victims that cannot help costs O(1) each, not O(accumulated) time and memory
            live = int(ist[vr.IS_POT]) - int(ist[vr.IS_DROPPED])
            same_as_all = False
            for n in sorted(hosts):
                cnt = vr.node_local(n, pi, ji, node_head)
                if not cnt:
                    continue
                local = pot[loc[:cnt]].tolist()  # in accumulation order
                if cnt == live:
                    same_as_all = True
                key = frozenset(local) | rec_key
                if key in tried:
                    continue
                tried.add(key)
                if fast:
                    # only the victims' nodes change: the same sums, in the same order, per node
                    if local_filter:
                        touched: dict[int, float] = {}
                        for t in local:
                            tn = int(s.task_node[t])
                            if tn >= 0:
                                touched[tn] = touched.get(tn, float(rec_gpu[tn])) + float(s.task_alloc[t, GPU])
                        if not any(float(base[tn]) + v >= thr for tn, v in touched.items()):
                            continue
                else:
                    gpu = rec_gpu.copy()
                    for t in local:
                        if s.task_node[t] >= 0:
                            gpu[int(s.task_node[t])] += s.task_alloc[t, GPU]
                    if not may_fit(s, partial, base, gpu, dem):
                        continue
                res = solver._try(j, partial, list(recorded) + local)
                if res is not None:
                    return res
                if solver.prune:
                    self.prune()
                    live = int(ist[vr.IS_POT]) - int(ist[vr.IS_DROPPED])
            if same_as_all or live <= 0:
                continue
            if fast:
                if self.n_good == 0:
                    continue
            elif not may_fit(s, partial, base, all_gpu, dem):
                continue
            p = int(ist[vr.IS_POT])
            extra = pot[:p][drop_seq[:p] < 0].tolist() if ist[vr.IS_DROPPED] else pot[:p].tolist()
            key = frozenset(extra) | frozenset(recorded)
            if key in tried:
                continue
            tried.add(key)
            res = solver._try(j, partial, list(recorded) + extra)
            if res is not None:
                return res
            if solver.prune:
                self.prune()
        return None

    # ---------------------------------------------------------------- the accumulated victims as arrays
    def _arrays(self, scratch: list, base: np.ndarray, recn: np.ndarray, need1: float, local_filter: bool,
                dem: tuple | None) -> None:
        """The accumulated victims and the per-node sums of the prefix search, laid out as
        :func:`~scheduler_engine.kernels.victim_run.run_victims` takes them (``self.kst``): per
        accumulated victim task (``pi``: task, job, node, the job's next one, when dropped, the
        per-node job entries), per job its first and last (``ji``), per task recorded / position
        (``ti``), per node the sums (``nf``: recorded + accumulated GPUs ``all_gpu``, best
        capacity ``cap``, filter base, recorded GPUs) and the filter's good nodes (``ni``). Those per-node
        rows come clean from :func:`_scratch` (``scratch``), the recorded nodes ``recn`` already written
        (:meth:`run`); the sums' scratch rows NF_TSUM / NF_CAPBUF are read only where this search's stamps
        and counts say they were written."""
        s, solver, vr = self.state, self.solver, victim_run
        N = s.N
        ji, ti = scratch[0], scratch[1]
        nf, ni, pi = scratch[7], scratch[8], scratch[6]
        self.all_gpu, self.good_l = nf[vr.NF_ALL_GPU], ni[vr.NI_GOOD]
        if self.recorded:
            ti[vr.TI_REC, self.recorded] = 1
        ist = np.zeros(28, dtype=np.int64)
        ist[vr.IS_BUDGET] = solver.search_budget
        ist[vr.IS_MAX_JOBS] = solver.max_victim_jobs
        ist[vr.IS_REC] = len(self.recorded_set)
        ist[vr.IS_FAST] = self.fast
        ist[vr.IS_SINGLE] = len(self.partial) == 1 and not s.task_selector_key[self.partial[0]]
        ist[vr.IS_LOCAL_FILTER] = local_filter
        ist[vr.IS_PACK] = self.pack
        fst = np.array([0.0, self.thr, float(need1) - 1e-9, self.mthr])
        ist[vr.IS_PHASE] = -1
        ist[vr.IS_GEN] = scratch[5]
        ist[vr.IS_STAMP] = scratch[11]["stamp"]
        ist[vr.IS_OSTAMP] = scratch[10]
        if dem is None:  # (only read by the packing filter: empty arrays, kept on the state)
            dem = s.__dict__.get("_victims_no_demand")
            if dem is None:
                dem = s._victims_no_demand = (np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros((0, N), dtype=np.bool_))
        if (self.pack and USE_SORTED_PACK and base is getattr(s, "_victims_fit_base", (None,))[0]
                and not bool((dem[1] >= 0).any())):
            # the packing filters search the sorted base; every other node's GPUs are 0.0 but the
            # recorded victims' nodes and the accumulated victims' (the filters' overlay). (Only the
            # job loop's base, kept across searches and patched per commit: a base made for one search,
            # consolidation's, would cost a sort per search; a request with a node selector: the scan)
            scratch[9] = _sorted_base(s, base, nf[vr.NF_SKEY], ni[vr.NI_SNODE], scratch[9])
            rec = recn[nf[vr.NF_REC_GPU, recn] != 0] if recn.shape[0] else recn  # (np.flatnonzero of the row)
            ni[vr.NI_RECN, :rec.shape[0]] = rec
            ist[vr.IS_NREC] = rec.shape[0]
            ist[vr.IS_SORTED] = 1
        self.kst = {"nf": nf, "ni": ni, "pi": pi, "ji": ji, "ti": ti, "tt": scratch[3], "pool": scratch[4],
                    "ist": ist, "fst": fst, "dem": dem}
        scratch[2] = (self.kst, np.asarray(self.recorded, dtype=np.int64))  # what the next search resets
        self.drop_seq = pi[vr.PI_DROP]

    def _kernel_args(self, vq: VictimQueue) -> None:
        """The arguments of :func:`~scheduler_engine.kernels.victim_run.run_victims` for this search,
        one tuple passed as is on every call (the victim order's arrays are ``vq``'s, updated in place)."""
        s, k = self.state, self.kst
        walloc, glen, gt = vq.heads()
        path, kid_ptr, kids, stat, tot, prio, tb, leaf_live, req, key, vrep = vq._k
        k["skip"] = vq.qi[victim_run.QI_SKIP]
        k["qbuf"] = np.empty(s.Q, dtype=np.int64)
        k["emptied"] = vq.qi[victim_run.QI_EMPTIED]
        # the compiled pruning's arguments but the served victims and the blocked queue (prune; the
        # same arrays for the whole search, as the loop's)
        k["dargs"] = (k["ti"], k["pi"], s.task_node, s.task_alloc[:, GPU], s.task_job, s.job_queue_arr, self.own,
                      k["nf"], k["ni"], k["ist"], k["fst"], k["skip"], k["qbuf"])
        k["path"] = path  # (kernel_static's, as the victim order's)
        k["args"] = ((path, kid_ptr, kids, stat, tot, prio, tb, s.queue_alloc, leaf_live, req, key, vrep, vq.qi,
                      vq.popped, vq.cj, walloc, glen, s.job_start, gt, k["ti"], s.task_node, s.task_alloc[:, GPU],
                      k["nf"], k["ni"], k["pi"], k["ji"]) + tuple(k["dem"]) + (k["tt"], k["pool"], k["ist"], k["fst"]))
        k["ist"][victim_run.IS_NEXT] = vq._knext
        k["call"] = victim_run.EntryCall()  # (the dispatcher once, then the compiled entry point: _kernel_step)
        k["drive"] = self._search_state()

    def _search_state(self) -> dict | None:
        """What the compiled search (:func:`~scheduler_engine.kernels.search.run_search`) needs besides
        the loop's and the scenario kernel's arguments, or None when this search's scenarios cannot run
        there: when ``Simulation.run`` would not call the scenario kernel (switched off, Python paths),
        the state has no scenario arrays yet (the first scenario makes them) or the beneficiary is not
        plain (each scenario takes the Python steps)."""
        s, solver = self.state, self.solver
        sim = solver.sim
        if not (USE_SEARCH_KERNEL and sim.use_kernel and s.fast_paths and sim.placer.use_index
                and s._journal is not None):
            return None
        ka = sim._ka
        if ka is None:
            ka = s.__dict__.get("_victims_scenario_arrays")
            if not ka:
                return None
            sim._ka = ka  # (what ScenarioArrays.of gives _run_compiled)
        if ka.jst[self.j, _scenario_k.J_OK] == 0:
            return None
        sk = _search_k
        ds = np.zeros(sk.D_FIELDS, dtype=np.int64)
        ds[sk.D_K] = -1 if getattr(s.budget, "seconds", 0) is None else SEARCH_YIELD
        ds[sk.D_PRUNE] = solver.prune
        ds[sk.D_MAX] = solver.max_scenarios
        ds[sk.D_J] = self.j
        ds[sk.D_OWN] = self.own
        ds[sk.D_NP] = len(self.partial)
        return {"ds": ds, "rec": np.asarray(self.recorded, dtype=np.int64),
                "part": np.asarray(self.partial, dtype=np.int64), "ka": ka, "of": None, "kargs": None, "args": None,
                "call": victim_run.EntryCall()}

    def _accumulate(self, vj: int, evict: list[int]) -> None:
        """Victims the Python loop accumulates, into the arrays (as the kernel writes them)."""
        k, s, vr = self.kst, self.state, victim_run
        pi, ist = k["pi"], k["ist"]
        pot, pot_job, pot_node, pot_next = pi[vr.PI_POT], pi[vr.PI_JOB], pi[vr.PI_NODE], pi[vr.PI_NEXT]
        job_first, job_last = k["ji"][vr.JI_FIRST], k["ji"][vr.JI_LAST]
        tpos = k["ti"][vr.TI_POS]
        node_head = k["ni"][vr.NI_NODE_HEAD]
        u = int(ist[vr.IS_POT])
        u0 = u
        # nodes where job vj already has an entry (its earlier victims, dropped ones included)
        seen: set[int] = set()
        x = int(job_first[vj])
        if x < 0:
            ist[vr.IS_JOBS] += 1
        while x >= 0:
            seen.add(int(pot_node[x]))
            x = int(pot_next[x])
        drop_seq = pi[vr.PI_DROP]
        for t in evict:
            pot[u] = t
            pot_job[u] = vj
            pot_next[u] = -1
            drop_seq[u] = -1  # (kept; the lent columns hold an earlier search's values)
            tpos[t] = u
            last = int(job_last[vj])
            if last >= 0:
                pot_next[last] = u
            else:
                job_first[vj] = u
            job_last[vj] = u
            n = int(s.task_node[t])
            pot_node[u] = n
            if n >= 0 and n not in seen:
                seen.add(n)
                e = int(ist[vr.IS_ENTRIES])
                pi[vr.PI_ENT_JOB, e] = vj
                pi[vr.PI_ENT_NEXT, e] = node_head[n]
                node_head[n] = e
                ist[vr.IS_ENTRIES] = e + 1
            u += 1
        ist[vr.IS_POT] = u
        assert u > u0

    def _grow(self) -> None:
        """The compiled loop's tried-set table or pool ran out of room (:data:`~scheduler_engine.kernels.
        victim_run.ROOM`): twice the table (entries rehashed) or a pool with room for one more set of
        every accumulated victim; lent on (:func:`_scratch`)."""
        k, vr = self.kst, victim_run
        ist, tt, pool = k["ist"], k["tt"], k["pool"]
        scratch = _scratch_of(self.state)
        if 2 * (int(ist[vr.IS_TRIED]) + 1) > tt.shape[1]:
            k["tt"] = scratch[3] = vr.tried_grown(tt, int(ist[vr.IS_GEN]))
        need = int(ist[vr.IS_POOL]) + k["pi"].shape[1]
        if need > pool.shape[0]:
            out = np.empty(max(2 * pool.shape[0], need), dtype=np.int64)
            out[:pool.shape[0]] = pool
            k["pool"] = scratch[4] = out
        args = list(k["args"])
        args[-4], args[-3] = k["tt"], k["pool"]
        k["args"] = tuple(args)
        k["call"].forget()

    def tried_all(self) -> set:
        """Every victim set this search tried (or ruled out by its filter after looking it up), as
        frozensets of tasks: Python's own, and those in the compiled loop's table (tests)."""
        out = set(self.tried_sets)
        k = self.kst
        if k is None or not getattr(self, "_kernel_mode", False):
            return out
        vr = victim_run
        tt, pool, pot = k["tt"], k["pool"], k["pi"][vr.PI_POT]
        rec = frozenset(self.recorded)
        for x in np.flatnonzero(tt[vr.TT_GEN] == k["ist"][vr.IS_GEN]).tolist():
            off, n = int(tt[vr.TT_OFF, x]), int(tt[vr.TT_LEN, x])
            out.add(frozenset(pot[pool[off:off + n]].tolist()) | rec)
        return out

    def _update_skip(self, vq: VictimQueue) -> None:
        """Per queue: its victims are passed over (a leaf that retook, or under a blocked queue);
        the kernel's row ``QI_SKIP`` of ``vq.qi``, brought up to date after :meth:`prune`."""
        s = self.state
        skip = vq.qi[victim_run.QI_SKIP]
        # the row only gains flags within a search: mark what was added since the last update
        done_r, done_b = self._skipped
        if len(self.retook) > len(done_r):
            new = self.retook - done_r
            skip[list(new)] = 1
            done_r |= new
        if len(self.blocked) > len(done_b):
            for b in self.blocked - done_b:
                skip[_queues_under(s, b)] = 1
            done_b |= self.blocked

    def _kernel_step(self, vq: VictimQueue, best_all: float) -> int:
        """Run the compiled loop from the current state and bring the victim order's Python side
        up to date (steps, live leaves; the accumulated victims are the arrays both share).
        Returns the kernel's code; after :data:`~scheduler_engine.kernels.victim_run.SIM` the set to
        simulate is ``pi[PI_LOC][:ist[IS_SETLEN]]`` (accumulation positions, ascending). With the
        compiled search (``kst["drive"]``, :meth:`_search_call`) the loop's failed scenarios are simulated
        and pruned in the same call, and it may also return :data:`~scheduler_engine.kernels.search.
        SIMULATED` (a scenario to finish, ``VictimSolver.finish_simulated``) or ``YIELD``."""
        k = self.kst
        ist = k["ist"]
        if self._skip_stale:
            self._update_skip(vq)
            self._skip_stale = False
        solver = self.solver
        steps0 = solver.steps
        ist[_IS_NEXT] = vq._knext
        ist[_IS_STEPS] = steps0
        ist[_IS_GOOD] = self.n_good
        ist[_IS_EMPTIED] = 0
        k["fst"][_FS_BEST] = best_all
        drive = k["drive"]
        if drive is None:
            code = k["call"](victim_run.run_victims, k["args"])
        else:
            code = self._search_call(drive)
        n_steps = int(ist[_IS_STEPS])
        solver.steps = n_steps
        self.n_good = int(ist[_IS_GOOD])
        vq.after_run(k["emptied"], int(ist[_IS_EMPTIED]), int(ist[_IS_NEXT]), n_steps != steps0)
        return code

    def _learn(self, d: dict) -> bool:
        """The compiled search handed back the set to simulate because the scenario kernel has not looked
        at one of its jobs yet (``UNKNOWN_JOB``): look at them as ``Simulation._run_compiled`` does before
        its call (``ScenarioArrays.learn`` of the beneficiary and the victims' jobs, in that order, the
        state still as the search began), and whether the compiled search may now simulate the set
        (True: it does so first at its next call) or Python must (a job the kernel does not simulate;
        then ``_run_compiled`` finds the jobs known and does not look again)."""
        ds = d["ds"]
        if ds[_search_k.D_R] != _scenario_k.UNKNOWN_JOB:
            return False
        s, ka = self.state, d["ka"]
        nb = int(ds[_search_k.D_NP])
        nv = len(self.recorded) + int(self.kst["ist"][victim_run.IS_SETLEN])
        vj = s.task_job[ka.pv[nb:nb + nv]]
        ka.learn([self.j] + vj.tolist())
        jok = ka.jst[:, _scenario_k.J_OK]
        if jok[self.j] == 0:
            self.kst["drive"] = None  # (the beneficiary is not plain: every scenario takes the Python steps)
            return False
        if jok[self.j] != 1 or (vj.shape[0] and int(jok[vj].min()) != 1):
            return False
        ds[_search_k.D_REDO] = 1
        return True

    def _search_call(self, d: dict) -> int:
        """:meth:`_kernel_step`'s call of the compiled search (:func:`~scheduler_engine.kernels.search.
        run_search`): one argument tuple (the driver's arrays, the loop's tuple, the scenario kernel's
        tuple; rebuilt when either of those is), then what its failed scenarios changed that Python
        keeps (scenarios tried, the change log's length, ``_protect_len``, ``resources_freed``, the
        leaves the pruning marked, the last scenario's released victims)."""
        s, k, solver, sk = self.state, self.kst, self.solver, _search_k
        ka = d["ka"]
        ka.sync_log()
        full = ka.arguments()
        if d["of"] is not full or d["kargs"] is not k["args"]:  # (ka.vs / va are replaced with full)
            d["args"] = (d["ds"], d["rec"], d["part"], ka.vs, ka.va, k["qbuf"], *k["args"], *full)
            d["of"], d["kargs"] = full, k["args"]
            d["call"].forget()
        ds = d["ds"]
        ds[sk.D_I0] = len(s._journal)
        ds[sk.D_TRIED] = solver.tried
        ds[sk.D_LOG] = s.node_log.n
        ds[sk.D_PROTECT] = s._protect_len
        code = d["call"](sk.run_search, d["args"])
        solver.tried = int(ds[sk.D_TRIED])
        s.node_log.set_len(int(ds[sk.D_LOG]))
        s._protect_len = int(ds[sk.D_PROTECT])
        if ds[sk.D_KEPT]:
            s.resources_freed += int(ds[sk.D_FREED])
            m = int(ds[sk.D_NQ])
            if m:
                new = k["qbuf"][:m].tolist()
                self.retook.update(new)
                self._skipped[0].update(new)
            if code != victim_run.SIM and code != sk.SIMULATED:
                # the last scenario kept there is Simulation.run's last: its victims that were Running
                # (the next rollback's Placer.fix_after_rollback reads them, as after Python's steps)
                nb, nv = int(ds[sk.D_NP]), int(ds[sk.D_NV])
                vs = ka.vs
                solver.sim.placer.released = {t for t, x in zip(ka.pv[nb:nb + nv].tolist(),
                                                                vs[sk.VS_RUN, :nv].tolist()) if x}
        return code
