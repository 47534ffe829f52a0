"""The job loop reclaim and preempt share (``actions.common.run_evicting``): identical jobs solve once.

Issue #8: identical pending jobs must not each rescan the cluster once one of them failed to fit.
These tests count victim solves (not time): a failure reached without simulating anything depends
only on the candidate set, the first task's shape and the cluster, so jobs of other leaves with the
same three reuse it, with the same event text as a full solve would have written.
"""
from __future__ import annotations

import numpy as np
import pytest

from scheduler_engine.actions import get_action
from scheduler_engine.actions import common
from scheduler_engine.solvers import accumulation
from scheduler_engine.solvers.job_solver import VictimSolver
from scheduler_engine.solvers.victim_order import VictimQueue
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
    real_solve, real_try = VictimSolver.solve, VictimSolver._try

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

    monkeypatch.setattr(VictimSolver, "solve", solve)
    monkeypatch.setattr(VictimSolver, "_try", try_)
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


# ---------------------------------------------------------------- pruning inside one solve
def _record_scenarios(monkeypatch):
    """Patch the solver to log every scenario: (solve no., prefix no., recorded victims, victims,
    accepted, victims re-placed before the beneficiary, queue the validator refused to take from).
    Every scenario through ``VictimSolver._try``: the compiled victim search, which simulates and prunes
    failed scenarios without it, is off (``test_kernels_search`` compares the two search by search)."""
    monkeypatch.setattr(accumulation, "USE_SEARCH_KERNEL", False)
    log: list[tuple] = []
    cur = {"solve": 0, "prefix": 0, "recorded": ()}
    real_solve, real_partial, real_try = (VictimSolver.solve, VictimSolver._solve_partial,
                                          VictimSolver._try)

    def solve(self, j, tasks):
        cur["solve"] += 1
        return real_solve(self, j, tasks)

    def partial(self, j, part, recorded):
        cur["prefix"] += 1
        cur["recorded"] = tuple(recorded)
        return real_partial(self, j, part, recorded)

    def try_(self, j, part, vs, arr=None):
        self._served_first, self._blocked_fail = [], -1
        res = real_try(self, j, part, vs, arr)
        log.append((cur["solve"], cur["prefix"], cur["recorded"], list(vs), res is not None,
                    list(self._served_first), self._blocked_fail))
        return res

    real_pop = VictimQueue.pop

    def pop(self):
        out = real_pop(self)
        if out is not None:
            log.append(("pop", cur["prefix"], out[0]))
        return out

    monkeypatch.setattr(VictimQueue, "pop", pop)
    monkeypatch.setattr(VictimSolver, "solve", solve)
    monkeypatch.setattr(VictimSolver, "_solve_partial", partial)
    monkeypatch.setattr(VictimSolver, "_try", try_)
    return log


@pytest.mark.parametrize("seed,shape", [(1, "one-gpu"), (2, "one-gpu"), (3, "mixed"), (4, "mixed")])
def test_victims_served_before_the_beneficiary_are_not_accumulated_again(monkeypatch, seed, shape):
    """After a failed scenario, a victim the re-placement served before the beneficiary (it took
    room back) is in no later scenario of the same prefix (unless recorded from the previous
    prefix), nor is any victim of its leaf popped afterwards; after a validator refusal, no victim
    under the queue it refused to take from is popped afterwards, and the earlier ones are dropped."""
    from scheduler_engine import bench

    snap = bench.generate(nodes=40, jobs=320, queues=30, seed=seed, shape=shape)
    state = CycleState(snap)
    get_action("allocate")(state)
    log = _record_scenarios(monkeypatch)
    get_action("reclaim")(state)
    monkeypatch.undo()
    s = state
    leaf_of = lambda t: int(s.job_queue_arr[int(s.task_job[t])])  # noqa: E731
    checked = 0
    for i, entry in enumerate(log):
        if entry[0] == "pop":
            continue
        solve, prefix, recorded, vs, ok, kept, blocked = entry
        kept = [t for t in kept if t not in recorded]
        if ok or (not kept and blocked < 0):
            continue
        popped_after: set[int] = set()  # victim jobs popped after this scenario
        for e in log[i + 1:]:
            if e[1] != prefix:
                continue
            if e[0] == "pop":
                popped_after.add(e[2])
                continue
            later = set(e[3]) - set(recorded)
            assert not later & set(kept)
            fresh = {t for t in later if int(s.task_job[t]) in popped_after}
            assert not {leaf_of(t) for t in fresh} & {leaf_of(t) for t in kept}
            if blocked >= 0:
                assert all(blocked not in s.queue_path_list[leaf_of(t)] for t in later)
            checked += 1
    assert checked > 0


