"""The stale-gang-eviction action (spec g): grace periods, Succeeded tasks, events."""
from __future__ import annotations

from tests.scheduler_engine.test_reclaim import events_of, job, node, pending, queue, run, running, scenario, status

QS = [queue("top", age=2), queue("q0", "top", gpu=(4, 0, -1), age=1)]


def _gang(stale_for=None, grace=None, extra_state="Failed", min_available=2, config_grace="60s"):
    second = {"name": "g-1", "state": extra_state, "gpu": 1, "cpu": 1, "memory": "1Gi"}
    if extra_state == "Running":
        second["node"] = "n0"
    kw = {"minAvailable": min_available}
    if stale_for is not None:
        kw["staleFor"] = stale_for
    if grace is not None:
        kw["stalenessGracePeriod"] = grace
    jobs = [job("g", "q0", [running("g-0", "n0"), second], age=5, **kw)]
    return scenario([node("n0", 4)], QS, jobs, ["stalegangeviction"], stalenessGracePeriod=config_grace)


def test_gang_below_min_available_past_grace_is_evicted_with_event():
    s = run(_gang(stale_for="61s"))
    assert status(s, "g-0") == ("Releasing", "n0")
    assert status(s, "g-1")[0] == "Failed"
    (ev,) = events_of(s, "g", "StaleGang")
    assert ev["task"] == "g-0"
    assert "1 of minAvailable=2" in ev["message"] and "61s" in ev["message"] and "60s" in ev["message"]


def test_within_grace_period_is_kept():
    s = run(_gang(stale_for="59s"))
    assert status(s, "g-0") == ("Running", "n0") and not s.events


def test_per_job_grace_overrides_config():
    assert status(run(_gang(stale_for="30s", grace="10s")), "g-0")[0] == "Releasing"
    assert status(run(_gang(stale_for="30s", grace="40s", config_grace="0s")), "g-0")[0] == "Running"


def test_negative_grace_means_never():
    assert status(run(_gang(stale_for="1d", grace="-1s")), "g-0")[0] == "Running"
    assert status(run(_gang(stale_for="1d", config_grace="-1s")), "g-0")[0] == "Running"


def test_job_with_a_succeeded_task_is_never_stale():
    s = run(_gang(stale_for="1d", extra_state="Succeeded"))
    assert status(s, "g-0")[0] == "Running" and status(s, "g-1")[0] == "Succeeded"


def test_gang_at_min_available_is_not_stale():
    s = run(_gang(stale_for="1d", extra_state="Running"))
    assert status(s, "g-0")[0] == "Running" and status(s, "g-1")[0] == "Running"


def test_unknown_staleness_with_zero_grace_evicts_now():
    jobs = [job("g", "q0", [running("g-0", "n0"), pending("g-1")], age=5, minAvailable=2)]
    s = run(scenario([node("n0", 4)], QS, jobs, ["stalegangeviction"], stalenessGracePeriod="0s"))
    assert status(s, "g-0")[0] == "Releasing" and status(s, "g-1")[0] == "Pending"


def test_job_without_active_tasks_is_not_stale():
    jobs = [job("g", "q0", [pending("g-0"), pending("g-1")], age=5, minAvailable=2, staleFor="1d")]
    s = run(scenario([node("n0", 4)], QS, jobs, ["stalegangeviction"], stalenessGracePeriod="0s"))
    assert not s.events


def test_vectorised_candidates_equal_the_per_job_rule():
    """``candidates`` (one mask over all jobs) selects exactly the jobs the per-job rule would evict."""
    import math

    import numpy as np

    from scheduler_engine.actions import stalegang
    from scheduler_engine.state import CycleState
    from tests.scheduler_engine.test_state_init import _random_snapshot

    evicting = 0
    for seed in range(200):
        snap = _random_snapshot(seed)
        rng = np.random.default_rng(seed)
        J = len(snap.jobs)
        snap.jobs.min_available[:] = rng.integers(1, 4, J)
        snap.jobs.stale_for[:] = np.where(rng.random(J) < 0.4, np.nan, rng.choice([0.0, 30.0, 100.0], J))
        snap.jobs.staleness_grace_period[:] = np.where(rng.random(J) < 0.6, np.nan, rng.choice([-1.0, 0.0, 50.0], J))
        with np.errstate(all="ignore"):
            s = CycleState(snap)
        expected = []
        for j in range(J):
            sf = float(snap.jobs.stale_for[j])
            sf = 0.0 if math.isnan(sf) else sf
            g = stalegang.grace_period(s, j)
            if stalegang.is_stale(s, j) and g >= 0 and sf >= g:
                expected.append(j)
        assert stalegang.candidates(s).tolist() == expected, seed
        evicting += bool(expected)
    assert evicting > 20  # the random clusters do exercise evictions
