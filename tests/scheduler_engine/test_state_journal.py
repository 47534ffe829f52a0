"""The array undo journal (kernels/journal.py) and the compiled evict / place paths of CycleState.

* A rollback restores the state bitwise after random sequences of evictions and placements
  (binds and pipelines, nested checkpoints), on generated clusters with shared GPUs, subgroups and
  DRA pools.
* The compiled evict / place (``CycleState.fast_paths``) leave exactly the state the general
  Python code leaves, step by step.
* The kernels' ``np.maximum`` / ``np.minimum`` keep numpy's signed-zero behaviour.
"""
from __future__ import annotations

import numpy as np
import pytest

from scheduler_engine import bench
from scheduler_engine.kernels import journal
from scheduler_engine.snapshot import TaskState
from scheduler_engine.state import CycleState

_ACTIVE = (int(TaskState.RUNNING), int(TaskState.BINDING), int(TaskState.PIPELINED))
_PEND = int(TaskState.PENDING)


def _snapshot(seed: int, shape: str, sub_groups: float = 0.0, dra_nodes: float = 0.0):
    snap = bench.generate(nodes=24, jobs=160, queues=12, seed=seed, shape=shape)
    return bench.with_features(snap, sub_groups=sub_groups, dra_nodes=dra_nodes, seed=seed)


def _image(s: CycleState) -> tuple:
    """Everything a primitive may change, as bytes / plain values (bitwise: -0.0 != 0.0 here)."""
    arrays = (s.task_state, s.task_node, s.task_alloc, s.task_rel_take, s._node_both, s.dev_free, s.dev_rel,
              s.dev_shared, s._queue_alloc_both, s.job_num_active_arr, s.dra_free, s.dra_rel,
              s._tdev, s._tndev, s._ttake, s._tntake)  # the task-device mirror, padding included
    lists = (s.task_devices, s.task_gpu_groups, s.task_dev_take, s.dev_group, s.task_dra, s.task_dra_take)
    return (tuple(a.tobytes() for a in arrays),
            repr([[list(x) if isinstance(x, (list, tuple)) else x for x in lst] for lst in lists]),
            repr(s.events))


def _assert_mirror_canonical(s: CycleState) -> None:
    """The task-device mirror holds each task's entries first and padding after them (-1 / 0.0),
    a pipelined task one take per device, and only placed or releasing tasks hold devices."""
    cols = np.arange(s.G)[None, :]
    used = cols < s._tndev[:, None]
    assert (s._tdev[~used] == -1).all() and (s._tdev[used] >= 0).all()
    taken = cols < s._tntake[:, None]
    assert (s._ttake[~taken] == 0.0).all()
    assert ((s._tntake == 0) | (s._tntake == s._tndev)).all()
    assert (s._tndev[s.task_node < 0] == 0).all()
    assert (s._tndev <= s.node_devices[np.maximum(s.task_node, 0)]).all()


def _step(s: CycleState, rng: np.random.Generator) -> None:
    """One random evict (with or without an event) or place (bind or pipeline) that is legal."""
    if rng.random() < 0.5:
        act = np.flatnonzero(np.isin(s.task_state, _ACTIVE))
        if act.size:
            t = int(rng.choice(act))
            s.evict(t, for_job=int(s.task_job[t]) if rng.random() < 0.3 else None)
            return
    pend = np.flatnonzero((s.task_state == _PEND) & (s.task_node < 0))
    for t in rng.permutation(pend)[:20].tolist():
        pipelined = bool(rng.random() < 0.5)
        for n in rng.permutation(s.N)[:6].tolist():
            fi, fa = s.fit_one(t, n)
            if (fa if pipelined else fi) and s.choose_devices(t, n, pipelined) is not None:
                if s._claims_list[t] and s.choose_claims(t, n, pipelined) is None:
                    continue
                s.place(t, n, pipelined=pipelined)
                return


CASES = [(1, "mixed", 0.0, 0.0), (2, "one-gpu", 0.0, 0.0), (3, "mixed", 0.3, 0.0), (4, "mixed", 0.0, 0.3),
         (5, "mixed", 0.2, 0.2)]


