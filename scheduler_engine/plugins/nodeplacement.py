"""The node order of a placement (KAI ``nodeplacement``, ``nodeavailability``, ``gpusharingorder``,
``resourcetype``) and its incremental per-shape index.

:func:`node_keys` turns KAI's summed node-order scores into one float key per node (smaller first,
ties by node index); :func:`node_key_one` is the same formula for one node in plain Python;
:class:`ShapeIndex` keeps the fit masks and keys of one task shape over all nodes up to date as the
state changes (``state.node_log``), so the first node in placement order costs O(changed nodes).
Real placements (allocate) and simulated ones (the victim solvers) use the same order.
"""
from __future__ import annotations

import numpy as np

from ..kernels import node_index
from ..snapshot import CPU, GPU, MEM
from ..state import EPS, CycleState


def placement_strategy(state: CycleState, placement: dict, t: int) -> tuple[int, bool]:
    """``(column, spread)`` of task t: GPU tasks are ordered on GPU, CPU-only ones on CPU, each by
    ``config.placement`` (binpack unless ``spread``)."""
    cpu_only = state.task_request[t, GPU] <= EPS and state.task_gpu_memory[t] <= 0
    col = CPU if cpu_only else GPU
    return col, placement.get("cpu" if cpu_only else "gpu", "binpack") == "spread"


def node_keys(state: CycleState, t: int, rows, idle_ok_rows: np.ndarray, col: int, spread: bool) -> np.ndarray:
    """Placement order of nodes ``rows`` for task t as one float key per node, smaller first.

    KAI sums node-order scores whose magnitudes never overlap, so the order is lexicographic:
    a shared-GPU task that fits a GPU group already in shared use (gpusharingorder, 10000; KAI
    enables that plugin with the GPU binpack strategy only, ``SchedulingShardSpec.setDefaultPlugins``,
    so under ``gpu: spread`` a fractional task goes by the spread score alone), then
    nodes where the task fits on free resources (nodeavailability, 1000), then a CPU-only task on
    a node without GPUs (resourcetype, 10), then binpack (least non-allocated first) or spread
    (largest non-allocated share first) on GPU for GPU tasks and on CPU otherwise (nodeplacement,
    non-allocated = free + releasing; GPU counted in devices with nothing but releasing load). Devices
    of DRA classes that count as gpu are GPUs of the node here too (KAI adds them to the node's GPU
    vector), for every GPU task; a CPU-only task's "node without GPUs" means without either kind.
    """
    s = state
    if not isinstance(rows, slice) and len(rows) <= 4:
        return np.fromiter((node_key_one(s, t, int(n), bool(i), col, spread) for n, i in zip(rows, idle_ok_rows)),
                           float, len(rows))
    dra = s.has_dra_gpus
    if col == GPU:
        if s.G:
            whole = ((s.dev_free[rows] + s.dev_rel[rows] >= 1 - EPS) & s.dev_valid[rows]).sum(axis=1).astype(float)
        else:
            whole = np.zeros(len(idle_ok_rows))
        if dra:
            free, overall = whole + s.dra_gpu_whole(rows), s.node_capacity[rows, GPU].astype(float)
            top = float(max(s.node_capacity[:, GPU].max() if s.N else 1.0, 1.0))
        else:
            free, overall, top = whole, s.node_devices[rows].astype(float), float(max(s.G, 1))
    else:
        free = s.node_idle[rows, col] + s.node_releasing[rows, col]
        overall = s.node_capacity[rows, col]
        top = float(s.node_capacity[:, col].max()) if s.N else 1.0
    has = overall > 0
    if spread:
        base = np.where(has, -free / np.where(has, overall, 1.0), 0.0)
        width = 3.0
    else:
        base = np.where(has, free, top + 1.0)
        width = 2.0 * top + 3.0
    tier = 1000.0 * idle_ok_rows
    if s.task_is_shared[t] and s.G and not spread:
        if s.task_is_mem[t]:
            gm = s.node_gpu_memory[rows]
            f = np.where(gm > 0, s.task_gpu_memory[t] / np.where(gm > 0, gm, 1.0), np.inf)[:, None]
        else:
            f = float(s.task_request[t, GPU])
        # in shared use and not wholly released (KAI IsTaskFitOnGpuGroup: !isAllGpuReleased)
        used = s.dev_shared[rows] & (s.dev_free[rows] + s.dev_rel[rows] < 1 - EPS) & s.dev_valid[rows]
        fits = used & (s.dev_free[rows] + s.dev_rel[rows] >= f - EPS)
        tier = tier + 10000.0 * fits.any(axis=1)
    elif col == CPU:
        tier = tier + 10.0 * ((s.node_capacity[rows, GPU] if dra else s.node_devices[rows]) == 0)
    return base - tier * width


