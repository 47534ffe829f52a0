"""CycleState construction: the vectorised charging of input tasks equals charging them one by one.

``CycleState._init_placements`` hands whole-GPU devices out by per-node cumulative counts and adds
node / queue sums with ``ufunc.at``. The reference below is the straightforward per-task loop the
engine used before (shared-GPU tasks first, then the others, each in task order): every array must
be bitwise equal on random clusters with over-committed nodes, named and unnamed gpuGroups,
GPU-memory tasks, Releasing / StuckInReleasing tasks and reserved devices.
"""
from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest

from scheduler_engine.snapshot import (
    ACTION_NAMES, CPU, GPU, MEM, Config, Jobs, Nodes, Queues, Snapshot, Tasks, TaskState,
)
from scheduler_engine.state import EPS, CycleState

GI = 1024.0 ** 3
_RUN, _REL, _STUCK = int(TaskState.RUNNING), int(TaskState.RELEASING), int(TaskState.STUCK_RELEASING)


def _random_snapshot(seed: int) -> Snapshot:
    rng = np.random.default_rng(seed)
    n_nodes, n_queues = int(rng.integers(1, 6)), 4
    gpus = rng.integers(0, 5, n_nodes)
    cap = np.zeros((n_nodes, 3))
    cap[:, GPU], cap[:, CPU], cap[:, MEM] = gpus, 16000.0, 64 * GI
    reserved = np.zeros((n_nodes, 3))
    reserved[:, GPU] = rng.integers(0, 2, n_nodes) * (rng.random(n_nodes) < 0.3)
    nodes = Nodes(names=[f"n{i}" for i in range(n_nodes)], capacity=cap, reserved=reserved,
                  gpus=gpus.astype(np.int64), gpu_memory=rng.choice([40960.0, 81920.0], n_nodes),
                  labels=[{} for _ in range(n_nodes)], unschedulable=rng.random(n_nodes) < 0.1,
                  ready=rng.random(n_nodes) < 0.9)
    queues = Queues(names=["top", "a", "b", "a1"], parent=np.array([-1, 0, 0, 1]),
                    priority=np.full(n_queues, 100), created_minutes_ago=np.ones(n_queues),
                    deserved=np.full((n_queues, 3), -1.0), weight=np.ones((n_queues, 3)),
                    limit=np.full((n_queues, 3), -1.0), reclaim_min_runtime=np.full(n_queues, np.nan),
                    preempt_min_runtime=np.full(n_queues, np.nan))
    n_jobs = int(rng.integers(1, 12))
    counts = rng.integers(1, 4, n_jobs)
    n_tasks = int(counts.sum())
    state = rng.choice([0, 1, 1, 1, 2, 3, 4, 5], n_tasks).astype(np.int8)
    node = np.where(np.isin(state, (_RUN, _REL, _STUCK)), rng.integers(-1, n_nodes, n_tasks), -1)
    req, gpu_memory, groups = np.zeros((n_tasks, 3)), np.zeros(n_tasks), []
    for t in range(n_tasks):
        kind = int(rng.integers(0, 4))
        if kind == 0:
            req[t, GPU] = float(rng.integers(1, 4))
        elif kind == 1:
            req[t, GPU] = float(rng.choice([0.25, 0.5, 0.75]))
        elif kind == 2:
            gpu_memory[t] = float(rng.choice([10240.0, 20480.0, 50000.0]))
        req[t, CPU], req[t, MEM] = float(rng.integers(0, 8)) * 1000, float(rng.integers(0, 16)) * GI
        named = kind in (1, 2) or rng.random() < 0.1
        groups.append([str(x) for x in rng.choice(["0", "1", "2", "x", "g", "7"], int(rng.integers(0, 2)))]
                      if named else [])
    jobs = Jobs(names=[f"j{j}" for j in range(n_jobs)], queue=rng.integers(0, n_queues, n_jobs).astype(np.int64),
                priority=np.full(n_jobs, 100), preemptible=rng.random(n_jobs) < 0.5,
                min_available=np.ones(n_jobs, dtype=np.int64), created_minutes_ago=np.ones(n_jobs),
                started_minutes_ago=np.ones(n_jobs), stale_for=np.full(n_jobs, np.nan),
                staleness_grace_period=np.full(n_jobs, np.nan), preemption_delay=np.full(n_jobs, np.nan),
                topology_required=[None] * n_jobs, topology_preferred=[None] * n_jobs,
                task_start=np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64),
                task_count=counts.astype(np.int64))
    tasks = Tasks(names=[f"t{t}" for t in range(n_tasks)], job=np.repeat(np.arange(n_jobs), counts).astype(np.int64),
                  request=req, gpu_memory=gpu_memory, state=state, priority=np.full(n_tasks, np.nan),
                  node=node.astype(np.int64), gpu_groups=groups, node_selector=[{} for _ in range(n_tasks)])
    cfg = Config(actions=ACTION_NAMES, k_value=1.0, now=datetime(2026, 1, 1, tzinfo=timezone.utc))
    return Snapshot(name=f"random-{seed}", config=cfg, nodes=nodes, queues=queues, jobs=jobs, tasks=tasks,
                    usage=np.zeros((n_queues, 3)))


