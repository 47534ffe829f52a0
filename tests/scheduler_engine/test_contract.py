"""The engine's input contract one row at a time (``validate_node / validate_queue /
validate_job``) and the split of a scenario into accepted and refused rows
(``partition_scenario``): the rules the control plane checks at every door and the cycle's
quarantine relies on (issue 16)."""
from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_engine.loader import (
    ScenarioError,
    label_key_problem,
    load_dict,
    partition_scenario,
    validate_job,
    validate_node,
    validate_queue,
)


def scenario() -> dict:
    return {
        "nodes": [{"name": "n0", "gpus": 4, "cpu": 8, "memory": "32Gi"},
                  {"name": "n1", "gpus": 2, "cpu": 8, "memory": "32Gi"}],
        "queues": [
            {"name": "root", "resources": {r: {"quota": -1, "limit": -1} for r in ("gpu", "cpu", "memory")}},
            {"name": "a", "parent": "root", "resources": {r: {"quota": -1, "limit": -1} for r in ("gpu", "cpu", "memory")}},
            {"name": "b", "parent": "root", "resources": {r: {"quota": -1, "limit": -1} for r in ("gpu", "cpu", "memory")}},
        ],
        "jobs": [
            {"name": "ok", "queue": "a", "tasks": [{"gpu": 1}]},
            {"name": "runs", "queue": "b", "tasks": [{"gpu": 1, "state": "Running", "node": "n1"}]},
        ],
    }


# ----------------------------------------------------------------------------- one row


@pytest.mark.parametrize("job, path, fragment", [
    ({"tasks": [{"gpu": 1.5}]}, "tasks[0].gpu", "whole devices"),
    ({"replicas": 3, "task": {"gpu": 2.5}}, "task.gpu", "whole devices"),
    ({"tasks": [{"gpu": 1.0001}]}, "tasks[0].gpu", "whole devices"),
    ({"tasks": [{"gpu": 1, "gpuMemory": 1000}]}, "tasks[0].gpuMemory", "not both"),
    ({"tasks": [{"gpu": 0.5, "gpuMemory": 1000}]}, "tasks[0].gpuMemory", "not both"),
    ({"tasks": [{"gpu": 1}], "minAvailable": 2}, "minAvailable", "number of tasks"),
    ({"tasks": [{"gpu": -1}]}, "tasks[0].gpu", ">= 0"),
    ({"tasks": [{"nodeSelector": {"bad key": "x"}}]}, "tasks[0].nodeSelector.bad key", "label key"),
    ({"tasks": [{"gpu": 1, "state": "Running", "node": "elsewhere"}]}, "tasks[0].node", "unknown node"),
])
def test_validate_job_names_the_field(job, path, fragment):
    problems = validate_job({"name": "j", "queue": "q", **job}, nodes=["n0"])
    assert any(p == path and fragment in m for p, m in problems), problems


def test_validate_job_accepts_what_the_loader_accepts():
    assert validate_job({"name": "j", "queue": "q", "tasks": [{"gpu": 0.5}, {"gpuMemory": 1000}, {"gpu": 3}]}) == []
    assert validate_job({"name": "j", "queue": "q", "tasks": [{"gpu": 1, "state": "Running", "node": "n0"}]},
                        nodes=["n0"]) == []


def test_validate_job_template_is_reported_once():
    assert validate_job({"name": "j", "queue": "q", "replicas": 10_000, "task": {"gpu": 1.5}}) == [
        ("task.gpu", "a request above 1 gpu must be whole devices, got 1.5")]


def test_validate_queue_memory_above_the_engine_bound():
    problems = validate_queue({"name": "q", "parent": "root", "resources": {"memory": {"quota": 2**70}}})
    assert [p for p, _ in problems] == ["resources.memory.quota"]
    assert validate_queue({"name": "q", "parent": "root", "resources": {"memory": {"quota": 2**62}}}) == []


def test_validate_queue_does_not_resolve_the_parent_but_refuses_itself_as_parent():
    assert validate_queue({"name": "q", "parent": "not-declared-here"}) == []
    assert validate_queue({"name": "q", "parent": "q"}) == [("parent", "a queue cannot be its own parent")]


def test_validate_node_reserved_above_capacity():
    assert validate_node({"name": "n", "gpus": 2, "reservedByOthers": {"gpu": 5}}) == [
        ("reservedByOthers.gpu", "must be <= the node's gpus (2), got 5")]
    assert validate_node({"name": "n", "gpus": 2, "cpu": 1, "reservedByOthers": {"cpu": "1500m"}})[0][0] == \
        "reservedByOthers.cpu"
    assert validate_node({"name": "n", "gpus": 2, "reservedByOthers": {"gpu": 2}}) == []


