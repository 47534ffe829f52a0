"""Queue order (spec b), job order (spec f), next tasks (spec g) and the hierarchical job queue."""
from __future__ import annotations

import numpy as np
import pytest

from scheduler_engine.ordering import (
    JobQueue,
    allocatable_share,
    dominant_share,
    job_order_key,
    next_tasks_to_allocate,
    queue_less,
    task_order,
)
from scheduler_engine.snapshot import GPU
from scheduler_engine.state import CycleState
from tests.scheduler_engine.alloc_builders import simple

NODE = {"name": "n0", "gpus": 8, "cpu": "64", "memory": "256Gi", "gpuMemory": 80}


def _state(queues, jobs, nodes=None):
    return CycleState(simple(nodes or [NODE], queues, jobs))


def _pend(name, queue, gpu=1, n=1, **kw):
    return {"name": name, "queue": queue, "tasks": [{"gpu": gpu} for _ in range(n)], **kw}


def _run(name, queue, gpu=1, n=1, **kw):
    return {"name": name, "queue": queue,
            "tasks": [{"gpu": gpu, "state": "Running", "node": "n0"} for _ in range(n)], **kw}


def test_allocatable_share_table():
    s = _state([{"name": "a", "parent": None, "gpu": (2, 1, 3)}, {"name": "b", "parent": None, "gpu": (-1, 1, 1)},
                {"name": "c", "parent": None, "gpu": (-1, 1, -1)}], [])
    s.fair_share[:, GPU] = [1, 5, 5]
    al = allocatable_share(s)
    assert list(al[:, GPU]) == [2, 1, -1]
    s.fair_share[0, GPU] = 5
    assert allocatable_share(s)[0, GPU] == 3  # max(D, F) capped by L


def test_dominant_share_cases():
    s = _state([{"name": "a", "parent": None, "gpu": (1000, 1, -1), "cpu": (1000, 1, -1), "memory": (1000, 1, -1)}], [])
    s.fair_share[:] = 0
    assert dominant_share(s, 0, [500, 100, 200]) == pytest.approx(0.5)
    s.queue_deserved[0] = [1000, 0, 1000]
    s._ordering_allocatable = None
    assert dominant_share(s, 0, [0, 500, 0]) == pytest.approx(500000)
    s.queue_deserved[0] = [-1, 1000, 1000]
    s._ordering_allocatable = None
    s.total[:] = [2000, 1e9, 1e12]
    assert dominant_share(s, 0, [700, 0, 0]) == pytest.approx(0.35)


def test_starved_queue_beats_higher_priority():
    qs = [{"name": "top", "parent": None},
          {"name": "lo", "parent": "top", "priority": 50, "gpu": (4, 1, -1)},
          {"name": "hi", "parent": "top", "priority": 200, "gpu": (1, 1, -1)}]
    s = _state(qs, [_run("r", "hi", gpu=1), _pend("a", "lo"), _pend("b", "hi")])
    one = [1.0, 0, 0]
    assert queue_less(s, 1, 2, one, one)  # lo stays within deserved with its job, hi does not
    assert not queue_less(s, 2, 1, one, one)


def test_priority_then_dominant_share_then_age():
    qs = [{"name": "top", "parent": None},
          {"name": "a", "parent": "top", "gpu": (0, 1, -1), "createdMinutesAgo": 5},
          {"name": "b", "parent": "top", "gpu": (0, 1, -1), "createdMinutesAgo": 1, "priority": 101}]
    s = _state(qs, [_pend("x", "a"), _pend("y", "b")])
    one = [1.0, 0, 0]
    assert queue_less(s, 2, 1, one, one)  # higher priority (neither is starved: deserved 0)
    s.queues.priority[2] = 100
    s.fair_share[1:, GPU] = [2, 2]
    s._ordering_allocatable = None
    s.queue_alloc[1, GPU] = 1
    assert queue_less(s, 2, 1, one, one)  # smaller dominant share with the job
    s.queue_alloc[1, GPU] = 0
    assert queue_less(s, 1, 2, one, one) and not queue_less(s, 2, 1, one, one)  # older first


