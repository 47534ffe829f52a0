"""Rows the victim search keeps across searches, patched where they changed: the prefix search's lent
rows brought back to clean after a search (:func:`reset_search`), reclaim's per-leaf runs of candidates
after a commit (:func:`rebuild_runs`).

The victim search's per-job, per-task and per-node rows (:func:`scheduler_engine.solvers.accumulation.
_scratch`) are kept on the state and lent to one prefix search after another. A search writes them at
its accumulated victims only (their tasks, their jobs, their nodes) and at its recorded victims (their
tasks and nodes), so resetting those entries makes the rows clean again in O(victims); at 10,000
nodes a reclaim search accumulates hundreds to thousands of victim tasks, and the same reset as a
handful of numpy fancy-index writes (each with its gathers and temporary arrays) was ~50 us of every
search. One pass here does them all.
"""
from __future__ import annotations

import numpy as np

from . import leaf_kernel
from .victim_run import (JI_FIRST, JI_LAST, NF_ALL_GPU, NF_BASE, NF_CAP, NF_REC_GPU, NI_GOOD, NI_NODE_HEAD, PI_JOB,
                         PI_NODE, PI_POT, TI_POS, TI_REC)


@leaf_kernel
def reset_search(p: int, pi: np.ndarray, ji: np.ndarray, ti: np.ndarray, rec: np.ndarray, recn: np.ndarray,
                 nf: np.ndarray, ni: np.ndarray, marks: bool, thr: float) -> None:
    """Undo what a search wrote (the first ``p`` accumulated victims in ``pi``, its recorded tasks ``rec``
    and their nodes ``recn``): every such task not accumulated (``TI_POS`` -1) nor recorded (``TI_REC``
    0), every such job without accumulated victims (``JI_FIRST`` / ``JI_LAST`` -1), every such node
    without recorded or accumulated GPUs (0.0) nor job entries (``NI_NODE_HEAD`` -1), its best capacity
    its base again (``NF_CAP`` = ``NF_BASE``) and, with ``marks``, its single-task filter mark the base's
    (``NF_BASE >= thr``: 1 or 0)."""
    pot, pjob, pnode = pi[PI_POT], pi[PI_JOB], pi[PI_NODE]
    tpos, is_rec = ti[TI_POS], ti[TI_REC]
    first, last = ji[JI_FIRST], ji[JI_LAST]
    all_gpu, cap, base, rec_gpu = nf[NF_ALL_GPU], nf[NF_CAP], nf[NF_BASE], nf[NF_REC_GPU]
    good, head = ni[NI_GOOD], ni[NI_NODE_HEAD]
    for u in range(p):
        tpos[pot[u]] = -1
        j = pjob[u]
        first[j] = -1
        last[j] = -1
        n = pnode[u]
        if n >= 0:
            all_gpu[n] = 0.0
            cap[n] = base[n]
            head[n] = -1
            if marks:
                good[n] = 1 if base[n] >= thr else 0
    for k in range(recn.shape[0]):
        n = recn[k]
        all_gpu[n] = 0.0
        rec_gpu[n] = 0.0
        cap[n] = base[n]
        if marks:
            good[n] = 1 if base[n] >= thr else 0
    for k in range(rec.shape[0]):
        is_rec[rec[k]] = 0


@leaf_kernel
def rebuild_runs(leaves: np.ndarray, by_static: np.ndarray, lo: np.ndarray, end: np.ndarray, member: np.ndarray,
                 group: np.ndarray, n_active: np.ndarray, min_available: np.ndarray, cj: np.ndarray,
                 n: np.ndarray) -> None:
    """Each leaf's run of member jobs (:meth:`scheduler_engine.solvers.victim_order.LeafRuns._rebuild_leaf`)
    for the leaves ``leaves``: the members of its range ``lo[q]:end[q]`` of the static order
    ``by_static`` (sorted by (leaf, priority) group, then the static rank) stably sorted by group and
    elastic state descending (2: above minAvailable, 1: at it, 0: below), into ``cj[lo[q]:]``, their
    number into ``n[q]``. Within one group run of the static order that sort is the members with state
    2, then 1, then 0, each in static order: three passes over the run, no sort (a leaf's few thousand
    jobs at 10,000 nodes took ~30 us per leaf in numpy, a commit touching tens of leaves)."""
    for i in range(leaves.shape[0]):
        q = leaves[i]
        w = lo[q]
        a = lo[q]
        e = end[q]
        while a < e:
            g = group[by_static[a]]
            b = a + 1
            while b < e and group[by_static[b]] == g:
                b += 1
            for want in range(2, -1, -1):
                for x in range(a, b):
                    j = by_static[x]
                    if not member[j]:
                        continue
                    act = n_active[j]
                    m = min_available[j]
                    el = 0 if act < m else (1 if act == m else 2)
                    if el == want:
                        cj[w] = j
                        w += 1
            a = b
        n[q] = w - lo[q]


#: numpy's pairwise summation adds at most this many terms in one block (``PW_BLOCKSIZE``); a longer row
#: is split in halves, which :func:`masked_row_sum` does not do (its callers check the row length)
PW_BLOCK = 128


