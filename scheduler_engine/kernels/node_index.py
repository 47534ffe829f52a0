"""The per-shape node index's inner loops (:class:`scheduler_engine.plugins.nodeplacement.ShapeIndex`):
re-evaluating changed nodes (fit + placement key, the same comparisons and arithmetic as
``state.fit_one`` + ``nodeplacement.node_key_one``) and the lazy heap of ``(key, node)`` entries.

The heap lives in two arrays (``hk`` keys, ``hn`` nodes; ``hs[0]`` entries used) ordered by
``(key, node)`` like Python's ``heapq`` on tuples. An entry is live while its node still fits and
still has that key; :func:`best` drops dead entries from the top. Which node :func:`best` returns
(the smallest live ``(key, node)``) does not depend on the heap's layout, only on the arrays
``any_ok``/``key``. Python callers make room first (``ShapeIndex._room``); the query kernels make
their own (:func:`push_room`), so a full heap is never written.

:func:`query_whole` / :func:`query_shared` are the whole query of an index (changed nodes
re-evaluated, then the best node) in one call, with the index's state passed as arrays: the Python
``ShapeIndex.query`` delegates to them, and compiled callers (allocate's per-job attempt, a compiled
scenario simulation) call them directly with a log of changed nodes of their own.
"""
from __future__ import annotations

import numpy as np

from . import kernel

EPS = 1e-9
GPU, CPU, MEM = 0, 1, 2


@kernel
def _less(k1: float, n1: int, k2: float, n2: int) -> bool:
    return k1 < k2 or (k1 == k2 and n1 < n2)


@kernel
def push(hk: np.ndarray, hn: np.ndarray, hs: np.ndarray, k: float, n: int) -> None:
    """Add entry (k, n) (sift up)."""
    i = hs[0]
    hs[0] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        if _less(k, n, hk[p], hn[p]):
            hk[i] = hk[p]
            hn[i] = hn[p]
            i = p
        else:
            break
    hk[i] = k
    hn[i] = n