def test_job_order_priority_elastic_age():
    qs = [{"name": "q", "parent": None}]
    jobs = [
        _pend("old", "q", createdMinutesAgo=9),
        _pend("new", "q", createdMinutesAgo=1),
        _pend("vip", "q", priority=125, createdMinutesAgo=0),
        {"name": "grown", "queue": "q", "minAvailable": 1, "createdMinutesAgo": 20,
         "tasks": [{"gpu": 1, "state": "Running", "node": "n0"}, {"gpu": 1}]},
    ]
    s = _state(qs, jobs)
    order = sorted(range(4), key=lambda j: job_order_key(s, j))
    assert [s.jobs.names[j] for j in order] == ["vip", "old", "new", "grown"]


def test_next_tasks_gang_then_one_elastic_and_task_priority():
    qs = [{"name": "q", "parent": None}]
    job = {"name": "e", "queue": "q", "minAvailable": 2,
           "tasks": [{"gpu": 1}, {"gpu": 1, "priority": 5}, {"gpu": 1}, {"gpu": 1, "priority": 1}]}
    s = _state(qs, [job])
    assert task_order(s, [0, 1, 2, 3]) == [1, 3, 0, 2]
    assert next_tasks_to_allocate(s, 0) == [1, 3]
    s.place(1, 0)
    s.place(3, 0)
    assert next_tasks_to_allocate(s, 0) == [0]
    short = _state(qs, [{"name": "g", "queue": "q", "minAvailable": 3, "tasks": [{"gpu": 1}, {"gpu": 1}]}])
    assert next_tasks_to_allocate(short, 0) == []


def test_job_queue_hierarchy_and_reversal():
    qs = [{"name": "d1", "parent": None, "gpu": (1, 1, -1)}, {"name": "d2", "parent": None, "gpu": (2, 1, -1)},
          {"name": "q0", "parent": "d1", "gpu": (3, 0, -1)}, {"name": "q1", "parent": "d1", "gpu": (2, 0, -1)},
          {"name": "q2", "parent": "d2", "gpu": (1, 0, -1)}]
    jobs = [_pend("j0", "q0", createdMinutesAgo=3), _pend("j1", "q1", createdMinutesAgo=2),
            _pend("j2", "q2", createdMinutesAgo=1)]
    s = _state(qs, jobs, nodes=[{**NODE, "gpus": 1}])
    jq = JobQueue(s, range(3))
    # d2 has the smaller dominant share with the job (1/2 vs 1/1): its job comes first
    assert s.jobs.names[jq.pop()] == "j2"
    rest = [s.jobs.names[jq.pop()], s.jobs.names[jq.pop()]]
    assert sorted(rest) == ["j0", "j1"] and jq.pop() is None


def test_victim_queue_order_is_reversed():
    qs = [{"name": "d1", "parent": None, "gpu": (1, 1, -1)}, {"name": "d2", "parent": None, "gpu": (2, 1, -1)},
          {"name": "q0", "parent": "d1", "gpu": (1, 0, -1)}, {"name": "q2", "parent": "d2", "gpu": (2, 0, -1)}]
    jobs = [_run("r0", "q0"), _run("r2", "q2"), _run("r2b", "q2", priority=40, createdMinutesAgo=0)]
    s = _state(qs, jobs)
    s.fair_share[:, GPU] = [1, 2, 1, 2]
    s._ordering_allocatable = None
    # normal order: d1 is "weaker" (allocatable 1 < 2) and is served first
    assert s.jobs.names[JobQueue(s, range(3)).peek()] == "r0"
    # victim order: reversed, with each queue's candidate victim subtracted in rule 5 (d2 keeps
    # 1 of 2 after losing one job, d1 keeps 0 of 1), and inside q2 the lower-priority job first
    vq = JobQueue(s, range(3), victim=True)
    assert [s.jobs.names[vq.pop()] for _ in range(3)] == ["r2b", "r2", "r0"]


