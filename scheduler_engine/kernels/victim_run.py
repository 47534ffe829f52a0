"""Pop and accumulate victims in victim order and emit their scenarios until Python has a set to
simulate (the accumulation loop of :class:`scheduler_engine.solvers.accumulation.PrefixSearch`
over :class:`scheduler_engine.solvers.victim_order.VictimQueue` in its total-order mode).

One call pops for as long as every step is a plain array update: the next leaf's head is a whole
candidate job from the leaf's sorted run (no pushed-back elastic remainder in that leaf) that
Python would evict whole: its single active task, or a gang at or below ``minAvailable`` (all its
active tasks, in reversed task order), without subgroups; the victim is either passed over (its
leaf retook or is under a queue the validator refused: ``skip_leaf``; its single task was recorded
by the previous prefix) or accumulated (per-node GPU sums, the single-task GPU-count filter, the
best node). While no node could hold the beneficiary's single task yet, the loop goes on; after
that it emits the victim's scenarios as Python's emission does (``phase`` in ``ist``): the
node-local set of each node it ran on, ascending (every accumulated, not dropped victim of the
jobs on that node), then all accumulated, not dropped victims (unless one node-local set was all
of them, or none is left). A set already tried is skipped; a node-local set is added to the tried
sets before its GPU-count filter, the all-accumulated set after it (``fast``: a single GPU task
without a node selector, some node with base + recorded + victims >= need; ``pack``: several
tasks with GPUs or one with a node selector, the best-fit packing of :func:`.gpu_fit.pack_best_fit`,
selectors honoured, on the nodes that could hold the smallest task - without a selector the same
packing on the search's base sorted once per commit, the set's nodes as an overlay, :func:`sorted_pack`,
instead of a pass over every node; otherwise every set passes).
The tried sets are a hash table of the sets' accumulation positions, ascending (:func:`tried_add`;
every set also holds the recorded victims, which are never accumulated). It returns:

* :data:`SIM`: a set to simulate, its positions in ``pi[PI_LOC, :ist[IS_SETLEN]]``; the next call
  goes on with the same victim's next set (after Python's pruning, which it reads: drops, skips);
* :data:`DONE`: a victim's emission ended and Python asked (``IS_STOP``) to check its limits
  first, as it does between two victims;
* :data:`ROOM`: the tried-set table or its pool is full (nothing consumed): Python grows them;
* :data:`PY`: the next head is not plain (elastic remainder or surplus, subgroups, no active task,
  a gang holding a recorded task): Python pops that victim itself (nothing of it was consumed, not
  even a step) and hands its hosts back for the emission (``phase`` 0);
* :data:`END`: no live leaf is left;
* :data:`BUDGET`: the search budget (steps) is exhausted (the step was counted);
* :data:`JOBS`: the victim-job budget is spent (the victim was popped, not accumulated).

Few arguments (the call is made once per scenario or stretch, thousands of times per cycle, and
each array argument costs the dispatcher): besides :mod:`.victim_keys`' tree arrays, same-length
arrays come packed as rows of one 2-D array, their rows named by the constants below. The victim
order: ``qi`` (per leaf: end and next position of its run in ``cj``, gave up something, holds
pushed-back remainders; the search's skip flag; leaves emptied by this call), ``popped`` (Q, 3)
what each leaf gave up so far, ``cj`` all leaves' sorted runs concatenated; per job its whole
allocation ``walloc`` (J, 3) and the tasks Python evicts when it pops the job whole: ``glen`` of
them at ``gt[gstart[j]:]`` (0: not plain). The accumulation: ``ti`` (per task: recorded, position
among the accumulated victims), ``nf`` / ``ni`` (per node: recorded + accumulated GPUs, best
capacity, filter base, recorded GPUs, scratch; good nodes of the single-task filter, scratch, the
head of the node's job entries, the victim's nodes), ``pi`` (per accumulated victim: task, job,
node, the job's next one, when it was dropped (-1: kept), the node entries' job and next entry,
the set being emitted), ``ji`` (per job: first and last accumulated victim), ``need`` / ``sel`` /
``masks`` the beneficiary's GPU requests as :func:`scheduler_engine.solvers.idle_gpus.demand`
gives them, ``tt`` / ``pool`` the tried sets, ``ist`` / ``fst`` counters, flags and thresholds.
These arrays are also Python's own record of the accumulated victims (its pops write them, its
pruning reads them), so nothing is copied back after a call.

The loop, its callees and the prunings are leaf kernels (``@leaf_kernel``: they allocate no array and
return none): no reference counting of their array arguments per call inside the loop (``node_local``,
``tried_add`` and the filters were called per victim, each taking and dropping a reference to every
array it got), and, called from Python, their ~33 arrays unboxed without a reference-counted wrapper
each (the entry point's fixed cost per call 2.0 -> 0.3 us at 2,000 nodes).

Room for what stays in Python: subgroup jobs and elastic surpluses (one task per step, the rest
pushed back into a per-leaf heap by key) are popped by the Python path, which writes the same
arrays; a compiled heap of remainders per leaf would bring elastic victims in.
"""
from __future__ import annotations

import numpy as np

from . import kernel, leaf_kernel
from .gpu_fit import EPS, pack_best_fit
from .victim_keys import rekey_path

PY = 1
END = 2
BUDGET = 3
JOBS = 4
SIM = 5
DONE = 6
ROOM = 7


