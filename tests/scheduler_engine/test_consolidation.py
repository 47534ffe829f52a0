"""The consolidation action (spec i): move running preemptible tasks, never lose one."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_engine.snapshot import TaskState
from tests.scheduler_engine.test_reclaim import (assert_no_overcommit, events_of, job, node, pending,
                                                 queue, run, running, scenario, status)

QS = [queue("top", age=2), queue("q0", "top", gpu=(2, 0, -1), age=1)]


def _split_cluster(**config):
    jobs = [job("a", "q0", [running("a-0", "n0")], age=3),
            job("b", "q0", [running("b-0", "n1")], age=2),
            job("p", "q0", [pending("p-0", gpu=2)], age=1)]
    return scenario([node("n0", 2), node("n1", 2)], QS, jobs, ["consolidation"], **config)


def test_moves_a_task_to_make_room_and_explains_it():
    s = run(_split_cluster())
    assert status(s, "a-0") == ("Running", "n0")
    assert status(s, "b-0") == ("Pipelined", "n0")
    assert status(s, "p-0") == ("Pipelined", "n1")
    (ev,) = events_of(s, "b", "Consolidated")
    assert ev["victimOf"] == "p" and "moved from node n1 to node n0" in ev["message"]
    # the old node shows the moved task's GPU as releasing, the new one holds it
    gi = s.node_releasing_gpus()
    assert gi[s.nodes.index["n1"]] == 0.0  # p took what b releases
    assert_no_overcommit(s)


def test_disabled_when_placement_is_spread():
    s = run(_split_cluster(placement={"gpu": "spread", "cpu": "binpack"}))
    assert status(s, "b-0") == ("Running", "n1") and status(s, "p-0")[0] == "Pending"
    assert not s.events


def test_non_preemptible_jobs_are_never_moved():
    sc = _split_cluster()
    for j in sc["jobs"][:2]:
        j.update(priority=100, preemptible=False)
    s = run(sc)
    assert status(s, "a-0") == ("Running", "n0") and status(s, "b-0") == ("Running", "n1")
    assert status(s, "p-0")[0] == "Pending"


def test_non_preemptible_pending_job_does_not_consolidate():
    sc = _split_cluster()
    sc["jobs"][2].update(priority=100, preemptible=False)
    s = run(sc)
    assert status(s, "b-0") == ("Running", "n1") and status(s, "p-0")[0] == "Pending"


def test_no_move_when_a_moved_task_would_not_fit_anywhere():
    # evicting b frees n1 for p, but b (2 GPUs) then fits nowhere: consolidation must not do it
    jobs = [job("a", "q0", [running("a-0", "n0", gpu=2)], age=3),
            job("b", "q0", [running("b-0", "n1", gpu=2)], age=2),
            job("p", "q0", [pending("p-0", gpu=2)], age=5)]  # older: placed before the victims
    s = run(scenario([node("n0", 3), node("n1", 3)], QS, jobs, ["consolidation"]))
    assert status(s, "a-0") == ("Running", "n0") and status(s, "b-0") == ("Running", "n1")
    assert status(s, "p-0")[0] == "Pending"
    assert not s.events


def test_not_tried_without_enough_free_gpus_in_the_cluster():
    jobs = [job("a", "q0", [running("a-0", "n0")], age=3), job("b", "q0", [running("b-0", "n1")], age=2),
            job("p", "q0", [pending("p-0", gpu=3)], age=1)]
    s = run(scenario([node("n0", 2), node("n1", 2)], QS, jobs, ["consolidation"]))
    assert status(s, "p-0")[0] == "Pending" and status(s, "b-0") == ("Running", "n1")


@st.composite
def fragmented(draw):
    n_nodes = draw(st.integers(2, 4))
    nodes = [node(f"n{i}", draw(st.integers(1, 4))) for i in range(n_nodes)]
    jobs = []
    k = 0
    for nd in nodes:
        free = nd["gpus"]
        while free > 0 and draw(st.booleans()):
            g = draw(st.sampled_from([1, 1, 2, 0.5]))
            if g > free:
                break
            jobs.append(job(f"r{k}", "q0", [running(f"r{k}-0", nd["name"], gpu=g)], age=30 - k,
                            priority=draw(st.sampled_from([50, 75, 100]))))
            free -= 1 if g == 0.5 else g
            k += 1
    for i in range(draw(st.integers(1, 3))):
        size = draw(st.integers(1, 2))
        jobs.append(job(f"p{i}", "q0", [pending(f"p{i}-{t}", gpu=draw(st.sampled_from([1, 2, 3]))) for t in range(size)],
                        age=draw(st.integers(1, 40)) + 0.5 * i))  # older or newer than the running jobs
    return scenario(nodes, QS, jobs, ["consolidation"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fragmented())
def test_property_consolidation_never_loses_a_task(sc):
    before = {t["name"]: (t["state"], t.get("node")) for j in sc["jobs"] for t in j["tasks"]}
    s = run(sc)
    assert_no_overcommit(s)
    for name, (state, nd) in before.items():
        got, where = status(s, name)
        if state == "Running":
            # a running task is either untouched or moved (Pipelined elsewhere): never evicted
            assert got in ("Running", "Pipelined"), (name, got)
            if got == "Running":
                assert where == nd
            else:
                assert events_of(s, name.rsplit("-", 1)[0], "Consolidated")
        else:
            # Binding: the solution placed it wholly on free resources (nothing to wait for, issue #18)
            assert got in ("Pending", "Pipelined", "Binding"), (name, got)
    moved_for = {e["victimOf"] for e in s.events if e["reason"] == "Consolidated" and "victimOf" in e}
    for b in moved_for:  # every move served a job that was placed in full: pipelined, or bound
        j = s.jobs.index[b]
        placed = [int(s.task_state[t]) for t in s.job_task_range(j)]
        assert not s.job_pending_tasks(j)
        assert len(set(placed)) == 1 and placed[0] in (int(TaskState.PIPELINED), int(TaskState.BINDING))
        if placed[0] == int(TaskState.BINDING):
            assert not any(s.takes_releasing(t) for t in s.job_task_range(j))
        else:
            assert any(s.takes_releasing(t) for t in s.job_task_range(j))


# ---------------------------------------------------------------- maxConsolidationPreemptees
def _two_moves_cluster(**config):
    """p needs a whole 4-GPU node: consolidation must move both 1-GPU jobs of n0 (two victim
    jobs) onto n1; the victim order tries the newest (b) first, then a."""
    jobs = [job("a", "q0", [running("a-0", "n0")], age=4),
            job("b", "q0", [running("b-0", "n0")], age=3),
            job("c", "q0", [running("c-0", "n1")], age=6),
            job("d", "q0", [running("d-0", "n1")], age=5),
            job("p", "q0", [pending("p-0", gpu=4)], age=1)]
    qs = [queue("top", age=2), queue("q0", "top", gpu=(8, 0, -1), age=1)]
    return scenario([node("n0", 4), node("n1", 4)], qs, jobs, ["consolidation"], **config)


def test_default_budget_is_kai_s_sixteen_victim_jobs():
    from scheduler_engine.loader import load_dict

    assert load_dict(_two_moves_cluster()).config.max_consolidation_preemptees == 16
    s = run(_two_moves_cluster())
    assert status(s, "p-0") == ("Pipelined", "n0")
    assert status(s, "a-0") == ("Pipelined", "n1") and status(s, "b-0") == ("Pipelined", "n1")


def test_a_budget_of_one_victim_job_cannot_make_a_two_move_consolidation():
    s = run(_two_moves_cluster(maxConsolidationPreemptees=1))
    assert status(s, "p-0")[0] == "Pending"
    assert status(s, "a-0") == ("Running", "n0") and status(s, "b-0") == ("Running", "n0")
    s = run(_two_moves_cluster(maxConsolidationPreemptees=2))
    assert status(s, "p-0") == ("Pipelined", "n0")


def test_budget_minus_one_is_unlimited_and_zero_turns_consolidation_off():
    s = run(_two_moves_cluster(maxConsolidationPreemptees=-1))
    assert status(s, "p-0") == ("Pipelined", "n0")
    s = run(_two_moves_cluster(maxConsolidationPreemptees=0))
    assert status(s, "p-0")[0] == "Pending" and not s.events


def test_bad_budgets_are_refused_naming_the_field():
    import pytest

    from scheduler_engine.loader import ScenarioError, load_dict

    for bad in (-2, 1.5, "many", True, 10**9):
        with pytest.raises(ScenarioError) as exc:
            load_dict(_two_moves_cluster(maxConsolidationPreemptees=bad))
        assert "config.maxConsolidationPreemptees" in str(exc.value)


def test_budget_survives_export_and_reload():
    from scheduler_engine.loader import load_dict, snapshot_to_dict

    snap = load_dict(_two_moves_cluster(maxConsolidationPreemptees=3))
    again = load_dict(snapshot_to_dict(snap))
    assert again.config.max_consolidation_preemptees == 3


def test_the_job_loop_runs_with_the_cyclic_collector_paused_and_restores_it(monkeypatch):
    """Consolidation's searches run with the cyclic collector off (as reclaim's and preempt's job
    loop): at 10,000 nodes it ran two full collections there for nothing. After the action the
    collector is as it was, on or off (a long-lived worker runs every later phase with it)."""
    import gc

    from scheduler_engine.actions import consolidation

    seen: list[bool] = []
    solve = consolidation.VictimSolver.solve

    def watched(self, j, tasks):
        seen.append(gc.isenabled())
        return solve(self, j, tasks)

    monkeypatch.setattr(consolidation.VictimSolver, "solve", watched)
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            seen.clear()
            s = run(_split_cluster())
            assert status(s, "p-0") == ("Pipelined", "n1")  # (the loop ran and solved)
            assert seen and not any(seen)
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


import pytest  # noqa: E402


@pytest.mark.parametrize("shape,features", [("mixed", {}), ("one-gpu", {}), ("mixed", {"sub_groups": 0.3})])
def test_jobs_tried_are_the_ready_preemptible_leaf_jobs_asked_one_by_one(monkeypatch, shape, features):
    """The jobs consolidation tries (the preemptible ones of ``pending_ready_jobs``, one pass over
    the tasks) are those a per-job test finds (leaf queue, preemptible, a pending task, ready), in
    the same order, after allocate changed task states."""
    from scheduler_engine import bench
    from scheduler_engine.actions import consolidation, get_action
    from scheduler_engine.actions.common import job_ready
    from scheduler_engine.state import CycleState
    snap = bench.generate(nodes=40, jobs=300, queues=12, seed=4, shape=shape)
    if features:
        snap = bench.with_features(snap, seed=4, **features)
    st = CycleState(snap)
    get_action("allocate")(st)
    want = [j for j in range(st.J) if st.queue_is_leaf[st.job_queue(j)] and st.job_is_preemptible(j)
            and st.job_pending_tasks(j) and job_ready(st, j)]
    got = []
    monkeypatch.setattr(consolidation.Consolidation, "_loop", lambda self, jobs: got.extend(jobs))
    consolidation.Consolidation(st).run()
    assert got == want and want


def _ends(monkeypatch):
    """Count the loop's early ends (``Consolidation._tail_budget`` calls) and the jobs they spared."""
    from scheduler_engine.actions import consolidation
    real = consolidation.Consolidation._tail_budget
    ends = []

    def counted(self, jq, jobs, popped):
        ends.append(sum(len(h) for h in jq.heaps))
        return real(self, jq, jobs, popped)

    monkeypatch.setattr(consolidation.Consolidation, "_tail_budget", counted)
    return ends