def test_job_queue_push_back_and_refresh_after_allocation():
    qs = [{"name": "top", "parent": None}, {"name": "a", "parent": "top", "gpu": (1, 0, -1), "createdMinutesAgo": 2},
          {"name": "b", "parent": "top", "gpu": (1, 0, -1), "createdMinutesAgo": 1}]
    jobs = [_pend("a0", "a"), _pend("a1", "a"), _pend("b0", "b")]
    s = _state(qs, jobs)
    jq = JobQueue(s, range(3))
    j = jq.pop()
    assert s.jobs.names[j] == "a0"
    s.place(0, 0)
    jq.refresh(s.job_queue(j))
    # queue a is no longer within deserved with its next job: b goes first
    assert s.jobs.names[jq.pop()] == "b0"
    assert s.jobs.names[jq.pop()] == "a1"
    assert not jq


# --------------------------------------------------------------------------- incremental == full recompute
from hypothesis import given, settings, strategies as st  # noqa: E402


class _FullRefresh(JobQueue):
    def refresh(self, leaf):
        self.refresh_all()


class _Heaps(JobQueue):
    use_kernel = False  # the lazy per-parent heaps also when the tree allows the key kernel


class _HeapsFullRefresh(_FullRefresh):
    use_kernel = False


@st.composite
def _tree_and_jobs(draw):
    qs = [{"name": "t0", "parent": None, "gpu": (draw(st.sampled_from([-1, 2, 6])), 1, -1)},
          {"name": "t1", "parent": None, "gpu": (draw(st.sampled_from([-1, 2, 6])), 1, -1),
           "priority": draw(st.sampled_from([100, 101]))}]
    leaves = []
    for i in range(draw(st.integers(2, 5))):
        name = f"l{i}"
        qs.append({"name": name, "parent": draw(st.sampled_from(["t0", "t1"])), "createdMinutesAgo": i,
                   "gpu": (draw(st.sampled_from([0, 1, 3])), 1, -1)})
        leaves.append(name)
    jobs = []
    for i in range(draw(st.integers(1, 25))):
        jobs.append({"name": f"j{i:02d}", "queue": draw(st.sampled_from(leaves)),
                     "priority": draw(st.sampled_from([50, 100])), "createdMinutesAgo": draw(st.integers(0, 5)),
                     "tasks": [{"gpu": draw(st.sampled_from([1, 2, 8]))}]})
    return qs, jobs, draw(st.lists(st.booleans(), min_size=25, max_size=25))


@settings(max_examples=60, deadline=None)
@given(_tree_and_jobs())
def test_property_incremental_refresh_matches_full_recompute(data):
    qs, jobs, place_flags = data
    leaf_names = {q["name"] for q in qs if q["name"].startswith("l")}
    if not any(j["queue"] in leaf_names for j in jobs):
        return
    orders = []
    for cls in (JobQueue, _FullRefresh, _Heaps, _HeapsFullRefresh):
        s = CycleState(simple([{**NODE, "gpus": 64}], qs, jobs))
        jq = cls(s, range(len(jobs)))
        seq = []
        for k in range(len(jobs)):
            j = jq.pop(refresh=False)
            if j is None:
                break
            seq.append(j)
            t = s.job_task_range(j)[0]
            if place_flags[k] and s.fit_masks(t)[0][0]:
                s.place(t, 0)
            jq.refresh(s.job_queue(j))
        orders.append(seq)
    assert orders[0] == orders[1] == orders[2] == orders[3]


