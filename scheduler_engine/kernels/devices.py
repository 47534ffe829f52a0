"""Device choice of a placement (:meth:`scheduler_engine.state.CycleState.choose_devices`) for a task
that takes whole GPUs or none (not shared, no DRA claims), as a kernel over the state's device rows,
so compiled callers (allocate's per-job attempt, a compiled scenario simulation) and the Python
method choose the same devices.

Whole devices: a device is free when its free share is at least ``1 - EPS``; a pipelined placement
may also take devices whose only load is releasing (free + releasing at least ``1 - EPS``), fully
free ones first, each group in device order. The first ``k`` such devices are taken.
"""
from __future__ import annotations

import numpy as np

from . import kernel

EPS = 1e-9


@kernel
def choose_whole(dev_free: np.ndarray, dev_rel: np.ndarray, n: int, nd: int, k: int, pipelined: bool,
                 out: np.ndarray) -> int:
    """Write the ``k`` devices of node n (``nd`` devices) a task of ``k`` whole GPUs takes into
    ``out[:k]`` and return ``k``, or return -1 when they do not fit (``k == 0``: 0, nothing
    written). ``out`` holds at least ``min(k, nd)`` entries."""
    if k == 0:
        return 0
    one = 1 - EPS
    c = 0
    if pipelined:
        # fully free devices first, then those whose remaining load is only releasing
        for d in range(nd):
            a = dev_free[n, d]
            if a + dev_rel[n, d] >= one and not a < one:
                out[c] = d
                c += 1
                if c == k:
                    return k
        for d in range(nd):
            a = dev_free[n, d]
            if a + dev_rel[n, d] >= one and a < one:
                out[c] = d
                c += 1
                if c == k:
                    return k
        return -1
    for d in range(nd):
        if dev_free[n, d] >= one:
            out[c] = d
            c += 1
            if c == k:
                return k
    return -1