#: rows of ``qi`` (Q columns, int64): the victim order's per-leaf run (shared with
#: :class:`~scheduler_engine.solvers.victim_order.VictimQueue`) and the search's per-leaf state
QI_HI, QI_PTR, QI_HAS_POPPED, QI_HEAP_LIVE, QI_SKIP, QI_EMPTIED = range(6)
#: rows of ``nf`` (N columns, float64); ``NF_SKEY``: the filter base in ascending (value, node) order
NF_ALL_GPU, NF_CAP, NF_BASE, NF_REC_GPU, NF_TSUM, NF_CAPBUF, NF_SKEY = range(7)
#: rows of ``ni`` (N columns, int64); ``NI_SNODE``: the nodes of ``NF_SKEY``, ``NI_OVL``: the packing
#: filters' marks (``ist[IS_OSTAMP]``: the last one, never reused), ``NI_RECN``: the nodes with recorded GPUs
NI_GOOD, NI_TSTAMP, NI_IDXBUF, NI_NODE_HEAD, NI_HOSTS, NI_SNODE, NI_OVL, NI_RECN = range(8)
#: rows of ``pi`` (one column per accumulated victim task, int64)
PI_POT, PI_JOB, PI_NODE, PI_NEXT, PI_DROP, PI_ENT_JOB, PI_ENT_NEXT, PI_LOC = range(8)
#: rows of ``ji`` (J columns, int64)
JI_FIRST, JI_LAST = range(2)
#: rows of ``ti`` (T columns, int64): recorded by the previous prefix (1), position among the
#: accumulated victims (-1: not accumulated)
TI_REC, TI_POS = range(2)
#: ``ist`` fields
(IS_NEXT, IS_STEPS, IS_BUDGET, IS_JOBS, IS_MAX_JOBS, IS_POT, IS_GOOD, IS_EMPTIED, IS_DROPPED, IS_ENTRIES, IS_TRIED,
 IS_STAMP, IS_REC, IS_POT0, IS_FAST, IS_SINGLE, IS_LOCAL_FILTER, IS_PACK, IS_HOSTS, IS_PHASE, IS_SAME, IS_STOP,
 IS_SETLEN, IS_POOL, IS_GEN, IS_OSTAMP, IS_SORTED, IS_NREC) = range(28)
#: (``IS_SORTED``: ``NF_SKEY`` / ``NI_SNODE`` sort this search's base and no request has a node selector, the
#: packing filters use :func:`sorted_pack`; ``IS_NREC``: how many ``NI_RECN``)
#: rows of the tried-set table ``tt`` (4 x capacity, a power of two; open addressing, linear probing):
#: the set's hash, its offset and length in ``pool`` (its accumulation positions, ascending), and the
#: search (generation) that wrote the slot: a slot of an older search is empty, so the table is lent
#: from one search to the next without clearing
TT_HASH, TT_OFF, TT_LEN, TT_GEN = range(4)
_HMASK = (1 << 61) - 1
#: ``fst`` fields
FS_BEST, FS_THR, FS_NEED_LO, FS_MTHR = range(4)


#: check every call made through :func:`entry_point`'s code: the arguments' numba types must be the
#: signature of the version it runs (tests; the wrapper trusts its caller's types and would read a
#: mismatched array wrongly instead of refusing it)
CHECK_ENTRY = False
CHECKED: list = []  # (one entry per checked call)


def entry_point(disp, args: tuple):
    """The compiled code of kernel ``disp`` to call again and again with the very argument tuple
    ``args`` it was just called with (through ``disp``, which compiled or loaded it): the
    dispatcher works out the type of each of :func:`run_victims`' 34 arguments on every call
    (~4 us of a call), and a prefix search calls the loop once per scenario with one argument tuple.

    Why this is safe: the wrapper unboxes each argument as the version's signature says, without
    checking (a dtype, ndim or layout mismatch would be read wrongly, silently). It is used only
    when ``disp`` holds exactly one compiled version after that call with these same objects: the
    dispatcher then ran that version, so the types match it (exactly, or C arrays into an 'A'
    layout, which reads them correctly; a mismatch it cannot take makes it compile a second
    version, and then ``disp`` itself is returned). The caller passes the same tuple of the same
    arrays every time (all arguments are arrays, whose dtype, ndim and layout do not change) and
    asks again for each search (a recompile in between is seen). ``disp`` itself when not compiled
    (``NUMBA_DISABLE_JIT=1``, no numba). With :data:`CHECK_ENTRY` each call checks the types."""
    overloads = getattr(disp, "overloads", None)
    if not overloads or len(overloads) != 1:
        return disp
    # (read through dict's own views: iterating the OrderedDict looks each key up again, and a key
    # is the tuple of 34 numba types, whose hashes are computed in Python: ~70-180 us per lookup,
    # which made a short search lose on the entry point)
    cres = next(iter(dict.values(overloads)))
    if not CHECK_ENTRY:
        return cres.entry_point
    from numba import typeof

    sig = next(iter(dict.keys(overloads)))

    seen = CHECKED

    def checked(*a):
        assert len(a) == len(args) and all(x is y for x, y in zip(a, args)), "other arguments"
        assert tuple(typeof(x) for x in a) == tuple(sig), "entry point called with other types"
        seen.append(1)
        return cres.entry_point(*a)

    return checked


class EntryCall:
    """Repeated calls of one kernel with one argument tuple: the first through the dispatcher (which
    compiles or loads it), the next ones through the compiled version's entry point
    (:func:`entry_point`), as long as the tuple is the same (its owner calls :meth:`forget` when it
    rebuilt the tuple) and the kernel is the same object (a test may put a wrapper in its place).
    One mechanism for every caller that keeps a fixed argument tuple (the scenario kernel, a
    rollback's undo); ``calls`` counts the calls made through the entry point (tests)."""

    __slots__ = ("ep", "of", "calls")

    def __init__(self) -> None:
        self.ep = None
        self.of = None
        self.calls = 0

    def forget(self) -> None:
        """The argument tuple was rebuilt: the next call goes through the dispatcher again."""
        self.ep = None

    def __call__(self, disp, args: tuple, use_entry_point: bool = True):
        ep = self.ep
        if ep is not None and self.of is disp:
            self.calls += 1
            return ep(*args)
        r = disp(*args)
        if use_entry_point:
            self.ep = entry_point(disp, args)
            self.of = disp
        return r