def _beneficiaries(state) -> set[str]:
    return {e["job"] for e in state.events if e["reason"] == "Reclaimed" and "victimOf" not in e}


def test_pruning_keeps_the_reclaims_and_simulates_far_fewer_victims(monkeypatch):
    """The 100-node / 800-job one-GPU bench cluster: as many jobs reclaim as without pruning, while
    the victims simulated (summed over scenarios) no longer grow quadratically with the solve."""
    from scheduler_engine import bench

    def run(prune: bool):
        state = CycleState(bench.generate(nodes=100, jobs=800, queues=100, seed=1, shape="one-gpu"))
        get_action("allocate")(state)
        real_init = VictimSolver.__init__

        def init(self, *a, **kw):
            real_init(self, *a, **kw)
            self.prune = prune and self.prune

        monkeypatch.setattr(VictimSolver, "__init__", init)
        log = _record_scenarios(monkeypatch)
        get_action("reclaim")(state)
        monkeypatch.undo()
        return len(_beneficiaries(state)), sum(len(e[3]) for e in log if e[0] != "pop")

    n_old, sim_old = run(False)
    n_new, sim_new = run(True)
    assert n_new >= n_old > 50
    assert sim_new * 3 < sim_old


# ---------------------------------------------------------------- search budget
def _budget_cluster(**config) -> dict:
    """One 4-GPU job of a leaf deserving 4 GPUs; two 4-GPU nodes held by 1-GPU jobs of a zero-quota
    queue: a solution needs the four victims of one node, found after at least four victims."""
    doc = _cluster(1, 1, gpus=(4,))
    doc["nodes"] = doc["nodes"][:2]
    doc["jobs"] = [j for j in doc["jobs"] if not j["name"].startswith("hog-") or j["tasks"][0]["node"] in ("n0", "n1")]
    doc["config"].update(config)
    return doc


def test_a_job_whose_search_exceeds_the_budget_is_given_up_with_a_reason():
    from scheduler_engine.loader import load_dict as load

    assert load(_budget_cluster()).config.scenario_search_budget == 5000
    s = CycleState(load_dict(_budget_cluster(scenarioSearchBudget=3)))
    get_action("reclaim")(s)
    (ev,) = [e for e in s.events if e["job"] == "p0-0"]
    assert ev["reason"] == "NotReclaiming"
    assert "search budget exhausted" in ev["message"] and "scenarioSearchBudget 3" in ev["message"]
    for budget in (-1, 5000):
        s = CycleState(load_dict(_budget_cluster(scenarioSearchBudget=budget)))
        get_action("reclaim")(s)
        assert [e for e in s.events if e["job"] == "p0-0"][-1]["reason"] == "Reclaimed"


def test_bad_search_budgets_are_refused_naming_the_field():
    from scheduler_engine.loader import ScenarioError

    for bad in (-2, 2.5, "x", False, 10**9):
        with pytest.raises(ScenarioError) as exc:
            load_dict(_budget_cluster(scenarioSearchBudget=bad))
        assert "config.scenarioSearchBudget" in str(exc.value)


