"""The per-shape node index's inner loops (:class:`scheduler_engine.plugins.nodeplacement.ShapeIndex`):
re-evaluating changed nodes (fit + placement key, the same comparisons and arithmetic as
``state.fit_one`` + ``nodeplacement.node_key_one``) and the lazy heap of ``(key, node)`` entries.

The heap lives in two arrays (``hk`` keys, ``hn`` nodes; ``hs[0]`` entries used) ordered by
``(key, node)`` like Python's ``heapq`` on tuples. An entry is live while its node still fits and
still has that key; :func:`best` drops dead entries from the top. Which node :func:`best` returns
(the smallest live ``(key, node)``) does not depend on the heap's layout, only on the arrays
``any_ok``/``key``. Python callers make room first (``ShapeIndex._room``); the query kernels make
their own (dropping dead entries when full), so a full heap is never written.

:func:`query_whole` / :func:`query_shared` are the whole query of an index (changed nodes
re-evaluated, then the best node) in one call, with the index's state passed as arrays: the Python
``ShapeIndex.query`` delegates to them, and compiled callers (allocate's per-job attempt, a compiled
scenario simulation) call them directly with a log of changed nodes of their own. Their ``_dra``
forms (:func:`query_whole_dra` / :func:`query_shared_dra`) take the DRA devices too: on a cluster whose
DRA classes count as gpu the key counts those devices like GPUs (as ``node_key_one`` does), and a
task's device claims must fit (``CycleState.claims_fit``); the plain forms call them with no DRA.
"""
from __future__ import annotations

import numpy as np

from . import leaf_kernel

EPS = 1e-9
GPU, CPU, MEM = 0, 1, 2


@leaf_kernel
def push(hk: np.ndarray, hn: np.ndarray, hs: np.ndarray, k: float, n: int) -> None:
    """Add entry (k, n) (sift up)."""
    i = hs[0]
    hs[0] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        if k < hk[p] or (k == hk[p] and n < hn[p]):  # (k, n) before the parent's entry
            hk[i] = hk[p]
            hn[i] = hn[p]
            i = p
        else:
            break
    hk[i] = k
    hn[i] = n


@leaf_kernel
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
        if c + 1 < size and (hk[c + 1] < hk[c] or (hk[c + 1] == hk[c] and hn[c + 1] < hn[c])):
            c += 1
        if hk[c] < k or (hk[c] == k and hn[c] < n):
            hk[i] = hk[c]
            hn[i] = hn[c]
            i = c
        else:
            break
    hk[i] = k
    hn[i] = n


@leaf_kernel
def rebuild(any_ok: np.ndarray, key: np.ndarray, hk: np.ndarray, hn: np.ndarray, hs: np.ndarray) -> None:
    """The heap of every fitting node's current entry (capacity >= number of nodes)."""
    hs[0] = 0
    for n in range(any_ok.shape[0]):
        if any_ok[n]:
            push(hk, hn, hs, key[n], n)


@leaf_kernel
def best(any_ok: np.ndarray, key: np.ndarray, hk: np.ndarray, hn: np.ndarray, hs: np.ndarray) -> int:
    """The fitting node first in placement order (smallest key, then index), or -1."""
    while hs[0] > 0:
        n = hn[0]
        if any_ok[n] and key[n] == hk[0]:
            return n
        _pop_top(hk, hn, hs)
    return -1


@leaf_kernel
def push_rows(rows: np.ndarray, ok: np.ndarray, keys: np.ndarray, hk: np.ndarray, hn: np.ndarray,
              hs: np.ndarray) -> None:
    """Entries for nodes ``rows`` whose fit flag ``ok`` is set (keys parallel to rows)."""
    for i in range(rows.shape[0]):
        if ok[i]:
            push(hk, hn, hs, keys[i], rows[i])