@leaf_kernel
def masked_row_sum(dev: np.ndarray, valid: np.ndarray, n: int) -> float:
    """``(dev[n] * valid[n]).sum()`` for a C-contiguous row of at most :data:`PW_BLOCK` terms, term for
    term as numpy adds them (``np.add.reduce``'s pairwise summation over a contiguous row: fewer than 8
    terms one after another, else eight running sums over the multiples of 8, added as
    ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then the remaining terms; the whole added to the
    reduction's identity 0.0). A plain left-to-right loop differs in the last bit from 8 terms on, and
    the filter base is compared with ``>=`` against task requests: every bit must be numpy's."""
    G = dev.shape[1]
    if G < 8:
        res = 0.0
        for d in range(G):
            res += dev[n, d] * (1.0 if valid[n, d] else 0.0)
        return 0.0 + res
    r0 = dev[n, 0] * (1.0 if valid[n, 0] else 0.0)
    r1 = dev[n, 1] * (1.0 if valid[n, 1] else 0.0)
    r2 = dev[n, 2] * (1.0 if valid[n, 2] else 0.0)
    r3 = dev[n, 3] * (1.0 if valid[n, 3] else 0.0)
    r4 = dev[n, 4] * (1.0 if valid[n, 4] else 0.0)
    r5 = dev[n, 5] * (1.0 if valid[n, 5] else 0.0)
    r6 = dev[n, 6] * (1.0 if valid[n, 6] else 0.0)
    r7 = dev[n, 7] * (1.0 if valid[n, 7] else 0.0)
    i = 8
    lim = G - G % 8
    while i < lim:
        r0 += dev[n, i] * (1.0 if valid[n, i] else 0.0)
        r1 += dev[n, i + 1] * (1.0 if valid[n, i + 1] else 0.0)
        r2 += dev[n, i + 2] * (1.0 if valid[n, i + 2] else 0.0)
        r3 += dev[n, i + 3] * (1.0 if valid[n, i + 3] else 0.0)
        r4 += dev[n, i + 4] * (1.0 if valid[n, i + 4] else 0.0)
        r5 += dev[n, i + 5] * (1.0 if valid[n, i + 5] else 0.0)
        r6 += dev[n, i + 6] * (1.0 if valid[n, i + 6] else 0.0)
        r7 += dev[n, i + 7] * (1.0 if valid[n, i + 7] else 0.0)
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < G:
        res += dev[n, i] * (1.0 if valid[n, i] else 0.0)
        i += 1
    return 0.0 + res


@leaf_kernel
def fit_rows(log: np.ndarray, lo: int, hi: int, mark: np.ndarray, rows: np.ndarray, vals: np.ndarray,
             dev_free: np.ndarray, dev_rel: np.ndarray, dev_valid: np.ndarray, sched: np.ndarray,
             old: np.ndarray) -> int:
    """:func:`scheduler_engine.solvers.idle_gpus.fit_base` (without DRA GPU classes) on the distinct nodes
    of ``log[lo:hi]``, against the base ``old``: returns how many of them changed value, those nodes
    ascending in ``rows[:m]`` and their new values in ``vals[:m]``; -1 (nothing written but ``rows``)
    when more than N / 8 nodes are logged (the caller recomputes every row). Per node the same terms
    as the numpy expression: ``max(sum(free * valid), 0) + max(sum(releasing * valid), 0)``, each sum
    numpy's (:func:`masked_row_sum`), 0.0 on an unschedulable node. ``mark`` (N,) is all False on entry
    and on return.

    Why compiled: the job loop's commits change a few hundred nodes each, and the same per-row sums in
    numpy (the log's distinct entries, two gathers, products, sums and maxima, the selection, the
    comparison with the old rows) were ~15 calls on small arrays, 50-70 us per commit."""
    N = old.shape[0]
    k = 0
    for i in range(lo, hi):
        n = log[i]
        if not mark[n]:
            mark[n] = True
            rows[k] = n
            k += 1
    if 8 * k > N:
        for i in range(k):
            mark[rows[i]] = False
        return -1
    if k <= 32:  # (few: insertion sort, then clear their marks)
        for i in range(1, k):
            x = rows[i]
            a = i
            while a > 0 and rows[a - 1] > x:
                rows[a] = rows[a - 1]
                a -= 1
            rows[a] = x
        for i in range(k):
            mark[rows[i]] = False
    else:  # (many: the marked nodes in node order, O(N) reads)
        w = 0
        for n in range(N):
            if mark[n]:
                mark[n] = False
                rows[w] = n
                w += 1
    m = 0
    for i in range(k):
        n = rows[i]
        v = 0.0
        if sched[n]:
            a = masked_row_sum(dev_free, dev_valid, n)
            if not (a >= 0.0 or a != a):  # (np.maximum(a, 0.0): NaN stays)
                a = 0.0
            b = masked_row_sum(dev_rel, dev_valid, n)
            if not (b >= 0.0 or b != b):
                b = 0.0
            v = a + b
        if v != old[n]:
            rows[m] = n
            vals[m] = v
            m += 1
    return m
