"""Issue #18.1: fractional GPU tasks under ``placement: {gpu: spread}``.

KAI ``pkg/apis/kai/v1/schedulingshard_types.go`` ``setDefaultPlugins``: with the GPU spread
strategy ``gpusharingorder`` (the 10000 node score for a node whose shared GPU the task fits,
``plugins/gpusharingorder``) and ``gpupack`` are disabled and ``gpuspread`` enabled. A fractional
task's node is then chosen by ``nodeplacement/spread.go`` (non-allocated whole GPUs / GPU count,
highest first; a partly used shared device is not non-allocated) after ``nodeavailability``
(fits on free resources); on the node, ``gpuspread`` ``gpuOrderFn`` prefers a whole free device
(score 1) over any shared one (1 - used portion). Under binpack, joining a partly used shared
device on another node still comes first (``gpusharingorder``).
"""
from __future__ import annotations

from scheduler_engine.cycle import run_cycle
from scheduler_engine.loader import load_dict
from tests.scheduler_engine.test_reclaim import job, node, pending, queue, running, scenario

QS = [queue("dept"), queue("a", parent="dept")]


def _doc(placement: str):
    # n0: 4 GPUs, one half-used shared device (3 whole free); n1: 4 GPUs, 2 whole GPUs in use
    # (2 free). Spread score: n0 3/4, n1 2/4 -> n0, onto a fresh device of n0 (gpuspread).
    nodes = [node("n0", gpus=4), node("n1", gpus=4)]
    jobs = [job("half", "a", [running("half-0", "n0", gpu=0.5, gpuGroups=["g0"])], age=10),
            job("two", "a", [running("two-0", "n1", gpu=2)], age=10),
            job("frac", "a", [pending("frac-0", gpu=0.25)], age=1)]
    return scenario(nodes, QS, jobs, ["allocate"], placement={"gpu": placement})


def _placed(placement):
    res = run_cycle(load_dict(_doc(placement)))
    t = res.jobs["frac"]["tasks"][0]
    return t["status"], t["node"], t.get("gpuGroups")


def test_spread_picks_the_node_with_most_whole_free_gpus_and_a_fresh_device():
    status, node_name, groups = _placed("spread")
    assert (status, node_name) == ("Binding", "n0")
    assert groups != ["g0"]  # gpuspread: a whole free device before the half-used one


def test_spread_does_not_prefer_a_node_only_because_it_has_a_shared_device():
    # n1 now has the half-used shared device and n0 is emptier: spread goes to n0, where binpack's
    # gpusharingorder would join n1's shared device
    nodes = [node("n0", gpus=4), node("n1", gpus=4)]
    jobs = [job("half", "a", [running("half-0", "n1", gpu=0.5, gpuGroups=["g0"])], age=10),
            job("frac", "a", [pending("frac-0", gpu=0.25)], age=1)]
    spread = run_cycle(load_dict(scenario(nodes, QS, jobs, ["allocate"], placement={"gpu": "spread"})))
    assert spread.jobs["frac"]["tasks"][0]["node"] == "n0"
    binpack = run_cycle(load_dict(scenario(nodes, QS, jobs, ["allocate"], placement={"gpu": "binpack"})))
    t = binpack.jobs["frac"]["tasks"][0]
    assert t["node"] == "n1" and t["gpuGroups"] == ["g0"]


def test_binpack_joins_the_partly_used_shared_device():
    status, node_name, groups = _placed("binpack")
    assert (status, node_name, groups) == ("Binding", "n0", ["g0"])
