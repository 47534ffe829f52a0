"""``CycleState.node_log`` as an int64 log (:class:`scheduler_engine.state.NodeLog`).

* The log itself: appends, extends, slices (views that stay valid after the buffer grew), the
  length a compiled writer sets, equality with lists.
* A rollback logs each undone journal entry's node, last entry first, as the per-entry loop did.
* Whole cycles on a log whose buffer starts tiny (so it is replaced many times, under the compiled
  writers - allocate's attempt, the scenario kernel - and the Python appends) log exactly what the
  Python steps log (``fast_paths = False``) and decide the same.
"""
from __future__ import annotations

import numpy as np
import pytest

from scheduler_engine import bench
from scheduler_engine.actions import get_action
from scheduler_engine.state import CycleState, NodeLog

from tests.scheduler_engine.test_state_journal import _snapshot, _step


def test_node_log_appends_extends_and_slices():
    log = NodeLog(16)
    assert len(log) == 0 and log == [] and log.tolist() == []
    ref: list[int] = []
    for k in range(40):  # past the first capacity: the buffer is replaced on the way
        log.append(k * 3)
        ref.append(k * 3)
    view = log[5:9]
    log.extend(np.arange(100, 180))
    ref.extend(range(100, 180))
    log.extend([])
    assert log == ref and list(log) == ref and len(log) == len(ref)
    assert view.tolist() == ref[5:9]  # a view of the old buffer keeps its entries
    assert log[3] == 9 and log[-1] == 179 and log[len(log) - 1] == 179
    with pytest.raises(IndexError):
        log[len(log)]
    assert log[len(log):].shape == (0,)
    assert np.asarray(log, dtype=np.int64).tolist() == ref
    # the array protocol: a view unless a copy or another dtype is asked for
    assert np.shares_memory(np.asarray(log), log.buf)
    assert not np.shares_memory(np.array(log, copy=True), log.buf)
    assert np.asarray(log, dtype=np.float64).tolist() == [float(x) for x in ref]
    with pytest.raises(ValueError):
        np.array(log, dtype=np.float64, copy=False)
    other = NodeLog(4)
    other.extend(ref)
    assert log == other
    other.append(1)
    assert log != other


def test_node_log_reserve_then_set_len():
    log = NodeLog(16)
    log.extend(range(10))
    buf = log.reserve(50)  # a compiled writer's room: 50 more slots
    assert buf is log.buf and buf.shape[0] >= 60
    buf[10:13] = (7, 8, 9)
    log.set_len(13)
    assert log.tolist() == list(range(10)) + [7, 8, 9]
    with pytest.raises(ValueError):
        log.set_len(12)  # never shorter
    with pytest.raises(ValueError):
        log.set_len(log.buf.shape[0] + 1)


def test_node_log_grows_fourfold():
    """``NodeLog.reserve`` grows the buffer fourfold (doubling copied the whole log into fresh memory
    twice as often; see its docstring): appending 1,000,000 entries from a capacity of 16 in chunks
    of 1 to 1,000 replaces the buffer at most 9 times, each time by one at least four times as large
    (doubling: 15 or more replacements), and keeps every entry."""
    log = NodeLog(16)
    rng = np.random.default_rng(2)
    bufs, total = [log.buf], 0
    while total < 1_000_000:
        k = int(rng.integers(1, 1001))
        buf = log.reserve(k)
        if buf is not bufs[-1]:
            assert buf.shape[0] >= 4 * bufs[-1].shape[0]
            bufs.append(buf)
        buf[total:total + k] = np.arange(total, total + k)
        total += k
        log.set_len(total)
    assert 2 <= len(bufs) - 1 <= 9 and log.buf.shape[0] < 4 * 1_000_000 + 1000
    assert np.array_equal(np.asarray(log), np.arange(total))


@pytest.mark.parametrize("seed,shape,sg,dra", [(1, "mixed", 0.0, 0.0), (3, "mixed", 0.3, 0.0), (4, "mixed", 0.0, 0.3)])
def test_rollback_logs_every_undone_node_last_entry_first(seed, shape, sg, dra):
    s = CycleState(_snapshot(seed, shape, sg, dra))
    rng = np.random.default_rng(seed)
    undone = 0
    for _round in range(4):
        cps = []
        for _ in range(40):
            if rng.random() < 0.2:
                cps.append(s.checkpoint())
            _step(s, rng)
        for cp in reversed(cps):
            expect = [e[1] for e in reversed(s._journal[cp[0]:]) if e[1] >= 0]  # the object half's nodes
            before = s.node_log.tolist()
            s.rollback(cp)
            assert s.node_log.tolist() == before + expect
            undone += len(expect)
    assert undone > 20


def _cycle(snap, fast: bool, capacity: int | None, monkeypatch) -> CycleState:
    if capacity is not None:
        monkeypatch.setattr(NodeLog.__init__, "__defaults__", (capacity,))
    s = CycleState(snap)
    monkeypatch.undo()
    s.fast_paths = fast
    for name in snap.config.actions:
        get_action(name)(s)
    return s


@pytest.mark.parametrize("seed,shape", [(1, "mixed"), (2, "one-gpu"), (5, "mixed")])
def test_cycles_on_a_tiny_log_buffer_log_what_the_python_steps_log(seed, shape, monkeypatch):
    snap = bench.generate(nodes=30, jobs=260, queues=8, seed=seed, shape=shape)
    tiny = _cycle(snap, True, 16, monkeypatch)
    assert len(tiny.node_log) > 4 * 16  # (grew many times)
    ka = tiny.__dict__.get("_victims_scenario_arrays")
    assert ka, "the scenario kernel ran"
    assert ka.log is tiny.node_log.buf or len(tiny.node_log) > ka.log.shape[0] // 2  # re-read before each call
    python = _cycle(snap, False, None, monkeypatch)
    assert tiny.node_log == python.node_log
    assert bench.decision_digest(tiny) == bench.decision_digest(python)
    assert (tiny.task_state == python.task_state).all() and (tiny.task_node == python.task_node).all()
