"""Kernel-callable placement pieces: the whole-device choice (``kernels.devices.choose_whole``, behind
``CycleState.choose_devices``) and the shape index's query (``kernels.node_index.query_whole`` /
``query_shared``, behind ``ShapeIndex.query``).

Each is checked compiled against its interpreted source (``py_func``; under ``NUMBA_DISABLE_JIT=1``
both are the same function and the checks against the references below carry the test) and against
the Python code it replaced: the list-based device choice, and the brute-force first node in
placement order (``fit_one`` + ``node_key_one`` over every node, smallest ``(key, node)``).
"""
from __future__ import annotations

import numpy as np
import pytest

from scheduler_engine import bench
from scheduler_engine.actions import allocate
from scheduler_engine.kernels import devices, node_index
from scheduler_engine.plugins import nodeplacement
from scheduler_engine.snapshot import TaskState
from scheduler_engine.state import EPS, CycleState

_ACTIVE = (int(TaskState.RUNNING), int(TaskState.BINDING), int(TaskState.PIPELINED))
_PEND = int(TaskState.PENDING)


def _interpreted(f):
    return getattr(f, "py_func", f)


def _old_choose_whole(free: list[float], rel: list[float], k: int, pipelined: bool) -> list[int] | None:
    """``CycleState.choose_devices`` for whole devices as it was in plain Python (reference)."""
    nd = len(free)
    if k == 0:
        return []
    one = 1 - EPS
    if pipelined:
        ok = [d for d in range(nd) if free[d] + rel[d] >= one]
        ok = [d for d in ok if not free[d] < one] + [d for d in ok if free[d] < one]
    else:
        ok = [d for d, x in enumerate(free) if x >= one]
    if len(ok) < k:
        return None
    return ok[:k]


def test_choose_whole_equals_the_list_code_compiled_and_interpreted():
    rng = np.random.default_rng(5)
    # values around the thresholds: exactly 1 - EPS, just below, 1, 0, -0.0, fractions, releasing shares
    pool = np.array([0.0, -0.0, 1.0, 1 - EPS, np.nextafter(1 - EPS, 0.0), 0.5, 0.25, 1e-10, 0.999999998, 0.75])
    checked = taken = 0
    for _ in range(3000):
        N, G = 3, int(rng.integers(1, 9))
        free = rng.choice(pool, size=(N, G))
        rel = rng.choice(pool, size=(N, G))
        n = int(rng.integers(0, N))
        nd = int(rng.integers(0, G + 1))
        k = int(rng.integers(0, G + 2))
        for pipelined in (False, True):
            want = _old_choose_whole(free[n, :nd].tolist(), rel[n, :nd].tolist(), k, pipelined)
            got = []
            for f in (devices.choose_whole, _interpreted(devices.choose_whole)):
                out = np.full(max(min(k, nd), 1), -7, dtype=np.int64)
                c = f(free, rel, n, nd, k, pipelined, out)
                got.append(None if c < 0 else out[:c].tolist())
            assert got[0] == got[1] == want, (free[n, :nd], rel[n, :nd], k, pipelined)
            checked += 1
            taken += bool(want)
    assert checked == 6000 and taken > 500


def _state(seed: int, shape: str) -> CycleState:
    return CycleState(bench.generate(nodes=30, jobs=220, queues=8, seed=seed, shape=shape))


def _brute_best(s: CycleState, t: int, col: int, spread: bool) -> int:
    best, bn = None, -1
    for n in range(s.N):
        fi, fa = s.fit_one(t, n)
        if fa:
            k = nodeplacement.node_key_one(s, t, n, fi, col, spread)
            if best is None or k < best:
                best, bn = k, n
    return bn


def _random_change(s: CycleState, rng: np.random.Generator) -> None:
    """A legal evict or place (bind or pipeline), as the engine's actions make them."""
    if rng.random() < 0.45:
        act = np.flatnonzero(np.isin(s.task_state, _ACTIVE))
        if act.size:
            s.evict(int(rng.choice(act)))
            return
    pend = np.flatnonzero((s.task_state == _PEND) & (s.task_node < 0))
    for t in rng.permutation(pend)[:10].tolist():
        pipelined = bool(rng.random() < 0.5)
        for n in rng.permutation(s.N)[:5].tolist():
            fi, fa = s.fit_one(t, n)
            if (fa if pipelined else fi) and s.choose_devices(t, n, pipelined) is not None:
                s.place(t, n, pipelined=pipelined)
                return


@pytest.mark.parametrize("seed,shape,spread", [(1, "mixed", False), (2, "mixed", True), (3, "one-gpu", False)])
def test_index_query_is_the_first_node_in_placement_order(seed, shape, spread):
    """Through random evictions and placements (one or many changed nodes between queries), the
    compiled query, the interpreted query on a copy of the index and the brute force agree."""
    s = _state(seed, shape)
    placement = {"gpu": "spread", "cpu": "spread"} if spread else {}
    rng = np.random.default_rng(seed)
    shapes = {s.task_signature(t): t for t in np.flatnonzero(s.task_state == _PEND).tolist()}
    idx = {}
    for t in shapes.values():
        col, sp = nodeplacement.placement_strategy(s, placement, t)
        idx[t] = nodeplacement.ShapeIndex(s, t, col, sp)
    kinds = {bool(s.task_is_shared[t]) for t in idx}
    assert kinds == ({False, True} if shape == "mixed" else {False})
    checked = found = full = 0
    for step in range(60):
        for _ in range(int(rng.choice([1, 1, 2, 5, 30]))):
            _random_change(s, rng)
        for t, ix in idx.items():
            assert ix._fast is not None
            lo, hi = ix.pos, len(s.node_log)
            full += (hi - lo) * 8 > s.N
            # the interpreted kernel on a copy of the index's arrays gives the same node and arrays
            arrs = [a.copy() for a in (ix.idle_ok, ix.any_ok, ix.key, ix.hk, ix.hn, ix.hs)]
            log = np.asarray(s.node_log, dtype=np.int64)
            if ix._shared:
                sched, sel, rc, rm, frac, ndev, top, fgpu = ix._fast
                other = _interpreted(node_index.query_shared)(
                    log, lo, hi, sched, sel, rc, rm, frac, fgpu, ndev, top, ix.spread, s._node_both, s.dev_free,
                    s.dev_rel, s.dev_shared, *arrs)
            else:
                sched, sel, rc, rm, k, ndev, top, cap = ix._fast
                other = _interpreted(node_index.query_whole)(
                    log, lo, hi, sched, sel, rc, rm, k, ndev, top, cap, ix.col, ix.spread, s._node_both, s.dev_free,
                    s.dev_rel, *arrs)
            got = ix.query()
            assert got == other == _brute_best(s, t, ix.col, ix.spread), (step, t)
            for a, b in zip((ix.idle_ok, ix.any_ok, ix.key), arrs[:3]):
                assert a.tobytes() == b.tobytes()
            checked += 1
            found += got >= 0
    assert checked >= 60 and found > 40 and full > 0


def test_allocate_decides_the_same_with_and_without_the_index():
    """The index's answers drive allocate; without it every task scans all nodes in order."""
    for seed, shape in ((4, "mixed"), (5, "one-gpu")):
        out = []
        for use in (True, False):
            s = _state(seed, shape)
            al = allocate.Allocator(s)
            al.use_index = use
            al.run()
            out.append((s.task_state.tobytes(), s.task_node.tobytes(), repr(s.task_devices), repr(s.events)))
        assert out[0] == out[1]