# --------------------------------------------------------------------------- heap order == sequential scan
def _scan_pick(s, victim, heaps):
    """Spec b by brute force: at every level the sequential scan over children with queue_less
    (rules 1-8), each queue represented by the best job of its best leaf."""
    from scheduler_engine.ordering import _default_request, _victim_request

    req = (lambda j: _victim_request(s, j)) if victim else (lambda j: _default_request(s, j))
    kids: dict[int, list[int]] = {}
    for q in range(s.Q):
        kids.setdefault(int(s.queues.parent[q]), []).append(q)

    def rep(q):
        if q not in kids:
            return (q, heaps[q][0][1]) if heaps.get(q) else None
        best = None
        for c in kids[q]:
            rc = rep(c)
            if rc is None:
                continue
            if best is None:
                best = (c, rc)
                continue
            less = queue_less(s, best[0], c, req(best[1][1]), req(rc[1]), victim=True) if victim else \
                queue_less(s, c, best[0], req(rc[1]), req(best[1][1]))
            if less:
                best = (c, rc)
        return None if best is None else best[1]

    return rep(-1)


@st.composite
def _odd_allocatables(draw):
    """Queues whose allocatable vectors are often incomparable (GPU and CPU quotas vary
    independently) and often tie on rules 1-6: the heap's tie-break fallback path."""
    qs = []
    tops = [f"t{i}" for i in range(draw(st.integers(1, 3)))]
    for i, t in enumerate(tops):
        qs.append({"name": t, "parent": None, "createdMinutesAgo": draw(st.integers(0, 2)),
                   "gpu": (draw(st.sampled_from([-1, 2, 4])), 1, -1), "cpu": (draw(st.sampled_from([-1, 8, 16])), 1, -1)})
    leaves = []
    for i in range(draw(st.integers(2, 7))):
        name = f"l{i}"
        qs.append({"name": name, "parent": draw(st.sampled_from(tops)), "createdMinutesAgo": draw(st.integers(0, 2)),
                   "gpu": (draw(st.sampled_from([-1, 2, 4])), 1, -1), "cpu": (draw(st.sampled_from([-1, 8, 16])), 1, -1)})
        leaves.append(name)
    jobs = []
    for i in range(draw(st.integers(1, 16))):
        jobs.append({"name": f"j{i:02d}", "queue": draw(st.sampled_from(leaves)),
                     "priority": draw(st.sampled_from([50, 100])), "createdMinutesAgo": draw(st.integers(0, 3)),
                     "tasks": [{"gpu": draw(st.sampled_from([0, 1, 2])), "cpu": "1",
                                "state": draw(st.sampled_from(["Pending", "Pending", "Running"])), "node": "n0"}]})
    return qs, jobs, draw(st.booleans()), draw(st.lists(st.booleans(), min_size=16, max_size=16))


@settings(max_examples=150, deadline=None)
@given(_odd_allocatables())
def test_property_job_queue_matches_sequential_scan(data):
    qs, jobs, victim, place_flags = data
    for jb in jobs:  # pending tasks carry no node
        for t in jb["tasks"]:
            if t["state"] == "Pending":
                t.pop("node")
    for cls in (JobQueue, _Heaps):  # the key kernel where the tree allows it / always the heaps
        s = CycleState(simple([{**NODE, "gpus": 64, "cpu": "512"}], qs, jobs))
        leaf_ids = [q for q in range(s.Q) if s.queue_is_leaf[q]]
        if victim:
            cand = [j for j in range(s.J) if s.job_num_active(j) > 0 and s.job_queue(j) in leaf_ids]
        else:
            cand = [j for j in range(s.J) if s.job_pending_tasks(j) and s.job_queue(j) in leaf_ids]
        jq = cls(s, cand, victim=victim)
        for k in range(len(cand)):
            want = _scan_pick(s, victim, {q: h for q, h in enumerate(jq.heaps)})
            assert jq.peek() == (None if want is None else want[1])
            j = jq.pop(refresh=False)
            assert (j is None) == (want is None)
            if j is None:
                break
            assert j == want[1]
            pend = s.job_pending_tasks(j)
            if not victim and place_flags[k] and pend and s.fit_masks(pend[0])[0][0]:
                s.place(pend[0], 0)
            jq.refresh(s.job_queue(j))
        assert jq.pop() is None and not jq