@pytest.mark.parametrize("seed,shape,sg,dra", CASES)
def test_rollback_restores_the_state_bitwise(seed, shape, sg, dra):
    s = CycleState(_snapshot(seed, shape, sg, dra))
    rng = np.random.default_rng(seed)
    for _round in range(4):
        before = _image(s)
        cp = s.checkpoint()
        images = []
        for _ in range(40):
            if rng.random() < 0.2:
                images.append((_image(s), s.checkpoint()))
            _step(s, rng)
        for img, inner in reversed(images):  # nested checkpoints, innermost first
            s.rollback(inner)
            assert _image(s) == img
        _assert_mirror_canonical(s)
        s.rollback(cp)
        assert _image(s) == before
        _assert_mirror_canonical(s)
        for _ in range(10):  # then move on from a changed state (journal entries reused)
            _step(s, rng)


@pytest.mark.parametrize("seed,shape,sg,dra", CASES)
def test_compiled_evict_and_place_equal_the_python_code(seed, shape, sg, dra, monkeypatch):
    snap = _snapshot(seed, shape, sg, dra)
    fast = CycleState(snap)
    slow = CycleState(snap)
    slow.fast_paths = False
    assert _image(fast) == _image(slow)
    rngs = (np.random.default_rng(seed), np.random.default_rng(seed))
    cps = []
    for k in range(150):
        if k % 37 == 0:
            cps.append((fast.checkpoint(), slow.checkpoint()))
        _step(fast, rngs[0])
        _step(slow, rngs[1])
        assert _image(fast) == _image(slow), k
        assert fast.node_log == slow.node_log
        assert (fast.queue_version == slow.queue_version).all() and (fast.job_version == slow.job_version).all()
    for a, b in reversed(cps):
        fast.rollback(a)
        slow.rollback(b)
        assert _image(fast) == _image(slow)
        assert fast.node_log == slow.node_log


def test_pipelined_take_of_a_negative_zero_matches_numpy():
    for a in (-0.0, 0.0, 1.5, -2.0, np.nan):
        for b in (-0.0, 0.0, 0.5, np.nan):
            want_max = np.maximum(np.array([a]), b)[0]
            want_min = np.minimum(np.array([a]), b)[0]
            got_max, got_min = journal.np_max(a, b), journal.np_min(a, b)
            assert np.array([got_max]).tobytes() == np.array([want_max]).tobytes(), (a, b)
            assert np.array([got_min]).tobytes() == np.array([want_min]).tobytes(), (a, b)


@pytest.mark.parametrize("seed,shape,sg,dra", CASES)
def test_evict_many_equals_one_by_one(seed, shape, sg, dra):
    """``evict_many`` (a scenario's victims in one compiled call) leaves the state, the change log
    and the counters of ``evict`` called task by task with the general Python code; then both roll back."""
    snap = _snapshot(seed, shape, sg, dra)
    batch, single = CycleState(snap), CycleState(snap)
    single.fast_paths = False
    rng = np.random.default_rng(seed + 100)
    for s in (batch, single):  # the same placements first (binds and pipelines of this cycle)
        r = np.random.default_rng(seed)
        for _ in range(60):
            _step(s, r)
    assert _image(batch) == _image(single)
    for _ in range(8):
        act = np.flatnonzero(np.isin(batch.task_state, _ACTIVE))
        victims = rng.permutation(act)[:int(rng.integers(1, 16))].tolist()
        cps = (batch.checkpoint(), single.checkpoint())
        before = _image(batch)
        batch.evict_many(victims)
        for t in victims:
            single.evict(t)
        assert _image(batch) == _image(single)
        assert batch.node_log == single.node_log and batch.resources_freed == single.resources_freed
        assert (batch.queue_version == single.queue_version).all()
        batch.rollback(cps[0])
        single.rollback(cps[1])
        assert _image(batch) == _image(single) == before


