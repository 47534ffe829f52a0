"""Issue #18.0: a task is Pipelined only onto resources that are releasing in that result.

KAI's victim solvers pipeline every placement they simulate (``actions/common/action.go``
``TryToVirtuallyAllocatePreemptorAndGetVictims`` -> ``AllocateJob(..., isPipelineOnly=true)``),
and a victim there is a pod on a node: ``framework/statement.go`` ``Statement.Evict`` makes its
share releasing. Victims may be tasks that allocate placed earlier in the same session (Binding
is an active-allocated status, ``api/pod_status``). In this engine nothing of a cycle is bound
before the cycle ends, so un-placing such a victim gives its share back *free*
(``Statement.unallocate``); a reclaimer then sitting wholly on free resources waits for nothing
and is bound. Left Pipelined, the next cycle turned it back to Pending and chose the same
victims again, for ever (the live repro in ``shared/repros``).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from scheduler_engine.bench import generate, with_features
from scheduler_engine.cycle import rewrite_snapshot, run_cycle, run_cycle_with_state, run_rounds
from scheduler_engine.invariants import pipelined_problems, result_problems
from scheduler_engine.loader import load_dict, load_scenario
from scheduler_engine.snapshot import TaskState
from tests.scheduler_engine.test_reclaim import job, node, pending, queue, running, scenario

REPRO = Path(__file__).resolve().parents[2].parent / "shared" / "repros" / "pipelined-on-idle-gpus.yaml"


def _unplaced_victim_doc(rounds: int | None = None) -> dict:
    """One 8-GPU node. team-0 (priority 200, deserves 3) runs 2 GPUs, team-1 (deserves 4) runs 1.
    Allocate serves team-0 first: its 5-task gang fills the node. team-1's quarter GPU then
    reclaims from team-0 (7 GPUs of a fair share of 4): the victims are the gang allocate placed
    moments before (the smallest generated cluster that showed the stall, bench seed 70)."""
    queues = [queue("dept", gpu=(7, 2, -1)), queue("team-0", parent="dept", gpu=(3, 3, -1), priority=200, age=300),
              queue("team-1", parent="dept", gpu=(4, 1, -1), age=100)]
    jobs = [
        job("run-0", "team-1", [running("run-0-0", "n0", gpu=1)], age=112),
        job("run-1", "team-0", [running("run-1-0", "n0", gpu=2)], age=2198),
        job("gang", "team-0", [pending(f"gang-{i}", gpu=1) for i in range(5)], age=644),
        job("big", "team-1", [pending("big-0", gpu=8)], age=458),
        job("quarter", "team-1", [pending("quarter-0", gpu=0.25)], age=313),
    ]
    extra = {"rounds": rounds} if rounds else {}
    return scenario([node("n0", gpus=8)], queues, jobs, ["allocate", "consolidation", "reclaim", "preempt"],
                    **extra)


def test_reclaim_over_victims_placed_this_cycle_binds_the_reclaimer():
    snap = load_dict(_unplaced_victim_doc())
    res = run_cycle(snap)
    assert res.tasks["quarter-0"] == {"status": "Binding", "node": "n0"}
    assert all(res.tasks[f"gang-{i}"]["status"] == "Pending" for i in range(5))
    assert not [t for t, v in res.tasks.items() if v["status"] in ("Pipelined", "Releasing")]
    assert result_problems(snap, res) == []
    undone = [e for e in res.events if e.get("victimOf") == "quarter"]
    assert len(undone) == 5 and all("placement undone" in e["message"] for e in undone)
    summary = [e for e in res.events if e["job"] == "quarter" and e["reason"] == "Reclaimed"]
    assert "1 task(s) bound on n0 after 0 victim task(s) evicted, 5 placement(s) of this cycle undone" \
        in summary[0]["message"]


def test_the_reclaimer_then_runs_and_the_cluster_settles_over_rounds():
    snap = load_dict(_unplaced_victim_doc())
    for _ in range(4):
        state, res = run_cycle_with_state(snap)
        assert result_problems(snap, res) == []
        snap = rewrite_snapshot(snap, state)
    i = snap.tasks.index["quarter-0"]
    assert int(snap.tasks.state[i]) == int(TaskState.RUNNING)


def test_a_reclaimer_that_takes_releasing_resources_stays_pipelined():
    # the victim ran before this cycle: it is Releasing and the reclaimer waits for it (KAI)
    queues = [queue("dept"), queue("a", parent="dept", gpu=(0, 1, -1)), queue("b", parent="dept", gpu=(4, 1, -1))]
    jobs = [job("hog", "a", [running("hog-0", "n0", gpu=4)], age=10),
            job("want", "b", [pending("want-0", gpu=4)], age=1)]
    snap = load_dict(scenario([node("n0", gpus=4)], queues, jobs, ["allocate", "reclaim"]))
    res = run_cycle(snap)
    assert res.tasks["hog-0"]["status"] == "Releasing"
    assert res.tasks["want-0"] == {"status": "Pipelined", "node": "n0"}
    assert result_problems(snap, res) == []


def test_the_check_names_a_job_pipelined_where_nothing_is_releasing():
    queues = [queue("dept"), queue("a", parent="dept")]
    jobs = [job("j", "a", [pending("j-0", gpu=1)], age=1)]
    snap = load_dict(scenario([node("n0", gpus=4)], queues, jobs, ["allocate"]))
    res = run_cycle(snap)
    assert res.tasks["j-0"]["status"] == "Binding"
    res.tasks["j-0"]["status"] = "Pipelined"  # what the engine used to return
    assert pipelined_problems(snap, res) == [
        "job j: 1 task(s) Pipelined on n0 where nothing is releasing in this result"]


@pytest.mark.skipif(not REPRO.exists(), reason="shared/repros not beside the repository")
def test_the_live_repro_has_nothing_pipelined_on_idle_gpus():
    snap = load_scenario(REPRO)
    res = run_cycle(snap)
    assert result_problems(snap, res) == []
    counts = res.status_counts()
    assert counts.get("Pipelined", 0) == 0 and counts.get("Binding", 0) == 4


@pytest.mark.parametrize("seed", range(1, 31))
def test_generated_clusters_over_many_rounds_keep_the_invariant(seed):
    # small crowded clusters: allocate fills nodes, then reclaim / preempt / consolidation pick
    # victims among what allocate just placed (before the fix, 47 of the first 60 such cycles broke it)
    fill = (0.3, 0.5, 0.8)[seed % 3]
    snap = generate(nodes=4 + seed % 13, jobs=20 + 5 * (seed % 17), queues=(4, 7, 13)[seed % 3], seed=seed, fill=fill)
    if seed % 4 == 0:
        snap = with_features(snap, sub_groups=0.3, dra_nodes=0.3, seed=seed)
    for r in range(8):
        state, res = run_cycle_with_state(snap)
        assert result_problems(snap, res) == [], f"seed {seed} round {r}"
        snap = rewrite_snapshot(snap, state)


def test_rounds_scenario_settles():
    out = run_rounds(load_dict(_unplaced_victim_doc(rounds=3)))
    for res in out.cycles:
        assert not [v for v in res.tasks.values() if v["status"] == "Pipelined"]
    assert out.final.tasks["quarter-0"]["status"] == "Running"


def test_check_holds_every_checked_cycle_to_the_invariant(monkeypatch):
    from scheduler_engine import check

    doc = _unplaced_victim_doc()
    doc["expect"] = {"tasks": {"quarter-0": {"status": "Binding"}}}
    assert check.check_snapshot(load_dict(doc)).passed
    # an engine that pipelined where nothing is releasing would fail `check` whatever `expect` says
    monkeypatch.setattr(check, "result_problems", lambda snap, res: ["job quarter: Pipelined on n0"])
    out = check.check_snapshot(load_dict(doc))
    assert out.mismatches == ["invariant: job quarter: Pipelined on n0"]
