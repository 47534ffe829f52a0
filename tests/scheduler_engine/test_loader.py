"""Scenario validation: every bad input is named by its path; defaults and units follow the format."""
from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
import yaml

from scheduler_engine.loader import ScenarioError, load_dict, load_scenario, snapshot_to_dict, snapshots_equal
from scheduler_engine.snapshot import ACTION_NAMES, TaskState

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"


def base() -> dict:
    """A small valid scenario: two nodes, a two-level queue tree, one running and one pending job."""
    return {
        "name": "base",
        "config": {"actions": ["allocate"], "now": "2026-01-01T00:00:00Z"},
        "nodes": [
            {"name": "node0", "gpus": 8, "gpuMemory": 81920, "cpu": "64", "memory": "512Gi",
             "labels": {"zone": "a"}},
            {"name": "node1", "gpus": 4, "cpu": 32, "memory": 1024},
        ],
        "queues": [
            {"name": "dept", "parent": None, "resources": {
                "gpu": {"quota": -1, "overQuotaWeight": -1, "limit": -1},
                "cpu": {"quota": -1, "overQuotaWeight": 1, "limit": -1},
                "memory": {"quota": -1, "overQuotaWeight": 1, "limit": -1}}},
            {"name": "research", "parent": "dept", "priority": 50, "createdMinutesAgo": 3, "resources": {
                "gpu": {"quota": 4, "overQuotaWeight": 2, "limit": 8},
                "cpu": {"quota": "1500m", "overQuotaWeight": 1, "limit": -1},
                "memory": {"quota": "1Gi", "overQuotaWeight": 1, "limit": -1}},
             "reclaimMinRuntime": "10m"},
        ],
        "jobs": [
            {"name": "train-1", "queue": "research", "priority": 50, "createdMinutesAgo": 10,
             "startedMinutesAgo": 5, "tasks": [
                 {"gpu": 1, "cpu": "4", "memory": "16Gi", "state": "Running", "node": "node0"},
                 {"name": "custom", "gpu": 0.5, "cpu": "500m", "state": "Running", "node": "node0",
                  "gpuGroups": ["g0"]},
             ]},
            {"name": "build", "queue": "research", "priority": 100, "replicas": 3,
             "task": {"gpu": 2, "cpu": 1, "memory": "1Gi"}},
        ],
        "usage": {"research": {"gpu": 0.25}},
        "expect": {"jobs": {"build": {"status": "Binding", "node": "node1"}},
                   "tasks": {"custom": {"status": "Running", "node": "node0"}},
                   "queues": {"research": {"fairShare": {"gpu": 4, "cpu": 1.5}}},
                   "nodes": {"node0": {"idleGpus": 6.5}}},
    }


def test_base_scenario_loads_with_internal_units_and_defaults():
    s = load_dict(base())
    assert s.nodes.names == ["node0", "node1"]
    np.testing.assert_array_equal(s.nodes.capacity[0], [8, 64000, 512 * 2**30])
    np.testing.assert_array_equal(s.nodes.capacity[1], [4, 32000, 1024])
    assert s.nodes.gpu_memory[1] == 0 and bool(s.nodes.ready.all()) and not s.nodes.unschedulable.any()
    assert list(s.queues.parent) == [-1, 0]
    assert list(s.queues.priority) == [100, 50]  # default queue priority 100
    np.testing.assert_array_equal(s.queues.deserved[0], [-1, -1, -1])
    np.testing.assert_array_equal(s.queues.deserved[1], [4, 1500, 2**30])
    np.testing.assert_array_equal(s.queues.weight[0], [1, 1, 1])  # overQuotaWeight -1 -> 1
    np.testing.assert_array_equal(s.queues.limit[1], [8, -1, -1])
    assert s.queues.reclaim_min_runtime[1] == 600 and math.isnan(s.queues.preempt_min_runtime[1])
    assert s.tasks.names == ["train-1-0", "custom", "build-0", "build-1", "build-2"]
    assert list(s.jobs.task_start) == [0, 2] and list(s.jobs.task_count) == [2, 3]
    assert list(s.jobs.min_available) == [2, 3]  # default = number of tasks
    assert list(s.jobs.preemptible) == [True, False]  # default priority < 100
    assert math.isnan(s.jobs.started_minutes_ago[1])
    np.testing.assert_array_equal(s.tasks.request[1], [0.5, 500, 0])
    assert list(s.tasks.state) == [TaskState.RUNNING] * 2 + [TaskState.PENDING] * 3
    assert list(s.tasks.node) == [0, 0, -1, -1, -1]
    assert s.tasks.gpu_groups[1] == ["g0"]
    assert s.usage[1, 0] == 0.25 and s.usage.sum() == 0.25
    assert s.config.now == datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert s.config.actions == ("allocate",) and s.config.k_value == 0.0
    assert s.source["name"] == "base" and s.expect["jobs"]["build"]["status"] == "Binding"
    # the cluster is in the arrays only; the other blocks are kept (export, the simulator)
    assert not {"nodes", "queues", "jobs"} & set(s.source) and s.source["config"]["actions"] == ["allocate"]


