"""The idle-GPU filter of accumulated scenarios (KAI ``accumulated_scenario_filters/idle_gpus``).

Before a victim set is simulated: could the beneficiary's GPU tasks fit at all if the victims'
GPUs were free? Per node: free + releasing + the victims' GPUs there; tasks are packed best-fit,
largest first, honouring node selectors. A necessary condition only: scenarios failing it are
never simulated, the others are.
"""
from __future__ import annotations

import numpy as np

from ..snapshot import GPU
from ..state import EPS, CycleState


def fit_base(state: CycleState) -> np.ndarray:
    """Per-node GPUs a pipelined task could use now (free + releasing); unschedulable nodes 0."""
    s = state
    base = s.node_idle_gpus() + s.node_releasing_gpus()
    return np.where(s.node_schedulable, base, 0.0)


def may_fit(state: CycleState, partial: list[int], base: np.ndarray, victim_gpu: np.ndarray) -> bool:
    """Could the GPUs of tasks ``partial`` fit with per-node ``base`` plus ``victim_gpu``?"""
    s = state
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
    return pack(s, partial, idx, cap[idx])


def pack(state: CycleState, partial: list[int], idx: np.ndarray, cap: np.ndarray) -> bool:
    """:func:`may_fit`'s best-fit packing of several tasks on nodes ``idx`` (ascending: the nodes
    that could hold the smallest GPU task) with per-node GPUs ``cap`` (consumed)."""
    s = state
    if idx.size == 0:
        return False
    g = s.task_order_req[partial, GPU]
    for t in [partial[i] for i in np.argsort(-g, kind="stable")]:
        need = float(s.task_order_req[t, GPU])
        if need <= EPS:
            continue
        ok = cap >= need - 1e-9
        key = s.task_selector_key[t]
        if key:
            ok &= s.selector_mask(key)[idx]
        if not ok.any():
            return False
        n = int(np.argmin(np.where(ok, cap, np.inf)))
        cap[n] -= need
    return True
