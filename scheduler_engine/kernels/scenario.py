"""Kernels of a victim scenario's simulation (:mod:`scheduler_engine.solvers.simulation`) that are
not journal primitives: the queue capacity check (spec a.7) over the state's arrays, so that a
compiled placement can ask it, and the Python method ``CycleState.queue_over_capacity`` answers
with the same comparisons.
"""
from __future__ import annotations

import numpy as np

from . import kernel

EPS = 1e-9


@kernel
def over_capacity(path_mat: np.ndarray, q: int, r0: float, r1: float, r2: float, nonpreemptible: bool,
                  lim: np.ndarray, des: np.ndarray, qab: np.ndarray) -> int:
    """-1 if the request ``(r0, r1, r2)`` may be added to leaf q, else ``(a * 3 + r) * 2 + kind``:
    queue ``a`` on the path (leaf first) is over its limit (``kind`` 0) or, for a non-preemptible
    job, over its deserved quota (``kind`` 1) in resource ``r``. Only requested resources
    (``> EPS``) are checked; ``lim`` / ``des`` are (Q, 3) with ``inf`` for unlimited;
    ``qab[a, 0]`` is the queue's allocation, ``qab[a, 1]`` its non-preemptible allocation."""
    rq = (r0, r1, r2)
    if not (r0 > EPS or r1 > EPS or r2 > EPS):
        return -1
    for k in range(path_mat.shape[1]):
        a = path_mat[q, k]
        if a < 0:
            break
        for r in range(3):
            if rq[r] > EPS and qab[a, 0, r] + rq[r] > lim[a, r] + EPS:
                return (a * 3 + r) * 2
        if nonpreemptible:
            for r in range(3):
                if rq[r] > EPS and qab[a, 1, r] + rq[r] > des[a, r] + EPS:
                    return (a * 3 + r) * 2 + 1
    return -1
