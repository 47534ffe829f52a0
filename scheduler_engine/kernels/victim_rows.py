"""The prefix search's lent rows brought back to clean after a search, where it wrote them only.

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