def test_defaults_when_config_absent():
    d = base()
    del d["config"]
    s = load_dict(d)
    assert s.config.actions == ACTION_NAMES
    assert s.config.placement == {"gpu": "binpack", "cpu": "binpack"}
    assert s.config.rounds == 1 and not s.config.rounds_given


def test_absent_queue_resources_are_zero():
    d = base()
    del d["queues"][1]["resources"]
    d["queues"][0]["resources"]["cpu"] = {"quota": 2}
    s = load_dict(d)
    np.testing.assert_array_equal(s.queues.deserved[1], [0, 0, 0])
    np.testing.assert_array_equal(s.queues.limit[1], [0, 0, 0])
    np.testing.assert_array_equal(s.queues.weight[1], [0, 0, 0])
    assert s.queues.deserved[0, 1] == 2000 and s.queues.limit[0, 1] == 0


def _set(d: dict, path: str, value) -> None:
    """Set ``a.b[2].c`` in a nested dict/list; value ``DELETE`` removes the key."""
    parts: list = []
    for chunk in path.split("."):
        while "[" in chunk:
            name, rest = chunk.split("[", 1)
            if name:
                parts.append(name)
            idx, chunk = rest.split("]", 1)
            parts.append(int(idx))
        if chunk:
            parts.append(chunk)
    cur = d
    for p in parts[:-1]:
        cur = cur[p]
    if value is DELETE:
        del cur[parts[-1]]
    else:
        cur[parts[-1]] = value


DELETE = object()