def test_task_rows_read_and_write_like_lists():
    """``task_devices`` / ``task_dev_take`` behave as per-task lists over the mirror's rows: a
    shorter assignment pads the rest, reads are fresh lists (changing one changes nothing)."""
    s = CycleState(_snapshot(1, "mixed"))
    assert s.G >= 3
    t = int(np.flatnonzero(s.task_node < 0)[0])
    rows = s.task_devices
    assert rows[t] == [] and len(rows) == s.T
    rows[t] = [2, 0, 1]
    assert rows[t] == [2, 0, 1] and s._tndev[t] == 3
    got = rows[t]
    got.append(5)
    assert rows[t] == [2, 0, 1]
    rows[t] = [1]
    assert rows[t] == [1] and s._tdev[t].tolist() == [1] + [-1] * (s.G - 1)
    s.task_dev_take[t] = [0.5]
    s.task_dev_take[t] = []
    assert s._ttake[t].tolist() == [0.0] * s.G and s._tntake[t] == 0
    rows[t] = []
    assert list(rows)[t] == [] and (s._tdev[t] == -1).all()
    assert repr(rows) == repr([list(x) for x in rows]) and rows == list(rows)


@pytest.mark.parametrize("seed,shape,features", [(3, "mixed", {}), (4, "one-gpu", {}),
                                                 (5, "mixed", {"dra_nodes": 0.3, "sub_groups": 0.2})])
def test_rollback_through_the_entry_point_decides_as_the_dispatcher(monkeypatch, seed, shape, features):
    """``CycleState.rollback``'s numeric half (``journal.undo_logged``) through the compiled version's entry
    point decides what calls through the dispatcher decide, on whole cycles (every simulated scenario is
    rolled back), and the entry point is used when allowed. (Python rolls every scenario back: the
    compiled victim search, which rolls its failed scenarios back itself, is off.)"""
    from scheduler_engine.cycle import run_cycle_with_state
    from scheduler_engine.kernels import JIT_ENABLED
    from scheduler_engine.solvers import accumulation

    monkeypatch.setattr(accumulation, "USE_SEARCH_KERNEL", False)
    snap = bench.generate(nodes=60, jobs=420, queues=20, seed=seed, shape=shape)
    if features:
        snap = bench.with_features(snap, seed=seed, **features)
    monkeypatch.setattr(CycleState, "undo_entry_point", False)
    state, _ = run_cycle_with_state(snap)
    off = bench.decision_digest(state), state.node_log.tolist()
    assert state.undo_entry_calls == 0
    monkeypatch.setattr(CycleState, "undo_entry_point", True)
    state, _ = run_cycle_with_state(snap)
    assert (bench.decision_digest(state), state.node_log.tolist()) == off
    if JIT_ENABLED and len(journal.undo_logged.overloads) == 1:
        assert state.undo_entry_calls > 10


def test_undo_logged_is_undo_then_the_undone_nodes_last_entry_first():
    """``journal.undo_logged``: the state ``journal.undo`` leaves, and each undone entry's node appended
    to the log from ``io[2]`` last entry first (entries without a node skipped), the rest of the log
    untouched, the new length in ``io[3]``; compiled and interpreted."""
    fns = [journal.undo_logged] + ([journal.undo_logged.py_func] if hasattr(journal.undo_logged, "py_func") else [])
    for fn in fns:
        a, c = CycleState(_snapshot(2, "mixed")), CycleState(_snapshot(2, "mixed"))
        for s in (a, c):  # the same steps on both
            rng = np.random.default_rng(8)
            for _ in range(6):
                _step(s, rng)
            cp = s.checkpoint()
            for _ in range(60):
                _step(s, rng)
            s._ji[cp[0] + 1, 4] = -1  # (an entry without a node)
        lo, hi = cp[0], len(a._journal)
        assert _image(a) == _image(c)
        want = [n for n in a._ji[lo:hi, 4][::-1].tolist() if n >= 0]
        assert hi - lo > len(want) > 10
        log = np.full(hi - lo + 5, -7, dtype=np.int64)
        io = np.array([lo, hi, 3, -1], dtype=np.int64)
        fn(io, *a._jarrays[1:], a._ji, a._jf, log)
        journal.undo(lo, hi, *c._jarrays[1:], c._ji, c._jf)
        assert _image(a) == _image(c)
        assert log.tolist() == [-7] * 3 + want + [-7] * (log.shape[0] - 3 - len(want))
        assert io[3] == 3 + len(want)
