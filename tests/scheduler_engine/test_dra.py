"""Devices of dynamic resource allocation (scenario-format "Devices"): device classes, node devices,
task claims, gpu classes in quota / fair share / capacity, device indices, pipelining on devices that
victims release. Rules from KAI ``plugins/dynamicresources``, ``pkg/common/resources/dra.go``
(``IsGPUDeviceClass``) and the design doc ``dra-extended-resources``; the cases are our own."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scheduler_engine.check import check_snapshot
from scheduler_engine.cycle import run_cycle, run_rounds
from scheduler_engine.loader import ScenarioError, load_dict, load_scenario, snapshot_to_dict, snapshots_equal
from scheduler_engine.solvers.simulation import unevict
from scheduler_engine.state import CycleState

SCENARIOS = Path(__file__).parent / "scenarios" / "dra"
UNLIMITED = {"gpu": {"quota": -1, "limit": -1}, "cpu": {"quota": -1, "limit": -1},
             "memory": {"quota": -1, "limit": -1}}
CLASSES = [{"name": "gpu.nvidia.com", "countsAs": "gpu"}, {"name": "compute-domain.nvidia.com"}]


def scenario(tasks, nodes=None, classes=CLASSES, **extra):
    return {"deviceClasses": classes,
            "nodes": nodes or [{"name": "gb0", "devices": {"gpu.nvidia.com": 4, "compute-domain.nvidia.com": 1}}],
            "queues": [{"name": "q", "resources": UNLIMITED}],
            "jobs": [{"name": "j", "queue": "q", "tasks": tasks}], **extra}


def problems(data):
    with pytest.raises(ScenarioError) as e:
        load_dict(data)
    return e.value.problems


@pytest.mark.parametrize("data, path, text", [
    (scenario([{"claims": [{"deviceClass": "nope"}]}]), "jobs[0].tasks[0].claims[0].deviceClass",
     "unknown device class 'nope'"),
    (scenario([{"claims": [{"deviceClass": "gpu.nvidia.com", "count": 0}]}]), "jobs[0].tasks[0].claims[0].count",
     "must be >= 1"),
    (scenario([{"claims": [{"deviceClass": "gpu.nvidia.com", "count": 1.5}]}]), "jobs[0].tasks[0].claims[0].count",
     "must be an integer"),
    (scenario([{"gpu": 1, "claims": [{"deviceClass": "gpu.nvidia.com"}]}]), "jobs[0].tasks[0].claims[0].deviceClass",
     "counts as gpu"),
    (scenario([{"gpuMemory": 1000, "claims": [{"deviceClass": "gpu.nvidia.com"}]}]),
     "jobs[0].tasks[0].claims[0].deviceClass", "counts as gpu"),
    (scenario([{"claims": [{"count": 1}]}]), "jobs[0].tasks[0].claims[0].deviceClass", "is required"),
    (scenario([{"claims": [{"deviceClass": "gpu.nvidia.com", "extra": 1}]}]), "jobs[0].tasks[0].claims[0].extra",
     "unknown key"),
    (scenario([], nodes=[{"name": "n", "devices": {"nope": 1}}]), "nodes[0].devices.nope", "unknown device class"),
    (scenario([], nodes=[{"name": "n", "devices": {"gpu.nvidia.com": -2}}]), "nodes[0].devices.gpu.nvidia.com",
     "must be >= 0"),
    (scenario([], nodes=[{"name": "n", "devices": {"gpu.nvidia.com": 1e12}}]), "nodes[0].devices.gpu.nvidia.com",
     "too large"),
    (scenario([], classes=[{"name": "a"}, {"name": "a"}]), "deviceClasses[1].name", "duplicate device class"),
    (scenario([], classes=[{"name": "a", "countsAs": "tpu"}]), "deviceClasses[0].countsAs", "must be one of gpu"),
    (scenario([], classes=[{"countsAs": "gpu"}]), "deviceClasses[0].name", "is required"),
    (scenario([{"claims": [{"deviceClass": "gpu.nvidia.com", "count": 2}], "state": "Running", "node": "gb0",
                "devices": {"gpu.nvidia.com": [0, 9]}}]), "jobs[0].tasks[0].devices.gpu.nvidia.com[1]",
     "has 4 gpu.nvidia.com devices"),
    (scenario([{"claims": [{"deviceClass": "gpu.nvidia.com", "count": 2}], "state": "Running", "node": "gb0",
                "devices": {"gpu.nvidia.com": [1]}}]), "jobs[0].tasks[0].devices.gpu.nvidia.com",
     "claims 2 gpu.nvidia.com devices, 1 listed"),
    (scenario([{"claims": [{"deviceClass": "gpu.nvidia.com"}], "devices": {"gpu.nvidia.com": [0]}}]),
     "jobs[0].tasks[0].devices", "only a task on a node holds devices"),
])
def test_loader_refuses_naming_the_field(data, path, text):
    found = problems(data)
    assert any(p == path and text in m for p, m in found), found


def test_gpu_class_by_name_or_counts_as():
    snap = load_dict({"deviceClasses": [{"name": "NVIDIA-GPU.example"}, {"name": "nic"},
                                        {"name": "accel", "countsAs": "gpu"}]})
    assert snap.device_classes.counts_as_gpu.tolist() == [True, False, True]


def test_claims_are_summed_per_class_and_round_trip():
    data = scenario([{"claims": [{"deviceClass": "gpu.nvidia.com", "count": 2}, {"deviceClass": "gpu.nvidia.com"},
                                 {"deviceClass": "compute-domain.nvidia.com"}]}])
    snap = load_dict(data)
    assert snap.tasks.claims.tolist() == [[3, 1]]
    assert snap.nodes.devices.tolist() == [[4, 1]]
    assert snapshots_equal(snap, load_dict(snapshot_to_dict(snap)))


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.name)
def test_scenarios(path):
    out = check_snapshot(load_scenario(path))
    assert out.has_expect and out.passed, out.mismatches


def test_capacity_and_requests_count_gpu_classes():
    st = CycleState(load_dict(scenario([{"claims": [{"deviceClass": "gpu.nvidia.com", "count": 3},
                                                    {"deviceClass": "compute-domain.nvidia.com"}]}],
                                       nodes=[{"name": "gb0", "gpus": 2,
                                               "devices": {"gpu.nvidia.com": 4, "compute-domain.nvidia.com": 1}}])))
    assert st.total[0] == 6  # 2 classic + 4 DRA GPUs; the channel is no GPU
    assert st.task_request[0, 0] == 3 and st.task_whole[0] == 0
    assert st.node_idle_gpus().tolist() == [6.0]


def test_place_evict_rollback_restore_devices():
    st = CycleState(load_dict(scenario([{"claims": [{"deviceClass": "gpu.nvidia.com", "count": 2}]},
                                        {"claims": [{"deviceClass": "gpu.nvidia.com", "count": 2}],
                                         "state": "Running", "node": "gb0"}])))
    assert st.task_dra[1] == {0: [0, 1]}
    free0 = st.dra_free.copy()
    cp = st.checkpoint()
    st.place(0, 0)
    assert st.task_dra[0] == {0: [2, 3]} and st.node_idle_gpus()[0] == 0
    st.evict(1)  # Running -> Releasing: its devices are releasing
    assert st.dra_rel[0, 0, :2].tolist() == [1.0, 1.0] and st.node_releasing_gpus()[0] == 2
    assert unevict(st, 1) and st.dra_rel[0].sum() == 0
    st.rollback(cp)
    assert np.array_equal(st.dra_free, free0) and st.task_dra[0] is None and st.dra_rel.sum() == 0


def test_pipelined_claim_takes_releasing_devices_and_gives_them_back():
    st = CycleState(load_dict(scenario([{"claims": [{"deviceClass": "gpu.nvidia.com", "count": 4}],
                                         "state": "Running", "node": "gb0"},
                                        {"claims": [{"deviceClass": "gpu.nvidia.com", "count": 3}]}])))
    st.evict(0)
    assert st.fit_one(1, 0) == (False, True)  # fits only on what is releasing
    st.place(1, 0, pipelined=True)
    assert st.task_dra[1] == {0: [0, 1, 2]} and st.dra_rel[0, 0].tolist() == [0, 0, 0, 1]
    assert not unevict(st, 0)  # its devices are promised to the pipelined task
    st.evict(1)
    assert st.dra_rel[0, 0].tolist() == [1, 1, 1, 1] and st.dra_free[0, 0].tolist() == [0, 0, 0, 0]


def test_rounds_keep_the_devices_a_bound_task_took():
    data = scenario([{"claims": [{"deviceClass": "gpu.nvidia.com", "count": 2}]}], config={"rounds": 1})
    rr = run_rounds(load_dict(data))
    assert rr.final_snapshot.tasks.devices[0] == {0: [0, 1]}
    assert rr.final.tasks["j-0"] == {"status": "Running", "node": "gb0", "devices": {"gpu.nvidia.com": [0, 1]}}


def test_result_devices_only_for_claims_on_a_node():
    data = scenario([{"claims": [{"deviceClass": "compute-domain.nvidia.com"}]},
                     {"claims": [{"deviceClass": "compute-domain.nvidia.com"}]}])
    data["jobs"][0]["minAvailable"] = 1
    res = run_cycle(load_dict(data))
    placed = [t for t in res.tasks.values() if "devices" in t]
    assert len(placed) == 1 and placed[0]["devices"] == {"compute-domain.nvidia.com": [0]}
    assert "devices" not in run_cycle(load_dict(scenario([{"gpu": 0}]))).tasks["j-0"]


def test_classic_and_dra_gpu_tasks_share_a_mixed_node():
    data = scenario([{"gpu": 2}, {"claims": [{"deviceClass": "gpu.nvidia.com", "count": 4}]}],
                    nodes=[{"name": "mixed", "gpus": 2, "devices": {"gpu.nvidia.com": 4}}])
    data["jobs"][0]["minAvailable"] = 2
    res = run_cycle(load_dict(data))
    assert res.jobs["j"]["status"] == "Binding"
    assert res.nodes["mixed"]["idleGpus"] == 0
    assert res.queues["q"]["allocated"]["gpu"] == 6