@pytest.mark.parametrize("shape,seed", [("one-gpu", 1), ("mixed", 2), ("mixed", 5)])
def test_path_refresh_after_a_commit_orders_jobs_like_a_full_refresh(monkeypatch, shape, seed):
    """After a commit only the beneficiary's and the victims' queue paths are re-ordered; the jobs
    then come in the same order as with every queue re-ordered (same decisions and events)."""
    from scheduler_engine import bench
    from scheduler_engine.ordering import JobQueue

    snap = bench.generate(nodes=40, jobs=300, queues=30, seed=seed, shape=shape)

    def cycle():
        state = CycleState(snap)
        for a in ("allocate", "reclaim", "preempt"):
            get_action(a)(state)
        return state

    fast = cycle()

    class FullRefresh(JobQueue):
        def refresh(self, leaf):
            self.refresh_all()

    monkeypatch.setattr(common, "JobQueue", FullRefresh)
    full = cycle()
    assert fast.events == full.events
    assert (fast.task_state == full.task_state).all() and (fast.task_node == full.task_node).all()
    assert any(e["reason"] in ("Reclaimed", "Preempted") for e in fast.events)


# ----------------------------------------------------------------------------- per-cluster-state caches
def _bench_cycle(snap) -> tuple:
    from scheduler_engine import bench  # noqa: F401  (snapshots come from bench.generate)
    st = CycleState(snap)
    for a in ["allocate", "consolidation", "reclaim", "preempt", "stalegangeviction"]:
        get_action(a)(st)
    return st.task_state.tolist(), st.task_node.tolist(), [repr(e) for e in st.events]


_CACHE_CLUSTERS = [(60, 400, 20, "one-gpu", 2), (80, 600, 30, "mixed", 5), (40, 300, 10, "mixed", 9)]


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed", _CACHE_CLUSTERS)
def test_gate_verdicts_kept_until_a_commit_decide_as_fresh_gates(monkeypatch, nodes, jobs, queues, shape, seed):
    """Reclaim keeps the gate's verdict per (leaf, request, preemptible) until the next commit (the
    gate reads the leaf's queue row, which only a commit changes): the cycle decides as with a gate
    computed for every job, the kept verdicts are used, and keeping them across a commit is wrong."""
    from scheduler_engine import bench
    from scheduler_engine.actions import reclaim
    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    real_gate = reclaim.Reclaim.gate
    hits = []

    def counting(self, j, tasks, leaf):
        n0 = len(self._gates)
        out = real_gate(self, j, tasks, leaf)
        hits.append(len(self._gates) == n0)
        return out

    def fresh(self, j, tasks, leaf):
        self._gates = {}
        return real_gate(self, j, tasks, leaf)

    with monkeypatch.context() as m:
        m.setattr(reclaim.Reclaim, "gate", counting)
        kept = _bench_cycle(snap)
    with monkeypatch.context() as m:
        m.setattr(reclaim.Reclaim, "gate", fresh)
        assert _bench_cycle(snap) == kept
    assert sum(hits) > 0
    if shape == "one-gpu":  # (many commits in the reclaimers' own leaves)
        real_committed = reclaim.Reclaim.committed

        def stale(self):
            gates = self._gates
            real_committed(self)
            self._gates = gates

        with monkeypatch.context() as m:
            m.setattr(reclaim.Reclaim, "committed", stale)
            assert _bench_cycle(snap) != kept


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed", _CACHE_CLUSTERS)
def test_signature_checks_read_kept_signatures_and_requests_as_fresh_ones(monkeypatch, nodes, jobs, queues, shape,
                                                                          seed):
    """The scheduling-signature checks (:class:`common.FailedShapes`) read each job's constraint
    signature once per cycle and its pending requests once per ``job_version``: the cycle decides as
    with both computed afresh at every check, and ignoring the version (a job's pending tasks change
    when it is placed or evicted) decides differently."""
    from scheduler_engine import bench
    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    kept = _bench_cycle(snap)

    def fresh_entry(state, j):
        p = state.job_pending_tasks(j)
        reqs = sorted(tuple(float(x) for x in state.task_order_req[t]) for t in p)  # (the old expression)
        return -1, len(p), reqs, None

    with monkeypatch.context() as m:
        m.setattr(common, "_signature", common._constraint_signature)
        m.setattr(common, "_pending_entry", fresh_entry)
        m.setattr(common, "MEMO_SHAPES", False)
        assert _bench_cycle(snap) == kept


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed", _CACHE_CLUSTERS)
def test_shape_comparisons_memoised_per_shape_ids_are_the_comparisons(monkeypatch, nodes, jobs, queues, shape, seed):
    """:class:`common.FailedShapes` memoises its two comparisons per pair of shape ids (equal exactly
    for equal pending shapes, :func:`common._pending_entry`): at every check of whole cycles the
    memoised answer is the comparison of the two jobs' pending shapes computed afresh, and memoised
    answers are used. On mixed clusters a memo keyed by the pending count alone (the requests left
    out of the key) answers otherwise."""
    from scheduler_engine import bench
    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    kept = _bench_cycle(snap)
    real_easier, real_smaller, real_entry = common.FailedShapes._easier, common.FailedShapes._smaller, \
        common._pending_entry
    calls, bad = [], []

    def fresh(state, j):
        p = state.job_pending_tasks(j)
        return len(p), sorted(tuple(float(x) for x in state.task_order_req[t]) for t in p)

    def check(real, plain):
        def checked(self, j, other):
            n = len(self._memo_easier) + len(self._memo_smaller)
            out = real(self, j, other)
            calls.append(len(self._memo_easier) + len(self._memo_smaller) == n)  # (answered from the memo)
            if out != plain(*fresh(self.state, j), *fresh(self.state, other)):
                bad.append((j, other))
            return out
        return checked

    with monkeypatch.context() as m:
        m.setattr(common.FailedShapes, "_easier", check(real_easier, common._easier_shape))
        m.setattr(common.FailedShapes, "_smaller", check(real_smaller, common._smaller_shape))
        assert _bench_cycle(snap) == kept
    assert not bad and sum(calls) > len(calls) // 2
    if shape == "one-gpu":  # (every pending shape is one task of one request: any memo answers right)
        return

    def by_count(state, j):  # a key that leaves the requests out
        e = real_entry(state, j)
        return e[:3] + (("count", e[1]),)

    with monkeypatch.context() as m:
        m.setattr(common.FailedShapes, "_easier", check(real_easier, common._easier_shape))
        m.setattr(common.FailedShapes, "_smaller", check(real_smaller, common._smaller_shape))
        m.setattr(common, "_pending_entry", by_count)
        _bench_cycle(snap)
    assert bad


