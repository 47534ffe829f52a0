"""``expect`` comparison and the Rounds rules, on hand-built results and a fake action."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from scheduler_engine import cycle as cycle_mod
from scheduler_engine.check import check_snapshot, compare
from scheduler_engine.cycle import observe, rewrite_snapshot, run_rounds, uses_rounds
from scheduler_engine.loader import load_dict
from scheduler_engine.result import CycleResult, job_status
from scheduler_engine.snapshot import TaskState


def result(**over) -> CycleResult:
    base = dict(
        name="r",
        jobs={
            "a": {"status": "Binding", "tasks": [
                {"name": "a-0", "status": "Binding", "node": "node0", "gpuGroups": []},
                {"name": "a-1", "status": "Binding", "node": "node0", "gpuGroups": []}]},
            "b": {"status": "Mixed", "tasks": [
                {"name": "b-0", "status": "Running", "node": "node1", "gpuGroups": []},
                {"name": "b-1", "status": "Pending", "node": None, "gpuGroups": []}]},
            "c": {"status": "Binding", "tasks": [
                {"name": "c-0", "status": "Binding", "node": "node0", "gpuGroups": []},
                {"name": "c-1", "status": "Binding", "node": "node1", "gpuGroups": []}]},
        },
        tasks={"a-0": {"status": "Binding", "node": "node0"}, "a-1": {"status": "Binding", "node": "node0"},
               "b-0": {"status": "Running", "node": "node1"}, "b-1": {"status": "Pending", "node": None}},
        queues={"q": {"fairShare": {"gpu": 4, "cpu": 3.333, "memory": 17179869184},
                      "allocated": {"gpu": 2, "cpu": 0.5, "memory": 0}}},
        nodes={"node0": {"idleGpus": 3.0, "releasingGpus": 1.0}},
    )
    base.update(over)
    return CycleResult(**base)


def test_matching_expect_has_no_mismatch():
    exp = {
        "jobs": {"a": {"status": "Binding", "node": "node0"}, "b": {"status": "Mixed"}},
        "tasks": {"b-1": {"status": "Pending"}, "b-0": {"status": "Running", "node": "node1"}},
        "queues": {"q": {"fairShare": {"gpu": 4, "cpu": 3.333, "memory": "16Gi"}, "allocated": {"cpu": "500m"}}},
        "nodes": {"node0": {"idleGpus": 3, "releasingGpus": 1}},
    }
    assert compare(result(), exp) == []
    assert compare(result(), None) == [] and compare(result(), {}) == []


def test_job_status_and_node_mismatches_are_named():
    out = compare(result(), {"jobs": {"a": {"status": "Pending", "node": "node1"}, "b": {"status": "Running"}}})
    assert out == [
        "job a: status expected Pending, got Binding",
        "job a: node expected node1, got node0",
        "job b: status expected Running, got Mixed (b-0=Running, b-1=Pending)",
    ]


def test_job_on_several_nodes_does_not_match_one_node():
    assert compare(result(), {"jobs": {"c": {"node": "node0"}}}) == ["job c: node expected node0, got node0, node1"]


def test_job_without_node_reports_none():
    r = result()
    r.jobs["p"] = {"status": "Pending", "tasks": [{"name": "p-0", "status": "Pending", "node": None, "gpuGroups": []}]}
    assert compare(r, {"jobs": {"p": {"node": "node0"}}}) == ["job p: node expected node0, got none"]


def test_task_mismatches():
    out = compare(result(), {"tasks": {"b-1": {"status": "Binding", "node": "node0"}, "a-0": {"node": "node0"}}})
    assert out == ["task b-1: status expected Binding, got Pending", "task b-1: node expected node0, got none"]


def test_queue_numbers_use_relative_tolerance():
    ok = {"queues": {"q": {"fairShare": {"gpu": 4 * (1 + 5e-7)}}}}
    bad = {"queues": {"q": {"fairShare": {"gpu": 4 * (1 + 5e-6)}}}}
    assert compare(result(), ok) == []
    assert compare(result(), bad) == ["queue q: fairShare.gpu expected 4.00002, got 4"]


def test_queue_cpu_is_compared_in_cores_and_memory_in_bytes():
    out = compare(result(), {"queues": {"q": {"fairShare": {"cpu": 3.334, "memory": "17Gi"}, "allocated": {"gpu": 0}}}})
    assert out == [
        "queue q: fairShare.cpu expected 3.334, got 3.333",
        "queue q: fairShare.memory expected 18253611008, got 17179869184",
        "queue q: allocated.gpu expected 0, got 2",
    ]


def test_zero_compares_with_float_noise():
    r = result(nodes={"node0": {"idleGpus": 1e-13, "releasingGpus": 0.0}})
    assert compare(r, {"nodes": {"node0": {"idleGpus": 0, "releasingGpus": 0}}}) == []
    assert compare(r, {"nodes": {"node0": {"releasingGpus": 0.5}}}) == [
        "node node0: releasingGpus expected 0.5, got 0"]


def test_objects_missing_from_result():
    out = compare(result(), {"jobs": {"zz": {"status": "Pending"}}, "nodes": {"n9": {"idleGpus": 0}}})
    assert out == ["job zz: not in the result", "node n9: not in the result"]


def test_job_status_rule():
    assert job_status(["Binding", "Binding"]) == "Binding"
    assert job_status(["Binding", "Pipelined"]) == "Mixed"
    assert job_status([]) == "Pending"


# ---------------------------------------------------------------------------------------- rounds


def scenario(**config) -> dict:
    return {
        "name": "rounds",
        "config": {"actions": ["allocate"], **config},
        "nodes": [{"name": "node0", "gpus": 2, "cpu": 8, "memory": "8Gi"}],
        "queues": [{"name": "q", "resources": {
            "gpu": {"quota": -1, "overQuotaWeight": 1, "limit": -1},
            "cpu": {"quota": -1, "overQuotaWeight": 1, "limit": -1},
            "memory": {"quota": -1, "overQuotaWeight": 1, "limit": -1}}}],
        "jobs": [
            {"name": "run", "queue": "q", "startedMinutesAgo": 30,
             "tasks": [{"gpu": 1, "state": "Running", "node": "node0"}]},
            {"name": "rel", "queue": "q", "startedMinutesAgo": 30,
             "tasks": [{"gpu": 0, "state": "Releasing", "node": "node0"}]},
            {"name": "new", "queue": "q", "tasks": [{"gpu": 1}]},
            {"name": "pipe", "queue": "q", "tasks": [{"gpu": 1}]},
        ],
    }


def fake_state(snap, states, nodes, groups=None):
    return SimpleNamespace(task_state=np.array(states, dtype=np.int8), task_node=np.array(nodes),
                           task_gpu_groups=groups or [[] for _ in states])


def test_rewrite_follows_the_rounds_section():
    snap = load_dict(scenario())
    st = fake_state(snap, [TaskState.RUNNING, TaskState.RELEASING, TaskState.BINDING, TaskState.PIPELINED],
                    [0, 0, 0, 0], [[], [], ["g1"], ["g2"]])
    new = rewrite_snapshot(snap, st)
    assert [TaskState(s).label for s in new.tasks.state] == ["Running", "Pending", "Running", "Pending"]
    assert list(new.tasks.node) == [0, -1, 0, -1]
    assert new.tasks.gpu_groups == [[], [], ["g1"], []]
    started = new.jobs.started_minutes_ago
    assert started[0] == 30 and started[1] == 30 and started[2] == 1 and np.isnan(started[3])
    # the input snapshot is untouched
    assert [TaskState(s).label for s in snap.tasks.state] == ["Running", "Releasing", "Pending", "Pending"]


def test_uses_rounds_when_rounds_key_present_even_if_one():
    assert not uses_rounds(load_dict(scenario()))
    assert uses_rounds(load_dict(scenario(rounds=1)))
    assert uses_rounds(load_dict(scenario(stableRounds=2)))


def _install_fake_action(monkeypatch, decide):
    """Replace every action with ``decide(state, call_number)``; returns the call counter."""
    calls = {"n": 0}

    def run(state):
        calls["n"] += 1
        decide(state, calls["n"])

    monkeypatch.setattr(cycle_mod, "get_action", lambda name: run)
    return calls


def _bind_pending(state, n):
    """Binds every pending task on node 0 without accounting (enough for status checks)."""
    pend = np.flatnonzero(state.task_state == TaskState.PENDING)
    state.task_state[pend] = TaskState.BINDING
    state.task_node[pend] = 0


def test_rounds_compare_after_rewrite(monkeypatch):
    _install_fake_action(monkeypatch, _bind_pending)
    d = scenario(rounds=2)
    d["expect"] = {"jobs": {"new": {"status": "Running", "node": "node0"}, "rel": {"status": "Running"}}}
    out = check_snapshot(load_dict(d))
    assert out.passed, out.mismatches
    d["expect"] = {"jobs": {"new": {"status": "Binding"}}}
    assert check_snapshot(load_dict(d)).mismatches == ["job new: status expected Binding, got Running"]


def test_plain_scenario_compares_the_cycle_itself(monkeypatch):
    _install_fake_action(monkeypatch, _bind_pending)
    d = scenario()
    d["expect"] = {"jobs": {"new": {"status": "Binding"}, "rel": {"status": "Releasing"}}}
    assert check_snapshot(load_dict(d)).passed


def test_stable_rounds_catch_a_late_eviction(monkeypatch):
    def decide(state, n):
        if n == 4:  # 1 round + 3rd stable round: evict the running task
            state.task_state[0] = TaskState.RELEASING

    calls = _install_fake_action(monkeypatch, decide)
    d = scenario(rounds=1, stableRounds=5)
    d["expect"] = {"jobs": {"run": {"status": "Running"}, "new": {"status": "Pending"}}}
    out = check_snapshot(load_dict(d))
    assert out.mismatches == ["stable round 3: job run: status expected Running, got Releasing"]
    assert calls["n"] == 6  # 1 round + 5 stable rounds, all run
    d["config"]["stableRounds"] = 2
    assert check_snapshot(load_dict(d)).passed


def test_run_rounds_counts(monkeypatch):
    calls = _install_fake_action(monkeypatch, lambda s, n: None)
    rr = run_rounds(load_dict(scenario(rounds=3, stableRounds=2)))
    assert len(rr.cycles) == 3 and len(rr.stable) == 2 and calls["n"] == 5
    assert rr.final.jobs["rel"]["status"] == "Pending"  # Releasing -> Pending by the first rewrite


def test_observe_reports_input_states_and_fair_share():
    r = observe(load_dict(scenario()))
    assert r.jobs["run"]["status"] == "Running" and r.tasks["new-0"]["status"] == "Pending"
    assert r.queues["q"]["allocated"]["gpu"] == 1
    assert set(r.timings) >= {"open", "result", "total"}


@pytest.mark.parametrize("bad", [0, -1])
def test_run_rounds_rejects_bad_count(bad):
    with pytest.raises(ValueError):
        run_rounds(load_dict(scenario()), rounds=bad)


def test_rewritten_snapshot_exports_and_reloads_equal():
    from scheduler_engine.loader import snapshot_to_dict, snapshots_equal

    snap = load_dict(scenario(rounds=2))
    st = fake_state(snap, [TaskState.RUNNING, TaskState.RELEASING, TaskState.BINDING, TaskState.PIPELINED],
                    [0, 0, 0, 0])
    new = rewrite_snapshot(snap, st)
    assert snapshots_equal(new, load_dict(snapshot_to_dict(new)))
