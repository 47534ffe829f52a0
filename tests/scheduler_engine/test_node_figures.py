"""Issue #18.6: ``idleGpus`` / ``releasingGpus`` count whole devices, as KAI does.

KAI ``pkg/scheduler/api/node_info/gpu_sharing_node_info.go``
``addSharedGPUTaskResourcesPerPodGroup``: a shared device leaves the node's idle vector with its
first fraction (``UsedSharedGPUsMemory <= request`` -> ``IdleVector.Sub(singleGpu)``) and joins the
releasing vector only when ``UsedSharedGPUsMemory == ReleasingSharedGPUsMemory`` (every fraction on
it releasing); a fraction pipelined onto it takes it out again. The contract says the same
(``scenario-format.md``, "Statuses").
"""
from __future__ import annotations

from scheduler_engine.cycle import run_cycle
from scheduler_engine.loader import load_dict
from scheduler_engine.state import CycleState
from tests.scheduler_engine.test_reclaim import job, node, pending, queue, running, scenario

QS = [queue("dept"), queue("a", parent="dept", gpu=(0, 1, -1)), queue("b", parent="dept", gpu=(2, 1, -1))]


def _figures(jobs, actions=(), gpus=2):
    res = run_cycle(load_dict(scenario([node("n0", gpus=gpus)], QS, jobs, list(actions))))
    return res.nodes["n0"]["idleGpus"], res.nodes["n0"]["releasingGpus"], res


def test_one_half_gpu_releasing_on_a_two_gpu_node_is_one_idle_and_one_releasing():
    # the example: KAI idle 1 / releasing 1 (the engine said 1.5 / 0.5)
    jobs = [job("r", "a", [running("r-0", "n0", gpu=0.5, state="Releasing", gpuGroups=["g0"])])]
    idle, rel, _ = _figures(jobs)
    assert (idle, rel) == (1, 1)


def test_a_shared_device_with_one_fraction_releasing_and_one_running_is_neither():
    jobs = [job("r", "a", [running("r-0", "n0", gpu=0.5, state="Releasing", gpuGroups=["g0"])]),
            job("s", "a", [running("s-0", "n0", gpu=0.5, gpuGroups=["g0"])])]
    idle, rel, _ = _figures(jobs)
    assert (idle, rel) == (1, 0)


def test_a_shared_device_whose_every_fraction_releases_counts_once():
    jobs = [job("r", "a", [running("r-0", "n0", gpu=0.25, state="Releasing", gpuGroups=["g0"]),
                           running("r-1", "n0", gpu=0.5, state="Releasing", gpuGroups=["g0"])]),
            job("w", "a", [running("w-0", "n0", gpu=1)])]
    idle, rel, _ = _figures(jobs, gpus=3)
    assert (idle, rel) == (1, 1)


def test_a_partly_used_shared_device_is_not_idle():
    jobs = [job("s", "a", [running("s-0", "n0", gpu=0.25, gpuGroups=["g0"])])]
    idle, rel, _ = _figures(jobs)
    assert (idle, rel) == (1, 0)


def test_a_fraction_pipelined_onto_a_releasing_shared_device_takes_it_out_of_releasing():
    # reclaim evicts a's two halves of device g0 (the whole GPU is not preemptible); b's half GPU is
    # pipelined onto g0: half of it is promised, so g0 is no longer wholly releasing
    jobs = [job("r", "a", [running("r-0", "n0", gpu=0.5, gpuGroups=["g0"]),
                           running("r-1", "n0", gpu=0.5, gpuGroups=["g0"])], age=10),
            job("w", "a", [running("w-0", "n0", gpu=1)], age=10, priority=100),
            job("p", "b", [pending("p-0", gpu=0.5)], age=1)]
    res = run_cycle(load_dict(scenario([node("n0", gpus=2)], QS, jobs, ["allocate", "reclaim"])))
    assert res.tasks["p-0"] == {"status": "Pipelined", "node": "n0"}
    assert res.tasks["r-0"]["status"] == res.tasks["r-1"]["status"] == "Releasing"
    assert (res.nodes["n0"]["idleGpus"], res.nodes["n0"]["releasingGpus"]) == (0, 0)
    # without the pipelined half, the same evictions leave one wholly releasing device
    res = run_cycle(load_dict(scenario([node("n0", gpus=2)], QS, jobs[:2] + [
        job("p", "b", [pending("p-0", gpu=1)], age=1)], ["allocate", "reclaim"])))
    assert res.tasks["p-0"]["status"] == "Pipelined"
    assert res.tasks["r-0"]["status"] == "Releasing"
    assert (res.nodes["n0"]["idleGpus"], res.nodes["n0"]["releasingGpus"]) == (0, 0)  # all promised


def test_the_victim_search_still_counts_free_fractions():
    # KAI GetSumOfIdleGPUs (what the accumulated-scenario filter uses) adds free fractions
    jobs = [job("s", "a", [running("s-0", "n0", gpu=0.25, gpuGroups=["g0"])])]
    s = CycleState(load_dict(scenario([node("n0", gpus=2)], QS, jobs, [])))
    assert float(s.node_idle_gpus()[0]) == 1.75
    assert float(s.node_idle_devices()[0]) == 1.0