def test_tied_queues_with_incomparable_allocatables_follow_the_sequential_scan():
    # Rules 7-8 are not transitive here: a is weaker than b, but c beats a and b beats c by age.
    # The three leaves tie on rules 1-6 (their jobs ask for nothing), so the result depends on the
    # scan order of the children (input order a, b, c): a, then c beats a -> c; then a, b.
    qs = [{"name": "top", "parent": None},
          {"name": "a", "parent": "top", "createdMinutesAgo": 1, "gpu": (1, 1, -1), "cpu": (5, 1, -1)},
          {"name": "b", "parent": "top", "createdMinutesAgo": 3, "gpu": (2, 1, -1), "cpu": (6, 1, -1)},
          {"name": "c", "parent": "top", "createdMinutesAgo": 2, "gpu": (3, 1, -1), "cpu": (1, 1, -1)}]
    jobs = [_pend(f"{q}0", q, gpu=0) for q in "abc"]
    s = _state(qs, jobs)
    s.fair_share[:] = s.queue_deserved
    s._ordering_allocatable = None
    jq = JobQueue(s, range(3))
    assert not jq._chain[0]  # the allocatables of top's children are not a chain: tie fallback
    assert [s.jobs.names[jq.pop()] for _ in range(3)] == ["c0", "a0", "b0"]


@pytest.mark.parametrize("seed", [1, 2])
def test_seeded_requests_equal_the_default_request(seed):
    from scheduler_engine.bench import generate
    from scheduler_engine.ordering import _default_request

    s = CycleState(generate(nodes=60, jobs=600, queues=20, seed=seed))
    pending = [j for j in range(s.J) if s.job_pending_tasks(j)]
    jq = JobQueue(s, pending)
    pos, sums, vers = jq._seed
    seeded = [j for j in pending if pos[j] >= 0]
    assert len(seeded) > len(pending) // 2
    for j in seeded:
        assert int(vers[pos[j]]) == int(s.job_version[j])
        assert tuple(sums[pos[j]].tolist()) == tuple(_default_request(s, j)), s.jobs.names[j]
        assert jq._request(j) == tuple(_default_request(s, j))  # (read through the seed)
    # a seed is read only at the version it was made for: a placed task moves the job on
    j = next(j for j in seeded if s.job_min_available[j] > 1 and s.fit_masks(int(s.job_start[j]))[0].any())
    s.place(int(s.job_start[j]), int(np.flatnonzero(s.fit_masks(int(s.job_start[j]))[0])[0]))
    jq._req_cache.pop(j, None)
    assert jq._request(j) == tuple(_default_request(s, j)) != tuple(sums[pos[j]].tolist())


def test_chain_trees_use_the_key_kernel_and_pop_like_the_heaps():
    from scheduler_engine.bench import generate

    snap = generate(nodes=40, jobs=400, queues=30, seed=4)
    orders = []
    for cls in (JobQueue, _Heaps):
        s = CycleState(snap)
        pending = [j for j in range(s.J) if s.job_pending_tasks(j)]
        jq = cls(s, pending)
        assert (jq._k is not None) == (cls is JobQueue)
        seq = []
        while (j := jq.pop(refresh=False)) is not None:
            seq.append(j)
            pend = s.job_pending_tasks(j)
            if len(seq) % 3 and pend and s.fit_masks(pend[0])[0].any():
                s.place(pend[0], int(np.flatnonzero(s.fit_masks(pend[0])[0])[0]))
            jq.refresh(s.job_queue(j))
        orders.append(seq)
    assert len(orders[0]) >= 400 and orders[0] == orders[1]


# ---------------------------------------------------------------- kept next tasks, the leaf re-key
_CYCLE = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")


def _whole_cycle(snap) -> tuple:
    from scheduler_engine.actions import get_action

    st = CycleState(snap)
    for a in _CYCLE:
        get_action(a)(st)
    return st.task_state.tolist(), st.task_node.tolist(), [repr(e) for e in st.events]