def _reference_charge(s: CycleState) -> dict:
    """Charge the input tasks of ``s.snap`` one by one, as the engine did before vectorising."""
    snap = s.snap
    n_nodes, g = s.N, s.G
    idle = s.node_capacity.copy()
    releasing = np.zeros_like(idle)
    free = s.dev_valid.astype(float)
    rel = np.zeros((n_nodes, g))
    dev_group: list[dict[int, str]] = [dict() for _ in range(n_nodes)]
    shared_dev = np.zeros((n_nodes, g), dtype=bool)
    alloc = np.zeros((s.T, 3))
    qa, qnp = np.zeros((s.Q, 3)), np.zeros((s.Q, 3))
    devices = [[] for _ in range(s.T)]
    groups = [list(x) for x in snap.tasks.gpu_groups]
    st = np.asarray(snap.tasks.state)
    node = np.asarray(snap.tasks.node)
    on = [t for t in range(s.T) if st[t] in (_RUN, _REL, _STUCK) and node[t] >= 0]
    for t in [t for t in on if s.task_is_shared[t]] + [t for t in on if not s.task_is_shared[t]]:
        n = int(node[t])
        nd = int(s.node_devices[n])
        frac = s._shared_fraction(t, n)
        devs: list[int] = []
        if s.task_is_shared[t] and nd > 0:
            names = groups[t]
            by_name = {v: k for k, v in dev_group[n].items()}
            name = names[0] if names else None
            if name is not None and name in by_name:
                d = by_name[name]
            else:
                d = None
                if name is not None and name.isdigit() and int(name) < nd and int(name) not in dev_group[n] \
                        and free[n, int(name)] >= 1 - EPS:
                    d = int(name)
                if d is None:
                    cand = [i for i in range(nd) if i not in dev_group[n] and free[n, i] >= 1 - EPS]
                    cand = cand or [i for i in range(nd) if free[n, i] >= frac - EPS] or [0]
                    d = cand[0]
                if name is None:
                    used, name, i = set(dev_group[n].values()), str(d), 1
                    while name in used:
                        name, i = f"{d}-{i}", i + 1
                dev_group[n][d] = name
                shared_dev[n, d] = True
            if not names:
                groups[t] = [dev_group[n][d]]
            devs = [d]
        elif not s.task_is_shared[t]:
            devs = [i for i in range(nd) if free[n, i] >= 1 - EPS][:int(s.task_whole[t])]
        r = s.task_request[t].copy()
        if s.task_is_mem[t]:
            r[GPU] = frac
        alloc[t] = r
        idle[n] -= r
        per = frac if s.task_is_shared[t] else 1.0
        for d in devs:
            free[n, d] -= per
        if st[t] == _REL:
            releasing[n] += r
            for d in devs:
                rel[n, d] += per
        devices[t] = devs
        if st[t] == _RUN:
            path = s.queue_path[int(s.job_queue_arr[s.task_job[t]])]
            qa[path] += r
            if not s.job_preemptible_arr[s.task_job[t]]:
                qnp[path] += r
    return dict(node_idle=idle, node_releasing=releasing, dev_free=free, dev_rel=rel, dev_group=dev_group,
                dev_shared=shared_dev, task_alloc=alloc, queue_alloc=qa, queue_alloc_np=qnp,
                task_devices=devices, task_gpu_groups=groups)


