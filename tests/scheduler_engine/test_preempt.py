"""The preempt action (spec d): same leaf queue, strictly lower priority, min-runtime, quota skip."""
from __future__ import annotations

from tests.scheduler_engine.test_reclaim import (assert_no_overcommit, events_of, job, job_status, node, pending,
                                                 queue, run, running, scenario, status)

QS = [queue("top", age=2), queue("q0", "top", gpu=(4, 0, -1), age=1)]


def test_build_job_preempts_lower_priority_train_job():
    jobs = [job("train", "q0", [running("train-0", "n0")], priority=50, age=1),
            job("build", "q0", [pending("build-0")], priority=100, preemptible=False, age=2)]
    s = run(scenario([node("n0", 1)], QS, jobs, ["preempt"]))
    assert status(s, "build-0") == ("Pipelined", "n0")
    assert status(s, "train-0") == ("Releasing", "n0")
    (ev,) = events_of(s, "train", "Preempted")
    assert ev["victimOf"] == "build" and "priority 50 < 100" in ev["message"]
    assert_no_overcommit(s)


def test_lowest_priority_victim_goes_first():
    jobs = [job("train", "q0", [running("train-0", "n0")], priority=50, age=1),
            job("interactive", "q0", [running("interactive-0", "n0")], priority=75, age=2),
            job("build", "q0", [pending("build-0")], priority=100, preemptible=False, age=3)]
    s = run(scenario([node("n0", 2)], QS, jobs, ["preempt"]))
    assert job_status(s, "train") == "Releasing"
    assert job_status(s, "interactive") == "Running"
    assert status(s, "build-0") == ("Pipelined", "n0")


def test_equal_priority_never_preempts():
    jobs = [job("a", "q0", [running("a-0", "n0")], priority=50, age=2),
            job("b", "q0", [pending("b-0")], priority=50, age=1)]
    s = run(scenario([node("n0", 1)], QS, jobs, ["preempt"]))
    assert status(s, "b-0")[0] == "Pending" and status(s, "a-0")[0] == "Running"
    (ev,) = events_of(s, "b", "NotPreempting")
    assert "no eligible victims" in ev["message"]


def test_other_queue_is_never_preempted():
    qs = [queue("top", age=3), queue("q0", "top", gpu=(1, 0, -1), age=2), queue("q1", "top", gpu=(1, 0, -1), age=1)]
    jobs = [job("a", "q0", [running("a-0", "n0")], priority=50),
            job("b", "q1", [pending("b-0")], priority=100, preemptible=False)]
    s = run(scenario([node("n0", 1)], qs, jobs, ["preempt"]))
    assert status(s, "b-0")[0] == "Pending" and status(s, "a-0")[0] == "Running"


def test_non_preemptible_preemptor_over_quota_is_skipped():
    qs = [queue("top", age=2), queue("q0", "top", gpu=(3, 0, -1), age=1)]
    jobs = [job("train", "q0", [running("train-0", "n0")], priority=50, age=1),
            job("build", "q0", [pending("build-0", gpu=2), pending("build-1", gpu=2)], priority=100,
                preemptible=False, age=2)]
    s = run(scenario([node("n0", 4)], qs, jobs, ["preempt"]))
    assert job_status(s, "build") == "Pending" and job_status(s, "train") == "Running"
    (ev,) = events_of(s, "build", "NotPreempting")
    assert ev["message"] == ("non-preemptible job would put queue q0 over its deserved quota for gpu: "
                             "0 non-preemptible allocated + 4 requested > 3 deserved")


def test_preempt_min_runtime_protects_and_inherits_from_parent():
    qs = [queue("top", age=2, preemptMinRuntime="10m"), queue("q0", "top", gpu=(4, 0, -1), age=1)]
    jobs = [job("train", "q0", [running("train-0", "n0")], priority=50, age=3, started=2),
            job("build", "q0", [pending("build-0")], priority=100, preemptible=False, age=2)]
    s = run(scenario([node("n0", 1)], qs, jobs, ["preempt"]))
    assert status(s, "train-0")[0] == "Running" and status(s, "build-0")[0] == "Pending"
    jobs[0]["startedMinutesAgo"] = 11
    s = run(scenario([node("n0", 1)], qs, jobs, ["preempt"]))
    assert status(s, "train-0")[0] == "Releasing" and status(s, "build-0")[0] == "Pipelined"


def test_elastic_victim_loses_only_surplus_tasks():
    jobs = [job("el", "q0", [running(f"el-{i}", "n0") for i in range(4)], priority=50, minAvailable=1, age=1),
            job("inf", "q0", [pending("inf-0", gpu=2)], priority=125, preemptible=False, age=2)]
    s = run(scenario([node("n0", 4)], QS, jobs, ["preempt"]))
    assert [status(s, f"el-{i}")[0] for i in range(4)] == ["Running", "Running", "Releasing", "Releasing"]
    assert status(s, "inf-0") == ("Pipelined", "n0")


def test_gang_preemptor_evicts_nothing_if_not_all_tasks_fit():
    jobs = [job("train", "q0", [running("train-0", "n0")], priority=50, age=1),
            job("build", "q0", [pending("build-0"), pending("build-1")], priority=100, preemptible=False, age=2)]
    s = run(scenario([node("n0", 1)], QS, jobs, ["preempt"]))
    assert job_status(s, "build") == "Pending" and job_status(s, "train") == "Running"
    (ev,) = events_of(s, "build", "NotPreempting")
    assert "2 of 2 tasks" in ev["message"]


def test_fractional_victim_that_fits_back_stays_running():
    # golden 077's shape: evicting the half-GPU job alone frees no whole device; the solver adds the
    # 1-GPU job, and the half-GPU job then lands back on its own device (un-evicted, still Running)
    jobs = [job("half-a", "q0", [running("half-a-0", "n0", gpu=0.5, gpuGroups=["g0"])], priority=50, age=3),
            job("whole", "q0", [running("whole-0", "n0", gpu=1)], priority=50, age=2),
            job("half-b", "q0", [running("half-b-0", "n0", gpu=0.5, gpuGroups=["g0"])], priority=50, age=1),
            job("build", "q0", [pending("build-0")], priority=100, preemptible=False, age=4)]
    s = run(scenario([node("n0", 2)], QS, jobs, ["preempt"]))
    assert status(s, "build-0") == ("Pipelined", "n0")
    assert status(s, "whole-0") == ("Releasing", "n0")
    assert status(s, "half-a-0") == ("Running", "n0") and status(s, "half-b-0") == ("Running", "n0")
    assert not events_of(s, "half-b")
    assert_no_overcommit(s)


def test_running_job_with_preemption_delay_is_still_a_victim():
    jobs = [job("train", "q0", [running("train-0", "n0")], priority=50, age=1, preemptionDelay="10m"),
            job("build", "q0", [pending("build-0")], priority=100, preemptible=False, age=2)]
    s = run(scenario([node("n0", 1)], QS, jobs, ["preempt"]))
    assert status(s, "train-0")[0] == "Releasing" and status(s, "build-0")[0] == "Pipelined"
