"""Device choice of a placement (:meth:`scheduler_engine.state.CycleState.choose_devices`) as kernels
over the state's device rows: :func:`choose_whole` for a task that takes whole GPUs or none (not
shared, no DRA claims; the Python method delegates to it, so compiled callers - allocate's per-job
attempt, a compiled scenario simulation - and the Python method choose the same devices) and
:func:`choose_shared` for a task sharing one GPU (the compiled scenario simulation; the Python
method keeps its own list code, the reference the tests compare this kernel with).

Whole devices: a device is free when its free share is at least ``1 - EPS``; a pipelined placement
may also take devices whose only load is releasing (free + releasing at least ``1 - EPS``), fully
free ones first, each group in device order. The first ``k`` such devices are taken.
"""
from __future__ import annotations

import numpy as np

import math

from . import leaf_kernel

EPS = 1e-9


@leaf_kernel
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


@leaf_kernel
def choose_shared(dev_free: np.ndarray, dev_rel: np.ndarray, n: int, nd: int, f: float, pipelined: bool,
                  spread: bool) -> int:
    """The device of node n (``nd`` devices) a task sharing a GPU with fraction ``f`` takes, or -1
    (``CycleState.choose_devices``' shared branch): the devices with room for ``f`` on free (plus
    releasing, ``pipelined``) within EPS; releasing load counts as occupied (occupied = 1 - free);
    binpack takes the first in ``(-occupied, device)`` order, spread in ``(occupied, device)``
    order (a later device only when its value is strictly smaller, as ``min`` over those tuples)."""
    if nd == 0 or not math.isfinite(f) or f > 1 + EPS:
        return -1
    lo = f - EPS
    best = -1
    bv = 0.0
    for d in range(nd):
        a = dev_free[n, d]
        room = a + dev_rel[n, d] if pipelined else a
        if room >= lo:
            v = 1.0 - a
            if not spread:
                v = -v
            if best < 0 or v < bv:
                best = d
                bv = v
    return best