# (what to change, new value, path named in the error, fragment of the message)
BAD_CASES = [
    ("colour", "red", "colour", "unknown key"),
    ("config.action", ["allocate"], "config.action", "unknown key"),
    ("config.actions", ["allocate", "reclaimm"], "config.actions[1]", "must be one of"),
    ("config.actions", ["allocate", "allocate"], "config.actions[1]", "listed twice"),
    ("config.actions", "allocate", "config.actions", "must be a list"),
    ("config.placement", {"gpu": "pack"}, "config.placement.gpu", "binpack, spread"),
    ("config.placement", {"disk": "spread"}, "config.placement.disk", "unknown key"),
    ("config.kValue", -1, "config.kValue", ">= 0"),
    ("config.kValue", float("nan"), "config.kValue", "finite"),
    ("config.rounds", 0, "config.rounds", ">= 1"),
    ("config.rounds", 1.5, "config.rounds", "integer"),
    ("config.rounds", True, "config.rounds", "integer"),
    ("config.stableRounds", -1, "config.stableRounds", ">= 0"),
    ("config.reclaimerUtilizationMultiplier", 0.5, "config.reclaimerUtilizationMultiplier", ">= 1"),
    ("config.reclaimMinRuntimeResolution", "root", "config.reclaimMinRuntimeResolution", "lca, queue"),
    ("config.defaultReclaimMinRuntime", "-5s", "config.defaultReclaimMinRuntime", ">= 0"),
    ("config.defaultPreemptMinRuntime", "soon", "config.defaultPreemptMinRuntime", "not a duration"),
    ("config.stalenessGracePeriod", "forever", "config.stalenessGracePeriod", "not a duration"),
    ("config.now", "yesterday", "config.now", "ISO 8601"),
    ("nodes", {"name": "x"}, "nodes", "must be a list"),
    ("nodes[0].gpu", 8, "nodes[0].gpu", "unknown key"),
    ("nodes[1].name", "node0", "nodes[1].name", "duplicate node name"),
    ("nodes[0].name", DELETE, "nodes[0].name", "is required"),
    ("nodes[0].gpus", -1, "nodes[0].gpus", ">= 0"),
    ("nodes[0].gpus", 2.5, "nodes[0].gpus", "integer"),
    ("nodes[0].gpus", 10**9, "nodes[0].gpus", "too large"),
    ("nodes[0].cpu", "-4", "nodes[0].cpu", ">= 0"),
    ("nodes[0].memory", "lots", "nodes[0].memory", "not a Kubernetes quantity"),
    ("nodes[0].memory", "1e40", "nodes[0].memory", "too large"),
    ("nodes[0].memory", float("inf"), "nodes[0].memory", "finite"),
    ("nodes[0].labels", ["zone"], "nodes[0].labels", "must be a mapping"),
    ("nodes[0].labels", {"zone": True}, "nodes[0].labels.zone", "must be a string"),
    ("nodes[0].ready", "yes", "nodes[0].ready", "true or false"),
    ("nodes[0].reservedByOthers", {"gpu": -1}, "nodes[0].reservedByOthers.gpu", ">= 0"),
    ("nodes[0].reservedByOthers", {"disk": 1}, "nodes[0].reservedByOthers.disk", "unknown key"),
    ("queues[1].name", "dept", "queues[1].name", "duplicate queue name"),
    ("queues[1].parent", "nowhere", "queues[1].parent", "unknown parent queue 'nowhere'"),
    ("queues[1].parent", "research", "queues[1].parent", "its own parent"),
    ("queues[1].weight", 1, "queues[1].weight", "unknown key"),
    ("queues[1].priority", "high", "queues[1].priority", "integer"),
    ("queues[1].createdMinutesAgo", -3, "queues[1].createdMinutesAgo", ">= 0"),
    ("queues[1].resources.gpus", {}, "queues[1].resources.gpus", "unknown key"),
    ("queues[1].resources.gpu.deserved", 4, "queues[1].resources.gpu.deserved", "unknown key"),
    ("queues[1].resources.gpu.quota", -2, "queues[1].resources.gpu.quota", "-1 for unlimited"),
    ("queues[1].resources.gpu.quota", float("nan"), "queues[1].resources.gpu.quota", "finite"),
    ("queues[1].resources.cpu.limit", "-3", "queues[1].resources.cpu.limit", ">= 0"),
    ("queues[1].resources.memory.quota", "1e30", "queues[1].resources.memory.quota", "too large"),
    ("queues[1].resources.gpu.overQuotaWeight", -2, "queues[1].resources.gpu.overQuotaWeight", "-1 for unset"),
    ("queues[1].resources.gpu.overQuotaWeight", float("inf"), "queues[1].resources.gpu.overQuotaWeight", "finite"),
    ("queues[1].reclaimMinRuntime", "-1m", "queues[1].reclaimMinRuntime", ">= 0"),
    ("jobs[0].queue", "dept", "jobs[0].queue", "only leaf queues take jobs"),
    ("jobs[0].queue", "ghost", "jobs[0].queue", "unknown queue 'ghost'"),
    ("jobs[0].queue", DELETE, "jobs[0].queue", "is required"),
    ("jobs[1].name", "train-1", "jobs[1].name", "duplicate job name"),
    ("jobs[0].gpus", 1, "jobs[0].gpus", "unknown key"),
    ("jobs[0].priority", 1.5, "jobs[0].priority", "integer"),
    ("jobs[0].preemptible", "no", "jobs[0].preemptible", "true or false"),
    ("jobs[0].minAvailable", 0, "jobs[0].minAvailable", ">= 1"),
    ("jobs[0].minAvailable", 3, "jobs[0].minAvailable", "<= the number of tasks (2)"),
    ("jobs[0].createdMinutesAgo", float("nan"), "jobs[0].createdMinutesAgo", "finite"),
    ("jobs[0].startedMinutesAgo", -1, "jobs[0].startedMinutesAgo", ">= 0"),
    ("jobs[0].staleFor", "-1s", "jobs[0].staleFor", ">= 0"),
    ("jobs[0].preemptionDelay", "later", "jobs[0].preemptionDelay", "not a duration"),
    ("jobs[0].topology", {"required": 3}, "jobs[0].topology.required", "must be a string"),
    ("jobs[0].topology", {"zone": "a"}, "jobs[0].topology.zone", "unknown key"),
    ("jobs[0].tasks", [], "jobs[0].tasks", "at least one task"),
    ("jobs[0].tasks", DELETE, "jobs[0].tasks", "is required"),
    ("jobs[0].replicas", 2, "jobs[0]", "not both"),
    ("jobs[1].replicas", 0, "jobs[1].replicas", ">= 1"),
    ("jobs[1].replicas", DELETE, "jobs[1].replicas", "is required with a `task` template"),
    ("jobs[1].task", DELETE, "jobs[1].task", "is required with `replicas`"),
    ("jobs[1].task.name", "x", "jobs[1].task.name", "a template has no name"),
    ("jobs[1].task.gpu", -1, "jobs[1].task.gpu", ">= 0"),
    ("jobs[1].task.colour", "red", "jobs[1].task.colour", "unknown key"),
    ("jobs[0].tasks[0].gpu", -1, "jobs[0].tasks[0].gpu", "must be >= 0"),
    ("jobs[0].tasks[0].gpu", 1.5, "jobs[0].tasks[0].gpu", "whole devices"),
    ("jobs[0].tasks[0].gpu", float("nan"), "jobs[0].tasks[0].gpu", "finite"),
    ("jobs[0].tasks[0].gpu", "1e30", "jobs[0].tasks[0].gpu", "too large"),
    ("jobs[0].tasks[0].gpuMemory", -5, "jobs[0].tasks[0].gpuMemory", ">= 0"),
    ("jobs[0].tasks[0].gpuMemory", 100, "jobs[0].tasks[0].gpuMemory", "either gpu or gpuMemory"),
    ("jobs[0].tasks[0].cpu", "4 cores", "jobs[0].tasks[0].cpu", "not a Kubernetes quantity"),
    ("jobs[0].tasks[0].memory", -1, "jobs[0].tasks[0].memory", ">= 0"),
    ("jobs[0].tasks[0].state", "Done", "jobs[0].tasks[0].state", "must be one of Pending"),
    ("jobs[0].tasks[0].state", "Binding", "jobs[0].tasks[0].state", "must be one of Pending"),
    ("jobs[0].tasks[0].node", "node9", "jobs[0].tasks[0].node", "unknown node 'node9'"),
    ("jobs[0].tasks[0].node", DELETE, "jobs[0].tasks[0].node", "required for a Running task"),
    ("jobs[0].tasks[0].name", "custom", "jobs[0].tasks[1].name", "duplicate task name"),
    ("jobs[0].tasks[0].nodeSelector", {"zone": ["a"]}, "jobs[0].tasks[0].nodeSelector.zone", "must be a string"),
    ("jobs[0].tasks[1].gpuGroups", "g0", "jobs[0].tasks[1].gpuGroups", "must be a list"),
    ("jobs[0].tasks[0].priority", float("inf"), "jobs[0].tasks[0].priority", "finite"),
    ("jobs[0].tasks[0].tasks", [], "jobs[0].tasks[0].tasks", "unknown key"),
    ("usage.ghost", {"gpu": 0.5}, "usage.ghost", "unknown queue 'ghost'"),
    ("usage.research", {"gpu": 1.5}, "usage.research.gpu", "[0, 1]"),
    ("usage.research", {"gpu": -0.1}, "usage.research.gpu", "[0, 1]"),
    ("usage.research", {"disk": 0.1}, "usage.research.disk", "unknown key"),
    ("expect.job", {}, "expect.job", "unknown key"),
    ("expect.jobs.ghost", {"status": "Pending"}, "expect.jobs.ghost", "unknown job 'ghost'"),
    ("expect.jobs.build", {"status": "Bound"}, "expect.jobs.build.status", "must be one of"),
    ("expect.jobs.build", {"node": "node9"}, "expect.jobs.build.node", "unknown node 'node9'"),
    ("expect.jobs.build", {"nodes": "node1"}, "expect.jobs.build.nodes", "unknown key"),
    ("expect.tasks.ghost", {"status": "Pending"}, "expect.tasks.ghost", "unknown task 'ghost'"),
    ("expect.tasks.custom", {"status": "Mixed"}, "expect.tasks.custom.status", "must be one of"),
    ("expect.queues.ghost", {"fairShare": {"gpu": 1}}, "expect.queues.ghost", "unknown queue 'ghost'"),
    ("expect.queues.research", {"fairshare": {"gpu": 1}}, "expect.queues.research.fairshare", "unknown key"),
    ("expect.queues.research", {"fairShare": {"gpu": -1}}, "expect.queues.research.fairShare.gpu", ">= 0"),
    ("expect.nodes.node9", {"idleGpus": 1}, "expect.nodes.node9", "unknown node 'node9'"),
    ("expect.nodes.node0", {"idleGPUs": 1}, "expect.nodes.node0.idleGPUs", "unknown key"),
    ("simulation", {"cycles": 0}, "simulation.cycles", ">= 1"),
    ("simulation", {"arrivals": [{"queue": "dept", "count": 1}]}, "simulation.arrivals[0].queue", "leaf"),
    ("simulation", {"windowType": "rolling"}, "simulation.windowType", "sliding, tumbling"),
]


