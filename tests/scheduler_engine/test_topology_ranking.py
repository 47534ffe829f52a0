"""Issue #18.3: topology domains ranked one way for real and simulated placement, and a preferred
level that cannot be met.

KAI ``pkg/scheduler/plugins/topology/job_filtering.go``: allocate and the victim solvers both place
through ``common.AllocateJob`` -> ``ssn.SubsetNodesFn`` (``subSetNodesFn``): domains are sorted by
``sortTree`` on ``getJobRatioToFreeResources`` (the job's dominant request / free-or-releasing
ratio, highest first, ties by domain id) and those failing ``checkJobDomainFit`` are dropped; the
node placement strategy (binpack / spread) does not enter. With only a preferred level the root is
a relevant level too, and ``node_scoring.go`` ``calculateNodeScores`` scores every node by its
preferred-level domain's rank, ``floor((i + 1) / n * 10) * scores.Topology``, a score above every
other node score: tasks that cannot share one domain go to the domain with the most room first.
"""
from __future__ import annotations

import numpy as np

from scheduler_engine.actions import get_action
from scheduler_engine.cycle import run_cycle
from scheduler_engine.loader import load_dict
from scheduler_engine.solvers.simulation import Placer
from scheduler_engine.state import CycleState
from tests.scheduler_engine.test_reclaim import job, node, pending, queue, running, scenario

RACK = "kai.scheduler/rack"
QS = [queue("dept"), queue("a", parent="dept"), queue("b", parent="dept")]


def _nodes(layout: dict[str, list[str]], gpus: int = 4):
    return [node(n, gpus=gpus, labels={RACK: r}) for r, ns in layout.items() for n in ns]


def test_a_preference_that_cannot_be_met_still_schedules_roomiest_domain_first():
    # 4 tasks x 4 GPUs = 16 GPUs; rack r1 has 8, rack r2 12: no rack holds the job. KAI ranks r1
    # (ratio 2) before r2 (1.33); r2 scores 10, r1 5: three tasks land in r2, one in r1. (The
    # plain node order would have taken n1a, n1b first: lower node indices, equal free GPUs.)
    nodes = _nodes({"r1": ["n1a", "n1b"], "r2": ["n2a", "n2b", "n2c"]})
    jobs = [job("j", "a", [pending(f"j-{i}", gpu=4) for i in range(4)], topology={"preferred": RACK})]
    res = run_cycle(load_dict(scenario(nodes, QS, jobs, ["allocate"])))
    placed = [res.tasks[f"j-{i}"] for i in range(4)]
    assert all(t["status"] == "Binding" for t in placed)
    racks = sorted(t["node"][:2] for t in placed)
    assert racks == ["n1", "n2", "n2", "n2"]


def test_a_preference_that_can_be_met_takes_the_most_packed_fitting_domain():
    # r1 has 4 free of 8 (n1a half used), r2 8 of 8: a 4-GPU job fits both; r1 is more packed
    nodes = _nodes({"r1": ["n1a", "n1b"], "r2": ["n2a", "n2b"]})
    jobs = [job("busy", "b", [running("busy-0", "n1a", gpu=4)], age=5),
            job("j", "a", [pending("j-0", gpu=2), pending("j-1", gpu=2)], topology={"preferred": RACK})]
    res = run_cycle(load_dict(scenario(nodes, QS, jobs, ["allocate"], placement={"gpu": "spread"})))
    assert {res.tasks["j-0"]["node"], res.tasks["j-1"]["node"]} == {"n1b"}


def _placed_nodes(state, j):
    return sorted({state.nodes.names[int(state.task_node[t])] for t in state.job_task_range(j)
                   if state.task_node[t] >= 0})


def test_simulated_placement_picks_the_domains_allocate_picks():
    # spread placement: the old simulation ordered domains by free GPUs (most first), allocate by
    # the job's ratio to free (most packed first). Now both take r1 (4 free of 8), never r2.
    nodes = _nodes({"r1": ["n1a", "n1b"], "r2": ["n2a", "n2b"]})
    for topo in ({"required": RACK}, {"preferred": RACK}):
        jobs = [job("busy", "b", [running("busy-0", "n1a", gpu=4)], age=5),
                job("j", "a", [pending("j-0", gpu=2), pending("j-1", gpu=2)], topology=topo)]
        doc = scenario(nodes, QS, jobs, ["allocate"], placement={"gpu": "spread"})
        real = CycleState(load_dict(doc))
        get_action("allocate")(real)
        sim = CycleState(load_dict(doc))
        j = sim.jobs.index["j"]
        assert Placer(sim).place_job(j, sim.job_pending_tasks(j))
        assert _placed_nodes(sim, j) == _placed_nodes(real, j) == ["n1b"], topo


def test_simulated_placement_spreads_an_unmet_preference_like_allocate():
    nodes = _nodes({"r1": ["n1a", "n1b"], "r2": ["n2a", "n2b", "n2c"]})
    jobs = [job("j", "a", [pending(f"j-{i}", gpu=4) for i in range(4)], topology={"preferred": RACK})]
    doc = scenario(nodes, QS, jobs, ["allocate"])
    real = CycleState(load_dict(doc))
    get_action("allocate")(real)
    sim = CycleState(load_dict(doc))
    j = sim.jobs.index["j"]
    assert Placer(sim).place_job(j, sim.job_pending_tasks(j))
    assert np.array_equal(sim.task_node, real.task_node)
