"""Why a job stays Pending, machine-readable: every ``Unschedulable`` event carries a ``category``
(capacity, quota, limit, gang) and ``CycleResult.pending_categories()`` maps each still-Pending
job to it.  Consumers (the Kubernetes PodScheduled condition, cluster autoscaling, the tenant
``why``) rely on it instead of parsing messages, so each path that produces a refusal is covered,
including the texts that wrap another one (gangs, topology, elastic growth)."""
from __future__ import annotations

import json

import pytest

from scheduler_engine.bench import decision_digest
from scheduler_engine.cycle import run_cycle, run_cycle_with_state
from scheduler_engine.loader import load_dict
from scheduler_engine.result import PENDING_CATEGORIES, Reason, reason_category


def _queue(name, parent=None, *, quota=-1, limit=-1):
    return {"name": name, "parent": parent, "priority": 100,
            "resources": {"gpu": {"quota": quota, "overQuotaWeight": 1, "limit": limit},
                          "cpu": {"quota": -1, "overQuotaWeight": 1, "limit": -1},
                          "memory": {"quota": -1, "overQuotaWeight": 1, "limit": -1}}}


def _job(name, queue, tasks, *, min_available=None, preemptible=True, topology=None, priority=50, ago=1):
    job = {"name": name, "queue": queue, "priority": priority, "preemptible": preemptible,
           "minAvailable": min_available or len(tasks), "createdMinutesAgo": ago,
           "tasks": [{"name": f"{name}-{i}", "cpu": "1", "memory": "1Gi", **t} for i, t in enumerate(tasks)]}
    if topology:
        job["topology"] = topology
    return job


def _scenario(jobs, *, nodes=None, queues=None, actions=("allocate",)):
    return {"name": "t", "config": {"actions": list(actions)},
            "nodes": nodes or [{"name": "n0", "gpus": 4, "cpu": "32", "memory": "256Gi", "labels": {"rack": "r0"}}],
            "queues": queues or [_queue("root"), _queue("qa", "root", quota=4), _queue("qb", "root", quota=4)],
            "jobs": jobs}


def _run(sc):
    return run_cycle(load_dict(sc, source="test"))


def _unsched(result, job):
    return [e for e in result.events if e["job"] == job and e["reason"] == "Unschedulable"]


def test_capacity_when_no_node_has_room():
    r = _run(_scenario([
        _job("big", "qa", [{"gpu": 4, "state": "Running", "node": "n0"}], ago=5),
        _job("wait", "qb", [{"gpu": 2, "state": "Pending"}]),
    ]))
    (ev,) = _unsched(r, "wait")
    assert ev["category"] == "capacity" and "free GPUs" in ev["message"]
    assert r.pending_categories() == {"wait": "capacity"}


def test_limit_and_non_preemptible_quota_are_not_capacity():
    queues = [_queue("root"), _queue("qa", "root", quota=4, limit=2), _queue("qb", "root", quota=1)]
    r = _run(_scenario([
        _job("over-limit", "qa", [{"gpu": 3, "state": "Pending"}]),
        _job("np-over-quota", "qb", [{"gpu": 2, "state": "Pending"}], preemptible=False),
        _job("fits", "qb", [{"gpu": 1, "state": "Pending"}]),
    ], queues=queues))
    assert r.pending_categories() == {"over-limit": "limit", "np-over-quota": "quota"}
    assert r.jobs["fits"]["status"] == "Binding"


def test_a_limit_on_an_ancestor_is_a_limit():
    queues = [_queue("root", limit=1), _queue("qa", "root", quota=4)]
    r = _run(_scenario([_job("x", "qa", [{"gpu": 2, "state": "Pending"}])], queues=queues))
    assert r.pending_categories() == {"x": "limit"}
    assert "queue root is over its limit" in _unsched(r, "x")[0]["message"]