@pytest.mark.parametrize(("where", "value", "path", "fragment"), BAD_CASES, ids=[c[2] + ":" + c[3] for c in BAD_CASES])
def test_each_validation_error_names_its_path(where, value, path, fragment):
    d = base()
    _set(d, where, value)
    with pytest.raises(ScenarioError) as info:
        load_dict(d)
    problems = info.value.problems
    assert any(p == path and fragment in m for p, m in problems), problems
    assert f"{path}: " in str(info.value)


def test_queue_cycle_is_reported():
    d = base()
    d["queues"].append({"name": "a", "parent": "b"})
    d["queues"].append({"name": "b", "parent": "a"})
    with pytest.raises(ScenarioError) as info:
        load_dict(d)
    (msg,) = [m for p, m in info.value.problems if "cycle" in m]
    assert "a -> b -> a" in msg or "b -> a -> b" in msg


def test_all_problems_are_collected_not_just_the_first():
    d = base()
    d["nodes"][0]["gpus"] = -1
    d["jobs"][0]["tasks"][0]["gpu"] = -1
    d["config"]["rounds"] = 0
    with pytest.raises(ScenarioError) as info:
        load_dict(d)
    paths = {p for p, _ in info.value.problems}
    assert {"nodes[0].gpus", "jobs[0].tasks[0].gpu", "config.rounds"} <= paths