@leaf_kernel
def placement_key(free: float, overall: float, top: float, spread: bool, tier: float) -> float:
    """A node's placement key (``nodeplacement.node_key_one``; smaller goes first): binpack prefers less
    free, spread a larger free share, and a higher ``tier`` (idle devices, joining a shared GPU, ...)
    wins whatever the amounts; a node with nothing of the resource ranks after every other."""
    if spread:
        base = -free / overall if overall > 0 else 0.0
        width = 3.0
    else:
        base = free if overall > 0 else top + 1.0
        width = 2.0 * top + 3.0
    return base - tier * width


@leaf_kernel
def dra_gpu_free(n: int, dgpu: np.ndarray, dra_free: np.ndarray, dra_rel: np.ndarray) -> int:
    """Devices of node n in the DRA classes ``dgpu`` flags (those that count as gpu) that are free or
    releasing (free + releasing at least ``1 - EPS``): ``CycleState.dra_gpu_whole_one``. A device slot
    a node does not have holds 0 free and 0 releasing (``CycleState`` never writes one), so it is
    never counted and needs no mask here."""
    c = 0
    for cl in range(dgpu.shape[0]):
        if dgpu[cl]:
            for d in range(dra_free.shape[2]):
                if dra_free[n, cl, d] + dra_rel[n, cl, d] >= 1 - EPS:
                    c += 1
    return c


@leaf_kernel
def claims_fit(n: int, claims: np.ndarray, dra_free: np.ndarray, dra_rel: np.ndarray) -> int:
    """``CycleState.claims_fit`` of a task claiming ``claims[c]`` devices of each class c on node n:
    2 every claim fits on free devices, 1 only on free + releasing ones, 0 not at all. (A class of
    fewer than ``claims[c]`` devices on n fails both counts: its missing slots hold 0 and 0.)"""
    fi = True
    for cl in range(claims.shape[0]):
        k = claims[cl]
        if k == 0:
            continue
        nf = 0
        na = 0
        for d in range(dra_free.shape[2]):
            x = dra_free[n, cl, d]
            if x >= 1 - EPS:
                nf += 1
            if x + dra_rel[n, cl, d] >= 1 - EPS:
                na += 1
        if nf < k:
            fi = False
            if na < k:
                return 0
    return 2 if fi else 1


@leaf_kernel
def query_span(lo: int, hi: int, n_nodes: int, hs: np.ndarray) -> tuple[int, int, bool]:
    """The nodes a query re-evaluates: ``log[lo:hi]``, or every node when the changed ones are many
    (more than an eighth of the nodes), and then the heap starts empty (every fitting node is pushed
    anew). Returns ``(lo, hi, full)``."""
    if (hi - lo) * 8 > n_nodes:
        hs[0] = 0
        return 0, n_nodes, True
    return lo, hi, False


@leaf_kernel
def offer(n: int, fi: bool, kk: float, idle_ok: np.ndarray, any_ok: np.ndarray, key: np.ndarray, hk: np.ndarray,
          hn: np.ndarray, hs: np.ndarray) -> None:
    """Record that node ``n`` fits (on idle resources: ``fi``) with placement key ``kk`` and push its
    heap entry, dropping the dead entries first when the heap is full (:func:`rebuild`)."""
    idle_ok[n] = fi
    any_ok[n] = True
    key[n] = kk
    if hs[0] >= hk.shape[0]:
        rebuild(any_ok, key, hk, hn, hs)
    push(hk, hn, hs, kk, n)


@leaf_kernel
def query_whole(log: np.ndarray, lo: int, hi: int, sched: np.ndarray, sel: np.ndarray, rc: float, rm: float,
                k: int, ndev: np.ndarray, top: float, cap: np.ndarray, col: int, spread: bool, node_both: np.ndarray,
                dev_free: np.ndarray, dev_rel: np.ndarray, idle_ok: np.ndarray, any_ok: np.ndarray, key: np.ndarray,
                hk: np.ndarray, hn: np.ndarray, hs: np.ndarray) -> int:
    """:func:`query_whole_dra` on a cluster without DRA GPUs for a task without claims (the DRA
    arguments empty)."""
    return query_whole_dra(log, lo, hi, sched, sel, rc, rm, k, ndev, top, cap, col, spread, node_both, dev_free,
                           dev_rel, idle_ok, any_ok, key, hk, hn, hs, cap[:0], sel[:0], log[:0], node_both[:0],
                           node_both[:0])