def _next_tasks_callers():
    """Every module that calls ``next_tasks_to_allocate`` by its own name."""
    from scheduler_engine import ordering
    from scheduler_engine.actions import allocate, common, consolidation
    return [ordering, common, consolidation, allocate]


@pytest.mark.parametrize("shape,features", [("mixed", {}), ("one-gpu", {}), ("mixed", {"sub_groups": 0.3})])
def test_next_tasks_kept_per_job_version_are_computed_ones(monkeypatch, shape, features):
    """``next_tasks_to_allocate`` keeps a gang's next tasks per ``job_version``: at every call of
    whole cycles (allocate, consolidation, reclaim, preempt, the job queues' requests) the answer is
    the one computed afresh (the uncached path, tasks in task order) and a list of the caller's own,
    kept answers are used, and the cycle decides the same with the cache off (the version's part:
    the test below)."""
    from scheduler_engine import bench, ordering

    snap = bench.generate(nodes=40, jobs=300, queues=12, seed=4, shape=shape)
    if features:
        snap = bench.with_features(snap, seed=4, **features)
    real = ordering.next_tasks_to_allocate
    bad, hits = [], []

    def fresh(state, j):
        pend = task_order(state, state.job_pending_tasks(j))
        if state.job_count[j] == 1 or state._sg_list[j] or not pend:
            return None  # (paths without the cache)
        missing = int(state.job_min_available[j]) - state.job_num_active(j)
        if missing > 0:
            return pend[:missing] if len(pend) >= missing else []
        return pend[:1]

    def checked(state, j):
        cache = state.__dict__.get("_next_tasks_cache") or {}
        hit = cache.get(j)
        out = real(state, j)
        want = fresh(state, j)
        if want is not None:
            hits.append(hit is not None and hit[0] == int(state.job_version[j]))
            if out != want or out is state._next_tasks_cache[j][1]:
                bad.append(j)
        return out

    with monkeypatch.context() as m:
        m.setattr(ordering, "CACHE_NEXT_TASKS", False)
        plain = _whole_cycle(snap)
    with monkeypatch.context() as m:
        for mod in _next_tasks_callers():
            m.setattr(mod, "next_tasks_to_allocate", checked)
        assert _whole_cycle(snap) == plain
    assert not bad
    assert sum(hits) > 10 or shape == "one-gpu"  # (one-task jobs take the uncached fast path)


def test_next_tasks_kept_follow_placements_and_rollbacks():
    """The kept next tasks follow ``job_version``: an elastic job's next task moves on when one is
    placed, comes back after a rollback, and a gang below minAvailable asks for what it misses. (A
    cache keyed by the job alone would answer the first task again after it was placed.)"""
    s = _state([{"name": "q"}], [
        {"name": "el", "queue": "q", "minAvailable": 1, "tasks": [{"gpu": 1}, {"gpu": 1}, {"gpu": 1}]},
        {"name": "gang", "queue": "q", "minAvailable": 3, "tasks": [{"gpu": 1}] * 4},
    ])
    el, gang = s.jobs.index["el"], s.jobs.index["gang"]
    e0, g0 = int(s.job_start[el]), int(s.job_start[gang])
    assert next_tasks_to_allocate(s, el) == [e0]
    assert next_tasks_to_allocate(s, gang) == [g0, g0 + 1, g0 + 2]
    cp = s.checkpoint()
    s.place(e0, 0)
    assert next_tasks_to_allocate(s, el) == [e0 + 1]
    s.place(g0, 0)
    assert next_tasks_to_allocate(s, gang) == [g0 + 1, g0 + 2]
    s.rollback(cp)
    assert next_tasks_to_allocate(s, el) == [e0]
    assert next_tasks_to_allocate(s, gang) == [g0, g0 + 1, g0 + 2]
    got = next_tasks_to_allocate(s, gang)
    got.append(99)  # (the caller's own list)
    assert next_tasks_to_allocate(s, gang) == [g0, g0 + 1, g0 + 2]