def test_repeated_values_are_checked_each_time_they_appear():
    """The loader parses each distinct request value once (``_Validator.resource``) and checks a
    mapping's keys in one set comparison: a value equal to an accepted one but of a refused type
    (``True`` after ``1``, ``1.0`` is fine), a bad value after a good one, and an unknown key on a
    mapping shaped like the others must each still be named at their own path."""
    d = base()
    tasks = d["jobs"][0]["tasks"]
    tasks.append({"gpu": True, "cpu": "4", "memory": "16Gi", "state": "Running", "node": "node0"})
    tasks.append({"gpu": 1.0, "cpu": 4, "memory": "16Gi", "state": "Running", "node": "node1"})
    tasks.append({"gpu": 1, "cpu": "4", "memory": ["16Gi"], "state": "Running", "node": "node1"})
    tasks.append({"gpu": 1, "cpu": "4", "memory": "16Gi", "state": "Running", "node": "node1", "gpus": 1})
    with pytest.raises(ScenarioError) as info:
        load_dict(d)
    assert sorted(p for p, _ in info.value.problems) == [
        "jobs[0].tasks[2].gpu", "jobs[0].tasks[4].memory", "jobs[0].tasks[5].gpus"]
    del tasks[2]
    del tasks[3:]
    snap = load_dict(d)
    assert snap.tasks.request[2].tolist() == [1.0, 4000.0, 16 * 2**30]

