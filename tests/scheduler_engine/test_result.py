"""build_result: the vectorised result equals the straightforward per-job / per-task construction.

The reference below is the loop the engine used before (``jobs.tasks_of`` per job, one dict per
task, ``job_status`` over the labels, ``_plain`` on every event); the JSON must be identical,
key order included, on random cycle states, with job task ranges out of order, and with numpy
values in event payloads.
"""
from __future__ import annotations

import dataclasses
import gc
import json

import numpy as np
import pytest

from scheduler_engine.result import _plain, build_result, job_status, to_scenario_units
from scheduler_engine.snapshot import TaskState
from scheduler_engine.state import CycleState
from tests.scheduler_engine.test_state_init import _random_snapshot


def _reference(snapshot, state) -> dict:
    nodes, jobs, tasks = snapshot.nodes, snapshot.jobs, snapshot.tasks
    out_tasks, out_jobs = {}, {}
    for j, jname in enumerate(jobs.names):
        entries = []
        for t in jobs.tasks_of(j):
            status = TaskState(int(state.task_state[t])).label
            n = int(state.task_node[t])
            node = nodes.names[n] if n >= 0 else None
            out_tasks[tasks.names[t]] = {"status": status, "node": node}
            entries.append({"name": tasks.names[t], "status": status, "node": node,
                            "gpuGroups": list(state.task_gpu_groups[t]) if node is not None else []})
        out_jobs[jname] = {"status": job_status([e["status"] for e in entries]), "tasks": entries}
    queues = {q: {"fairShare": to_scenario_units(state.fair_share[i]),
                  "allocated": to_scenario_units(state.queue_alloc[i])} for i, q in enumerate(snapshot.queues.names)}
    idle, rel = state.node_idle_devices(), state.node_releasing_devices()
    out_nodes = {}
    for i, n in enumerate(nodes.names):
        out_nodes[n] = {}
        for key, v in (("idleGpus", idle[i]), ("releasingGpus", rel[i])):
            x = round(float(v), 9)
            out_nodes[n][key] = int(x) if x.is_integer() else x
    return {"jobs": out_jobs, "tasks": out_tasks, "queues": queues, "nodes": out_nodes,
            "events": [_plain(e) for e in state.events]}


def _reverse_jobs(snap):
    """The same cluster with the jobs listed in reverse (task ranges no longer in job order)."""
    J = len(snap.jobs.names)
    changes = {}
    for f in dataclasses.fields(snap.jobs):
        v = getattr(snap.jobs, f.name)
        if f.name != "index" and hasattr(v, "__len__") and len(v) == J:
            changes[f.name] = v[::-1] if isinstance(v, list) else np.asarray(v)[::-1].copy()
    tasks = dataclasses.replace(snap.tasks, job=(J - 1 - np.asarray(snap.tasks.job)))
    return dataclasses.replace(snap, jobs=dataclasses.replace(snap.jobs, **changes), tasks=tasks)


def _play(state, rng) -> None:
    """Some evictions, placements and events, so the statuses are mixed."""
    for t in range(state.T):
        r = rng.random()
        if state.task_state[t] in (int(TaskState.RUNNING),) and r < 0.3:
            state.evict(t, reason="Test", message=f"evicted {np.int64(t)}")
        elif state.task_state[t] == int(TaskState.PENDING) and r < 0.6:
            ok, _ = state.fit_masks(t)
            cand = np.flatnonzero(ok)
            if cand.size and state.choose_devices(t, int(cand[0]), False) is not None:
                state.place(t, int(cand[0]))
    state.events.append({"job": "x", "reason": "Numpy", "message": "m", "count": np.int64(3),
                         "vec": np.arange(2.0), "nested": {"a": (np.float64(0.5),)}})


@pytest.mark.parametrize("seed", range(120))
def test_build_result_equals_the_per_task_construction(seed):
    rng = np.random.default_rng(seed)
    snap = _random_snapshot(seed)
    if seed % 2:
        snap = _reverse_jobs(snap)
    with np.errstate(all="ignore"):
        s = CycleState(snap)
        _play(s, rng)
        got = build_result(snap, s).to_json()
        want = _reference(snap, s)
    assert json.dumps(got) == json.dumps(want)


def test_job_status_and_events_are_plain_python():
    snap = _random_snapshot(7)
    with np.errstate(all="ignore"):
        s = CycleState(snap)
        _play(s, np.random.default_rng(7))
    res = build_result(snap, s)
    ev = res.events[-1]
    assert type(ev["count"]) is int and ev["vec"] == [0.0, 1.0] and ev["nested"] == {"a": [0.5]}
    assert ev is not s.events[-1]  # a copy, not the state's event
    assert {j["status"] for j in res.jobs.values()} <= {t.label for t in TaskState} | {"Mixed"}


@pytest.mark.parametrize("enabled", [True, False])
def test_garbage_collector_state_is_restored(enabled):
    snap = _random_snapshot(3)
    with np.errstate(all="ignore"):
        s = CycleState(snap)
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        build_result(snap, s)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
