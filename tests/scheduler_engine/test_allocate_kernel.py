"""The allocate action's compiled per-job attempt (``kernels/allocate.py``).

* Whole allocate passes decide exactly as the Python attempt code (``Allocator.use_kernel = False``):
  the state bitwise (task / node / device / queue arrays, devices and what they took from releasing,
  as float bits) and the events, on random clusters with limits, quotas, selectors, releasing load,
  shared GPUs, and on generated clusters with subgroups and DRA pools; both the compiled success path
  and the fall-back after a failed kernel attempt are exercised.
* The kernel compiled and interpreted (``py_func``) give the same pass.
(Its parts have tests of their own: the queue check ``kernels.scenario.over_capacity`` in
``test_kernels_scenario.py``, the index query and device choice in ``test_kernels_placement.py``,
``journal.place`` in ``test_state_journal.py``.)
"""
from __future__ import annotations

import numpy as np
import pytest

from scheduler_engine import bench
from scheduler_engine.actions import allocate
from scheduler_engine.kernels import allocate as attempt_k
from scheduler_engine.loader import load_dict
from scheduler_engine.state import CycleState
from tests.scheduler_engine.test_reference import random_scenario


def _bits(x) -> object:
    if isinstance(x, (list, tuple)):
        return tuple(_bits(v) for v in x)
    if isinstance(x, (float, np.floating)):
        return float(x).hex()
    if isinstance(x, (int, np.integer)):
        return int(x)
    return x


def _image(s: CycleState) -> tuple:
    arrays = (s.task_state, s.task_node, s.task_alloc, s.task_rel_take, s._node_both, s.dev_free, s.dev_rel,
              s.dev_shared, s._queue_alloc_both, s.job_num_active_arr, s.dra_free, s.dra_rel)
    lists = (s.task_devices, s.task_gpu_groups, s.task_dev_take, s.task_dra, s.task_dra_take)
    return (tuple(a.tobytes() for a in arrays), _bits([list(x) if isinstance(x, (list, tuple)) else x
                                                       for lst in lists for x in lst]),
            repr([sorted(g.items()) for g in s.dev_group]), repr(s.events))


class _Count:
    """Counts compiled attempts that placed everything, that failed (explained from the kernel's
    stopping point; gangs partly placed among them) and that fell back to the Python attempt."""

    def __init__(self, monkeypatch):
        self.ok = self.failed = self.gang_failed = self.back = 0
        orig = allocate.Allocator._attempt_kernel

        def wrapped(al, j, tasks, idx):
            try:
                r = orig(al, j, tasks, idx)
            except allocate._Fail as f:
                self.failed += 1
                self.gang_failed += f.message.startswith("gang of")
                raise
            if r:
                self.ok += 1
            else:
                self.back += 1
            return r

        monkeypatch.setattr(allocate.Allocator, "_attempt_kernel", wrapped)


def _run(snap, use_kernel: bool) -> tuple:
    s = CycleState(snap)
    al = allocate.Allocator(s)
    al.use_kernel = use_kernel
    al.run()
    return _image(s)


def _snapshots():
    for seed in range(40):
        yield load_dict(random_scenario(seed, 8, 40, 5, seed % 3 == 1))
    for seed, shape, sg, dra in ((1, "mixed", 0.0, 0.0), (2, "one-gpu", 0.0, 0.0), (3, "mixed", 0.3, 0.0),
                                 (4, "mixed", 0.0, 0.3)):
        snap = bench.generate(nodes=40, jobs=400, queues=10, seed=seed, shape=shape)
        yield bench.with_features(snap, sub_groups=sg, dra_nodes=dra, seed=seed)


def test_compiled_attempts_decide_like_the_python_attempts(monkeypatch):
    count = _Count(monkeypatch)
    for snap in _snapshots():
        assert _run(snap, True) == _run(snap, False)
    assert count.ok > 400 and count.failed > 100 and count.gang_failed > 10 and count.back == 0, vars(count)


def test_attempt_kernel_compiled_and_interpreted_are_the_same():
    interpreted = getattr(attempt_k.attempt, "py_func", attempt_k.attempt)
    snaps = list(_snapshots())[::5]
    compiled = [_run(snap, True) for snap in snaps]
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(attempt_k, "attempt", interpreted)
        assert [_run(snap, True) for snap in snaps] == compiled
    finally:
        mp.undo()


