"""CycleState: capacity, queue accounting, placement primitives and the undo journal."""
from __future__ import annotations

import numpy as np
import pytest

from scheduler_engine.snapshot import CPU, GPU, MEM, TaskState
from scheduler_engine.state import CycleState

from tests.scheduler_engine.alloc_builders import simple


def _node(name, gpus=4, cpu="16", memory="64Gi", **kw):
    return {"name": name, "gpus": gpus, "gpuMemory": kw.pop("gpuMemory", 80), "cpu": cpu, "memory": memory, **kw}


def _queues(**leaf):
    return [{"name": "top", "parent": None}, {"name": "q0", "parent": "top", **leaf}]


def _job(name, tasks, queue="q0", **kw):
    return {"name": name, "queue": queue, "tasks": tasks, **kw}


def test_capacity_skips_unready_and_unschedulable_and_subtracts_reserved():
    snap = simple(
        [_node("a", reservedByOthers={"gpu": 1, "cpu": "2"}), _node("b", ready=False), _node("c", unschedulable=True)],
        _queues(), [],
    )
    s = CycleState(snap)
    assert s.total[GPU] == 3
    assert s.total[CPU] == 14000
    assert list(s.node_schedulable) == [True, False, False]
    assert s.node_devices[0] == 3


def test_queue_request_and_allocation_aggregate_to_ancestors_and_skip_releasing():
    snap = simple(
        [_node("a")], _queues(gpu=(2, 1, -1)),
        [
            _job("run", [{"gpu": 1, "cpu": "1", "state": "Running", "node": "a"}], preemptible=False, priority=100),
            _job("rel", [{"gpu": 1, "state": "Releasing", "node": "a"}]),
            _job("stuck", [{"gpu": 1, "state": "StuckInReleasing", "node": "a"}]),
            _job("done", [{"gpu": 1, "state": "Succeeded"}]),
            _job("pend", [{"gpu": 2, "state": "Pending"}]),
        ],
    )
    s = CycleState(snap)
    assert s.queue_alloc[1, GPU] == 1 and s.queue_alloc[0, GPU] == 1
    assert s.queue_alloc_np[0, GPU] == 1
    assert s.queue_request[1, GPU] == 3 and s.queue_request[0, GPU] == 3
    # node: 4 devices, 3 physically held (run, rel, stuck), 1 of them releasing
    assert s.node_idle_gpus()[0] == pytest.approx(1)
    assert s.node_releasing_gpus()[0] == pytest.approx(1)
    assert s.node_idle[0, CPU] == 15000


def test_pending_gpu_memory_request_uses_smallest_device_memory():
    snap = simple(
        [_node("small", gpuMemory=40), _node("big", gpuMemory=80)], _queues(),
        [_job("m", [{"gpu": 0, "gpuMemory": 20}])],
    )
    s = CycleState(snap)
    assert s.queue_request[1, GPU] == pytest.approx(0.5)
    assert s.task_quota_req[0, GPU] == pytest.approx(0.25)


def test_fit_masks_whole_fraction_memory_selector():
    snap = simple(
        [_node("a", gpus=2, labels={"zone": "x"}), _node("b", gpus=1, labels={"zone": "y"})], _queues(),
        [
            _job("r", [{"gpu": 0.5, "state": "Running", "node": "a", "gpuGroups": ["0"]}]),
            _job("w2", [{"gpu": 2}]),
            _job("f", [{"gpu": 0.6}]),
            _job("sel", [{"gpu": 1, "nodeSelector": {"zone": "y"}}]),
            _job("mem", [{"gpu": 0, "gpuMemory": 60}]),
        ],
    )
    s = CycleState(snap)
    idle, anyok = s.fit_masks(1)
    assert list(idle) == [False, False]  # only one whole free device on a, one on b
    assert list(s.fit_masks(2)[0]) == [True, True]
    assert list(s.fit_masks(3)[0]) == [False, True]
    assert list(s.fit_masks(4)[0]) == [True, True]
    # fraction goes next to the running shared task's device only if it fits there
    assert s.choose_devices(2, 0, pipelined=False) == [1]