@pytest.mark.parametrize("key, ok", [
    ("zone", True), ("topology.kubernetes.io/zone", True), ("kai-test/pool", True), ("a_b.c-d", True),
    ("bad key", False), ("/x", False), ("x/", False), ("-x", False), ("UPPER.example/x", False),
    ("a" * 64, False), ("p" * 254 + "/x", False), ("x\x00", False), ("", False),
])
def test_label_keys_follow_kubernetes(key, ok):
    assert (label_key_problem(key) is None) is ok
    problems = validate_node({"name": "n", "labels": {key: "v"}})
    assert (problems == []) is ok


# ----------------------------------------------------------------------------- partition


def test_partition_of_a_valid_scenario_refuses_nothing():
    part = partition_scenario(scenario())
    assert part.refused == {"nodes": {}, "queues": {}, "jobs": {}} and part.problems == []
    load_dict(part.data)


def test_partition_refuses_one_job_and_keeps_the_rest():
    data = scenario()
    data["jobs"].insert(0, {"name": "bad", "queue": "a", "tasks": [{"gpu": 1.5}]})
    with pytest.raises(ScenarioError):
        load_dict(data)
    part = partition_scenario(data)
    assert part.refused["jobs"] == {0: [("tasks[0].gpu", "a request above 1 gpu must be whole devices, got 1.5")]}
    assert [j["name"] for j in part.data["jobs"]] == ["ok", "runs"]
    load_dict(part.data)


def test_a_refused_queue_takes_its_subtree_and_their_jobs():
    data = scenario()
    data["queues"][2]["resources"]["memory"] = {"quota": 2**70}  # b
    data["queues"].append({"name": "b-child", "parent": "b"})
    data["queues"].insert(0, {"name": "grandchild", "parent": "b-child"})  # before its parent in the list
    data["jobs"].append({"name": "deep", "queue": "grandchild", "tasks": [{"gpu": 1}]})
    part = partition_scenario(data)
    refused_queues = {data["queues"][i]["name"]: probs for i, probs in part.refused["queues"].items()}
    assert set(refused_queues) == {"b", "b-child", "grandchild"}
    assert refused_queues["b"][0][0] == "resources.memory.quota"
    assert refused_queues["grandchild"][0][0] == "parent"
    refused_jobs = {data["jobs"][i]["name"]: probs for i, probs in part.refused["jobs"].items()}
    assert set(refused_jobs) == {"runs", "deep"}
    assert refused_jobs["runs"][0][0] == "queue" and "queue 'b' is refused" in refused_jobs["runs"][0][1]
    assert [q["name"] for q in part.data["queues"]] == ["root", "a"]
    load_dict(part.data)


def test_a_refused_node_takes_the_jobs_running_on_it():
    data = scenario()
    data["nodes"][1]["reservedByOthers"] = {"gpu": 3}
    part = partition_scenario(data)
    assert list(part.refused["nodes"]) == [1]
    assert part.refused["jobs"] == {1: [("tasks[0].node", "node 'n1' is refused (reservedByOthers.gpu: must be <= "
                                                          "the node's gpus (2), got 3)")]}
    load_dict(part.data)


def test_bad_usage_entry_is_dropped_and_config_problems_refuse_everything():
    data = scenario()
    data["usage"] = {"a": {"gpu": 5}, "b": {"gpu": 0.5}}
    part = partition_scenario(data)
    assert part.problems == [] and part.data["usage"] == {"b": {"gpu": 0.5}}
    data["config"] = {"actions": ["nonsense"]}
    part = partition_scenario(data)
    assert part.problems and part.problems[0][0] == "config.actions[0]"


def test_partition_does_not_modify_its_input():
    data = scenario()
    data["jobs"].append({"name": "bad", "queue": "a", "tasks": [{"gpu": 1.5}]})
    before = copy.deepcopy(data)
    partition_scenario(data)
    assert data == before


_junk = st.one_of(st.none(), st.booleans(), st.integers(-10, 2**70), st.floats(allow_nan=True),
                  st.text(max_size=5), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                                            st.integers(), max_size=2))
_job_keys = st.sampled_from(["gpu", "gpuMemory", "cpu", "memory", "state", "node", "priority", "nodeSelector",
                             "name", "gpuGroups"])


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(edits=st.lists(st.tuples(st.integers(0, 3), _job_keys, _junk), max_size=4),
       queue_edit=st.one_of(st.none(), st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["gpu", "memory"]),
                                                 st.sampled_from(["quota", "limit", "overQuotaWeight"]), _junk)))