@pytest.mark.parametrize("shape,seed,run", [("mixed", 3, 4), ("one-gpu", 2, 4), ("mixed", 7, 64)])
def test_loop_ending_once_every_job_left_is_passed_over_decides_as_popping_them_all(monkeypatch, shape, seed, run):
    """The job loop ends once every job left would be passed over (no next tasks, or blocked by a
    failed job of its signature; ``Consolidation._rest_inert``): whole cycles decide and report the
    same as when every job is popped, the early end happens and spares pops, and with budgets that
    run out all along consolidation's loop and just after it (a clock ticking once per reading) the
    cut lands where it lands when every job is popped, with the same counts (``_tail_budget`` reads
    the budget once per job it spares: leaving those readings out, or counting one job more, fails
    here)."""
    from scheduler_engine import bench
    from scheduler_engine.actions import consolidation
    import itertools
    import sys
    from scheduler_engine.cycle import run_cycle, run_cycle_with_state
    snap = bench.generate(nodes=40, jobs=400, queues=12, seed=seed, shape=shape)
    monkeypatch.setattr(consolidation, "_INERT_RUN", run)
    ends = _ends(monkeypatch)

    def cycle(flag, budget=None, clock=None):
        monkeypatch.setattr(consolidation, "END_WHEN_INERT", flag)
        if budget is None:
            return run_cycle(snap).to_json()
        return run_cycle_with_state(snap, time_budget=float(budget), clock=clock)[1].to_json()

    full = cycle(False)
    assert not ends
    assert cycle(True) == full
    assert ends and ends[0] > 0
    # which readings of the clock consolidation's loop takes (one per popped job), in an unlimited
    # cycle of every job popped; a budget of n readings runs out at reading n
    seen = []

    def logging():
        n = itertools.count()

        def clock():
            seen.append(sys._getframe(2).f_code.co_filename.endswith("consolidation.py"))
            return float(next(n))
        return clock

    cycle(False, 1e9, logging())
    mine = [i for i, c in enumerate(seen) if c]
    assert len(mine) > 2 * ends[0] // 3
    picks = sorted(set(mine[::max(1, len(mine) // 12)] + mine[-5:] + [mine[0] - 1, mine[-1] + 1, mine[-1] + 2]))
    cuts = 0
    for ticks in picks:
        off = cycle(False, ticks, logging())
        assert cycle(True, ticks, logging()) == off, ticks
        cuts += (off.get("budget") or {}).get("cutIn") == "consolidation"
    assert cuts >= 10


@pytest.mark.parametrize("sub_groups, dra_nodes, selectors", [(0.0, 0.0, False), (0.2, 0.0, True), (0.0, 0.3, False)])
def test_primed_job_entries_are_the_one_by_one_entries(sub_groups, dra_nodes, selectors):
    """``common.prime_job_entries`` makes, for jobs in any order (repeats, jobs with entries already,
    entries of an older ``job_version``), the constraint signatures and pending entries that
    ``_signature`` / ``_pending_entry`` make one job at a time on the same state: equal signatures,
    equal (version, pending count, sorted requests), and shape ids equal exactly for equal shapes
    (counting every task of a job instead of its Pending ones fails it)."""
    import dataclasses

    import numpy as np

    from scheduler_engine import bench
    from scheduler_engine.actions import common, get_action
    from scheduler_engine.state import CycleState

    snap = bench.with_features(bench.generate(nodes=40, jobs=400, queues=10, seed=5), sub_groups=sub_groups,
                               dra_nodes=dra_nodes, seed=5)
    if selectors:  # every third task asks for a zone
        sel = [({"zone": "a"} if t % 3 == 0 else {}) for t in range(len(snap.tasks.names))]
        snap = dataclasses.replace(snap, tasks=dataclasses.replace(snap.tasks, node_selector=sel))
    def state():
        st = CycleState(snap)
        for j in range(0, st.J, 2):  # (jobs partly placed: a Pending task after a Binding one)
            t = int(st.job_start[j]) + 1
            if st.job_count[j] > 2 and st.task_state[t] == TaskState.PENDING:
                idle = np.flatnonzero(st.fit_masks(t)[0])
                if idle.size:
                    st.place(t, int(idle[-1]))
        get_action("allocate")(st)
        return st

    s = state()
    rng = np.random.default_rng(3)
    jobs = rng.permutation(s.J).tolist()
    for j in jobs[:50]:
        common._signature(s, j), common._pending_entry(s, j)  # (made before, one by one)
    for j in jobs[50:60]:  # entries of an older version
        s._pending_reqs[j] = (-1,) + s._pending_reqs.get(j, (0, 0, [], -5))[1:]
    common.prime_job_entries(s, jobs + jobs[:30])
    ref = state()
    assert s.job_version.tolist() == ref.job_version.tolist()
    got = {j: s._pending_reqs[j] for j in jobs}
    want = {j: common._pending_entry(ref, j) for j in jobs}
    assert {j: e[:3] for j, e in got.items()} == {j: e[:3] for j, e in want.items()}
    assert any(0 < e[1] < int(s.job_count[j]) for j, e in got.items())  # (partly pending jobs)
    pairs = rng.integers(0, len(jobs), size=(3000, 2))
    for a, b in pairs.tolist():
        ja, jb = jobs[a], jobs[b]
        assert (got[ja][3] == got[jb][3]) == (want[ja][3] == want[jb][3])
    assert {j: s._constraint_sigs[j] for j in jobs} == {j: common._signature(ref, j) for j in jobs}