@kernel
def candidate_gpu(cands: np.ndarray, job_start: np.ndarray, job_count: np.ndarray, task_state: np.ndarray,
                  active: np.ndarray, task_job: np.ndarray, task_node: np.ndarray, task_gpu: np.ndarray,
                  out: np.ndarray) -> None:
    """Add to ``out`` (per node) the GPUs of every active, placed task of the jobs ``cands``, in task
    order: the prefix search's bound "even evicting every candidate" (``np.add.at`` / the weighted
    ``np.bincount`` it replaced add in that same order, one task at a time). Many candidates: one
    pass over every task. Few (a preempt search's, of one leaf): a job's tasks are the contiguous
    range ``job_start[j]:job_start[j] + job_count[j]``, so the candidates' ranges taken by start are
    their tasks in the same task order, O(their tasks)."""
    m = cands.shape[0]
    n_jobs = job_start.shape[0]
    if m * 8 > n_jobs:
        is_c = np.zeros(n_jobs, dtype=np.bool_)
        for x in cands:
            is_c[x] = True
        for t in range(task_state.shape[0]):
            if active[task_state[t]] and is_c[task_job[t]]:
                n = task_node[t]
                if n >= 0:
                    out[n] = out[n] + task_gpu[t]
        return
    keys = np.empty(m, dtype=np.int64)
    for i in range(m):
        keys[i] = job_start[cands[i]] * n_jobs + cands[i]
    keys.sort()
    for i in range(m):
        j = keys[i] % n_jobs
        if i > 0 and keys[i] == keys[i - 1]:
            continue  # (a repeated candidate counts once)
        t0 = job_start[j]
        for t in range(t0, t0 + job_count[j]):
            if active[task_state[t]]:
                n = task_node[t]
                if n >= 0:
                    out[n] = out[n] + task_gpu[t]


@kernel
def _le(x: float, y: float, tol: float) -> bool:
    """``x <= y`` as :func:`scheduler_engine.plugins.proportion.compare_quantities` says it (-1 is
    +infinity, within ``tol`` is equal)."""
    if y == -1.0:
        return True
    if x == -1.0:
        return False
    return x <= y or abs(x - y) <= tol


@kernel
def victim_filter_rows(leaf: int, vl: np.ndarray, req: np.ndarray, mat: np.ndarray, lens: np.ndarray,
                       allocated: np.ndarray, deserved: np.ndarray, fair_share: np.ndarray, limit: np.ndarray,
                       tol: float) -> np.ndarray:
    """The proportion victim filter (:func:`scheduler_engine.plugins.proportion.victim_filter`) of
    reclaimer leaf ``leaf`` against each victim leaf of ``vl``, one pass per leaf: the leveled pair
    (A*, B*) from the top-down path rows ``mat`` / ``lens``; if ``A + req <= D`` on A*, keep iff B*
    holds more than deserved in a requested resource with a deserved quota or less in none; else keep
    iff B* is above its allocatable share (``allocatable``: D = -1 -> L, else max(D, F) capped by L
    unless L = -1) in some resource."""
    n = vl.shape[0]
    out = np.zeros(n, dtype=np.bool_)
    la = lens[leaf]
    for i in range(n):
        b = vl[i]
        common = min(la, lens[b])
        depth = common - 1
        for d in range(common):
            if mat[b, d] != mat[leaf, d]:
                depth = d
                break
        qa = mat[leaf, depth]
        qb = mat[b, depth]
        fits = True
        for r in range(3):
            if not _le(allocated[qa, r] + req[r], deserved[qa, r], tol):
                fits = False
                break
        if fits:
            over = False
            under = False
            for r in range(3):
                d_r = deserved[qb, r]
                if req[r] > 0 and d_r != -1.0:
                    a_r = allocated[qb, r]
                    if a_r > d_r:
                        over = True
                    if a_r < d_r:
                        under = True
            out[i] = over or not under
        else:
            keep = False
            for r in range(3):
                d_r = deserved[qb, r]
                f_r = fair_share[qb, r]
                l_r = limit[qb, r]
                if np.isnan(d_r) or np.isnan(f_r):
                    base = np.nan
                else:
                    base = d_r if d_r >= f_r else f_r
                if l_r == -1.0:
                    capped = base
                elif np.isnan(l_r) or np.isnan(base):
                    capped = np.nan
                else:
                    capped = l_r if l_r <= base else base
                share = l_r if d_r == -1.0 else capped
                if not _le(allocated[qb, r], share, tol):
                    keep = True
                    break
            out[i] = keep
    return out