def test_partition_always_leaves_a_loadable_scenario(edits, queue_edit):
    """Whatever junk lands in some rows, the rest loads, and every row is either kept or refused."""
    data = scenario()
    data["jobs"] += [{"name": f"extra-{i}", "queue": "a", "tasks": [{"gpu": 1}]} for i in range(2)]
    for job, key, value in edits:
        data["jobs"][job]["tasks"][0][key] = value
    if queue_edit is not None:
        qname, res, fld, value = queue_edit
        q = next(q for q in data["queues"] if q["name"] == qname)
        q["resources"][res][fld] = value
    part = partition_scenario(data)
    assert part.problems == []
    load_dict(part.data)
    kept = {j["name"] for j in part.data["jobs"]}
    refused = {data["jobs"][i]["name"] for i in part.refused["jobs"]}
    assert kept | refused == {j["name"] for j in data["jobs"] if isinstance(j.get("name"), str)}
    assert not kept & refused
    for i in part.refused["jobs"]:  # a job refused for its own fields: validate_job agrees
        # (not for names clashing with another row's: that is no property of the row alone)
        own = [p for p, m in part.refused["jobs"][i] if p != "queue" and "duplicate" not in m]
        if own:
            assert validate_job(data["jobs"][i], nodes=["n0", "n1"])


# ----------------------------------------------------------------------------- subgroups and devices (issue 21)

CLASSES = [{"name": "gpu.nvidia.com"}, {"name": "compute-domain.nvidia.com"}]


def test_validate_job_checks_the_subgroup_tree_and_claims_against_the_given_classes():
    from scheduler_engine.loader import check_job

    job = {"name": "j", "queue": "a", "minSubGroups": 1,
           "subGroups": [{"name": "decode"}, {"name": "leader", "parent": "decode", "minAvailable": 1},
                         {"name": "workers", "parent": "decode", "minAvailable": 2}, {"name": "prefill"}],
           "tasks": [{"subGroup": "leader", "claims": [{"deviceClass": "gpu.nvidia.com", "count": 2}]},
                     {"subGroup": "workers"}, {"subGroup": "workers"}, {"subGroup": "workers"},
                     {"subGroup": "prefill"}]}
    assert check_job(job, device_classes=CLASSES) == ([], 1)  # prefill alone satisfies the root
    # the same job without its device classes: the claim names an unknown class
    assert validate_job(job) == [("tasks[0].claims[0].deviceClass",
                                  "unknown device class 'gpu.nvidia.com' (declare it in deviceClasses)")]
    bad = copy.deepcopy(job)
    bad["subGroups"][1]["parent"] = "nope"
    bad["tasks"][1]["subGroup"] = "decode"
    paths = [p for p, _ in validate_job(bad, device_classes=CLASSES)]
    assert "subGroups[1].parent" in paths
    bad = copy.deepcopy(job)
    bad["tasks"][1]["subGroup"] = "decode"
    assert [p for p, _ in validate_job(bad, device_classes=CLASSES)] == ["tasks[1].subGroup"]


def test_validate_job_checks_device_pins_against_the_named_nodes_devices():
    job = {"name": "j", "queue": "a",
           "tasks": [{"state": "Running", "node": "gb", "claims": [{"deviceClass": "gpu.nvidia.com", "count": 2}],
                      "devices": {"gpu.nvidia.com": [0, 3]}}]}
    node = {"name": "gb", "gpus": 0, "devices": {"gpu.nvidia.com": 4}}
    assert validate_job(job, nodes=[node], device_classes=CLASSES) == []
    small = {**node, "devices": {"gpu.nvidia.com": 2}}
    assert [p for p, _ in validate_job(job, nodes=[small], device_classes=CLASSES)] == ["tasks[0].devices.gpu.nvidia.com[1]"]


def test_validate_node_checks_devices_against_the_given_classes():
    node = {"name": "gb", "gpus": 0, "devices": {"gpu.nvidia.com": 4}}
    assert validate_node(node, device_classes=CLASSES) == []
    assert validate_node(node) == [("devices.gpu.nvidia.com",
                                    "unknown device class 'gpu.nvidia.com' (declare it in deviceClasses)")]
    assert [p for p, _ in validate_node({**node, "devices": {"gpu.nvidia.com": -1}}, device_classes=CLASSES)] == [
        "devices.gpu.nvidia.com"]


def test_partition_refuses_a_job_with_a_bad_tree_and_a_node_with_an_undeclared_class():
    data = scenario()
    data["deviceClasses"] = CLASSES
    data["nodes"].append({"name": "gb", "gpus": 0, "devices": {"fpga.example.com": 1}})
    data["jobs"].append({"name": "tree", "queue": "a", "subGroups": [{"name": "x", "minAvailable": 3}],
                         "tasks": [{"subGroup": "x"}]})
    data["jobs"].append({"name": "dra", "queue": "a", "tasks": [{"claims": [{"deviceClass": "gpu.nvidia.com"}]}]})
    part = partition_scenario(data)
    assert [data["nodes"][i]["name"] for i in part.refused["nodes"]] == ["gb"]
    assert [data["jobs"][i]["name"] for i in part.refused["jobs"]] == ["tree"]
    assert "dra" in [j["name"] for j in part.data["jobs"]]
    load_dict(part.data)