def node_key_one(s: CycleState, t: int, n: int, idle_ok: bool, col: int, spread: bool) -> float:
    """:func:`node_keys` for one node in plain Python (same formula)."""
    nd = int(s.node_devices[n])
    dra = s.has_dra_gpus
    if col == GPU:
        fr = s.dev_free[n, :nd].tolist() if nd else []
        rl = s.dev_rel[n, :nd].tolist() if nd else []
        free = float(sum(1 for a, b in zip(fr, rl) if a + b >= 1 - EPS))
        overall, top = float(nd), float(max(s.G, 1))
        if dra:
            free += s.dra_gpu_whole_one(n)
            overall = float(s.node_capacity[n, GPU])
            top = float(max(s.node_capacity[:, GPU].max(), 1.0))
    else:
        free = float(s.node_idle[n, col] + s.node_releasing[n, col])
        overall = float(s.node_capacity[n, col])
        top = float(s.node_capacity[:, col].max())
    if spread:
        base, width = (-free / overall if overall > 0 else 0.0), 3.0
    else:
        base, width = (free if overall > 0 else top + 1.0), 2.0 * top + 3.0
    tier = 1000.0 if idle_ok else 0.0
    if s.task_is_shared[t] and nd and not spread:
        f = s._shared_fraction(t, n)
        sh = s.dev_shared[n, :nd].tolist()
        fr = s.dev_free[n, :nd].tolist()
        rl = s.dev_rel[n, :nd].tolist()
        if any(h and a + b < 1 - EPS and a + b >= f - EPS for h, a, b in zip(sh, fr, rl)):
            tier += 10000.0
    elif col == CPU and (s.node_capacity[n, GPU] if dra else nd) == 0:
        tier += 10.0
    return base - tier * width


