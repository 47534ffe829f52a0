"""Issue #18.5: the over-quota reclaim KAI refuses, so that allocate does not loop.

KAI ``pkg/scheduler/actions/integration_tests/reclaim/reclaim_test.go``, case "queue0 is over
quota, queue1 is under quota, yet we don't reclaim because allocate will case a loop (this is a
bug in allocate)": one 4-GPU node; queue0 (deserved 2) runs 2 + 1 GPUs and has a 1-GPU job
pending, queue1 (deserved 2) runs 1 GPU and has a 3-GPU and a 1-GPU job pending. KAI expects no
bind and no eviction, round after round.

The rule that decides it: the victim simulation orders every pending job of the cluster with the
victims and the reclaimer (``actions/common/action.go`` ``GetJobsToAllocate`` ->
``utils.GetAllPendingJobs``) and only skips the others when popped
(``TryToVirtuallyAllocatePreemptorAndGetVictims``). queue1's head is then the 3-GPU job, so by
``proportion/queue_order`` (resource share with the head job) queue0 goes first and takes its
evicted GPU back: no scenario places the 1-GPU reclaimer, nothing is evicted. (Before, the
engine compared queue1 by the reclaimer alone, reclaimed, and -- until issue #18.0 -- the freed
GPU went back to queue0 in allocate and reclaim took it again, every cycle.)
"""
from __future__ import annotations

from scheduler_engine.cycle import run_rounds
from scheduler_engine.loader import load_dict
from tests.scheduler_engine.test_reclaim import job, node, pending, queue, running, scenario

ACTIONS = ["allocate", "consolidation", "reclaim", "preempt", "stalegangeviction"]


def _doc(rounds: int, stable: int = 0) -> dict:
    qs = [queue("dept"), queue("queue0", parent="dept", gpu=(2, 2, -1)), queue("queue1", parent="dept", gpu=(2, 2, -1))]
    jobs = [job("running_job0", "queue0", [running("rj0", "node0", gpu=2)], age=10),
            job("running_job1", "queue0", [running("rj1", "node0", gpu=1)], age=10),
            job("running_job2", "queue1", [running("rj2", "node0", gpu=1)], age=10),
            job("pending_job0", "queue1", [pending("pj0", gpu=3)], age=5),
            job("pending_job1", "queue1", [pending("pj1", gpu=1)], age=4),
            job("pending_job2", "queue0", [pending("pj2", gpu=1)], age=3)]
    return scenario([node("node0", gpus=4)], qs, jobs, ACTIONS, rounds=rounds, stableRounds=stable)


def test_no_reclaim_and_nothing_moves_round_after_round():
    # KAI's harness: 2 rounds until the match, then 5 more that must still match
    out = run_rounds(load_dict(_doc(rounds=2, stable=5)))
    for res in out.cycles + out.stable:
        assert {v["status"] for v in res.tasks.values()} <= {"Running", "Pending"}
        assert not [e for e in res.events if e["reason"] == "Reclaimed"]
    final = out.final.tasks
    assert all(final[t]["status"] == "Running" for t in ("rj0", "rj1", "rj2"))
    assert all(final[t]["status"] == "Pending" for t in ("pj0", "pj1", "pj2"))


def test_without_the_big_pending_job_queue1_reclaims():
    # the same cluster without queue1's 3-GPU job: queue1 now heads with the 1-GPU reclaimer,
    # is under quota with it, goes first, and reclaims queue0's over-quota GPU
    doc = _doc(rounds=1)
    doc["jobs"] = [jb for jb in doc["jobs"] if jb["name"] != "pending_job0"]
    res = run_rounds(load_dict(doc)).cycles[0]
    assert res.tasks["pj1"]["status"] == "Pipelined" and res.tasks["rj1"]["status"] == "Releasing"
