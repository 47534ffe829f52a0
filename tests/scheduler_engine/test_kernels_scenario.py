"""Kernels of the scenario simulation (kernels/scenario.py, the journal's ``unevict``).

* ``queue_over_capacity`` (compiled comparisons, message built in Python) answers exactly what a
  plain restatement of spec a.7 answers (the leaf first, then each ancestor; limit before the
  non-preemptible quota; only requested resources), refusal messages included, on generated
  clusters with limits and quotas on random allocations.
* ``simulation.unevict`` through the compiled call leaves the state bitwise as the Python code
  does, and refuses in the same cases (resources or devices promised to a pipelined task).
"""
from __future__ import annotations

import numpy as np
import pytest

from scheduler_engine import bench
from scheduler_engine.result import PENDING_LIMIT, PENDING_QUOTA
from scheduler_engine.snapshot import UNLIMITED, TaskState
from scheduler_engine.solvers import simulation
from scheduler_engine.state import EPS, CycleState

from tests.scheduler_engine.test_state_journal import _assert_mirror_canonical, _image, _snapshot, _step

_RUN = int(TaskState.RUNNING)
_REL = int(TaskState.RELEASING)
_CODES_MET: dict[int, int] = {}  # return codes of the compiled placement seen by the simulation tests


def _reference_over_capacity(s: CycleState, q: int, req, nonpre: bool):
    """Spec a.7 restated: (queue, resource, kind) of the first refusal, or None."""
    for a in s.queue_path_list[q]:
        for r in range(3):
            lim = s.queue_limit[a, r]
            if req[r] > EPS and lim != UNLIMITED and s.queue_alloc[a, r] + req[r] > lim + EPS:
                return a, r, PENDING_LIMIT
        if nonpre:
            for r in range(3):
                des = s.queue_deserved[a, r]
                if req[r] > EPS and des != UNLIMITED and s.queue_alloc_np[a, r] + req[r] > des + EPS:
                    return a, r, PENDING_QUOTA
    return None


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_queue_over_capacity_matches_the_rule(seed):
    s = CycleState(bench.generate(nodes=20, jobs=150, queues=30, seed=seed))
    rng = np.random.default_rng(seed)
    # tighten some limits and quotas so that refusals of both kinds happen on every level
    Q = s.Q
    s.queue_limit = s.queue_limit.copy()
    s.queue_deserved = s.queue_deserved.copy()
    pick = rng.random((Q, 3)) < 0.3
    s.queue_limit[pick] = np.round(rng.random(pick.sum()) * 4, 1) * np.array([1.0, 2e3, 4e9])[np.nonzero(pick)[1]]
    pick = rng.random((Q, 3)) < 0.3
    s.queue_deserved[pick] = np.round(rng.random(pick.sum()) * 4, 1) * np.array([1.0, 2e3, 4e9])[np.nonzero(pick)[1]]
    s._lim_rows = None
    s._queue_alloc_both[:] = rng.random((Q, 2, 3)) * np.array([3.0, 3e3, 3e9])
    seen = {None: 0, PENDING_LIMIT: 0, PENDING_QUOTA: 0}
    leaves = np.flatnonzero(s.queue_is_leaf)
    for _ in range(800):
        q = int(rng.choice(leaves))
        req = np.array([rng.choice([0.0, 0.5, 1.0, 4.0]), rng.choice([0.0, 500.0, 4e3]), rng.choice([0.0, 1e9])])
        nonpre = bool(rng.integers(2))
        want = _reference_over_capacity(s, q, req, nonpre)
        got = s.queue_over_capacity(q, req, nonpre)
        if want is None:
            assert got is None
            seen[None] += 1
            continue
        a, r, kind = want
        assert got is not None and got.category == kind, (q, req, nonpre)
        assert got.startswith(f"queue {s.queues.names[a]} ") and ("gpu", "cpu", "memory")[r] in got
        seen[kind] += 1
    assert min(seen.values()) > 20, seen  # every answer was exercised


@pytest.mark.parametrize("seed,shape,sg,dra", [(1, "mixed", 0.0, 0.0), (2, "one-gpu", 0.0, 0.0),
                                               (4, "mixed", 0.0, 0.3)])
def test_compiled_unevict_equals_the_python_code(seed, shape, sg, dra):
    snap = _snapshot(seed, shape, sg, dra)
    fast, slow = CycleState(snap), CycleState(snap)
    slow.fast_paths = False
    outcomes = {True: 0, False: 0}
    for k in range(6):
        rngs = (np.random.default_rng(seed + k), np.random.default_rng(seed + k))
        cps = (fast.checkpoint(), slow.checkpoint())
        run = np.flatnonzero(fast.task_state == _RUN)
        victims = np.random.default_rng(k).permutation(run)[:12].tolist()
        for s in (fast, slow):
            for t in victims:
                s.evict(t)
        for _ in range(8):  # placements that may pipeline onto what the victims release
            _step(fast, rngs[0])
            _step(slow, rngs[1])
        assert _image(fast) == _image(slow)
        for t in victims:
            a = simulation.unevict(fast, t)
            b = simulation.unevict(slow, t)
            assert a == b
            outcomes[a] += 1
            assert _image(fast) == _image(slow)
            assert fast.node_log == slow.node_log
            assert (fast.queue_version == slow.queue_version).all() and (fast.job_version == slow.job_version).all()
        _assert_mirror_canonical(fast)
        fast.rollback(cps[0])
        slow.rollback(cps[1])
        assert _image(fast) == _image(slow)
    assert outcomes[True] > 0 and outcomes[False] > 0, outcomes


