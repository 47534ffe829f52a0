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