def test_place_binding_and_pipelined_and_evict_roundtrip():
    snap = simple(
        [_node("a", gpus=2)], _queues(),
        [
            _job("run", [{"gpu": 1, "cpu": "2", "state": "Running", "node": "a"}]),
            _job("p", [{"gpu": 1, "cpu": "2"}, {"gpu": 1, "cpu": "2"}]),
        ],
    )
    s = CycleState(snap)
    cp = s.checkpoint()
    s.place(1, 0)
    assert s.task_state[1] == TaskState.BINDING
    assert s.queue_alloc[1, GPU] == 2
    assert s.fit_masks(2) [0][0] == np.False_
    s.evict(0, for_job=1)
    assert s.task_state[0] == TaskState.RELEASING
    assert s.queue_alloc[1, GPU] == 1
    idle, anyok = s.fit_masks(2)
    assert not idle[0] and anyok[0]
    s.place(2, 0, pipelined=True)
    assert s.task_state[2] == TaskState.PIPELINED
    assert s.node_releasing_gpus()[0] == pytest.approx(0)
    assert s.events and s.events[0]["victimOf"] == "p"
    s.rollback(cp)
    assert list(s.task_state) == [TaskState.RUNNING, TaskState.PENDING, TaskState.PENDING]
    assert s.queue_alloc[1, GPU] == 1
    assert s.node_idle[0, GPU] == 1 and s.node_idle[0, CPU] == 14000
    assert s.dev_rel.sum() == 0
    assert s.events == []


def test_evict_pipelined_returns_exact_split():
    snap = simple(
        [_node("a", gpus=1, cpu="4")], _queues(),
        [_job("rel", [{"gpu": 0, "cpu": "1", "state": "Releasing", "node": "a"}]), _job("p", [{"gpu": 0, "cpu": "4"}])],
    )
    s = CycleState(snap)
    assert s.fit_masks(1)[1][0] and not s.fit_masks(1)[0][0]
    s.place(1, 0, pipelined=True)
    assert s.node_idle[0, CPU] == 0 and s.node_releasing[0, CPU] == 0
    s.evict(1)
    assert s.task_state[1] == TaskState.PENDING
    assert s.node_idle[0, CPU] == 3000 and s.node_releasing[0, CPU] == 1000


def test_queue_over_capacity_limit_and_nonpreemptible_quota():
    snap = simple(
        [_node("a", gpus=8)], [{"name": "top", "parent": None, "gpu": (-1, 1, 5)}, {"name": "q0", "parent": "top", "gpu": (2, 1, -1)}],
        [_job("run", [{"gpu": 4, "state": "Running", "node": "a"}])],
    )
    s = CycleState(snap)
    msg = s.queue_over_capacity(1, np.array([2.0, 0, 0]), nonpreemptible=False)
    assert msg == "queue top is over its limit for gpu: 4 used + 2 requested > 5"
    assert s.queue_over_capacity(1, np.array([1.0, 0, 0]), nonpreemptible=False) is None
    msg = s.queue_over_capacity(1, np.array([1.0, 0, 0]), nonpreemptible=True)
    assert msg is None  # running job is preemptible: Anp = 0
    assert "non-preemptible" in s.queue_over_capacity(1, np.array([3.0, 0, 0]), nonpreemptible=True)


def test_shared_devices_by_gpu_group():
    snap = simple(
        [_node("a", gpus=2)], _queues(),
        [
            _job("x", [{"gpu": 0.5, "state": "Running", "node": "a", "gpuGroups": ["g1"]}]),
            _job("y", [{"gpu": 0.3, "state": "Running", "node": "a", "gpuGroups": ["g1"]}]),
            _job("z", [{"gpu": 0.5}]),
        ],
    )
    s = CycleState(snap)
    assert sorted(s.dev_free[0]) == pytest.approx([0.2, 1.0])
    s.place(2, 0)
    # 0.5 does not fit on g1 (0.2 left): a new group on the other device
    assert s.task_gpu_groups[2] and s.task_gpu_groups[2] != ["g1"]
    assert sorted(s.dev_free[0]) == pytest.approx([0.2, 0.5])


def test_rollback_below_a_failure_point_bumps_resources_freed():
    snap = simple([_node("a", gpus=2)], _queues(), [_job("p", [{"gpu": 1}, {"gpu": 1}])])
    s = CycleState(snap)
    outer = s.checkpoint()
    s.place(0, 0)
    inner = s.checkpoint()
    s.mark_failure_point()  # e.g. a job failed to fit while task 0 held a GPU
    before = s.resources_freed
    s.place(1, 0)
    s.rollback(inner)  # back to the failure point: no more room than when it failed
    assert s.resources_freed == before
    s.rollback(outer)  # undoes task 0: the cached failure may no longer hold
    assert s.resources_freed == before + 1


def test_mark_pipelined_and_evict_return_free_resources():
    snap = simple([_node("a", gpus=2, cpu="4")], _queues(), [_job("p", [{"gpu": 1, "cpu": "1"}])])
    s = CycleState(snap)
    s.place(0, 0)
    s.mark_pipelined(0)
    assert s.task_state[0] == TaskState.PIPELINED and s.node_idle[0, CPU] == 3000
    s.evict(0)
    assert s.task_state[0] == TaskState.PENDING
    assert s.node_idle[0, CPU] == 4000 and s.node_idle_gpus()[0] == 2 and s.node_releasing[0].sum() == 0


