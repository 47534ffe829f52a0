"""Best-fit packing of GPU requests on per-node GPU capacities (the idle-GPU filter's inner loop,
:mod:`scheduler_engine.solvers.idle_gpus`)."""
from __future__ import annotations

import numpy as np

from . import leaf_kernel

EPS = 1e-9


@leaf_kernel
def pack_best_fit(need: np.ndarray, sel_row: np.ndarray, masks: np.ndarray, idx: np.ndarray,
                  cap: np.ndarray) -> bool:
    """Place requests ``need`` (in the order given: largest first) one by one on the node of
    ``idx`` with the least capacity ``cap`` that still holds it (first such node on ties), and
    consume it. ``sel_row[i] >= 0``: request i may only use nodes n with ``masks[sel_row[i], n]``
    (``idx`` holds node numbers, ``cap`` is parallel to it). Requests <= EPS need no GPU. True if
    every request found a node.
    """
    for i in range(need.shape[0]):
        nd = need[i]
        if nd <= EPS:
            continue
        thr = nd - 1e-9
        row = sel_row[i]
        best = -1
        best_cap = np.inf
        for k in range(idx.shape[0]):
            c = cap[k]
            if c >= thr and c < best_cap and (row < 0 or masks[row, idx[k]]):
                best = k
                best_cap = c
        if best < 0:
            return False
        cap[best] -= nd
    return True
