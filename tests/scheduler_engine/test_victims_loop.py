"""The job loop reclaim and preempt share (``victims.run_evicting``): identical jobs solve once.

Issue #8: identical pending jobs must not each rescan the cluster once one of them failed to fit.
These tests count victim solves (not time): a failure reached without simulating anything depends
only on the candidate set, the first task's shape and the cluster, so jobs of other leaves with the
same three reuse it, with the same event text as a full solve would have written.
"""
from __future__ import annotations

import pytest

from scheduler_engine.actions import get_action
from scheduler_engine.actions import victims
from scheduler_engine.loader import load_dict
from scheduler_engine.state import CycleState

from tests.scheduler_engine.test_reclaim import job, node, pending, queue, running, scenario


def _cluster(leaves: int, per_leaf: int, gpus: tuple[int, ...] = (6,)) -> dict:
    """``leaves`` leaf queues each deserving 6 GPUs, each with ``per_leaf`` pending jobs asking for
    ``gpus`` (cycled); 4-GPU nodes all held by preemptible jobs of a zero-quota queue ("hog")."""
    n_nodes = leaves * 6 // 4
    nodes = [node(f"n{i}", gpus=4) for i in range(n_nodes)]
    queues = [queue("dept", gpu=(-1, 1, -1)), queue("hog", parent="dept", gpu=(0, 1, -1))]
    queues += [queue(f"leaf{q}", parent="dept", gpu=(6, 1, -1)) for q in range(leaves)]
    jobs = [job(f"hog-{i}-{k}", "hog", [running(f"hog-{i}-{k}-0", f"n{i}")], age=100)
            for i in range(n_nodes) for k in range(4)]
    c = 0
    for q in range(leaves):
        for k in range(per_leaf):
            jobs.append(job(f"p{q}-{k}", f"leaf{q}", [pending(f"p{q}-{k}-0", gpu=gpus[c % len(gpus)])], age=10))
            c += 1
    return scenario(nodes, queues, jobs, ["reclaim"])


def _run(doc: dict, monkeypatch, share: bool = True):
    """One reclaim run; returns (solve calls, simulations, events); solved job names in ``_run.solved``."""
    calls = {"solve": 0, "try": 0}
    solved: list[str] = []
    real_solve, real_try = victims.VictimSolver.solve, victims.VictimSolver._try

    def solve(self, j, tasks):
        calls["solve"] += 1
        solved.append(self.state.jobs.names[j])
        out = real_solve(self, j, tasks)
        if not share:
            self.unsimulated_failure = None  # what the loop did before failures were shared
        return out

    def try_(self, *a):
        calls["try"] += 1
        return real_try(self, *a)

    monkeypatch.setattr(victims.VictimSolver, "solve", solve)
    monkeypatch.setattr(victims.VictimSolver, "_try", try_)
    state = CycleState(load_dict(doc))
    get_action("reclaim")(state)
    monkeypatch.undo()
    _run.solved = solved
    return calls["solve"], calls["try"], state.events


def test_identical_unreclaimable_jobs_across_leaves_solve_once(monkeypatch):
    # 200 identical 6-GPU jobs in 40 leaves: no 4-GPU node can hold one whatever is evicted
    solves, tries, events = _run(_cluster(40, 5), monkeypatch)
    assert solves == 1  # one distinct shape, not one per leaf (40) nor per job (200)
    assert tries == 0
    failed = [e for e in events if e["reason"] == "NotReclaiming" and "reclaim failed" in e["message"]]
    assert len(failed) == 40  # each leaf's first job; its leaf mates are skipped by signature
    assert all("even evicting every eligible victim would not free enough GPUs" in e["message"] for e in failed)
    assert not [e for e in events if e["reason"] == "Reclaimed"]


def test_solves_grow_with_distinct_shapes_not_jobs(monkeypatch):
    # two shapes (5 and 6 GPUs) alternate within each leaf: two solves in all
    solves, _, _ = _run(_cluster(40, 5, gpus=(6, 5)), monkeypatch)
    assert solves == 2


@pytest.mark.parametrize("gpus", [(6,), (6, 5)])
def test_shared_failures_write_the_events_a_full_solve_writes(monkeypatch, gpus):
    doc = _cluster(12, 3, gpus=gpus)
    shared_solves, _, shared_events = _run(doc, monkeypatch)
    full_solves, _, full_events = _run(doc, monkeypatch, share=False)
    assert shared_solves == len(gpus) < full_solves
    assert shared_events == full_events


def test_failures_are_not_shared_across_a_commit(monkeypatch):
    # leaf1's low-priority 1-GPU job reclaims after leaf1's 6-GPU job failed: the cluster changed,
    # so the next leaf's 6-GPU job is solved again (candidates recomputed on the new state)
    doc = _cluster(6, 1)
    doc["jobs"].append(job("small", "leaf1", [pending("small-0", gpu=1)], priority=10, age=10))
    solves, _, events = _run(doc, monkeypatch)
    order = [e["job"] for e in events if "task" not in e]
    assert order == ["p0-0", "p1-0", "small", "p2-0", "p3-0", "p4-0", "p5-0"]
    assert [e["reason"] for e in events if e["job"] == "small" and "task" not in e] == ["Reclaimed"]
    assert _run.solved == ["p0-0", "small", "p2-0"]
    _, _, full = _run(doc, monkeypatch, share=False)
    assert full == events