def test_a_gang_short_of_pods_waits_for_them():
    r = _run(_scenario([_job("g", "qa", [{"gpu": 1, "state": "Failed"}, {"gpu": 1, "state": "Pending"},
                                         {"gpu": 1, "state": "Pending"}], min_available=3)]))
    assert r.pending_categories() == {"g": "gang"}


def test_a_gang_that_only_partly_fits_is_capacity():
    r = _run(_scenario([_job("g", "qa", [{"gpu": 2, "state": "Pending"}] * 3)]))
    (ev,) = _unsched(r, "g")
    assert ev["message"].startswith("gang of 3 needs 3 tasks placed together; only 2 fit")
    assert ev["category"] == "capacity"


def test_required_topology_without_room_is_capacity():
    nodes = [{"name": f"n{i}", "gpus": 2, "cpu": "32", "memory": "256Gi", "labels": {"rack": f"r{i}"}}
             for i in range(2)]
    r = _run(_scenario([_job("t", "qa", [{"gpu": 2, "state": "Pending"}] * 2,
                             topology={"required": "rack"})], nodes=nodes))
    assert r.pending_categories() == {"t": "capacity"}


def test_node_selector_nothing_matches_is_capacity():
    r = _run(_scenario([_job("s", "qa", [{"gpu": 1, "state": "Pending", "nodeSelector": {"rack": "r9"}}])]))
    (ev,) = _unsched(r, "s")
    assert "nodeSelector" in ev["message"] and ev["category"] == "capacity"


def test_elastic_growth_keeps_the_category_of_what_stopped_it():
    queues = [_queue("root"), _queue("qa", "root", quota=4, limit=2)]
    r = _run(_scenario([_job("e", "qa", [{"gpu": 1, "state": "Pending"}] * 3, min_available=1)], queues=queues))
    (ev,) = _unsched(r, "e")
    assert ev["message"].startswith("elastic growth stopped: queue qa is over its limit")
    assert r.pending_categories() == {"e": "limit"}


def test_a_job_pipelined_by_reclaim_is_not_pending():
    """allocate fails for capacity (its event stays in the list), reclaim then pipelines it."""
    queues = [_queue("root"), _queue("qa", "root", quota=0), _queue("qb", "root", quota=4)]
    r = _run(_scenario([
        _job("borrower", "qa", [{"gpu": 4, "state": "Running", "node": "n0"}], ago=9),
        _job("owner", "qb", [{"gpu": 4, "state": "Pending"}]),
    ], queues=queues, actions=("allocate", "reclaim")))
    assert _unsched(r, "owner")[0]["category"] == "capacity"
    assert r.jobs["owner"]["status"] == "Pipelined"
    assert r.pending_categories() == {}


def test_category_is_in_the_json_and_outside_the_digest():
    sc = _scenario([_job("big", "qa", [{"gpu": 4, "state": "Running", "node": "n0"}], ago=5),
                    _job("wait", "qb", [{"gpu": 2, "state": "Pending"}])])
    state, result = run_cycle_with_state(load_dict(sc, source="test"))
    doc = json.loads(json.dumps(result.to_json()))
    assert [e["category"] for e in doc["events"] if e["reason"] == "Unschedulable"] == ["capacity"]
    assert all(type(e["message"]) is str for e in result.events)
    before = decision_digest(state)
    for e in state.events:
        e["category"] = "quota"
    assert decision_digest(state) == before  # derived from the message: the digest does not change


def test_reason_type():
    r = Reason("queue q is over its limit", "limit")
    assert r == "queue q is over its limit" and reason_category(r) == "limit"
    assert reason_category("no node has 2 free GPUs") == "capacity"
    assert reason_category(Reason.wrap(f"gang of 2 ...: {r}", r)) == "limit"
    assert set(PENDING_CATEGORIES) == {"capacity", "quota", "limit", "gang"}
    with pytest.raises(ValueError):
        Reason("x", "fairness")
