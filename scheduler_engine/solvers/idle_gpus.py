"""The idle-GPU filter of accumulated scenarios (KAI ``accumulated_scenario_filters/idle_gpus``).

Before a victim set is simulated: could the beneficiary's GPU tasks fit at all if the victims'
GPUs were free? Per node: free + releasing + the victims' GPUs there; tasks are packed best-fit,
largest first, honouring node selectors. A necessary condition only: scenarios failing it are
never simulated, the others are.
"""
from __future__ import annotations

import numpy as np

from ..snapshot import GPU
from ..kernels import victim_bound
from ..kernels.gpu_fit import pack_best_fit
from ..state import EPS, CycleState


def fit_base(state: CycleState, rows: np.ndarray | None = None) -> np.ndarray:
    """Per-node GPUs a pipelined task could use now (free + releasing); unschedulable nodes 0.
    ``rows``: those nodes only (the same values as the full array's rows)."""
    s = state
    base = s.node_idle_gpus(rows) + s.node_releasing_gpus(rows)
    return np.where(s.node_schedulable if rows is None else s.node_schedulable[rows], base, 0.0)


#: :func:`may_fit` in one compiled pass (:func:`~scheduler_engine.kernels.victim_bound.capacity_fits`,
#: :func:`~scheduler_engine.kernels.victim_bound.pack_fits`); ``False``: the numpy expressions (tests compare)
USE_KERNEL = True
_NO_MASK = np.zeros(0, dtype=np.bool_)


def may_fit(state: CycleState, partial: list[int], base: np.ndarray, victim_gpu: np.ndarray,
            dem: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> bool:
    """Could the GPUs of tasks ``partial`` fit with per-node ``base`` plus ``victim_gpu``?

    Compiled (``USE_KERNEL``): the same per-node sums, nodes and packing without the (N,) temporaries
    of the numpy expressions below (the sum, the selector's where, the threshold's mask, its nodes and
    their capacities: ~25 us per call at 10,000 nodes, once per prefix search for its bound)."""
    s = state
    if USE_KERNEL and s.N > 0:
        if len(partial) == 1:
            t = partial[0]
            need = float(s.task_order_req[t, GPU])
            if need <= EPS:
                return True
            key = s.task_selector_key[t]
            return bool(victim_bound.capacity_fits(base, victim_gpu, s.selector_mask(key) if key else _NO_MASK,
                                                   bool(key), need - 1e-9))
        need, sel, masks = demand(s, partial) if dem is None else dem
        buf = s.__dict__.get("_victims_fit_bufs")
        if buf is None:
            buf = s._victims_fit_bufs = (np.empty(s.N, dtype=np.int64), np.empty(s.N))
        return bool(victim_bound.pack_fits(base, victim_gpu, need, sel, masks, buf[0], buf[1]))
    if len(partial) == 1:
        t = partial[0]
        need = float(s.task_order_req[t, GPU])
        if need <= EPS:
            return True
        key = s.task_selector_key[t]
        cap = base + victim_gpu
        if key:
            cap = np.where(s.selector_mask(key), cap, 0.0)
        return float(cap.max()) >= need - 1e-9
    g = s.task_order_req[partial, GPU]
    pos_g = g > EPS
    if not np.any(pos_g):
        return True
    cap = base + victim_gpu
    # only nodes that could hold the smallest GPU task take part (the same choices: a node
    # below that can never pass a task's test, and argmin's first index keeps index order)
    idx = np.flatnonzero(cap >= float(g[pos_g].min()) - 1e-9)
    return pack(s, partial, idx, cap[idx], dem)


def demand(state: CycleState, partial: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The GPU requests of tasks ``partial`` as :func:`~scheduler_engine.kernels.gpu_fit.pack_best_fit`
    takes them: requests largest first (stable), each task's row in a stack of node-selector masks
    (-1: no selector), and the stack ((0, N) when no task has a selector)."""
    s = state
    g = s.task_order_req[partial, GPU]
    order = np.argsort(-g, kind="stable")
    rows: dict[tuple, int] = {}
    sel = np.full(len(partial), -1, dtype=np.int64)
    for i, p in enumerate(order.tolist()):
        key = s.task_selector_key[partial[p]]
        if key:
            sel[i] = rows.setdefault(key, len(rows))
    masks = np.stack([s.selector_mask(k) for k in rows]) if rows else np.zeros((0, s.N), dtype=bool)
    return np.ascontiguousarray(g[order], dtype=np.float64), sel, masks


def pack(state: CycleState, partial: list[int], idx: np.ndarray, cap: np.ndarray,
         dem: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> bool:
    """:func:`may_fit`'s best-fit packing of several tasks on nodes ``idx`` (ascending: the nodes
    that could hold the smallest GPU task) with per-node GPUs ``cap`` (consumed): largest task
    first, each on the fitting node with the least GPUs (compiled kernel; ``dem`` = :func:`demand`
    of ``partial`` when the caller keeps it)."""
    if idx.size == 0:
        return False
    need, sel, masks = demand(state, partial) if dem is None else dem
    return bool(pack_best_fit(need, sel, masks, idx.astype(np.int64, copy=False),
                              np.ascontiguousarray(cap, dtype=np.float64)))
