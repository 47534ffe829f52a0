"""allocate's failure caches: identical failing jobs do not each scan the cluster, in any queue.

Issue #8: "identical pending jobs must not each rescan the cluster once one of them failed to
fit". Node-fit work is counted by wrapping the state's fit primitives and the explanation (each
is a pass over nodes); decisions are checked against the plain-Python reference, which retries
every (queue, shape) and therefore proves the skips change nothing.
"""
from __future__ import annotations

from collections import Counter

import pytest

from tests.support import engine_reference as reference
from scheduler_engine.actions import allocate
from scheduler_engine.state import CycleState
from tests.scheduler_engine.alloc_builders import simple


def node(name, gpus=2):
    return {"name": name, "gpus": gpus, "gpuMemory": 80, "cpu": "32", "memory": "128Gi"}


def tree(leaves, **leaf_kw):
    return [{"name": "top", "parent": None}] + [{"name": q, "parent": "top", **leaf_kw.get(q, {})} for q in leaves]


def job(name, queue, gpu=1, n=1, age=0, **kw):
    return {"name": name, "queue": queue, "createdMinutesAgo": age, "tasks": [{"gpu": gpu} for _ in range(n)], **kw}


def counted(monkeypatch):
    """Count every pass over nodes: full-cluster fit masks, single-node fits, explanations."""
    calls = Counter()
    for cls, name in ((CycleState, "fit_rows"), (CycleState, "fit_one"), (allocate.Allocator, "explain")):
        real = getattr(cls, name)

        def wrap(self, *a, _real=real, _name=name, **kw):
            calls[_name] += 1
            return _real(self, *a, **kw)

        monkeypatch.setattr(cls, name, wrap)
    return calls


def run(snap):
    s = CycleState(snap)
    allocate.run(s)
    return s


def test_identical_failing_jobs_in_many_queues_scan_the_cluster_once(monkeypatch):
    leaves = [f"q{i}" for i in range(8)]
    # 2 nodes x 2 GPUs: the 1-GPU jobs fill them; the 4-GPU jobs never fit, in any queue
    jobs = [job(f"big-{q}-{k}", q, gpu=4, age=10 - k) for q in leaves for k in range(3)]
    jobs += [job(f"one-{q}", q, gpu=1, age=1) for q in leaves]
    snap = simple([node("a"), node("b")], tree(leaves), jobs)
    calls = counted(monkeypatch)
    s = run(snap)
    # one scan of the cluster per task shape (building its node index), one explanation per
    # failing shape (4 GPUs at once, 1 GPU once the 4 slots are taken) and single-node updates
    # only for the nodes that changed (4 placements x 2 shapes at most)
    assert calls["explain"] == 2
    assert calls["fit_rows"] == 2
    assert calls["fit_one"] <= 2 * 4
    big = [e for e in s.events if e["job"].startswith("big-")]
    assert len(big) == 24 and {e["message"] for e in big} == {"no node has 4 free GPUs (largest free: 2)"}
    assert sum(e["job"].startswith("one-") for e in s.events) == 4
    assert reference.decisions_of_state(s) == reference.allocate(snap).decisions


def test_queue_capacity_is_still_checked_first_for_a_shape_that_fits_nowhere(monkeypatch):
    leaves = ["a", "b"]
    jobs = [job("a0", "a", gpu=4, age=5), job("b0", "b", gpu=4, age=1)]
    snap = simple([node("n")], tree(leaves, b={"gpu": (-1, 1, 2)}), jobs)
    calls = counted(monkeypatch)
    s = run(snap)
    msgs = {e["job"]: e["message"] for e in s.events}
    assert msgs["a0"].startswith("no node has 4 free GPUs")
    assert msgs["b0"].startswith("queue b is over its limit for gpu")
    assert calls["explain"] == 1


def test_a_partly_placed_gang_does_not_teach_the_cache():
    # The gang places 2 of 3 tasks before failing: "fits no node" then holds only in a state that
    # is rolled back, so a single 1-GPU job of another queue must still be tried (and placed).
    leaves = ["g", "s"]
    jobs = [job("gang", "g", gpu=1, n=3, age=5), job("solo", "s", gpu=1, age=1)]
    snap = simple([node("n", gpus=2)], tree(leaves, g={"priority": 200}), jobs)  # the gang goes first
    s = run(snap)
    al_names = {s.tasks.names[t] for t in range(s.T) if s.task_node[t] >= 0}
    assert al_names == {"solo-0"}
    assert any(e["job"] == "gang" and "only 2 fit" in e["message"] for e in s.events)
    assert reference.decisions_of_state(s) == reference.allocate(snap).decisions


def test_freed_resources_make_the_shape_worth_a_new_scan(monkeypatch):
    jobs = [job(f"j{i}", f"q{i}", gpu=2, age=5 - i) for i in range(3)]
    s = CycleState(simple([node("n", gpus=1)], tree(["q0", "q1", "q2"]), jobs))
    calls = counted(monkeypatch)
    al = allocate.Allocator(s)
    al.run()
    assert calls["explain"] == 1
    s.resources_freed += 1  # as an eviction would
    ok, _, msg = al.try_job(1, [s.job_task_range(1)[0]])
    assert not ok and calls["explain"] == 2 and msg.startswith("no node has 2 free GPUs")


