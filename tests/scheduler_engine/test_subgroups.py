"""Hierarchical gangs (scenario-format "SubGroups"): loader rules, the subgroup tree's rules
(satisfaction, KAI subgrouporder, tasks to allocate / evict), and whole cycles.

The rules come from KAI's design docs (hierarchical-podgroup, min-subgroups) and
``pkg/scheduler/api/podgroup_info`` (``allocation_info.go``, ``eviction_info.go``); the cases here are
our own (KAI's test tables are kept as an independent check).
"""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from scheduler_engine import subgroups
from scheduler_engine.check import check_snapshot
from scheduler_engine.cycle import run_cycle, run_rounds
from scheduler_engine.loader import ScenarioError, load_dict, load_scenario, snapshot_to_dict, snapshots_equal
from scheduler_engine.snapshot import TaskState
from scheduler_engine.state import CycleState

SCENARIOS = Path(__file__).parent / "scenarios" / "subgroups"
UNLIMITED = {"gpu": {"quota": -1, "limit": -1}, "cpu": {"quota": -1, "limit": -1},
             "memory": {"quota": -1, "limit": -1}}


def scenario(jobs, nodes=None, **extra):
    return {"nodes": nodes or [{"name": "n0", "gpus": 8}], "queues": [{"name": "q", "resources": UNLIMITED}],
            "jobs": jobs, **extra}


def job(name="j", subgroups_=None, tasks=None, **kw):
    out = {"name": name, "queue": "q", **kw}
    if subgroups_ is not None:
        out["subGroups"] = subgroups_
    out["tasks"] = tasks if tasks is not None else []
    return out


def problems(data):
    with pytest.raises(ScenarioError) as e:
        load_dict(data)
    return e.value.problems


# ------------------------------------------------------------------------------------ loader
@pytest.mark.parametrize("sgs, tasks, path, text", [
    ([{"name": "a", "parent": "zz"}], [{"subGroup": "a"}], "jobs[0].subGroups[0].parent", "unknown parent subgroup 'zz'"),
    ([{"name": "a", "parent": "a"}], [{"subGroup": "a"}], "jobs[0].subGroups[0].parent", "cannot be its own parent"),
    ([{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}, {"name": "c"}], [{"subGroup": "c"}],
     "jobs[0].subGroups[0].parent", "cycle in the subgroup tree: a -> b -> a"),
    ([{"name": "a"}, {"name": "a"}], [{"subGroup": "a"}], "jobs[0].subGroups[1].name", "duplicate subgroup name 'a'"),
    ([{"name": "a", "minAvailable": 1}, {"name": "b", "parent": "a"}], [{"subGroup": "b"}],
     "jobs[0].subGroups[0].minAvailable", "has child subgroups"),
    ([{"name": "a", "minSubGroups": 1}], [{"subGroup": "a"}], "jobs[0].subGroups[0].minSubGroups", "is a leaf"),
    ([{"name": "a"}, {"name": "b", "parent": "a"}], [{"subGroup": "a"}], "jobs[0].tasks[0].subGroup",
     "subgroup 'a' has child subgroups; tasks belong to leaf subgroups"),
    ([{"name": "a"}], [{"subGroup": "x"}], "jobs[0].tasks[0].subGroup", "unknown subgroup 'x'"),
    ([{"name": "a"}], [{}], "jobs[0].tasks[0].subGroup", "is required"),
    ([{"name": "a", "minAvailable": 2}], [{"subGroup": "a"}], "jobs[0].subGroups[0].minAvailable",
     "must be <= the number of tasks in subgroup 'a' (1), got 2"),
    ([{"name": "a", "minAvailable": -1}], [{"subGroup": "a"}], "jobs[0].subGroups[0].minAvailable", "must be >= 0"),
    ([{"name": "m", "minSubGroups": 3}, {"name": "a", "parent": "m"}], [{"subGroup": "a"}],
     "jobs[0].subGroups[0].minSubGroups", "must be <= the number of direct child subgroups (1), got 3"),
    ([{"name": "a", "bogus": 1}], [{"subGroup": "a"}], "jobs[0].subGroups[0].bogus", "unknown key"),
    ([{"name": "a", "topology": {"required": 3}}], [{"subGroup": "a"}], "jobs[0].subGroups[0].topology.required",
     "must be a string"),
])
def test_loader_refuses_a_bad_tree_naming_the_field(sgs, tasks, path, text):
    found = problems(scenario([job(subgroups_=sgs, tasks=tasks)]))
    assert any(p == path and text in m for p, m in found), found