@kernel
def leaf_runs(jobs: np.ndarray, by_static: np.ndarray, static_pos: np.ndarray, group: np.ndarray,
              n_active: np.ndarray, min_available: np.ndarray, job_queue: np.ndarray, qi: np.ndarray):
    """The victim order inside each leaf for distinct candidate jobs ``jobs`` (no subgroups):
    ``by_static`` (every job by (leaf, priority) group, then older first / name descending; its
    inverse ``static_pos``) masked to the candidates, then stably re-sorted by group and elastic state descending where that is not
    already the order. Writes each leaf's run ``[ptr, hi)`` into ``qi``; returns the candidates in
    that order, the leaves in run order and ``True`` (``False``: ``jobs`` repeats a job, nothing
    written: the caller sorts those itself)."""
    n = jobs.shape[0]
    cj = np.empty(n, dtype=np.int64)
    if n * 8 > by_static.shape[0]:  # many candidates: mask the static order in one pass
        is_c = np.zeros(by_static.shape[0], dtype=np.bool_)
        for x in jobs:
            if is_c[x]:
                return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), False
            is_c[x] = True
        k = 0
        for x in by_static:
            if is_c[x]:
                cj[k] = x
                k += 1
    else:
        # few: their places in ``by_static`` (``static_pos`` is its inverse), ascending, O(n log n)
        at = np.empty(n, dtype=np.int64)
        for i in range(n):
            at[i] = static_pos[jobs[i]]
        at.sort()
        for i in range(n):
            if i > 0 and at[i] == at[i - 1]:
                return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), False
            cj[i] = by_static[at[i]]
    # ``cj`` is in group order: the stable sort by (group, elastic state descending) is, inside each
    # group's stretch, the jobs above minAvailable, then at it, then below it, each in rank order
    els = np.empty(n, dtype=np.int64)
    unsorted = False
    for i in range(n):
        j = cj[i]
        a = n_active[j]
        m = min_available[j]
        els[i] = 0 if a < m else (1 if a == m else 2)
        if i > 0 and els[i] > els[i - 1] and group[j] == group[cj[i - 1]]:
            unsorted = True
    if unsorted:
        out = np.empty(n, dtype=np.int64)
        lo = 0
        while lo < n:
            g = group[cj[lo]]
            hi = lo
            while hi < n and group[cj[hi]] == g:
                hi += 1
            k = lo
            for e in range(2, -1, -1):
                for i in range(lo, hi):
                    if els[i] == e:
                        out[k] = cj[i]
                        k += 1
            lo = hi
        cj = out
    firsts = np.empty(n, dtype=np.int64)
    nf = 0
    prev = -1
    for i in range(n):
        q = job_queue[cj[i]]
        if i == 0 or q != prev:
            if nf > 0:
                qi[QI_HI, firsts[nf - 1]] = i
            qi[QI_PTR, q] = i
            firsts[nf] = q
            nf += 1
            prev = q
    if nf > 0:
        qi[QI_HI, firsts[nf - 1]] = n
    return cj, firsts[:nf], True


@kernel
def refresh_heads(cj: np.ndarray, job_version: np.ndarray, seen: np.ndarray, job_count: np.ndarray,
                  job_start: np.ndarray, has_sg: np.ndarray, task_state: np.ndarray, active: np.ndarray,
                  task_alloc: np.ndarray, walloc: np.ndarray, glen: np.ndarray, gt: np.ndarray) -> np.ndarray:
    """Bring the heads cache (:meth:`~scheduler_engine.solvers.victim_order.VictimQueue.heads`) up to
    date for the candidates ``cj``: a one-task job without subgroups whose version moved gets its
    task and allocation if active (nothing otherwise); returns the other jobs whose version moved
    (ascending, distinct), which Python recomputes from their representatives."""
    n = cj.shape[0]
    mark = np.zeros(job_version.shape[0], dtype=np.bool_)
    out = np.empty(n, dtype=np.int64)
    m = 0
    for i in range(n):
        j = cj[i]
        if seen[j] == job_version[j] or mark[j]:
            continue
        mark[j] = True
        if job_count[j] == 1 and not has_sg[j]:
            t = job_start[j]
            if active[task_state[t]]:
                for r in range(walloc.shape[1]):
                    walloc[j, r] = task_alloc[t, r]
                glen[j] = 1
            else:
                for r in range(walloc.shape[1]):
                    walloc[j, r] = 0.0
                glen[j] = 0
            gt[t] = t
            seen[j] = job_version[j]
        else:
            out[m] = j
            m += 1
    out = out[:m]
    out.sort()  # (distinct: each job marked once)
    return out


@leaf_kernel
def node_local(n: int, pi: np.ndarray, ji: np.ndarray, node_head: np.ndarray) -> int:
    """The positions of the node-local set of node n (accumulated, not dropped victims of every job
    with a victim on n) into ``pi[PI_LOC]``, ascending; returns how many."""
    pot_next, drop_seq, ent_job, ent_next, loc = pi[PI_NEXT], pi[PI_DROP], pi[PI_ENT_JOB], pi[PI_ENT_NEXT], pi[PI_LOC]
    job_first = ji[JI_FIRST]
    cnt = 0
    e = node_head[n]
    while e >= 0:
        u = job_first[ent_job[e]]
        while u >= 0:
            if drop_seq[u] < 0:
                # insertion into the ascending run (sets are a few victims)
                k = cnt
                while k > 0 and loc[k - 1] > u:
                    loc[k] = loc[k - 1]
                    k -= 1
                loc[k] = u
                cnt += 1
            u = pot_next[u]
        e = ent_next[e]
    return cnt


@leaf_kernel
def sorted_pack(need: np.ndarray, skey: np.ndarray, snode: np.ndarray, ovl: np.ndarray, stamp: int,
                idxbuf: np.ndarray, capbuf: np.ndarray, m: int) -> bool:
    """:func:`.gpu_fit.pack_best_fit` of requests ``need`` (no node selector) on every node, where the
    nodes not marked ``stamp`` in ``ovl`` have the capacity ``skey`` gives them (``skey`` / ``snode``:
    those capacities and their nodes in ascending (capacity, node) order, every node once) and the
    ``m`` marked ones (``idxbuf[:m]`` / ``capbuf[:m]``) theirs. The best fit is the smallest (capacity,
    node) that holds the request - what the scan in node order with a strict ``<`` picks - so it is
    the smaller of the overlay's best and the first unmarked entry of the order at or above the
    request (a binary search); a node taken from the order joins the overlay, consumed. The same
    nodes, the same subtractions, so the same answer in O(log N + overlay) per request instead of a
    pass over every node (and a node below the smallest request is never picked either way)."""
    n_all = skey.shape[0]
    for i in range(need.shape[0]):
        nd = need[i]
        if nd <= EPS:
            continue
        thr = nd - 1e-9
        best = -1
        best_c = np.inf
        for k in range(m):
            c = capbuf[k]
            if c >= thr and (c < best_c or (c == best_c and idxbuf[k] < idxbuf[best])):
                best = k
                best_c = c
        lo = 0
        hi = n_all
        while lo < hi:
            mid = (lo + hi) >> 1
            if skey[mid] >= thr:
                hi = mid
            else:
                lo = mid + 1
        while lo < n_all and ovl[snode[lo]] == stamp:
            lo += 1
        if lo < n_all:
            c = skey[lo]
            v = snode[lo]
            if best < 0 or c < best_c or (c == best_c and v < idxbuf[best]):
                ovl[v] = stamp
                idxbuf[m] = v
                capbuf[m] = c - nd
                m += 1
                continue
        if best < 0:
            return False
        capbuf[best] -= nd
    return True