@pytest.mark.parametrize("seed,shape,sg,dra", [(1, "mixed", 0.0, 0.0), (2, "one-gpu", 0.0, 0.0),
                                               (3, "mixed", 0.3, 0.0), (5, "mixed", 0.2, 0.2)])
def test_compiled_placement_simulates_like_the_python_path(seed, shape, sg, dra, monkeypatch):
    """Whole scenarios (evict victims, re-place the beneficiary and them in queue order) with the
    compiled single-task placement (``kernels.scenario.place_one_whole``) leave the state, the
    change log and the outcome of the Python path, scenario after scenario and after each rollback;
    every return code of the kernel is met."""
    codes: dict[int, int] = {}
    compiled = simulation.Placer._place_one_compiled

    def counting(self, t, idx, released, old, qcheck):
        r = compiled(self, t, idx, released, old, qcheck)
        key = r if r < 0 else 0
        codes[key] = codes.get(key, 0) + 1
        return r

    monkeypatch.setattr(simulation.Placer, "_place_one_compiled", counting)
    snap = _snapshot(seed, shape, sg, dra)
    fast, slow = CycleState(snap), CycleState(snap)
    slow.fast_paths = False
    for s in (fast, slow):  # the same placements of this cycle first (binds and pipelines)
        r = np.random.default_rng(seed)
        for _ in range(30):
            _step(s, r)
    # limits just above today's allocation on some queues, so that queue checks refuse some jobs
    pick = np.random.default_rng(seed).random(fast.Q) < 0.3
    lim = np.where(pick[:, None], fast.queue_alloc + np.array([2.0, 4e3, 8e9]), UNLIMITED)
    for s in (fast, slow):
        s.queue_limit = lim.copy()
        s._lim_rows = None
    sims = (simulation.Simulation(fast), simulation.Simulation(slow))
    rng = np.random.default_rng(seed + 7)
    placed = {True: 0, False: 0}
    for k in range(60):
        act = np.flatnonzero(np.isin(fast.task_state, (_RUN, int(TaskState.BINDING), int(TaskState.PIPELINED))))
        victims = rng.permutation(act)[:int(rng.integers(1, 12))].tolist()
        pend_jobs = np.unique(fast.task_job[(fast.task_state == int(TaskState.PENDING)) & (fast.task_node < 0)])
        j = int(rng.choice(pend_jobs))
        partial = fast.job_pending_tasks(j)[:max(1, int(fast.job_min_available[j]))]
        cps = (fast.checkpoint(), slow.checkpoint())
        a = sims[0].run(j, partial, victims)
        b = sims[1].run(j, partial, victims)
        assert a == b, k
        placed[a] += 1
        assert _image(fast) == _image(slow), k
        assert fast.node_log == slow.node_log
        assert sims[0].outcome(victims) == sims[1].outcome(victims)
        _assert_mirror_canonical(fast)
        if k % 3 == 2 and a:  # keep some scenarios: later ones start from them
            continue
        sims[0].rollback(cps[0])
        sims[1].rollback(cps[1])
        assert _image(fast) == _image(slow)
    assert placed[True] > 0 and placed[False] > 0, placed
    if fast.has_dra_gpus:  # GPU devices of DRA classes: every shape index takes the general update
        assert not codes
        return
    assert codes.get(0, 0) > 20 and sum(v for c, v in codes.items() if c < 0) > 0, codes
    _CODES_MET.update(codes)


def test_every_return_code_of_the_compiled_placement_was_met():
    """(Runs after the cases above, which collect the codes: placed, no node, old node, scan.)"""
    if not _CODES_MET:
        pytest.skip("run together with test_compiled_placement_simulates_like_the_python_path")
    assert set(_CODES_MET) == {0, -1, -3, -4}, _CODES_MET


@pytest.mark.parametrize("seed,shape", [(1, "mixed"), (2, "one-gpu"), (6, "mixed")])
def test_old_node_key_is_node_key_one(seed, shape):
    """The compiled key of a victim's own node (as a node that does not fit on free resources)
    is ``nodeplacement.node_key_one`` bit for bit, on GPU and CPU columns, binpack and spread."""
    from scheduler_engine.kernels import scenario
    from scheduler_engine.plugins.nodeplacement import ShapeIndex, node_key_one, placement_strategy

    s = CycleState(_snapshot(seed, shape))
    rng = np.random.default_rng(seed)
    for _ in range(40):
        _step(s, rng)
    checked = 0
    tasks = [t for t in range(s.T) if not s.task_is_shared[t]]
    for t in rng.permutation(tasks)[:30].tolist():
        for spread in (False, True):
            col, _sp = placement_strategy(s, {}, t)
            idx = ShapeIndex(s, t, col, spread)
            if idx._fast is None:
                continue
            _sched, _sel, _rc, _rm, _k, ndev, top, cap = idx._fast
            for n in range(s.N):
                got = scenario.old_node_key(n, ndev, top, cap, col, spread, s._node_both, s.dev_free, s.dev_rel)
                want = node_key_one(s, t, n, False, col, spread)
                assert np.float64(got).tobytes() == np.float64(want).tobytes(), (t, n, col, spread)
                checked += 1
    assert checked > 500