def test_sorted_requests_are_the_float_tuples_of_each_row():
    """``_sorted_requests`` (one gather and ``tolist``) gives the tuples of Python floats that
    ``float()`` of each element gives, sorted; an empty task list gives an empty list."""
    from scheduler_engine import bench
    st = CycleState(bench.generate(nodes=20, jobs=200, queues=5, seed=3, shape="mixed"))
    for j in range(st.J):
        ts = list(st.job_task_range(j))
        want = sorted(tuple(float(x) for x in st.task_order_req[t]) for t in ts)
        got = common._sorted_requests(st, ts)
        assert got == want and all(type(x) is float for r in got for x in r)
    assert common._sorted_requests(st, []) == []


@pytest.mark.parametrize("shape,features", [("mixed", {}), ("one-gpu", {}), ("mixed", {"sub_groups": 0.3})])
def test_pending_ready_jobs_are_the_jobs_the_loop_tried_one_by_one(shape, features):
    """The jobs reclaim and preempt try (``common.pending_ready_jobs``: one pass over the tasks) are
    the leaf jobs with a pending task that are ready, asked job by job, also after allocate and
    consolidation changed task states (elastic jobs partly running, subgroup jobs)."""
    from scheduler_engine import bench
    snap = bench.generate(nodes=40, jobs=300, queues=12, seed=4, shape=shape)
    if features:
        snap = bench.with_features(snap, seed=4, **features)
    st = CycleState(snap)
    for a in [None, "allocate", "consolidation", "reclaim"]:
        if a:
            get_action(a)(st)
        want = [j for j in range(st.J) if st.queue_is_leaf[st.job_queue(j)] and st.job_pending_tasks(j)
                and common.job_ready(st, j)]
        assert common.pending_ready_jobs(st) == want
        assert want