def test_template_problem_reported_once_not_per_replica():
    d = base()
    d["jobs"][1]["replicas"] = 50
    d["jobs"][1]["task"]["cpu"] = "-1"
    with pytest.raises(ScenarioError) as info:
        load_dict(d)
    assert [p for p, _ in info.value.problems] == ["jobs[1].task.cpu"]


def test_top_level_must_be_a_mapping():
    with pytest.raises(ScenarioError, match="mapping at the top level"):
        load_dict([1, 2])


def test_pending_task_with_node_is_rejected():
    d = base()
    d["jobs"][1]["task"]["node"] = "node0"
    with pytest.raises(ScenarioError, match=r"jobs\[1\].task.node: a Pending task has no node"):
        load_dict(d)


def test_succeeded_task_may_keep_its_node():
    d = base()
    d["jobs"][0]["tasks"][0]["state"] = "Succeeded"
    s = load_dict(d)
    assert s.tasks.state[0] == TaskState.SUCCEEDED and s.tasks.node[0] == 0


def test_overquota_weight_minus_one_is_one_and_zero_stays_zero():
    d = base()
    d["queues"][1]["resources"]["gpu"]["overQuotaWeight"] = 0
    s = load_dict(d)
    assert s.queues.weight[0, 0] == 1 and s.queues.weight[1, 0] == 0


def test_preemptible_explicit_overrides_priority_default():
    d = base()
    d["jobs"][1]["preemptible"] = True
    assert load_dict(d).jobs.preemptible[1]