def test_early_exit_still_explains_jobs_that_had_no_attempt():
    # After the first 4-GPU failure every remaining shape is known to fail and the pass stops
    # early; the newer gang that cannot start (2 tasks for minAvailable 3) is explained anyway.
    jobs = [job("big0", "a", gpu=4, age=9), job("big1", "b", gpu=4, age=8),
            {"name": "short", "queue": "b", "createdMinutesAgo": 0, "minAvailable": 3,
             "tasks": [{"gpu": 1}, {"gpu": 1}]}]
    s = run(simple([node("n")], tree(["a", "b"]), jobs))
    msgs = {e["job"]: e["message"] for e in s.events}
    assert set(msgs) == {"big0", "big1", "short"}
    assert msgs["short"].startswith("gang needs minAvailable=3 tasks but only 0 are running and 2 pending")


def test_vectorised_first_attempt_groups_equal_the_per_job_signatures():
    import numpy as np

    from scheduler_engine.bench import generate, with_features
    from scheduler_engine.ordering import next_tasks_to_allocate

    # the groups' signatures are built without job_signature: equal to it with subgroups and DRA claims too
    for seed, sg, dra in ((1, 0.0, 0.0), (2, 0.0, 0.0), (3, 0.0, 0.0), (4, 0.2, 0.3)):
        s = CycleState(with_features(generate(nodes=80, jobs=900, queues=25, seed=seed), sub_groups=sg,
                                     dra_nodes=dra, seed=seed))
        al = allocate.Allocator(s)
        jobs = al.candidate_jobs()
        group, gsig, count = al._initial_signatures(jobs)
        assert int((s.job_count[jobs] > 1).sum()) > 50  # gangs are part of the mix
        for j in jobs:
            ts = next_tasks_to_allocate(s, j)
            assert (gsig[group[j]] if group[j] >= 0 else None) == (s.job_signature(j, ts) if ts else None)
        assert np.bincount(group[group >= 0], minlength=len(gsig)).tolist() == count


@pytest.mark.parametrize("broken", [False, True])
def test_a_shape_that_fits_nowhere_is_attempted_once_over_the_queues(monkeypatch, broken):
    """``try_job`` looks a single task's shape up in ``nofit`` by the job signature's one task shape
    (``sig[4][0]``, which is ``task_signature`` of that task): after the first 4-GPU job failed, the
    same shape in the seven other queues fails without an attempt. A key that never hits (``broken``:
    the whole shapes tuple) attempts it in every queue."""
    leaves = [f"q{i}" for i in range(8)]
    jobs = [job(f"big-{q}", q, gpu=4, age=10) for q in leaves]
    jobs += [job(f"one-{q}-{k}", q, gpu=1, age=1) for q in leaves for k in range(2)]
    snap = simple([node("a"), node("b")], tree(leaves), jobs)
    attempts, checked = Counter(), []
    real_attempt, real_try = allocate.Allocator._attempt, allocate.Allocator.try_job

    def attempt(self, j, tasks, sig=None):
        attempts[self.state.jobs.names[j].split("-")[0]] += 1
        return real_attempt(self, j, tasks, sig)

    def try_job(self, j, tasks, sig=None, g=-1):
        if sig is not None and len(tasks) == 1 and sig[2] is None and sig[3] is None:
            checked.append(sig[4][0] == self.state.task_signature(tasks[0]))
            if broken:
                sig, g = sig[:4] + ((sig[4],), ) + sig[5:], -1
        return real_try(self, j, tasks, sig, g)

    monkeypatch.setattr(allocate.Allocator, "_attempt", attempt)
    monkeypatch.setattr(allocate.Allocator, "try_job", try_job)
    s = run(snap)
    assert checked and all(checked)
    assert (attempts["big"] == 1) != broken, attempts
    assert sum(e["job"].startswith("big-") for e in s.events) == 8


@pytest.mark.parametrize("shape", ["mixed", "one-gpu"])
def test_group_failure_slots_are_the_cache_entries_of_their_signatures(monkeypatch, shape):
    """The driver reads a first-attempt group's failure from ``_gfail[g]`` instead of
    ``fail_cache.get(gsig[g])``: after every attempt (every write goes through ``_fail``) and at the
    end of whole passes, each group's slot is the cache's entry for its signature (a ``_fail`` that
    leaves the slots alone fails it), and many pops take the fast path."""
    from scheduler_engine import bench

    real_try = allocate.Allocator.try_job
    checks = []

    def same(al):
        return all(x is al.fail_cache.get(sig) for x, sig in zip(al._gfail, al._gsig))

    def try_job(self, j, tasks, sig=None, g=-1):
        r = real_try(self, j, tasks, sig, g)
        checks.append(same(self))
        return r

    monkeypatch.setattr(allocate.Allocator, "try_job", try_job)
    for seed in (1, 2, 3):
        s = CycleState(bench.generate(nodes=40, jobs=400, queues=10, seed=seed, shape=shape))
        al = allocate.Allocator(s)
        al.run()
        assert same(al) and sum(x is not None for x in al._gfail) > 3
    assert len(checks) > 100 and all(checks)