def test_loader_job_level_rules():
    both = job(subgroups_=[{"name": "a"}], tasks=[{"subGroup": "a"}], minAvailable=1)
    assert problems(scenario([both]))[0][0] == "jobs[0].minAvailable"
    lone = job(tasks=[{"gpu": 1}], minSubGroups=1)
    assert problems(scenario([lone]))[0] == ("jobs[0].minSubGroups", "only a job with subGroups sets minSubGroups")
    too_many = job(subgroups_=[{"name": "a"}], tasks=[{"subGroup": "a"}], minSubGroups=2)
    assert "top-level subgroups (1)" in problems(scenario([too_many]))[0][1]
    stray = job(tasks=[{"subGroup": "a"}])
    assert problems(scenario([stray]))[0] == ("jobs[0].tasks[0].subGroup", "the job has no subGroups")


def test_loader_reports_every_problem_at_once():
    bad = job(subgroups_=[{"name": "a", "minSubGroups": 1}, {"name": "b", "parent": "nope"}],
              tasks=[{"subGroup": "a", "gpu": -1}])
    paths = {p for p, _ in problems(scenario([bad, job("k", tasks=[{"subGroup": "x"}])]))}
    assert {"jobs[0].subGroups[1].parent", "jobs[0].tasks[0].gpu", "jobs[1].tasks[0].subGroup"} <= paths


def test_tree_arrays_and_defaults():
    snap = load_dict(scenario([
        job("flat", tasks=[{"gpu": 1}]),
        job("tree", minSubGroups=1, subgroups_=[
            {"name": "m"}, {"name": "l1", "parent": "m", "minAvailable": 1}, {"name": "l2", "parent": "m"},
            {"name": "z", "minAvailable": 0}],
            tasks=[{"subGroup": "l1"}, {"subGroup": "l2"}, {"subGroup": "l2"}, {"subGroup": "z"}]),
    ]))
    sg, jobs = snap.sub_groups, snap.jobs
    assert jobs.sg_count.tolist() == [0, 4] and jobs.sg_start.tolist()[1] == 0
    assert sg.parent.tolist() == [-1, 0, 0, -1]  # parent-index array, -1 = the job root
    assert sg.min_available.tolist() == [-1, 1, 2, 0]  # a leaf without minAvailable: all its tasks
    assert sg.min_sub_groups.tolist() == [-1, -1, -1, -1]
    assert jobs.min_sub_groups.tolist() == [-1, 1]
    assert snap.tasks.sub_group.tolist() == [-1, 1, 2, 2, 3]
    # derived gang size: the cheapest way to satisfy the root (z needs 0 tasks)
    assert jobs.min_available.tolist() == [1, 0]


def test_export_round_trip():
    snap = load_scenario(SCENARIOS / "03-topology-per-subtree.yaml")
    again = load_dict(snapshot_to_dict(snap))
    assert snapshots_equal(snap, again)
    assert snapshot_to_dict(snap)["jobs"][1]["subGroups"][1] == {
        "name": "decode-leader", "parent": "decode", "minAvailable": 1,
        "topology": {"required": "rack", "preferred": None}}


# ------------------------------------------------------------------------------------ the tree's rules
def _state(jobs, nodes=None, **extra):
    return CycleState(load_dict(scenario(jobs, nodes, **extra)))


def test_member_order_kai_subgrouporder():
    st = _state([job(subgroups_=[{"name": n, "minAvailable": m} for n, m in
                                 (("below", 2), ("half", 2), ("full", 1), ("zero-b", 0), ("zero-a", 0))],
                     tasks=[{"subGroup": "below", "state": "Running", "node": "n0"}, {"subGroup": "below"},
                            {"subGroup": "half", "state": "Running", "node": "n0"},
                            {"subGroup": "half", "state": "Running", "node": "n0"}, {"subGroup": "half"},
                            {"subGroup": "half"},
                            {"subGroup": "full", "state": "Running", "node": "n0"},
                            {"subGroup": "zero-b", "state": "Running", "node": "n0"}, {"subGroup": "zero-a"}])])
    tree = subgroups.tree_of(st, 0)
    members, sat = subgroups.satisfaction(tree, subgroups.leaf_counts(tree, st.task_state))
    order = [tree.names[i] for i in subgroups.ordered_members(tree, tree.root, members, sat)]
    # below minAvailable first; then allocated / minAvailable: half 2/2 = 1 == full 1/1, by name;
    # minAvailable 0 last, fewer allocated first
    assert order == ["below", "full", "half", "zero-a", "zero-b"]