@pytest.mark.parametrize("seed", range(300))
def test_vectorised_input_charging_equals_the_per_task_loop(seed):
    snap = _random_snapshot(seed)
    with np.errstate(all="ignore"):
        s = CycleState(snap)
        ref = _reference_charge(s)
    for name in ("node_idle", "node_releasing", "dev_free", "dev_rel", "dev_shared", "task_alloc",
                 "queue_alloc", "queue_alloc_np"):
        np.testing.assert_array_equal(getattr(s, name), ref[name], err_msg=name)
    assert [dict(x) for x in s.dev_group] == ref["dev_group"]
    assert [list(x) for x in s.task_devices] == ref["task_devices"]
    assert [list(x) for x in s.task_gpu_groups] == ref["task_gpu_groups"]


def test_whole_gpu_tasks_take_each_nodes_free_devices_in_task_order():
    """Interleaved nodes: a node's devices go to its tasks in task order; an over-commit gets fewer."""
    snap = _random_snapshot(0)
    tasks = snap.tasks
    n_nodes = len(snap.nodes)
    assert n_nodes >= 1
    from dataclasses import replace

    t = 5
    nodes = replace(snap.nodes, names=["a", "b"], capacity=np.tile([[4.0, 64000.0, 256 * GI]], (2, 1)),
                    reserved=np.zeros((2, 3)), gpus=np.array([4, 4]), gpu_memory=np.array([81920.0, 81920.0]),
                    labels=[{}, {}], unschedulable=np.zeros(2, bool), ready=np.ones(2, bool))
    req = np.array([[2.0, 1000.0, GI], [1.0, 1000.0, GI], [1.0, 1000.0, GI], [0.0, 1000.0, GI], [3.0, 1000.0, GI]])
    tasks = replace(tasks, names=[f"t{i}" for i in range(t)], job=np.arange(t), request=req, gpu_memory=np.zeros(t),
                    state=np.array([_RUN, _RUN, _REL, _RUN, _RUN], np.int8), priority=np.full(t, np.nan),
                    node=np.array([0, 1, 0, 0, 0]), gpu_groups=[[] for _ in range(t)],
                    node_selector=[{} for _ in range(t)])
    jobs = replace(snap.jobs, names=[f"j{i}" for i in range(t)], queue=np.full(t, 3), priority=np.full(t, 100),
                   preemptible=np.ones(t, bool), min_available=np.ones(t, np.int64), created_minutes_ago=np.ones(t),
                   started_minutes_ago=np.ones(t), stale_for=np.full(t, np.nan),
                   staleness_grace_period=np.full(t, np.nan), preemption_delay=np.full(t, np.nan),
                   topology_required=[None] * t, topology_preferred=[None] * t, task_start=np.arange(t),
                   task_count=np.ones(t, np.int64))
    s = CycleState(replace(snap, nodes=nodes, jobs=jobs, tasks=tasks))
    assert [list(x) for x in s.task_devices] == [[0, 1], [0], [2], [], [3]]  # t4 wanted 3, got 1
    assert list(s.dev_rel[0]) == [0.0, 0.0, 1.0, 0.0]
    assert list(s.dev_free[0]) == [0.0, 0.0, 0.0, 0.0] and list(s.dev_free[1]) == [0.0, 1.0, 1.0, 1.0]
    assert s.node_idle[0, GPU] == 4 - 2 - 1 - 0 - 3  # an over-commit keeps its full request
    assert s.queue_alloc[3, GPU] == 2 + 1 + 3 and s.queue_alloc[0, GPU] == 6  # Releasing not counted