@leaf_kernel
def query_whole_dra(log: np.ndarray, lo: int, hi: int, sched: np.ndarray, sel: np.ndarray, rc: float, rm: float,
                    k: int, ndev: np.ndarray, top: float, cap: np.ndarray, col: int, spread: bool,
                    node_both: np.ndarray, dev_free: np.ndarray, dev_rel: np.ndarray, idle_ok: np.ndarray,
                    any_ok: np.ndarray, key: np.ndarray, hk: np.ndarray, hn: np.ndarray, hs: np.ndarray,
                    gcap: np.ndarray, dgpu: np.ndarray, claims: np.ndarray, dra_free: np.ndarray,
                    dra_rel: np.ndarray) -> int:
    """The shape index's query for a task without a shared GPU (``k`` whole devices, CPU ``rc``,
    memory ``rm``; ``sel`` empty = no node selector; ``cap`` the nodes' capacity in ``col`` when
    ordering on CPU): re-evaluate the nodes changed since the last query (``log[lo:hi]``, repeats
    allowed; when they are many, every node), push the fitting ones' entries and return the best
    fitting node or -1 (:func:`best`).

    DRA (``plugins/dynamicresources``): on a cluster with DRA classes that count as gpu, ``gcap``
    holds every node's GPU capacity (its devices plus those of the gpu classes, flagged in ``dgpu``)
    and the key counts the free or releasing devices of those classes as GPUs too
    (:func:`dra_gpu_free`; ``top`` is then the largest GPU capacity, as ``node_key_one`` has it);
    empty ``gcap``: no DRA GPUs. ``claims`` (per class, empty: none): the task's device claims, which
    must fit too (:func:`claims_fit`, all or nothing). ``dra_free`` / ``dra_rel``: the state's (N, D, M)
    DRA device rows. The same comparisons and arithmetic as ``CycleState.fit_one`` +
    ``nodeplacement.node_key_one``.

    Kernel-callable: a compiled caller keeps its own log of changed nodes (any int64 array) and the
    index's arrays (``idle_ok``, ``any_ok`` (N,) bool, ``key`` (N,) float64, the heap ``hk``/``hn``
    of capacity > N, ``hs`` (1,) int64). When the heap is full the dead entries are dropped first
    (:func:`rebuild`; it pushes every fitting node's current entry, so a node pushed right after is
    a duplicate of a live entry, which changes nothing :func:`best` returns)."""
    lo, hi, full = query_span(lo, hi, any_ok.shape[0], hs)
    has_sel = sel.shape[0] > 0
    dra = gcap.shape[0] > 0
    has_claims = claims.shape[0] > 0
    for i in range(lo, hi):
        n = i if full else log[i]
        idle_ok[n] = False
        any_ok[n] = False
        if not sched[n] or (has_sel and not sel[n]):
            continue
        ic = node_both[n, 0, CPU]
        im = node_both[n, 0, MEM]
        lc = node_both[n, 1, CPU]
        lm = node_both[n, 1, MEM]
        fi = ic >= rc - EPS and im >= rm - EPS
        fa = ic + lc >= rc - EPS and im + lm >= rm - EPS
        if not fa:
            continue
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
                    continue
        if has_claims:  # (the node fits otherwise: fa holds here)
            c = claims_fit(n, claims, dra_free, dra_rel)
            if c == 0:
                continue
            fi = fi and c == 2
        if col == GPU:
            free = float(whole_any)
            overall = float(nd)
            if dra:
                free += float(dra_gpu_free(n, dgpu, dra_free, dra_rel))
                overall = gcap[n]
        else:
            free = node_both[n, 0, col] + node_both[n, 1, col]
            overall = cap[n]
        tier = 1000.0 if fi else 0.0
        if col == CPU and ((gcap[n] == 0) if dra else (nd == 0)):
            tier += 10.0
        offer(n, fi, placement_key(free, overall, top, spread, tier), idle_ok, any_ok, key, hk, hn, hs)
    return best(any_ok, key, hk, hn, hs)