class ShapeIndex:
    """Incrementally maintained fit masks and placement keys of one task shape over all nodes.

    Identical tasks (same request, GPU memory and nodeSelector) share one index. After a
    placement only the nodes in ``state.node_log`` since the last query are re-evaluated; the
    fitting nodes sit in a lazy heap of ``(key, node)`` so the best node (smallest key, then
    smallest index) costs O(changed nodes * log N) instead of a scan of the cluster. The
    re-evaluation of a node (fit + key) and the heap are compiled kernels
    (:mod:`scheduler_engine.kernels.node_index`; on a cluster with DRA GPUs or for a task with device
    claims their ``_dra`` forms, which count a node's free devices of gpu classes as GPUs and check
    the claims). The generic ``fit_one`` + :func:`node_key_one` in Python stay the reference
    (``ShapeIndex.compiled = False``) and serve a task sharing a GPU on a cluster without GPU devices.
    """

    __slots__ = ("state", "t", "col", "spread", "idle_ok", "any_ok", "key", "pos", "hk", "hn", "hs", "_fast", "_shared",
                 "_kargs", "_cq", "_dra")

    #: ``False``: every index re-evaluates changed nodes with the generic ``fit_one`` + :func:`node_key_one`
    #: in Python (the reference; the tests compare both paths bit for bit)
    compiled = True

    def __init__(self, state: CycleState, t: int, col: int, spread: bool) -> None:
        self.state, self.t, self.col, self.spread = state, t, col, spread
        s = state
        # constants of the compiled query (tasks without / with a shared GPU), copied: they are the
        # values of the moment the index is built. ``_cq``: those of this index's own query; ``_fast``:
        # the same tuple when compiled callers (allocate's attempt, the scenario kernels) may query the
        # index, i.e. for a task without claims (None otherwise); they pass the cluster's DRA GPUs
        # (``CycleState.dra_query_args``) to :func:`node_index.query_whole_dra` / ``query_shared_dra``
        # or, like allocate's attempt, keep off clusters with DRA GPUs; ``_dra``: the DRA arguments of
        # this index's own query when the cluster has DRA GPUs or the task claims devices (else None)
        self._cq = self._fast = self._dra = None
        # a compiled caller's argument tuple, built on first use, with the kernel it was last called
        # through and that kernel's entry point for these arguments (allocate's attempt)
        self._kargs = None
        self._shared = bool(s.task_is_shared[t])
        sched = np.array(s.node_schedulable, dtype=np.bool_)
        ndev = np.array(s.node_devices, dtype=np.int64)
        dra = s.has_dra_gpus
        if dra or s.task_has_claims[t]:
            self._dra = s.dra_query_args(t)
        if col == GPU:
            # (node_key_one's ``top``: the most GPUs of a node, DRA devices of gpu classes included)
            top = float(max(s.node_capacity[:, GPU].max(), 1.0)) if dra else float(max(s.G, 1))
        else:
            top = float(s.node_capacity[:, col].max()) if s.N else 1.0
        if not s.task_is_shared[t]:
            key = s.task_selector_key[t]
            req = s.task_request[t]
            cap = _NO_FLOATS if col == GPU else np.array(s.node_capacity[:, col], dtype=np.float64)
            self._cq = (sched, np.array(s.selector_mask(key), dtype=np.bool_) if key else _NO_BOOLS,
                        float(req[CPU]), float(req[MEM]), int(s.task_whole[t]), ndev, top, cap)
        elif col == GPU and s.G:
            key = s.task_selector_key[t]
            req = s.task_request[t]
            if s.task_is_mem[t]:
                gm = s.node_gpu_memory
                with np.errstate(divide="ignore", invalid="ignore"):
                    frac = np.where(gm > 0, s.task_gpu_memory[t] / np.where(gm > 0, gm, 1.0), np.inf).astype(np.float64)
            else:
                frac = _NO_FLOATS
            self._cq = (sched, np.array(s.selector_mask(key), dtype=np.bool_) if key else _NO_BOOLS,
                        float(req[CPU]), float(req[MEM]), frac, ndev, top, float(req[GPU]))
        if not self.compiled:
            self._cq = None
        if not s._claims_list[t]:
            self._fast = self._cq
        self.hs = np.zeros(1, dtype=np.int64)
        cap0 = 2 * s.N + 16
        self.hk = np.empty(cap0, dtype=np.float64)
        self.hn = np.empty(cap0, dtype=np.int64)
        self._full()

    def _room(self, m: int) -> None:
        """Make room for m more heap entries: drop the dead ones (and grow if still short)."""
        if int(self.hs[0]) + m <= self.hk.shape[0]:
            return
        size = max(self.hk.shape[0], 2 * (self.state.N + m))
        if size > self.hk.shape[0]:
            self.hk = np.empty(size, dtype=np.float64)
            self.hn = np.empty(size, dtype=np.int64)
            self._kargs = None
        node_index.rebuild(self.any_ok, self.key, self.hk, self.hn, self.hs)

    def _full(self) -> None:
        s = self.state
        idle_ok, any_ok = s.fit_rows(self.t, slice(None))
        key = node_keys(s, self.t, slice(None), idle_ok, self.col, self.spread)
        self.idle_ok = np.array(idle_ok, dtype=np.bool_)
        self.any_ok = np.array(any_ok, dtype=np.bool_)
        self.key = np.array(key, dtype=np.float64)
        self._kargs = None
        self.pos = len(s.node_log)
        self._room(s.N)
        node_index.rebuild(self.any_ok, self.key, self.hk, self.hn, self.hs)

    def _batch(self, rows: np.ndarray) -> None:
        """:meth:`_update` for many nodes at once (the vectorised primitives ``_full`` uses)."""
        s = self.state
        idle_ok, any_ok = s.fit_rows(self.t, rows)
        keys = np.asarray(node_keys(s, self.t, rows, idle_ok, self.col, self.spread), dtype=np.float64)
        self.idle_ok[rows] = idle_ok
        self.any_ok[rows] = any_ok
        self.key[rows] = keys
        self._room(rows.shape[0])
        node_index.push_rows(rows.astype(np.int64, copy=False), np.asarray(any_ok, dtype=np.bool_), keys,
                             self.hk, self.hn, self.hs)

    def _update_nodes(self, nodes: np.ndarray) -> None:
        """Re-evaluate ``nodes`` (fit flags, key) and push the fitting ones."""
        if self._cq is None:
            for n in nodes.tolist():
                self._update_generic(n)
            return
        self._query_fast(nodes)

    def _query_fast(self, nodes: np.ndarray) -> int:
        """One compiled query (:func:`node_index.query_whole` / :func:`node_index.query_shared`, or
        their ``_dra`` forms on a cluster with DRA GPUs or for a task with claims): re-evaluate
        ``nodes`` (int64, repeats allowed; many: every node) and return the best node."""
        s = self.state
        dra = self._dra
        if self._shared:
            sched, sel, rc, rm, frac, ndev, top, fgpu = self._cq
            if dra is None:
                return node_index.query_shared(nodes, 0, nodes.shape[0], sched, sel, rc, rm, frac, fgpu, ndev, top,
                                               self.spread, s._node_both, s.dev_free, s.dev_rel, s.dev_shared,
                                               self.idle_ok, self.any_ok, self.key, self.hk, self.hn, self.hs)
            return node_index.query_shared_dra(nodes, 0, nodes.shape[0], sched, sel, rc, rm, frac, fgpu, ndev, top,
                                               self.spread, s._node_both, s.dev_free, s.dev_rel, s.dev_shared,
                                               self.idle_ok, self.any_ok, self.key, self.hk, self.hn, self.hs, *dra)
        sched, sel, rc, rm, k, ndev, top, cap = self._cq
        if dra is None:
            return node_index.query_whole(nodes, 0, nodes.shape[0], sched, sel, rc, rm, k, ndev, top, cap, self.col,
                                          self.spread, s._node_both, s.dev_free, s.dev_rel, self.idle_ok, self.any_ok,
                                          self.key, self.hk, self.hn, self.hs)
        return node_index.query_whole_dra(nodes, 0, nodes.shape[0], sched, sel, rc, rm, k, ndev, top, cap, self.col,
                                          self.spread, s._node_both, s.dev_free, s.dev_rel, self.idle_ok, self.any_ok,
                                          self.key, self.hk, self.hn, self.hs, *dra)

    def _update_generic(self, n: int) -> None:
        s = self.state
        fi, fa = s.fit_one(self.t, n)
        k = node_key_one(s, self.t, n, fi, self.col, self.spread)
        self.idle_ok[n] = fi
        self.any_ok[n] = fa
        self.key[n] = k
        if fa:
            self._room(1)
            node_index.push(self.hk, self.hn, self.hs, float(self.key[n]), n)

    def _update(self, n: int) -> None:
        self._update_nodes(np.array([n], dtype=np.int64))

    def entries(self) -> list[tuple[float, int]]:
        """The heap's entries (live and dead) as ``(key, node)`` pairs, for tests."""
        size = int(self.hs[0])
        return list(zip(self.hk[:size].tolist(), self.hn[:size].tolist()))

    def query(self) -> int:
        """Best node (or -1) for the shape under the current state: the fitting node first in
        placement order (smallest key, then smallest index)."""
        s = self.state
        log = s.node_log
        if self._cq is not None:
            # one compiled call: the changed nodes' updates and the heap's top
            hi = len(log)
            if hi == self.pos:
                return int(node_index.best(self.any_ok, self.key, self.hk, self.hn, self.hs))
            delta = log[self.pos:hi]  # (an int64 view of the log: the query only reads it)
            self.pos = hi
            return int(self._query_fast(delta))
        if len(log) != self.pos:
            delta = log[self.pos:]
            self.pos = len(log)
            if len(delta) <= 16:
                # (re-evaluating a node twice gives the same flags and key: no need to deduplicate)
                self._update_nodes(np.array(delta, dtype=np.int64))
            else:
                # (the order nodes are re-evaluated in does not matter: each one's entries are
                # recomputed from the current state and the heap orders by (key, node))
                changed = set(delta.tolist())
                if len(changed) * 8 > s.N:
                    self._full()
                elif len(changed) > 48:
                    self._batch(np.fromiter(sorted(changed), dtype=np.int64, count=len(changed)))
                else:
                    self._update_nodes(np.fromiter(changed, dtype=np.int64, count=len(changed)))
        return int(node_index.best(self.any_ok, self.key, self.hk, self.hn, self.hs))


_NO_BOOLS = np.zeros(0, dtype=np.bool_)
_NO_FLOATS = np.zeros(0, dtype=np.float64)