def test_tasks_to_allocate_gang_then_elastic():
    st = _state([job(minSubGroups=1, subgroups_=[{"name": "b", "minAvailable": 2}, {"name": "a", "minAvailable": 2}],
                     tasks=[{"subGroup": "b"}, {"subGroup": "b"}, {"subGroup": "a"}, {"subGroup": "a"},
                            {"subGroup": "a"}])])
    names = st.tasks.names
    # gang phase: the first minSubGroups=1 member in order (both unsatisfied: by name -> a)
    assert [names[t] for t in subgroups.tasks_to_allocate(st, 0)] == ["j-2", "j-3"]
    st.place(2, 0)
    st.place(3, 0)
    # root satisfied: elastic phase, first member with something to place: b (unsatisfied) asks its gang
    assert [names[t] for t in subgroups.tasks_to_allocate(st, 0)] == ["j-0", "j-1"]
    st.place(0, 0)
    st.place(1, 0)
    # then one task at a time: a (2/2 = b's 2/2, by name)
    assert [names[t] for t in subgroups.tasks_to_allocate(st, 0)] == ["j-4"]


def test_tasks_to_allocate_not_ready_when_a_required_leaf_lacks_tasks():
    st = _state([job(subgroups_=[{"name": "a", "minAvailable": 2}, {"name": "b", "minAvailable": 1}],
                     tasks=[{"subGroup": "a"}, {"subGroup": "a", "state": "Failed"}, {"subGroup": "b"}])])
    assert subgroups.tasks_to_allocate(st, 0) == []
    assert not subgroups.job_ready(st, 0)


def test_tasks_to_evict_phases():
    run = {"state": "Running", "node": "n0", "gpu": 1}
    st = _state([job(minSubGroups=1, subgroups_=[
        {"name": "m"}, {"name": "x", "parent": "m", "minAvailable": 1}, {"name": "y", "parent": "m", "minAvailable": 1},
        {"name": "opt", "minAvailable": 1}],
        tasks=[{"subGroup": "x", **run}, {"subGroup": "x", **run}, {"subGroup": "y", **run},
               {"subGroup": "opt", **run}])])
    names = st.tasks.names
    act = list(range(4))
    # phase 1: a surplus task of a leaf (x has 2 of minAvailable 1)
    ev, more = subgroups.tasks_to_evict(st, 0, act)
    assert [names[t] for t in ev] == ["j-1"] and more
    # without it, no leaf has surplus; the root needs 1 of 2 satisfied members: phase 2 drops a whole
    # member, the last in subgroup order (m: 2 of 2 satisfied children = ratio 1, opt 1/1 = 1 -> by
    # name reversed: opt first)
    ev, more = subgroups.tasks_to_evict(st, 0, [0, 2, 3])
    assert [names[t] for t in ev] == ["j-3"] and more
    # then nothing is surplus: everything goes (phase 3)
    ev, more = subgroups.tasks_to_evict(st, 0, [0, 2])
    assert sorted(names[t] for t in ev) == ["j-0", "j-2"] and not more


def test_elastic_state_follows_the_leaves():
    run = {"state": "Running", "node": "n0"}
    st = _state([job("below", subgroups_=[{"name": "a", "minAvailable": 2}, {"name": "b", "minAvailable": 0}],
                     tasks=[{"subGroup": "a", **run}, {"subGroup": "a"}, {"subGroup": "b", **run}]),
                 job("at", subgroups_=[{"name": "a", "minAvailable": 1}], tasks=[{"subGroup": "a", **run},
                                                                                 {"subGroup": "a"}]),
                 job("above", subgroups_=[{"name": "a", "minAvailable": 1}],
                     tasks=[{"subGroup": "a", **run}, {"subGroup": "a", **run}])])
    assert [subgroups.elastic_state(st, j) for j in range(3)] == [0, 1, 2]
    assert [subgroups.is_elastic(st, j) for j in range(3)] == [True, True, True]