@kernel
def _pop_top(hk: np.ndarray, hn: np.ndarray, hs: np.ndarray) -> None:
    size = hs[0] - 1
    hs[0] = size
    if size == 0:
        return
    k = hk[size]
    n = hn[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and _less(hk[c + 1], hn[c + 1], hk[c], hn[c]):
            c += 1
        if _less(hk[c], hn[c], k, n):
            hk[i] = hk[c]
            hn[i] = hn[c]
            i = c
        else:
            break
    hk[i] = k
    hn[i] = n


@kernel
def rebuild(any_ok: np.ndarray, key: np.ndarray, hk: np.ndarray, hn: np.ndarray, hs: np.ndarray) -> None:
    """The heap of every fitting node's current entry (capacity >= number of nodes)."""
    hs[0] = 0
    for n in range(any_ok.shape[0]):
        if any_ok[n]:
            push(hk, hn, hs, key[n], n)


@kernel
def best(any_ok: np.ndarray, key: np.ndarray, hk: np.ndarray, hn: np.ndarray, hs: np.ndarray) -> int:
    """The fitting node first in placement order (smallest key, then index), or -1."""
    while hs[0] > 0:
        n = hn[0]
        if any_ok[n] and key[n] == hk[0]:
            return n
        _pop_top(hk, hn, hs)
    return -1


@kernel
def push_rows(rows: np.ndarray, ok: np.ndarray, keys: np.ndarray, hk: np.ndarray, hn: np.ndarray,
              hs: np.ndarray) -> None:
    """Entries for nodes ``rows`` whose fit flag ``ok`` is set (keys parallel to rows)."""
    for i in range(rows.shape[0]):
        if ok[i]:
            push(hk, hn, hs, keys[i], rows[i])


@kernel
def push_room(any_ok: np.ndarray, key: np.ndarray, hk: np.ndarray, hn: np.ndarray, hs: np.ndarray, k: float,
              n: int) -> None:
    """:func:`push`, dropping the dead entries first when the heap is full (the heap's capacity
    exceeds the number of nodes, so after :func:`rebuild` there is room). A rebuild pushes every
    fitting node's current entry, node n's included: the entry pushed here is then a duplicate of a
    live one, which changes nothing :func:`best` returns."""
    if hs[0] >= hk.shape[0]:
        rebuild(any_ok, key, hk, hn, hs)
    push(hk, hn, hs, k, n)


@kernel
def eval_whole(n: int, sched: np.ndarray, sel: np.ndarray, rc: float, rm: float, k: int, ndev: np.ndarray,
               top: float, cap: np.ndarray, col: int, spread: bool, node_both: np.ndarray, dev_free: np.ndarray,
               dev_rel: np.ndarray, idle_ok: np.ndarray, any_ok: np.ndarray, key: np.ndarray) -> bool:
    """Re-evaluate node n for a task without a shared GPU (``k`` whole devices, CPU ``rc``,
    memory ``rm``; ``sel`` empty = no node selector; ``cap`` the nodes' capacity in ``col`` when
    ordering on CPU): set its fit flags and key; True when it fits (its entry is to be pushed)."""
    if not sched[n] or (sel.shape[0] > 0 and not sel[n]):
        any_ok[n] = False
        idle_ok[n] = False
        return False
    ic = node_both[n, 0, CPU]
    im = node_both[n, 0, MEM]
    lc = node_both[n, 1, CPU]
    lm = node_both[n, 1, MEM]
    fi = ic >= rc - EPS and im >= rm - EPS
    fa = ic + lc >= rc - EPS and im + lm >= rm - EPS
    if not fa:
        any_ok[n] = False
        idle_ok[n] = False
        return False
    nd = ndev[n]
    whole_any = 0
    if k > 0 or col == GPU:
        whole_idle = 0
        for d in range(nd):
            x = dev_free[n, d]
            if x + dev_rel[n, d] >= 1 - EPS:
                whole_any += 1
            if x >= 1 - EPS:
                whole_idle += 1
        if k > 0:
            fi = fi and whole_idle >= k
            fa = fi or whole_any >= k
            if not fa:
                any_ok[n] = False
                idle_ok[n] = False
                return False
    if col == GPU:
        free = float(whole_any)
        overall = float(nd)
    else:
        free = node_both[n, 0, col] + node_both[n, 1, col]
        overall = cap[n]
    if spread:
        base = -free / overall if overall > 0 else 0.0
        width = 3.0
    else:
        base = free if overall > 0 else top + 1.0
        width = 2.0 * top + 3.0
    tier = 1000.0 if fi else 0.0
    if col == CPU and nd == 0:
        tier += 10.0
    idle_ok[n] = fi
    any_ok[n] = True
    key[n] = base - tier * width
    return True


@kernel
def eval_shared(n: int, sched: np.ndarray, sel: np.ndarray, rc: float, rm: float, frac: np.ndarray, fgpu: float,
                ndev: np.ndarray, top: float, spread: bool, node_both: np.ndarray, dev_free: np.ndarray,
                dev_rel: np.ndarray, dev_shared: np.ndarray, idle_ok: np.ndarray, any_ok: np.ndarray,
                key: np.ndarray) -> bool:
    """Re-evaluate node n for a task sharing one GPU (fraction ``fgpu``, or per node ``frac`` of
    its device memory when ``frac`` is not empty); True when it fits."""
    if not sched[n] or (sel.shape[0] > 0 and not sel[n]):
        any_ok[n] = False
        idle_ok[n] = False
        return False
    fi = node_both[n, 0, CPU] >= rc - EPS and node_both[n, 0, MEM] >= rm - EPS
    fa = (node_both[n, 0, CPU] + node_both[n, 1, CPU] >= rc - EPS
          and node_both[n, 0, MEM] + node_both[n, 1, MEM] >= rm - EPS)
    nd = ndev[n]
    f = frac[n] if frac.shape[0] > 0 else fgpu
    if not fa or nd == 0 or f > 1 + EPS:
        any_ok[n] = False
        idle_ok[n] = False
        return False
    idle_dev = False
    any_dev = False
    whole = 0
    joins = False
    for d in range(nd):
        a = dev_free[n, d]
        b = dev_rel[n, d]
        if a >= f - EPS:
            idle_dev = True
        if a + b >= f - EPS:
            any_dev = True
            if dev_shared[n, d] and a + b < 1 - EPS:  # in use, not only releasing
                joins = True
        if a + b >= 1 - EPS:
            whole += 1
    fi = fi and idle_dev
    fa = fi or any_dev
    if not fa:
        any_ok[n] = False
        idle_ok[n] = False
        return False
    free = float(whole)
    overall = float(nd)
    if spread:
        base = -free / overall
        width = 3.0
    else:
        base = free
        width = 2.0 * top + 3.0
    tier = 1000.0 if fi else 0.0
    if joins and not spread:  # gpusharingorder runs with the GPU binpack strategy only
        tier += 10000.0
    idle_ok[n] = fi
    any_ok[n] = True
    key[n] = base - tier * width
    return True


@kernel
def query_whole(log: np.ndarray, lo: int, hi: int, sched: np.ndarray, sel: np.ndarray, rc: float, rm: float,
                k: int, ndev: np.ndarray, top: float, cap: np.ndarray, col: int, spread: bool, node_both: np.ndarray,
                dev_free: np.ndarray, dev_rel: np.ndarray, idle_ok: np.ndarray, any_ok: np.ndarray, key: np.ndarray,
                hk: np.ndarray, hn: np.ndarray, hs: np.ndarray) -> int:
    """The shape index's query for a task without a shared GPU (see :func:`eval_whole` for the
    shape's constants): re-evaluate the nodes changed since the last query (``log[lo:hi]``, repeats
    allowed; when they are many, every node) and return the best fitting node or -1 (:func:`best`).

    Kernel-callable: a compiled caller keeps its own log of changed nodes (any int64 array) and the
    index's arrays (``idle_ok``, ``any_ok`` (N,) bool, ``key`` (N,) float64, the heap ``hk``/``hn``
    of capacity > N, ``hs`` (1,) int64)."""
    N = any_ok.shape[0]
    if (hi - lo) * 8 > N:
        hs[0] = 0
        for n in range(N):
            if eval_whole(n, sched, sel, rc, rm, k, ndev, top, cap, col, spread, node_both, dev_free, dev_rel,
                          idle_ok, any_ok, key):
                push(hk, hn, hs, key[n], n)
    else:
        for i in range(lo, hi):
            n = log[i]
            if eval_whole(n, sched, sel, rc, rm, k, ndev, top, cap, col, spread, node_both, dev_free, dev_rel,
                          idle_ok, any_ok, key):
                push_room(any_ok, key, hk, hn, hs, key[n], n)
    return best(any_ok, key, hk, hn, hs)


@kernel
def query_shared(log: np.ndarray, lo: int, hi: int, sched: np.ndarray, sel: np.ndarray, rc: float, rm: float,
                 frac: np.ndarray, fgpu: float, ndev: np.ndarray, top: float, spread: bool, node_both: np.ndarray,
                 dev_free: np.ndarray, dev_rel: np.ndarray, dev_shared: np.ndarray, idle_ok: np.ndarray,
                 any_ok: np.ndarray, key: np.ndarray, hk: np.ndarray, hn: np.ndarray, hs: np.ndarray) -> int:
    """:func:`query_whole` for a task sharing one GPU (constants of :func:`eval_shared`)."""
    N = any_ok.shape[0]
    if (hi - lo) * 8 > N:
        hs[0] = 0
        for n in range(N):
            if eval_shared(n, sched, sel, rc, rm, frac, fgpu, ndev, top, spread, node_both, dev_free, dev_rel,
                           dev_shared, idle_ok, any_ok, key):
                push(hk, hn, hs, key[n], n)
    else:
        for i in range(lo, hi):
            n = log[i]
            if eval_shared(n, sched, sel, rc, rm, frac, fgpu, ndev, top, spread, node_both, dev_free, dev_rel,
                           dev_shared, idle_ok, any_ok, key):
                push_room(any_ok, key, hk, hn, hs, key[n], n)
    return best(any_ok, key, hk, hn, hs)
