"""Issue #18.2: consolidation moves GPU-memory (and fractional) tasks together onto one device.

KAI ``pkg/scheduler/plugins/gpusharingorder``: a node scores ``scores.GpuSharing`` when one of its
shared GPUs in use fits the task, ``node_info.IsTaskFitOnGpuGroup``: used memory != 0, room for the
request counting releasing memory, and ``!isAllGpuReleased`` -- a device whose every fraction is
being released is not "in use". In a consolidation simulation the victims are evicted first, so
their own devices are wholly releasing: they no longer pull the victims back onto them, binpack
(``nodeplacement/pack.go``: fewest non-allocated whole GPUs) sends the first victim to the fullest
node, gpusharingorder then sends the second onto the same device, and the pending job gets the
freed devices (victims Pipelined elsewhere, the job Pipelined on what they release).
"""
from __future__ import annotations

import pytest

from scheduler_engine.cycle import run_cycle
from scheduler_engine.invariants import result_problems
from scheduler_engine.loader import load_dict
from tests.scheduler_engine.test_reclaim import job, node, pending, queue, scenario

QS = [queue("dept"), queue("a", parent="dept")]


def _share(name, node_name, group, by_memory):
    t = {"name": name, "state": "Running", "node": node_name, "cpu": 1, "memory": "1Gi", "gpuGroups": [group]}
    if by_memory:
        t.update(gpu=0, gpuMemory=30000)  # 30000 of 80000 MiB
    else:
        t.update(gpu=0.375)
    return t


@pytest.mark.parametrize("by_memory", [True, False])
def test_two_shared_tasks_move_together_onto_one_device_to_free_a_node(by_memory):
    # n0: 2 devices, each with one shared task; n1: 1 free device. A 2-GPU job needs n0 whole.
    nodes = [node("n0", gpus=2, gpuMemory=80000), node("n1", gpus=1, gpuMemory=80000)]
    jobs = [job("a", "a", [_share("a-0", "n0", "g0", by_memory)], age=10),
            job("b", "a", [_share("b-0", "n0", "g1", by_memory)], age=9),
            job("c", "a", [pending("c-0", gpu=2)], age=1)]
    snap = load_dict(scenario(nodes, QS, jobs, ["allocate", "consolidation"]))
    res = run_cycle(snap)
    assert res.tasks["c-0"] == {"status": "Pipelined", "node": "n0"}
    a, b = res.jobs["a"]["tasks"][0], res.jobs["b"]["tasks"][0]
    assert (a["status"], a["node"], b["status"], b["node"]) == ("Pipelined", "n1", "Pipelined", "n1")
    assert a["gpuGroups"] == b["gpuGroups"]  # one device
    assert result_problems(snap, res) == []
    moved = [e for e in res.events if e["reason"] == "Consolidated" and e.get("victimOf") == "c"]
    assert len(moved) == 2


def test_a_device_still_in_use_keeps_attracting_fractions():
    # binpack's gpusharingorder is unchanged for a device that is not wholly releasing
    nodes = [node("n0", gpus=2, gpuMemory=80000), node("n1", gpus=2, gpuMemory=80000)]
    jobs = [job("a", "a", [_share("a-0", "n1", "g0", False)], age=10),
            job("c", "a", [pending("c-0", gpu=0.25)], age=1)]
    res = run_cycle(load_dict(scenario(nodes, QS, jobs, ["allocate"])))
    t = res.jobs["c"]["tasks"][0]
    assert (t["status"], t["node"], t["gpuGroups"]) == ("Binding", "n1", ["g0"])