@leaf_kernel
def overlay_recorded(recn: np.ndarray, nrec: int, ovl: np.ndarray, mark: int, base: np.ndarray, add: np.ndarray,
                     idxbuf: np.ndarray, capbuf: np.ndarray, m: int) -> int:
    """The recorded victims' nodes ``recn[:nrec]`` not yet in the overlay (``ovl[v] != mark``) join it
    after its first ``m`` entries, each with capacity ``base[v] + add[v]``; returns the overlay's new
    length (both packing filters' last step before :func:`sorted_pack`)."""
    for k in range(nrec):
        v = recn[k]
        if ovl[v] != mark:
            ovl[v] = mark
            idxbuf[m] = v
            capbuf[m] = base[v] + add[v]
            m += 1
    return m


@leaf_kernel
def _gpu_filter(n_cand: int, pi: np.ndarray, task_node: np.ndarray, task_gpu: np.ndarray, nf: np.ndarray,
                ni: np.ndarray, fast: bool, thr: float, mthr: float, need: np.ndarray, sel: np.ndarray,
                masks: np.ndarray, stamp: int, ist: np.ndarray) -> bool:
    """Does the node-local set in ``pi[PI_LOC][:n_cand]`` pass the GPU-count filter (recorded victims
    plus the set's victims per node, summed in accumulation order; ``stamp`` marks this set's nodes)?"""
    pot, loc = pi[PI_POT], pi[PI_LOC]
    base, rec_gpu, tsum = nf[NF_BASE], nf[NF_REC_GPU], nf[NF_TSUM]
    tstamp = ni[NI_TSTAMP]
    for k in range(n_cand):
        tk = pot[loc[k]]
        tn = task_node[tk]
        if tn >= 0:
            if tstamp[tn] != stamp:
                tstamp[tn] = stamp
                tsum[tn] = rec_gpu[tn]
            tsum[tn] = tsum[tn] + task_gpu[tk]
    if fast:
        for k in range(n_cand):
            tn = task_node[pot[loc[k]]]
            if tn >= 0 and base[tn] + tsum[tn] >= thr:
                return True
        return False
    # idle_gpus.may_fit: pack on the nodes that could hold the smallest GPU task
    idxbuf, capbuf = ni[NI_IDXBUF], nf[NF_CAPBUF]
    if ist[IS_SORTED]:
        # every node but the set's and the recorded ones has its base (+ 0.0): the sorted base and
        # those nodes as the overlay (sorted_pack)
        ovl = ni[NI_OVL]
        mark = ist[IS_OSTAMP] + 1
        ist[IS_OSTAMP] = mark
        m = 0
        for k in range(n_cand):
            tn = task_node[pot[loc[k]]]
            if tn >= 0 and ovl[tn] != mark:
                ovl[tn] = mark
                idxbuf[m] = tn
                capbuf[m] = base[tn] + tsum[tn]
                m += 1
        m = overlay_recorded(ni[NI_RECN], ist[IS_NREC], ovl, mark, base, rec_gpu, idxbuf, capbuf, m)
        return sorted_pack(need, nf[NF_SKEY], ni[NI_SNODE], ovl, mark, idxbuf, capbuf, m)
    m = 0
    for v in range(base.shape[0]):
        c = base[v] + (tsum[v] if tstamp[v] == stamp else rec_gpu[v])
        if c >= mthr:
            idxbuf[m] = v
            capbuf[m] = c
            m += 1
    return m > 0 and pack_best_fit(need, sel, masks, idxbuf[:m], capbuf[:m])


@leaf_kernel
def all_filter(nf: np.ndarray, ni: np.ndarray, pi: np.ndarray, n_pot: int, ist: np.ndarray, mthr: float,
               need: np.ndarray, sel: np.ndarray, masks: np.ndarray) -> bool:
    """The packing filter (:func:`scheduler_engine.solvers.idle_gpus.may_fit`) of every accumulated,
    not dropped victim: per node the base plus ``all_gpu``, the nodes that could hold the smallest
    GPU task (``mthr``) in index order, best-fit packing of ``need``.

    With the search's base sorted (``IS_SORTED``: no request has a node selector): ``all_gpu`` is 0.0 but on
    the recorded victims' nodes and the nodes of the ``n_pot`` victims accumulated so far (dropped ones
    included), so those are the overlay of :func:`sorted_pack` (O(victims + log N), not O(N))."""
    base, all_gpu = nf[NF_BASE], nf[NF_ALL_GPU]
    idxbuf, capbuf = ni[NI_IDXBUF], nf[NF_CAPBUF]
    if ist[IS_SORTED]:
        ovl = ni[NI_OVL]
        mark = ist[IS_OSTAMP] + 1
        ist[IS_OSTAMP] = mark
        m = 0
        pot_node = pi[PI_NODE]
        for u in range(n_pot):
            v = pot_node[u]
            if v >= 0 and ovl[v] != mark:
                ovl[v] = mark
                idxbuf[m] = v
                capbuf[m] = base[v] + all_gpu[v]
                m += 1
        m = overlay_recorded(ni[NI_RECN], ist[IS_NREC], ovl, mark, base, all_gpu, idxbuf, capbuf, m)
        return sorted_pack(need, nf[NF_SKEY], ni[NI_SNODE], ovl, mark, idxbuf, capbuf, m)
    m = 0
    for v in range(base.shape[0]):
        c = base[v] + all_gpu[v]
        if c >= mthr:
            idxbuf[m] = v
            capbuf[m] = c
            m += 1
    return m > 0 and pack_best_fit(need, sel, masks, idxbuf[:m], capbuf[:m])