def test_yaml_duplicate_key_and_bad_yaml(tmp_path):
    f = tmp_path / "dup.yaml"
    f.write_text("name: a\nname: b\n")
    with pytest.raises(ScenarioError, match="duplicate key 'name'"):
        load_scenario(f)
    f.write_text("nodes: [unclosed\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(f)


def test_json_scenario_and_nan_constant(tmp_path):
    f = tmp_path / "s.json"
    f.write_text(json.dumps(base()))
    assert load_scenario(f).nodes.names == ["node0", "node1"]
    f.write_text('{"nodes": [{"name": "n", "gpus": NaN}]}')
    with pytest.raises(ScenarioError, match="not valid JSON"):
        load_scenario(f)


def test_missing_file_is_a_scenario_error(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "nope.yaml")


def test_unquoted_yaml_timestamp_is_accepted(tmp_path):
    f = tmp_path / "t.yaml"
    f.write_text("config: {now: 2026-01-01T00:00:00Z}\n")
    s = load_scenario(f)
    assert s.config.now == datetime(2026, 1, 1, tzinfo=timezone.utc)
    json.dumps(s.source)  # source stays JSON-serialisable


def test_round_trip_base_scenario():
    s = load_dict(base())
    d = snapshot_to_dict(s)
    json.dumps(d)
    s2 = load_dict(copy.deepcopy(d))
    assert snapshots_equal(s, s2)
    assert snapshot_to_dict(s2) == d


def test_snapshots_equal_detects_a_difference():
    a = load_dict(base())
    d = base()
    d["jobs"][0]["tasks"][0]["cpu"] = "5"
    assert not snapshots_equal(a, load_dict(d))


def _golden_files() -> list[Path]:
    if not SHARED.is_dir():
        return []
    return sorted(SHARED.glob("scenarios/*/*.yaml"))


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared scenarios not found at {SHARED}")
def test_every_golden_file_loads_and_round_trips():
    files = _golden_files()
    assert len(files) > 200
    for f in files:
        s = load_scenario(f)
        d = snapshot_to_dict(s)
        assert snapshots_equal(s, load_dict(json.loads(json.dumps(d)))), f


def test_invalid_file_via_cli_exits_2_with_empty_stdout(tmp_path):
    d = base()
    d["jobs"][0]["tasks"][0]["gpu"] = -1
    d["queues"][1]["parent"] = "nowhere"
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(d))
    for cmd in ("cycle", "check"):
        proc = subprocess.run(
            [sys.executable, "-m", "scheduler_engine", cmd, str(f)],
            cwd=REPO, capture_output=True, text=True, timeout=120,
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stdout == ""
        assert "jobs[0].tasks[0].gpu: must be >= 0" in proc.stderr
        assert "queues[1].parent: unknown parent queue 'nowhere'" in proc.stderr


# ---------------------------------------------------------------------------------------- fuzzing

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _all_paths(x, prefix=()):
    """Every (container path) reachable in a nested dict/list, including the leaves."""
    yield prefix
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _all_paths(v, prefix + (k,))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _all_paths(v, prefix + (i,))


BASE_PATHS = [p for p in _all_paths(base()) if p]

junk = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
        st.sampled_from(["-1", "1e999", "4Gi", "500m", "node0", "research", "Running", "-5s", "dept"]),
    ),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.text(max_size=6), children, max_size=3)),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(BASE_PATHS), value=junk)
def test_any_junk_value_gives_a_scenario_error_or_a_snapshot(path, value):
    """Bad input never crashes the loader: it is either valid or a ScenarioError naming paths."""
    d = base()
    cur = d
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    try:
        snap = load_dict(d)
    except ScenarioError as exc:
        assert exc.problems
        assert all(isinstance(p, str) and isinstance(m, str) and m for p, m in exc.problems)
        return
    # a valid result must still export and reload identically
    assert snapshots_equal(snap, load_dict(json.loads(json.dumps(snapshot_to_dict(snap)))))


def test_null_means_default():
    d = base()
    d["config"].update({"kValue": None, "rounds": None, "actions": None, "stalenessGracePeriod": None})
    d["nodes"][1].update({"gpus": None, "ready": None, "unschedulable": None})
    d["queues"][1].update({"priority": None, "createdMinutesAgo": None})
    d["jobs"][1].update({"priority": None, "createdMinutesAgo": None, "preemptible": None, "minAvailable": None})
    d["jobs"][1]["task"].update({"state": None, "cpu": None})
    s = load_dict(d)
    assert s.config.k_value == 0 and s.config.rounds == 1 and not s.config.rounds_given
    assert s.config.actions == ACTION_NAMES and s.config.staleness_grace_period == 60
    assert s.nodes.gpus[1] == 0 and s.nodes.ready[1] and not s.nodes.unschedulable[1]
    assert s.queues.priority[1] == 100 and s.queues.created_minutes_ago[1] == 0
    assert s.jobs.priority[1] == 50 and s.jobs.preemptible[1] and s.jobs.min_available[1] == 3
    assert s.tasks.state[2] == TaskState.PENDING and s.tasks.request[2, 1] == 0