@leaf_kernel
def query_shared(log: np.ndarray, lo: int, hi: int, sched: np.ndarray, sel: np.ndarray, rc: float, rm: float,
                 frac: np.ndarray, fgpu: float, ndev: np.ndarray, top: float, spread: bool, node_both: np.ndarray,
                 dev_free: np.ndarray, dev_rel: np.ndarray, dev_shared: np.ndarray, idle_ok: np.ndarray,
                 any_ok: np.ndarray, key: np.ndarray, hk: np.ndarray, hn: np.ndarray, hs: np.ndarray) -> int:
    """:func:`query_shared_dra` on a cluster without DRA GPUs for a task without claims."""
    return query_shared_dra(log, lo, hi, sched, sel, rc, rm, frac, fgpu, ndev, top, spread, node_both, dev_free,
                            dev_rel, dev_shared, idle_ok, any_ok, key, hk, hn, hs, frac[:0], sel[:0], log[:0],
                            node_both[:0], node_both[:0])


@leaf_kernel
def query_shared_dra(log: np.ndarray, lo: int, hi: int, sched: np.ndarray, sel: np.ndarray, rc: float, rm: float,
                     frac: np.ndarray, fgpu: float, ndev: np.ndarray, top: float, spread: bool, node_both: np.ndarray,
                     dev_free: np.ndarray, dev_rel: np.ndarray, dev_shared: np.ndarray, idle_ok: np.ndarray,
                     any_ok: np.ndarray, key: np.ndarray, hk: np.ndarray, hn: np.ndarray, hs: np.ndarray,
                     gcap: np.ndarray, dgpu: np.ndarray, claims: np.ndarray, dra_free: np.ndarray,
                     dra_rel: np.ndarray) -> int:
    """:func:`query_whole_dra` for a task sharing one GPU (fraction ``fgpu``, or per node ``frac`` of
    its device memory when ``frac`` is not empty); the DRA arguments as there."""
    lo, hi, full = query_span(lo, hi, any_ok.shape[0], hs)
    has_sel = sel.shape[0] > 0
    has_frac = frac.shape[0] > 0
    dra = gcap.shape[0] > 0
    has_claims = claims.shape[0] > 0
    for i in range(lo, hi):
        n = i if full else log[i]
        idle_ok[n] = False
        any_ok[n] = False
        if not sched[n] or (has_sel and not sel[n]):
            continue
        fi = node_both[n, 0, CPU] >= rc - EPS and node_both[n, 0, MEM] >= rm - EPS
        fa = (node_both[n, 0, CPU] + node_both[n, 1, CPU] >= rc - EPS
              and node_both[n, 0, MEM] + node_both[n, 1, MEM] >= rm - EPS)
        nd = ndev[n]
        f = frac[n] if has_frac else fgpu
        if not fa or nd == 0 or f > 1 + EPS:
            continue
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
            continue
        if has_claims:  # (the node fits otherwise: fa holds here)
            c = claims_fit(n, claims, dra_free, dra_rel)
            if c == 0:
                continue
            fi = fi and c == 2
        tier = 1000.0 if fi else 0.0
        if joins and not spread:  # gpusharingorder runs with the GPU binpack strategy only
            tier += 10000.0
        free = float(whole)
        overall = float(nd)  # nd > 0: a device fitted
        if dra:
            free += float(dra_gpu_free(n, dgpu, dra_free, dra_rel))
            overall = gcap[n]
        offer(n, fi, placement_key(free, overall, top, spread, tier), idle_ok, any_ok, key, hk, hn, hs)
    return best(any_ok, key, hk, hn, hs)