@leaf_kernel
def tried_add(loc: np.ndarray, cnt: int, tt: np.ndarray, pool: np.ndarray, ist: np.ndarray) -> int:
    """Add the set of accumulation positions ``loc[:cnt]`` (ascending) to the search's tried sets
    (``tt`` / ``pool``, generation ``ist[IS_GEN]``): 1 if it was new, 0 if it was tried already, -1
    (nothing done) when the table or the pool is too full: the caller grows them
    (:func:`tried_grown`) and asks again. Every set of a search also holds the recorded victims,
    which have no position (never accumulated), so positions alone tell two sets apart."""
    cap = tt.shape[1]
    used = ist[IS_POOL]
    n_t = ist[IS_TRIED]
    if 2 * (n_t + 1) > cap or used + cnt > pool.shape[0]:
        return -1
    gen = ist[IS_GEN]
    h = 1469598103934665603 & _HMASK
    for i in range(cnt):
        h = ((h ^ int(loc[i])) * 1099511628211) & _HMASK
    slot = h & (cap - 1)
    while tt[TT_GEN, slot] == gen:
        if tt[TT_HASH, slot] == h and tt[TT_LEN, slot] == cnt:
            off = tt[TT_OFF, slot]
            same = True
            for i in range(cnt):
                if pool[off + i] != loc[i]:
                    same = False
                    break
            if same:
                return 0
        slot = (slot + 1) & (cap - 1)
    tt[TT_HASH, slot] = h
    tt[TT_OFF, slot] = used
    tt[TT_LEN, slot] = cnt
    tt[TT_GEN, slot] = gen
    for i in range(cnt):
        pool[used + i] = loc[i]
    ist[IS_POOL] = used + cnt
    ist[IS_TRIED] = n_t + 1
    return 1


def tried_grown(tt: np.ndarray, gen: int) -> np.ndarray:
    """The tried-set table ``tt`` twice as large, with its generation ``gen`` entries rehashed (same
    hashes, same pool offsets; the slot order of the probes does not matter). Plain Python: a table
    grows a few times per cycle (it is lent from one search to the next and keeps its size)."""
    cap = 2 * tt.shape[1]
    out = np.zeros((4, cap), dtype=np.int64)
    gens = out[TT_GEN]
    for x in np.flatnonzero(tt[TT_GEN] == gen).tolist():
        slot = int(tt[TT_HASH, x]) & (cap - 1)
        while gens[slot] == gen:
            slot = (slot + 1) & (cap - 1)
        out[:, slot] = tt[:, x]
    return out


@leaf_kernel
def good_step(n: int, all_gpu: np.ndarray, base: np.ndarray, thr: float, good: np.ndarray) -> int:
    """After the accumulated victims' GPUs on node ``n`` changed (``all_gpu[n]``): node ``n``'s mark in
    the single-task filter's good nodes (its base plus what the accumulated set frees reaches the
    threshold), and the change of their count (+1, -1 or 0) for ``ist[IS_GOOD]``."""
    ok = base[n] + all_gpu[n] >= thr
    if ok == (good[n] != 0):
        return 0
    good[n] = 1 if ok else 0
    return 1 if ok else -1


@leaf_kernel
def drop_one(u: int, seq: int, t: int, drop_seq: np.ndarray, task_node: np.ndarray, task_gpu: np.ndarray,
             all_gpu: np.ndarray, base: np.ndarray, fast: bool, thr: float, good: np.ndarray) -> int:
    """Accumulated victim ``u`` (task ``t``) leaves the set as ``PrefixSearch.drop`` takes it out:
    numbered ``seq`` in drop order, its GPUs off its node's sum, the good nodes kept (the one step of
    both prunings, :func:`drop_served` and :func:`drop_under`). Returns the good count's change."""
    drop_seq[u] = seq
    n = task_node[t]
    if n < 0:
        return 0
    all_gpu[n] = all_gpu[n] - task_gpu[t]
    return good_step(n, all_gpu, base, thr, good) if fast else 0


@leaf_kernel
def drop_served(served: np.ndarray, ti: np.ndarray, pi: np.ndarray, task_node: np.ndarray, task_gpu: np.ndarray,
                task_job: np.ndarray, job_queue: np.ndarray, own: int, nf: np.ndarray, ni: np.ndarray,
                ist: np.ndarray, fst: np.ndarray, skip: np.ndarray, out: np.ndarray, blocked: int,
                path: np.ndarray) -> int:
    """The pruning after a failed scenario (:meth:`~scheduler_engine.solvers.accumulation.PrefixSearch.
    prune`) of its victims ``served`` that the simulation re-placed before the beneficiary's turn:
    each one not recorded leaves the accumulated set as ``PrefixSearch.drop`` takes it out (numbered
    in drop order from ``ist[IS_DROPPED]``, its GPUs off its node's sum, the single-task filter's
    good nodes and ``ist[IS_GOOD]`` updated), and its leaf, unless the beneficiary's own, is passed
    over from now on (``skip``). Writes the leaves newly marked into ``out``; returns how many.
    ``blocked`` >= 0 (the validator refused because of what that queue gave up; ``served`` is then
    empty): :func:`drop_under` it (one entry point for both prunings, which the warm-up's cycles reach)."""
    is_rec, tpos, drop_seq = ti[TI_REC], ti[TI_POS], pi[PI_DROP]
    all_gpu, base, good = nf[NF_ALL_GPU], nf[NF_BASE], ni[NI_GOOD]
    fast = ist[IS_FAST] != 0
    thr = fst[FS_THR]
    n_drop = ist[IS_DROPPED]
    n_good = ist[IS_GOOD]
    m = 0
    for t in served:
        if is_rec[t]:
            continue
        u = tpos[t]
        if u >= 0 and drop_seq[u] < 0:
            n_good += drop_one(u, n_drop, t, drop_seq, task_node, task_gpu, all_gpu, base, fast, thr, good)
            n_drop += 1
        q = job_queue[task_job[t]]
        if q != own and skip[q] == 0:
            skip[q] = 1
            out[m] = q
            m += 1
    ist[IS_DROPPED] = n_drop
    ist[IS_GOOD] = n_good
    if blocked >= 0:
        drop_under(blocked, path, job_queue, pi, task_node, task_gpu, nf, ni, ist, fst)
    return m


