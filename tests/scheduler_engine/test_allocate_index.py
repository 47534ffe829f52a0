"""The per-shape node index's fused single-node updates equal ``fit_one`` + ``_node_key_one``."""
from __future__ import annotations

import numpy as np
import pytest

from scheduler_engine.actions import allocate
from scheduler_engine.plugins import nodeplacement
from scheduler_engine.loader import load_dict
from scheduler_engine.state import CycleState
from tests.scheduler_engine.test_reference import random_scenario


@pytest.mark.parametrize("spread", [False, True])
def test_fused_node_updates_match_the_generic_primitives(spread):
    checked = shared_tier = 0
    for seed in range(40):
        # partly used nodes (whole and shared devices, some releasing) and every task kind
        s = CycleState(load_dict(random_scenario(seed, 6, 24, 4, spread)))
        al = allocate.Allocator(s)
        shapes = {}
        for t in np.flatnonzero(s.task_state == 0).tolist():
            shapes.setdefault(s.task_signature(t), t)
        for t in shapes.values():
            col, sp = nodeplacement.placement_strategy(s, al.placement, t)
            idx = nodeplacement.ShapeIndex(s, t, col, sp)
            assert idx._fast is not None or not s.G
            width = 3.0 if sp else 2.0 * max(s.G, 1) + 3.0  # key = base - tier * width
            for n in range(s.N):
                idx._update(n)
                fi, fa = s.fit_one(t, n)
                assert (bool(idx.idle_ok[n]), bool(idx.any_ok[n])) == (fi, fa), (seed, t, n)
                if fa:
                    assert idx.key[n] == nodeplacement.node_key_one(s, t, n, fi, col, sp), (seed, t, n)
                    checked += 1
                    shared_tier += bool(s.task_is_shared[t] and idx.key[n] < -5000 * width)
    assert checked > 200
    # the "joins a shared device in use" tier (gpusharingorder) was exercised under binpack; KAI
    # disables that plugin under the GPU spread strategy (issue #18.1), so it never applies there
    assert bool(shared_tier) is not spread


def test_batch_update_equals_single_node_updates():
    for seed in range(15):
        s = CycleState(load_dict(random_scenario(seed, 6, 24, 4, seed % 2 == 1)))
        al = allocate.Allocator(s)
        rows = np.arange(s.N)
        for t in {s.task_signature(t): t for t in np.flatnonzero(s.task_state == 0).tolist()}.values():
            col, sp = nodeplacement.placement_strategy(s, al.placement, t)
            one, many = nodeplacement.ShapeIndex(s, t, col, sp), nodeplacement.ShapeIndex(s, t, col, sp)
            for n in rows.tolist():
                one._update(n)
            many._batch(rows)
            assert (one.idle_ok.tolist(), one.any_ok.tolist()) == (many.idle_ok.tolist(), many.any_ok.tolist())
            assert [k for k, ok in zip(one.key, one.any_ok) if ok] == [k for k, ok in zip(many.key, many.any_ok) if ok]
            # the live entries (the ones ``best`` can return; a query may also drop dead ones)
            assert _live(one) == _live(many)


def _live(ix) -> set[tuple[float, int]]:
    return {(k, n) for k, n in ix.entries() if ix.any_ok[n] and ix.key[n] == k}