def test_pending_ready_jobs_count_running_tasks_toward_min_available():
    """A gang with tasks running and one pending is ready when running + pending reach
    minAvailable (and not ready below it: a releasing task does not count); a job with nothing
    pending is not tried."""
    doc = scenario([node("n0", gpus=8)], [queue("dept"), queue("q", parent="dept")],
                   [job("g", "q", [running("g-0", "n0"), running("g-1", "n0"), pending("g-2")], minAvailable=3),
                    job("short", "q", [running("s-0", "n0"), pending("s-1"),
                                       running("s-2", "n0", state="Releasing")], minAvailable=3),
                    job("done", "q", [running("d-0", "n0")])], ["reclaim"])
    st = CycleState(load_dict(doc))
    assert [st.jobs.names[j] for j in common.pending_ready_jobs(st)] == ["g"]


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed", _CACHE_CLUSTERS)
def test_reclaim_request_kept_per_job_version_is_the_sum_of_the_tasks(monkeypatch, nodes, jobs, queues, shape, seed):
    """Reclaim keeps a job's request per ``job_version`` (``Reclaim._job_request``, read by the gate
    and the candidates): at every call of whole cycles it is bit for bit the sum of the tasks the
    loop passes (the job's next tasks), and kept values are read."""
    from scheduler_engine import bench
    from scheduler_engine.actions import reclaim
    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    real = reclaim.Reclaim._job_request
    bad, hits = [], []

    def checked(self, j, tasks):
        hits.append(j in self._reqs and self._reqs[j][0] == int(self.state.job_version[j]))
        req, rb = real(self, j, tasks)
        want = reclaim._request(self.state, tasks)
        if req.tobytes() != want.tobytes() or rb != want.tobytes():
            bad.append(j)
        return req, rb

    kept = _bench_cycle(snap)
    with monkeypatch.context() as m:
        m.setattr(reclaim.Reclaim, "_job_request", checked)
        assert _bench_cycle(snap) == kept
    assert not bad and any(hits)


def test_preemption_delay_per_job_computed_once_is_the_per_job_rule():
    """``within_preemption_delay`` reads a per-state list computed once from the jobs' static fields:
    for NaN, zero, negative and positive delays, and ages on both sides of each (the same float64
    product and comparison), it is the rule asked job by job."""
    import math
    from scheduler_engine import bench
    snap = bench.generate(nodes=10, jobs=200, queues=4, seed=1, shape="mixed")
    st = CycleState(snap)
    rng = np.random.default_rng(5)
    delay = rng.choice([math.nan, 0.0, -5.0, 30.0, 600.0, 3600.0], size=st.J)
    ago = rng.choice([0.0, 0.5, 10.0, 60.0, math.nan], size=st.J)
    ago[::7] = delay[::7] / 60.0  # exactly at the delay: not within it
    st.jobs.preemption_delay[:] = delay
    st.jobs.created_minutes_ago[:] = ago
    for j in range(st.J):
        d, a = float(delay[j]), float(ago[j])
        want = not (math.isnan(d) or d <= 0) and a * 60.0 < d
        assert common.within_preemption_delay(st, j) is want, (d, a)


def test_describe_alloc_reads_the_row_as_floats_once():
    """``describe_alloc`` (a commit's explanation of each victim task) reads the row as Python floats
    once: for float64 / float32 rows and lists, zeros, tiny and fractional amounts, the text the
    per-element reading gives."""
    from scheduler_engine.state import EPS, fmt_amount
    from scheduler_engine.snapshot import CPU, GPU, MEM

    def per_element(vec):
        parts = []
        for r, name in ((GPU, "gpu"), (CPU, "cpu"), (MEM, "memory")):
            if vec[r] > EPS:
                parts.append(f"{name}={fmt_amount.__wrapped__(r, float(vec[r]))}")
        return ", ".join(parts) or "no resources"

    rng = np.random.default_rng(3)
    rows = [np.zeros(3), np.array([1.0, 4000.0, 2.0 ** 34]), np.array([0.5, 0.0, 1e-10]), np.array([1e-9, 2e-9, 0.0])]
    rows += [rng.choice([0.0, 0.25, 1.0, 3.0, 1500.0, 123456.789, 2.0 ** 30], size=3) for _ in range(200)]
    for row in rows:
        for vec in (row, row.astype(np.float32), row.tolist()):
            assert common.describe_alloc(vec) == per_element(vec), vec