def test_next_tasks_without_task_priorities_skip_the_sort():
    """A job none of whose tasks has a task priority takes its pending tasks in input order without
    sorting them (``_job_has_task_priority``); one with a priority is sorted (higher first)."""
    s = _state([{"name": "q"}], [
        {"name": "plain", "queue": "q", "minAvailable": 2, "tasks": [{"gpu": 1}, {"gpu": 1}, {"gpu": 1}]},
        {"name": "prio", "queue": "q", "minAvailable": 2,
         "tasks": [{"gpu": 1}, {"gpu": 1, "priority": 5}, {"gpu": 1, "priority": 9}]},
    ])
    from scheduler_engine.ordering import _job_has_task_priority
    assert _job_has_task_priority(s) == [False, True]
    plain, prio = s.jobs.index["plain"], s.jobs.index["prio"]
    st = int(s.job_start[prio])
    assert next_tasks_to_allocate(s, plain) == [int(s.job_start[plain]), int(s.job_start[plain]) + 1]
    assert next_tasks_to_allocate(s, prio) == [st + 2, st + 1]


@pytest.mark.parametrize("shape", ["mixed", "one-gpu"])
def test_leaf_rekey_through_entry_points_keeps_the_request_rows_exact(monkeypatch, shape):
    """``JobQueue.refresh`` in the key-kernel mode re-keys through one entry point per leaf
    (``JobQueue._rekey``) and rewrites a leaf's request row only when it changes: after every refresh
    of whole cycles each live leaf's row holds, bit for bit, the request of its best job, the entry
    points are used (when compiled), and the queue pops what it pops with every row rewritten and
    every re-key through the dispatcher. On a mixed cluster, writing each row only once leaves stale
    rows."""
    from scheduler_engine import bench, ordering
    from scheduler_engine.kernels import JIT_ENABLED

    snap = bench.generate(nodes=40, jobs=300, queues=12, seed=4, shape=shape)
    real_refresh = ordering.JobQueue.refresh
    bad, queues = [], []

    def checked(self, leaf):
        real_refresh(self, leaf)
        if self._k is None:
            return
        queues.append(self)
        live, req = self._k[7], self._k[8]
        for q in self._leafq:
            h = self.heaps[q]
            if bool(live[q]) != bool(h):
                bad.append(("live", q))
            elif h and req[q].tobytes() != np.asarray(self._request(h[0][1]), dtype=np.float64).tobytes():
                bad.append(("req", q))

    with monkeypatch.context() as m:
        m.setattr(ordering.JobQueue, "refresh", checked)
        kept = _whole_cycle(snap)
    assert not bad and queues
    if JIT_ENABLED:
        assert sum(e[0].calls for jq in set(queues) for e in jq._rk.values()) > 100

    def every_write(self, leaf, r):
        self._k[8][leaf] = r

    def dispatcher(self, leaf):
        path, kid_ptr, kids, stat, tot, prio, tb, live, req, key, vrep = self._k
        return ordering.victim_keys.rekey_path(self.victim, leaf, path, kid_ptr, kids, stat, tot, prio, tb,
                                               self._alloc, live, req, key, vrep, False)

    with monkeypatch.context() as m:
        m.setattr(ordering.JobQueue, "_set_req", every_write)
        m.setattr(ordering.JobQueue, "_rekey", dispatcher)
        assert _whole_cycle(snap) == kept

    if shape == "one-gpu":  # (every job asks the same: after its first write no row changes)
        return

    def no_write(self, leaf, r):
        if self._lreq[leaf] is None:  # (the first write of each row only)
            self._k[8][leaf] = r
        self._lreq[leaf] = r

    bad.clear()
    with monkeypatch.context() as m:
        m.setattr(ordering.JobQueue, "_set_req", no_write)
        m.setattr(ordering.JobQueue, "refresh", checked)
        _whole_cycle(snap)
    assert bad