@leaf_kernel
def drop_under(b: int, path: np.ndarray, job_queue: np.ndarray, pi: np.ndarray, task_node: np.ndarray,
               task_gpu: np.ndarray, nf: np.ndarray, ni: np.ndarray, ist: np.ndarray, fst: np.ndarray) -> int:
    """The pruning after the validator refused a scenario because of what queue ``b`` gave up
    (:meth:`~scheduler_engine.solvers.accumulation.PrefixSearch.prune`): every accumulated, not dropped
    victim whose leaf's path holds ``b`` leaves the set, in accumulation order, as ``PrefixSearch.drop``
    takes it out (numbered in drop order from ``ist[IS_DROPPED]``, its GPUs off its node's sum, the
    single-task filter's good nodes and ``ist[IS_GOOD]`` updated). Python did this with an
    (accumulated, depth) mask and a loop over the victims under ``b``: ~65 us per refusal at 2,000
    nodes, where about half of the validated scenarios are refused. Returns how many it dropped."""
    pot, pjob, drop_seq = pi[PI_POT], pi[PI_JOB], pi[PI_DROP]
    all_gpu, base, good = nf[NF_ALL_GPU], nf[NF_BASE], ni[NI_GOOD]
    fast = ist[IS_FAST] != 0
    thr = fst[FS_THR]
    n_drop = ist[IS_DROPPED]
    n_good = ist[IS_GOOD]
    m = 0
    for u in range(ist[IS_POT]):
        if drop_seq[u] >= 0:
            continue
        leaf = job_queue[pjob[u]]
        under = False
        for i in range(path.shape[1]):
            if path[leaf, i] == b:
                under = True
                break
        if not under:
            continue
        n_good += drop_one(u, n_drop, pot[u], drop_seq, task_node, task_gpu, all_gpu, base, fast, thr, good)
        n_drop += 1
        m += 1
    ist[IS_DROPPED] = n_drop
    ist[IS_GOOD] = n_good
    return m