# ------------------------------------------------------------------------------------ cycles
@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.name)
def test_scenarios(path):
    out = check_snapshot(load_scenario(path))
    assert out.has_expect and out.passed, out.mismatches


def test_explanation_names_the_subgroup_and_the_level():
    """Three racks of one block with one free GPU each: the block holds decode's 3 tasks, but once
    the leader has a rack no rack has room for both workers."""
    nodes = [{"name": f"n{i}", "gpus": 1, "labels": {"block": "b1", "rack": f"r{i}"}} for i in range(3)]
    data = scenario([job("disagg", subgroups_=[
        {"name": "decode", "topology": {"required": "block"}},
        {"name": "decode-leader", "parent": "decode", "minAvailable": 1, "topology": {"required": "rack"}},
        {"name": "decode-workers", "parent": "decode", "minAvailable": 2, "topology": {"required": "rack"}}],
        tasks=[{"subGroup": "decode-leader", "gpu": 1}, {"subGroup": "decode-workers", "gpu": 1},
               {"subGroup": "decode-workers", "gpu": 1}])], nodes, config={"actions": ["allocate"]})
    res = run_cycle(load_dict(data))
    msgs = [e for e in res.events if e["job"] == "disagg" and e["reason"] == "Unschedulable"]
    assert msgs[0]["message"].startswith("subgroup decode-workers needs 2, 1 fit in any rack"), msgs
    assert msgs[0]["category"] == "capacity"
    assert res.jobs["disagg"]["status"] == "Pending"
    assert res.jobs["disagg"]["subGroups"]["decode"] == {"placed": 0, "satisfied": False}


def test_without_subgroups_nothing_changes():
    """A job without subGroups has no ``subGroups`` in the result and schedules exactly as before."""
    data = scenario([job("flat", tasks=[{"gpu": 1}, {"gpu": 1}], minAvailable=1)])
    res = run_cycle(load_dict(data))
    assert "subGroups" not in res.jobs["flat"]
    assert res.jobs["flat"]["status"] == "Binding"


def test_rounds_keep_a_satisfied_tree_running():
    data = snapshot_to_dict(load_scenario(SCENARIOS / "02-min-subgroups.yaml"))
    data.pop("expect")
    data["config"]["rounds"] = 2
    rr = run_rounds(load_dict(data))
    final = rr.final.jobs["serve"]
    assert final["subGroups"]["replica-a"] == {"placed": 3, "satisfied": True}
    assert final["subGroups"]["replica-b"] == {"placed": 0, "satisfied": False}


def test_partial_tree_attempt_is_rolled_back():
    """A gang whose second member does not fit leaves nothing behind (state and queue)."""
    st = _state([job(subgroups_=[{"name": "a", "minAvailable": 4}, {"name": "b", "minAvailable": 5}],
                     tasks=[{"subGroup": "a", "gpu": 1}] * 0 + [{"name": f"a{i}", "subGroup": "a", "gpu": 1}
                                                                for i in range(4)]
                     + [{"name": f"b{i}", "subGroup": "b", "gpu": 1} for i in range(5)])])
    from scheduler_engine.actions import allocate
    allocate.run(st)
    assert (st.task_state == int(TaskState.PENDING)).all()
    assert float(st.queue_alloc[0, 0]) == 0.0
    assert float(st.node_idle_gpus()[0]) == 8.0


def test_stale_uses_the_root():
    res = run_cycle(load_scenario(SCENARIOS / "08-stale-gang.yaml"))
    msgs = [e["message"] for e in res.events if e["reason"] == "StaleGang"]
    assert len(msgs) == 2 and "subgroup y has 1 of minAvailable=2" in msgs[0]


def test_scenario_copy_is_not_mutated():
    data = snapshot_to_dict(load_scenario(SCENARIOS / "01-gang-all-or-nothing.yaml"))
    before = copy.deepcopy(data)
    run_cycle(load_dict(data))
    assert data == before


def test_the_readme_example_holds():
    """docs/examples/subgroups-and-devices.yaml (the README's copyable example) passes ``check``."""
    path = Path(__file__).parents[2] / "docs" / "examples" / "subgroups-and-devices.yaml"
    out = check_snapshot(load_scenario(path))
    assert out.passed, out.mismatches
