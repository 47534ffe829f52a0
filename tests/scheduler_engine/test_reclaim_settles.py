"""Issue #18.5: the over-quota reclaim of KAI's "allocate will cause a loop" case settles.

KAI ``pkg/scheduler/actions/integration_tests/reclaim/reclaim_test.go``, case "queue0 is over
quota, queue1 is under quota, yet we don't reclaim because allocate will case a loop (this is a
bug in allocate)": one 4-GPU node; queue0 (deserved 2) runs 2 + 1 GPUs and has a 1-GPU job
pending, queue1 (deserved 2) runs 1 GPU and has a 3-GPU and a 1-GPU job pending. KAI expects no
bind and no eviction. This engine reclaims the 1-GPU job once (queue1 is below its fair share of 2,
queue0 above it; the proportion rules of ``plugins/proportion/reclaimable`` allow it), and the loop
the test warns about is gone: the next cycle binds the reclaimer, and nothing moves after that.
Before issue #18.0 the freed GPU went back to queue0's recreated job in allocate and reclaim took it
away again, every cycle (the reclaimer Pipelined for ever). README "What we differ from KAI".
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
            job("pending_job1", "queue1", [pending("pj1", gpu=1)], age=5),
            job("pending_job2", "queue0", [pending("pj2", gpu=1)], age=5)]
    return scenario([node("node0", gpus=4)], qs, jobs, ACTIONS, rounds=rounds, stableRounds=stable)


def test_the_reclaim_settles_instead_of_pipelining_for_ever():
    out = run_rounds(load_dict(_doc(rounds=2, stable=4)))
    first, second = out.cycles
    assert first.tasks["pj1"]["status"] == "Pipelined" and first.tasks["rj1"]["status"] == "Releasing"
    assert second.tasks["pj1"]["status"] == "Binding"
    final = out.final.tasks
    assert final["pj1"]["status"] == "Running" and final["rj0"]["status"] == "Running"
    assert final["rj1"]["status"] == final["pj2"]["status"] == final["pj0"]["status"] == "Pending"
    for res in out.stable:  # nothing binds, pipelines or evicts any more
        assert {v["status"] for v in res.tasks.values()} <= {"Running", "Pending"}