def test_overcommitted_input_does_not_crash():
    snap = simple([_node("a", gpus=0), _node("b", gpus=1)], _queues(),
                  [_job("x", [{"gpu": 0.5, "state": "Running", "node": "a", "gpuGroups": ["0"]}]),
                   _job("y", [{"gpu": 2, "state": "Running", "node": "b"}]),
                   _job("z", [{"gpu": 0.5, "gpuMemory": 0}])])
    s = CycleState(snap)
    assert s.queue_alloc[1, GPU] == pytest.approx(2.5)
    idle, anyok = s.fit_masks(2)
    assert not anyok.any()


def _move(s, t, n):
    """What a consolidation move does (solvers.simulation.place_released): evict, then pipeline elsewhere."""
    s.evict(t)
    s.task_state[t] = TaskState.PENDING
    s.place(t, n, pipelined=True)


def test_evicting_a_moved_task_leaves_it_releasing_on_its_original_node():
    snap = simple(
        [_node("a", gpus=2), _node("b", gpus=2)], _queues(),
        [_job("m", [{"gpu": 1, "cpu": "2", "state": "Running", "node": "a"}], preemptible=False, priority=100),
         _job("w", [{"gpu": 0.5, "cpu": "1", "state": "Running", "node": "a", "gpuGroups": ["grp"]}])],
    )
    s = CycleState(snap)
    devs, alloc = list(s.task_devices[0]), s.task_alloc[0].copy()
    cp = s.checkpoint()
    _move(s, 0, 1)
    assert s.task_state[0] == TaskState.PIPELINED and s.task_node[0] == 1
    assert s.queue_alloc[1, GPU] == 1.5 and s.queue_alloc_np[1, GPU] == 1
    s.evict(0, reason="Reclaimed", message="for a reclaimer")
    assert s.task_state[0] == TaskState.RELEASING and s.task_node[0] == 0
    assert list(s.task_devices[0]) == devs and np.array_equal(s.task_alloc[0], alloc)
    # b got everything back; a still shows the task's share as releasing; the queue lost it
    assert s.node_idle_gpus()[1] == 2 and s.node_releasing[1].sum() == 0 and s.node_idle[1, CPU] == 16000
    assert s.node_releasing_gpus()[0] == 1 and s.node_releasing[0, CPU] == 2000
    assert s.queue_alloc[1, GPU] == 0.5 and s.queue_alloc_np[1, GPU] == 0 and s.job_num_active(0) == 0
    # the shared task keeps its named group when moved back and forth
    _move(s, 1, 1)
    s.evict(1)
    assert s.task_state[1] == TaskState.RELEASING and s.task_gpu_groups[1] == ["grp"] and s.task_node[1] == 0
    s.rollback(cp)
    assert list(s.task_state) == [TaskState.RUNNING, TaskState.RUNNING] and s.node_releasing.sum() == 0


def test_rolling_back_a_moved_tasks_new_placement_leaves_it_releasing():
    """The pipelining of an evicted task is journaled as Releasing (not the interim Pending)."""
    snap = simple([_node("a", gpus=1), _node("b", gpus=1)], _queues(),
                  [_job("m", [{"gpu": 1, "state": "Running", "node": "a"}])])
    s = CycleState(snap)
    s.evict(0)
    cp = s.checkpoint()
    s.task_state[0] = TaskState.PENDING
    s.place(0, 1, pipelined=True)
    s.rollback(cp)
    assert s.task_state[0] == TaskState.RELEASING and s.task_node[0] == 0
    assert s.node_releasing_gpus()[0] == 1 and s.node_idle_gpus()[1] == 1


def test_fmt_amount_memoised_writes_what_it_computes():
    """``fmt_amount`` is memoised: over numpy and Python floats and ints of the same values (both
    orders of first use), zeros of both signs and non-integers, each text is the unmemoised
    function's; a NaN still raises."""
    from scheduler_engine.state import fmt_amount
    raw = fmt_amount.__wrapped__
    vals = [0.0, -0.0, 1, 2.0, np.float64(3.5), np.float32(0.25), 1500, np.int64(7), 1e20, 10 ** 20, 2 ** 53 + 1,
            float(2 ** 53 + 1), 0.1, np.float64(0.1), 123456.789, 1e-12, -3.0000000001, 4000.0, np.float64(4000)]
    fmt_amount.cache_clear()
    for order in (vals, vals[::-1], vals):
        for r in (GPU, CPU, MEM):
            for v in order:
                assert fmt_amount(r, v) == raw(r, v), (r, v)
        fmt_amount.cache_clear()
    with pytest.raises(ValueError):
        fmt_amount(GPU, float("nan"))