def test_compiled_gang_attempts_take_tasks_in_task_priority_order(monkeypatch):
    # the compiled attempt takes a gang's tasks in task order: by index when no task of the cycle
    # has a priority (the generated clusters), by priority when some do (here: gangs whose tasks of one
    # shape carry priorities in reverse, so the order changes which task lands on which node)
    import dataclasses

    count = _Count(monkeypatch)
    for seed in (1, 2):
        snap = bench.generate(nodes=40, jobs=400, queues=10, seed=seed)
        prio = np.full(len(snap.tasks.names), np.nan)
        gangs = [j for j in range(len(snap.jobs.names)) if snap.jobs.task_count[j] > 1]
        for j in gangs[::2]:
            ts = list(snap.jobs.tasks_of(j))
            prio[ts] = np.arange(len(ts), dtype=float)  # the last task first
        snap = dataclasses.replace(snap, tasks=dataclasses.replace(snap.tasks, priority=prio))
        assert _run(snap, True) == _run(snap, False)
    assert count.ok > 50 and count.gang_failed > 0, vars(count)


def test_attempt_writes_the_journal_object_half_and_node_log_as_record_objects(monkeypatch):
    """After each compiled attempt (placed everything or failed part-way, before the caller's
    rollback) the journal's new entries are what ``CycleState._record_objects`` writes for such a task
    (task, node, its gpuGroup list as it was before the placement, no gpuGroup map, no DRA part), the
    task / node of each matches the numeric half, each task's gpuGroup list is cleared, and the node
    log grew by exactly the placements' nodes in order (``Allocator._attempt_kernel`` writes these
    itself instead of calling ``_record_objects`` per task)."""
    orig = allocate.Allocator._attempt_kernel
    seen = {"entries": 0, "failed_with_entries": 0}

    def checked(al, j, tasks, idx):
        s = al.state
        i0, hi = len(s._journal), len(s.node_log)
        groups = list(s.task_gpu_groups)
        failed = False
        try:
            return orig(al, j, tasks, idx)
        except allocate._Fail:
            failed = True
            raise
        finally:
            new = s._journal[i0:]
            nodes = [n for (_, n, _, _, _) in new]
            assert new == [(int(s._ji[i0 + i, 0]), int(s._ji[i0 + i, 4]), groups[t], None, None)
                           for i, (t, *_rest) in enumerate(new)]
            assert all(s.task_gpu_groups[t] == [] for (t, *_rest) in new)
            assert len(s.node_log) == hi + len(new)
            assert np.asarray(s.node_log)[hi:].tolist() == nodes
            seen["entries"] += len(new)
            seen["failed_with_entries"] += failed and bool(new)

    monkeypatch.setattr(allocate.Allocator, "_attempt_kernel", checked)
    for snap in _snapshots():
        _run(snap, True)
    assert seen["entries"] > 600 and seen["failed_with_entries"] > 5, seen


def test_attempt_entry_point_takes_the_compiled_versions_types(monkeypatch):
    """``Allocator._entry_point``: with ``CHECK_TYPES`` every call through the attempt's entry point
    checks each argument's type against the compiled version's signature (the entry point itself
    would read a mismatch wrongly, silently); whole passes over random and generated clusters call it
    (when compiled) and decide as passes whose every attempt goes through the dispatcher."""
    from scheduler_engine.kernels import JIT_ENABLED

    snaps = list(_snapshots())[::2]
    monkeypatch.setattr(allocate, "CHECK_TYPES", True)
    allocate.CHECKED.clear()
    entry = [_run(snap, True) for snap in snaps]
    if JIT_ENABLED:
        assert len(allocate.CHECKED) > 200
    monkeypatch.setattr(allocate.Allocator, "_entry_point", lambda self, disp: disp)
    assert [_run(snap, True) for snap in snaps] == entry


def test_rows_sum_is_the_gathered_sum_bit_for_bit():
    """``rows_sum`` sums a slice only for an ascending range of a C-contiguous array: the floats of
    ``rows[tasks].sum(axis=0)`` for ranges, permutations, repeats and non-contiguous rows (rows where
    the order of the additions changes the result: summing a permuted list as its range fails)."""
    rng = np.random.default_rng(5)
    rows = np.array([[1e16, 1.0, 0.1], [1.0, 1e16, 0.2], [-1e16, -1e16, 0.3], [3.0, 0.5, 1e-17]] * 8)
    rows = np.vstack([rows, rng.normal(size=(200, 3)) * 10.0 ** rng.integers(-8, 9, size=(200, 1))])
    cases = [[2, 0, 1], [1, 2, 0], [0, 1, 2], [5, 6, 7, 8], [8, 7, 6, 5], [3, 3, 4], [0, 2, 4]]
    for _ in range(300):
        a, m = int(rng.integers(0, rows.shape[0] - 40)), int(rng.integers(2, 40))
        ts = list(range(a, a + m))
        cases.append(ts)
        cases.append([int(x) for x in rng.permutation(ts)])
    differs = 0
    for arr in (rows, np.asfortranarray(rows)):
        for ts in cases:
            want = arr[ts].sum(axis=0)
            assert allocate.rows_sum(arr, ts).tobytes() == want.tobytes(), ts
            differs += arr[min(ts):min(ts) + len(ts)].sum(axis=0).tobytes() != want.tobytes()
    assert differs > 0  # (the order matters on these rows: a slice for a permuted list would be wrong)
