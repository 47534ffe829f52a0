"""Kernels of the scenario simulation (the journal's ``unevict``).

* ``simulation.unevict`` through the compiled call leaves the state bitwise as the Python code
  does, and refuses in the same cases (resources or devices promised to a pipelined task).
"""
from __future__ import annotations

import numpy as np
import pytest

from scheduler_engine import bench
from scheduler_engine.snapshot import TaskState
from scheduler_engine.solvers import simulation
from scheduler_engine.state import CycleState

from tests.scheduler_engine.test_state_journal import _assert_mirror_canonical, _image, _snapshot, _step

_RUN = int(TaskState.RUNNING)
_REL = int(TaskState.RELEASING)


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