@pytest.mark.parametrize("shape", ["mixed", "one-gpu"])
def test_pop_after_refreshes_the_deferred_leaf_first(shape):
    """``pop(refresh=False)`` then ``pop(after=leaf)`` (and ``push(j, refresh=False)``) pops what
    ``pop(refresh=False)`` + ``refresh(leaf)`` / ``push(j)`` + ``pop`` pop, with the state changing
    between pops (placements on the popped job's leaf and jobs pushed back); a pop that ignores
    ``after`` pops another order."""
    from scheduler_engine.bench import generate

    s = CycleState(generate(nodes=40, jobs=400, queues=12, seed=6, shape=shape))
    pending = [j for j in range(s.J) if s.job_pending_tasks(j)]

    def run(deferred: bool, ignore_after: bool = False) -> list[int]:
        st = CycleState(s.snap)
        jq = JobQueue(st, pending)
        out, after, pushed = [], -1, set()
        while True:
            if deferred:
                j = jq.pop(refresh=False, after=-1 if ignore_after else after)
            else:
                j = jq.pop(refresh=False)
            if j is None:
                return out
            out.append(j)
            leaf = int(st.job_queue_arr[j])
            t = int(st.job_start[j])
            idle, _ = st.fit_masks(t)
            if st.task_state[t] == 0 and idle.any() and len(out) % 3:
                st.place(t, int(np.flatnonzero(idle)[-1]))
            if j not in pushed and st.job_pending_tasks(j) and len(out) % 5 == 0:
                pushed.add(j)
                if deferred:
                    jq.push(j, refresh=False)
                    after = leaf
                else:
                    jq.push(j)
                continue
            if deferred:
                after = leaf
            else:
                jq.refresh(leaf)

    plain = run(False)
    assert len(plain) > len(pending) and run(True) == plain
    try:
        wrong = run(True, ignore_after=True)
    except IndexError:  # (its stale order may even point at a leaf it emptied)
        wrong = None
    assert wrong != plain


@pytest.mark.parametrize("shape,features", [("mixed", {}), ("one-gpu", {}), ("mixed", {"sub_groups": 0.2})])
def test_refresh_keeps_the_next_leaf_only_when_a_rekey_would(monkeypatch, shape, features):
    """``JobQueue.refresh`` (key-kernel mode) skips the re-key of the leaf it re-keyed last when nothing a
    re-key reads was written since (no request row or live flag, no allocation on the path: its top-level
    queue's ``queue_version``). At every such skip of whole cycles a re-key made anyway writes the same keys
    and representatives and returns the same next leaf (``check_skips``; more than 50 skips per cycle); the
    cycles decide as without skips. Keeping the next leaf when only the allocations changed
    (a placement of allocate) fails the check."""
    from scheduler_engine import bench, ordering

    snap = bench.with_features(bench.generate(nodes=60, jobs=500, queues=16, seed=3, shape=shape), seed=3,
                               **features)
    monkeypatch.setattr(ordering.JobQueue, "check_skips", True)
    real = ordering.JobQueue._check_skip
    seen = []

    def counted(self, leaf):
        real(self, leaf)
        seen.append(self.victim)

    monkeypatch.setattr(ordering.JobQueue, "_check_skip", counted)
    kept = _whole_cycle(snap)
    assert len(seen) > 50

    real_refresh = ordering.JobQueue.refresh

    def never_skip(self, leaf):
        self._last = -1
        real_refresh(self, leaf)

    with monkeypatch.context() as m:
        m.setattr(ordering.JobQueue, "refresh", never_skip)
        assert _whole_cycle(snap) == kept

    class NoVersion:  # the path's version read as always the same
        def __getitem__(self, q):
            return 0

    def versionless(self, leaf):
        self._qv = NoVersion()
        real_refresh(self, leaf)

    with monkeypatch.context() as m:
        m.setattr(ordering.JobQueue, "refresh", versionless)
        with pytest.raises(AssertionError):
            _whole_cycle(snap)
