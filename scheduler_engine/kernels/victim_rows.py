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
