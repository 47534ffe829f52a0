"""Victim simulations (``solvers.simulation``): the fast paths decide exactly as the plain ones.

The placer takes the first node in placement order from the incremental per-shape index
(``plugins.nodeplacement.ShapeIndex``) and falls back to the full fit scan only when that node does not take
the task; the re-placement order shares queue profiles by value across scenarios. Whole cycles on
generated clusters must end in the same task states, nodes and event texts with these shortcuts
switched off. ``CycleState.choose_devices`` (plain Python now) is checked against the numpy form
it replaced.
"""
from __future__ import annotations

import numpy as np
import pytest

from scheduler_engine import bench
from scheduler_engine.actions import get_action
from scheduler_engine.solvers import simulation
from scheduler_engine.snapshot import TaskState
from scheduler_engine.state import EPS, CycleState

ACTIONS = ["allocate", "consolidation", "reclaim", "preempt", "stalegangeviction"]


def _cycle(snap) -> tuple:
    st = CycleState(snap)
    for a in ACTIONS:
        get_action(a)(st)
    return st.task_state.tolist(), st.task_node.tolist(), [repr(e) for e in st.events]


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed", [
    (30, 200, 12, "mixed", 1), (50, 300, 20, "mixed", 3), (60, 400, 30, "one-gpu", 2), (40, 300, 10, "mixed", 9),
    (200, 1200, 60, "mixed", 7),  # has first nodes that do not take the task (the full scan continues)
])
def test_fast_paths_decide_like_the_plain_simulation(monkeypatch, nodes, jobs, queues, shape, seed):
    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    fast = _cycle(snap)
    with monkeypatch.context() as m:
        m.setattr(simulation.Placer, "use_index", False)  # placer: full fit scan + node order for every task
        m.setattr(simulation, "_PROFILE_CACHE_MAX", 0)  # leaf order: (almost) no shared profiles
        plain = _cycle(snap)
    assert fast == plain


def _choose_devices_numpy(s: CycleState, t: int, n: int, pipelined: bool, spread: bool):
    """The numpy form ``choose_devices`` had before it went plain Python (reference)."""
    nd = int(s.node_devices[n])
    if nd == 0:
        return [] if (not s.task_is_shared[t] and s.task_whole[t] == 0) else None
    free = s.dev_free[n, :nd]
    rel = s.dev_rel[n, :nd]
    if s.task_is_shared[t]:
        f = s._shared_fraction(t, n)
        if not np.isfinite(f) or f > 1 + EPS:
            return None
        room = free + rel if pipelined else free
        ok = np.flatnonzero(room >= f - EPS)
        if ok.size == 0:
            return None
        occupied = 1.0 - free
        order = sorted(ok, key=(lambda d: (occupied[d], d)) if spread else (lambda d: (-occupied[d], d)))
        return [int(order[0])]
    k = int(s.task_whole[t])
    if k == 0:
        return []
    if pipelined:
        ok = np.flatnonzero(free + rel >= 1 - EPS)
        ok = sorted(ok, key=lambda d: (free[d] < 1 - EPS, d))
    else:
        ok = [d for d, x in enumerate(free.tolist()) if x >= 1 - EPS]
    if len(ok) < k:
        return None
    return [int(d) for d in ok[:k]]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_choose_devices_matches_the_numpy_form(seed):
    snap = bench.generate(nodes=40, jobs=300, queues=10, seed=seed, shape="mixed")
    s = CycleState(snap)
    get_action("allocate")(s)
    rng = np.random.default_rng(seed)
    running = np.flatnonzero(s.task_state == int(TaskState.RUNNING))
    for t in rng.choice(running, size=min(60, running.size), replace=False).tolist():
        s.evict(t)  # releasing devices, partly used ones
    tasks = rng.choice(s.T, size=min(150, s.T), replace=False).tolist()
    checked = 0
    for t in tasks:
        for n in rng.choice(s.N, size=8, replace=False).tolist():
            for pipelined in (False, True):
                for spread in (False, True):
                    got = s.choose_devices(t, n, pipelined, spread)
                    assert got == _choose_devices_numpy(s, t, n, pipelined, spread), (t, n, pipelined, spread)
                    checked += got is not None and len(got) > 0
    assert checked > 100