@leaf_kernel
def run_victims(path: np.ndarray, kid_ptr: np.ndarray, kids: np.ndarray, stat: np.ndarray, tot: np.ndarray,
                prio: np.ndarray, tb: np.ndarray, alloc: np.ndarray, leaf_live: np.ndarray, req: np.ndarray,
                key: np.ndarray, vrep: np.ndarray, qi: np.ndarray, popped: np.ndarray, cj: np.ndarray,
                walloc: np.ndarray, glen: np.ndarray, gstart: np.ndarray, gt: np.ndarray, ti: np.ndarray,
                task_node: np.ndarray,
                task_gpu: np.ndarray, nf: np.ndarray, ni: np.ndarray, pi: np.ndarray, ji: np.ndarray,
                need: np.ndarray, sel: np.ndarray, masks: np.ndarray, tt: np.ndarray, pool: np.ndarray,
                ist: np.ndarray, fst: np.ndarray) -> int:
    """The accumulation loop and the emission of each victim's scenarios (module docstring);
    returns the code of the point where it stopped. A pop re-keys the leaf's path with
    :func:`.victim_keys.rekey_path` ``share_only`` (only the column that changes)."""
    hi, ptr, has_popped, heap_live = qi[QI_HI], qi[QI_PTR], qi[QI_HAS_POPPED], qi[QI_HEAP_LIVE]
    skip_leaf, emptied = qi[QI_SKIP], qi[QI_EMPTIED]
    all_gpu, cap, base = nf[NF_ALL_GPU], nf[NF_CAP], nf[NF_BASE]
    good, node_head, hosts = ni[NI_GOOD], ni[NI_NODE_HEAD], ni[NI_HOSTS]
    pot, pot_job, pot_node, pot_next, drop_seq = pi[PI_POT], pi[PI_JOB], pi[PI_NODE], pi[PI_NEXT], pi[PI_DROP]
    ent_job, ent_next, loc = pi[PI_ENT_JOB], pi[PI_ENT_NEXT], pi[PI_LOC]
    job_first, job_last = ji[JI_FIRST], ji[JI_LAST]
    is_rec, tpos = ti[TI_REC], ti[TI_POS]
    knext = ist[IS_NEXT]
    steps = ist[IS_STEPS]
    budget = ist[IS_BUDGET]
    n_jobs = ist[IS_JOBS]
    max_jobs = ist[IS_MAX_JOBS]
    n_pot = ist[IS_POT]
    n_good = ist[IS_GOOD]
    n_empt = ist[IS_EMPTIED]
    n_drop = ist[IS_DROPPED]
    n_ent = ist[IS_ENTRIES]
    stamp = ist[IS_STAMP]
    n_hosts = ist[IS_HOSTS]
    phase = ist[IS_PHASE]
    same_as_all = ist[IS_SAME] != 0
    stop = ist[IS_STOP] != 0
    fast = ist[IS_FAST] != 0
    single = ist[IS_SINGLE] != 0
    local_filter = ist[IS_LOCAL_FILTER] != 0
    pack = ist[IS_PACK] != 0
    ist[IS_POT0] = n_pot
    best_all = fst[FS_BEST]
    thr = fst[FS_THR]
    need_lo = fst[FS_NEED_LO]
    mthr = fst[FS_MTHR]
    code = END
    while True:
        if phase < 0:
            leaf = knext
            if leaf < 0:
                code = END
                break
            i = ptr[leaf]
            if heap_live[leaf] or i >= hi[leaf]:
                code = PY
                break
            vj = cj[i]
            c0 = gstart[vj]
            c1 = c0 + glen[vj]
            if c0 == c1:  # not a plain victim
                code = PY
                break
            if c1 - c0 > 1 and not skip_leaf[leaf]:
                # a gang with a recorded task: Python pushes the rest back
                rec_in = False
                for k in range(c0, c1):
                    if is_rec[gt[k]]:
                        rec_in = True
                if rec_in:
                    code = PY
                    break
            steps += 1
            if 0 <= budget < steps:
                code = BUDGET
                break
            # pop the leaf's head: what the leaf gave up grows by its whole allocation
            ptr[leaf] = i + 1
            if has_popped[leaf]:
                for r in range(3):
                    popped[leaf, r] = popped[leaf, r] + walloc[vj, r]
            else:
                for r in range(3):
                    popped[leaf, r] = walloc[vj, r]
                has_popped[leaf] = 1
            if i + 1 < hi[leaf]:
                nj = cj[i + 1]
                for r in range(3):
                    req[leaf, r] = popped[leaf, r] + walloc[nj, r]
            else:
                leaf_live[leaf] = False
                emptied[n_empt] = leaf
                n_empt += 1
            knext = rekey_path(True, leaf, path, kid_ptr, kids, stat, tot, prio, tb, alloc, leaf_live, req, key, vrep,
                               True)
            # accumulate it (a job popped whole from its leaf's run is new to the accumulated set)
            if skip_leaf[leaf] or (c1 - c0 == 1 and is_rec[gt[c0]]):
                continue
            if 0 <= max_jobs <= n_jobs:
                code = JOBS
                break
            n_jobs += 1
            n_hosts = 0
            for k in range(c0, c1):
                t = gt[k]
                u = n_pot
                pot[u] = t
                tpos[t] = u
                pot_job[u] = vj
                pot_next[u] = -1
                drop_seq[u] = -1
                if k == c0:
                    job_first[vj] = u
                else:
                    pot_next[job_last[vj]] = u
                job_last[vj] = u
                n_pot += 1
                n = task_node[t]
                pot_node[u] = n
                if n >= 0:
                    # the job's entry on n (once per node), n among the victim's hosts (ascending)
                    h = n_hosts
                    while h > 0 and hosts[h - 1] > n:
                        h -= 1
                    if h == 0 or hosts[h - 1] != n:
                        for x in range(n_hosts, h, -1):
                            hosts[x] = hosts[x - 1]
                        hosts[h] = n
                        n_hosts += 1
                        ent_job[n_ent] = vj
                        ent_next[n_ent] = node_head[n]
                        node_head[n] = n_ent
                        n_ent += 1
                    g = task_gpu[t]
                    all_gpu[n] = all_gpu[n] + g
                    if fast:
                        n_good += good_step(n, all_gpu, base, thr, good)
                    c = cap[n] + g
                    cap[n] = c
                    if c > best_all:
                        best_all = c
            if single and best_all < need_lo:
                continue  # no node can hold the task yet, whatever subset is evicted
            phase = 0
            same_as_all = False
        # the scenarios of the newest victim (phase: the next of its hosts, then n_hosts: all
        # accumulated victims), each set new to the tried sets and passing its GPU-count filter
        # handed to Python to simulate (SIM; the next call resumes here)
        code = -1
        while phase <= n_hosts:
            if phase < n_hosts:
                n = hosts[phase]
                cnt = node_local(n, pi, ji, node_head)
                if cnt == 0:
                    phase += 1
                    continue
                if cnt == n_pot - n_drop:
                    same_as_all = True
                r = tried_add(loc, cnt, tt, pool, ist)
                if r < 0:
                    code = ROOM
                    break
                phase += 1
                if r == 0:
                    continue
                if local_filter or pack:
                    stamp += 1
                    if not _gpu_filter(cnt, pi, task_node, task_gpu, nf, ni, fast, thr, mthr, need, sel, masks,
                                       stamp, ist):
                        continue
                ist[IS_SETLEN] = cnt
                code = SIM
                break
            # all accumulated, not dropped victims (after the node-local sets: one of them, or
            # nothing left, is no new scenario)
            if same_as_all or n_pot - n_drop <= 0:
                phase += 1
                break
            if fast:
                if n_good == 0:
                    phase += 1
                    break
            elif pack:
                if not all_filter(nf, ni, pi, n_pot, ist, mthr, need, sel, masks):
                    phase += 1
                    break
            cnt = 0
            for u in range(n_pot):
                if drop_seq[u] < 0:
                    loc[cnt] = u
                    cnt += 1
            r = tried_add(loc, cnt, tt, pool, ist)
            if r < 0:
                code = ROOM
                break
            phase += 1
            if r == 1:
                ist[IS_SETLEN] = cnt
                code = SIM
            break
        if code >= 0:
            break
        phase = -1
        if stop:  # Python checks its limits between two victims, as after every emission
            code = DONE
            break
    ist[IS_NEXT] = knext
    ist[IS_STEPS] = steps
    ist[IS_JOBS] = n_jobs
    ist[IS_POT] = n_pot
    ist[IS_GOOD] = n_good
    ist[IS_EMPTIED] = n_empt
    ist[IS_ENTRIES] = n_ent
    ist[IS_STAMP] = stamp
    ist[IS_HOSTS] = n_hosts
    ist[IS_PHASE] = phase
    ist[IS_SAME] = 1 if same_as_all else 0
    fst[FS_BEST] = best_all
    return code
