"""The victim order (``solvers.victim_order.VictimQueue``): its heap mode pops exactly what the sibling scan pops.

Issue #8: the victim queue re-keys only the queues on the popped leaf's path in per-parent heaps
when the comparator is a strict total order (allocatable vectors of every parent's children form
a chain); otherwise it rescans siblings in children order. Both must give the same victims in the
same order, elastic remainders pushed back included, or reclaim and preempt would pick other
victims depending on how the tree happens to be shaped.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from scheduler_engine.plugins.elastic import tasks_to_evict
from scheduler_engine.solvers import victim_order
from scheduler_engine.loader import load_dict
from scheduler_engine.state import CycleState

from tests.scheduler_engine.test_reclaim import job, node, queue, running, scenario


def _random_cluster(rng: random.Random, chain: bool) -> dict:
    """A 2-3 level tree with running jobs of 1-3 tasks (some elastic) spread over its leaves.

    ``chain``: GPU quotas only (CPU unlimited), so siblings' allocatable vectors are comparable;
    otherwise some siblings trade GPU for CPU quota, which makes them incomparable.
    """
    n_nodes = rng.randint(3, 8)
    nodes = [node(f"n{i}", gpus=8, cpu=256) for i in range(n_nodes)]
    queues, leaves = [], []
    for d in range(rng.randint(1, 3)):
        queues.append(queue(f"d{d}", gpu=(rng.choice([-1, 4, 8, 16]), rng.randint(1, 3), -1), age=rng.randint(1, 50)))
        for p in range(rng.randint(1, 4)):
            name = f"d{d}p{p}"
            q = queue(name, parent=f"d{d}", gpu=(rng.choice([0, 1, 2, 4, 6]), rng.randint(1, 3), -1),
                      age=rng.randint(1, 50))
            if not chain and rng.random() < 0.5:
                q["resources"]["cpu"] = {"quota": rng.choice([2, 8, 64]), "overQuotaWeight": 1, "limit": -1}
            queues.append(q)
            leaves.append(name)
            if rng.random() < 0.3:  # one more level below some projects
                queues[-1] = q
                for k in range(rng.randint(1, 3)):
                    leaf = f"{name}l{k}"
                    queues.append(queue(leaf, parent=name, gpu=(rng.choice([0, 1, 2, 3]), rng.randint(1, 3), -1),
                                        age=rng.randint(1, 50)))
                    leaves.append(leaf)
                leaves.remove(name)
    jobs = []
    free = {f"n{i}": 8 for i in range(n_nodes)}
    for k in range(rng.randint(5, 30)):
        ntasks = rng.choice([1, 1, 1, 2, 3])
        tasks = []
        for t in range(ntasks):
            hosts = [n for n, g in free.items() if g >= 1]
            if not hosts:
                break
            h = rng.choice(hosts)
            g = rng.choice([1, 1, 2]) if free[h] >= 2 else 1
            free[h] -= g
            tasks.append(running(f"j{k}-{t}", h, gpu=g, cpu=rng.choice([1, 4, 16])))
        if not tasks:
            break
        jobs.append(job(f"j{k}", rng.choice(leaves), tasks, priority=rng.choice([10, 50, 100]),
                        age=rng.randint(1, 500), minAvailable=rng.randint(1, len(tasks))))
    return scenario(nodes, queues, jobs, ["reclaim"])


def _pops(state: CycleState, heap_mode: bool) -> list[tuple[int, tuple[int, ...]]]:
    """Pop every candidate; an elastic victim goes back with its remaining tasks (as the solver does)."""
    cands = [j for j in range(state.J) if state.job_num_active(j) > 0]
    vq = victim_order.VictimQueue(state, cands)
    if not heap_mode:
        vq._tb = None
    out = []
    while vq:
        popped = vq.pop()
        if popped is None:
            break
        vj, vtasks = popped
        out.append((vj, tuple(vtasks)))
        evict, more = tasks_to_evict(state, vtasks, int(state.job_min_available[vj]))
        if more:
            ev = set(evict)
            vq.push(vj, [t for t in vtasks if t not in ev])
        assert len(out) < 500
    return out


@pytest.mark.parametrize("seed", range(120))
def test_heap_mode_pops_what_the_scan_pops(seed):
    rng = random.Random(seed)
    state = CycleState(load_dict(_random_cluster(rng, chain=True)))
    assert victim_order._victim_tiebreaks(state) is not None
    heap = _pops(state, heap_mode=True)
    scan = _pops(state, heap_mode=False)
    assert heap == scan
    assert len({v for v, _ in heap}) == sum(1 for j in range(state.J) if state.job_num_active(j) > 0)


def test_incomparable_siblings_fall_back_to_the_scan():
    """GPU-rich/CPU-poor next to GPU-poor/CPU-rich siblings: no total order, so no heap mode."""
    rng = random.Random(7)
    for _ in range(50):
        doc = _random_cluster(rng, chain=False)
        state = CycleState(load_dict(doc))
        if victim_order._victim_tiebreaks(state) is None:
            vq = victim_order.VictimQueue(state, [j for j in range(state.J) if state.job_num_active(j) > 0])
            if len(vq._leaves()) > 1:
                vq.pop()
                assert vq._k is None  # the scan decided
                return
    pytest.fail("no generated cluster had incomparable siblings")


@pytest.mark.parametrize("queues", [12, 100, 1000])
def test_bench_trees_take_the_heap_path(queues):
    """The generated 3-level trees (quotas on GPUs only) have comparable siblings everywhere, so the
    victim order runs in heap mode: a change that made it fall back would only show as lost speed."""
    from scheduler_engine import bench

    state = CycleState(bench.generate(nodes=20, jobs=40, queues=queues, seed=1))
    assert victim_order._victim_tiebreaks(state) is not None
    vq = victim_order.VictimQueue(state, [j for j in range(state.J) if state.job_num_active(j) > 0])
    assert len(vq._leaves()) > 1
    vq.pop()
    assert vq._k is not None


# ---------------------------------------------------------------- reclaim's per-leaf runs (LeafRuns)
_CYCLE = ("allocate", "consolidation", "reclaim", "preempt")


def _cycle(snap) -> tuple:
    from scheduler_engine.actions import get_action

    st = CycleState(snap)
    for a in _CYCLE:
        get_action(a)(st)
    return st.task_state.tolist(), st.task_node.tolist(), [repr(e) for e in st.events]


def _fresh_heads(state: CycleState, jobs) -> tuple:
    """The heads rows of ``jobs`` computed into an empty cache (the state's own is left as it was)."""
    saved = getattr(state, "_victims_heads", None)
    state._victims_heads = None
    try:
        victim_order._refresh_heads(state, np.asarray(jobs, dtype=np.int64))
        return state._victims_heads
    finally:
        state._victims_heads = saved


def _runs_differ(state: CycleState, runs) -> list[str]:
    """Where the patched ``runs`` differ from runs built from scratch on ``state`` (leaf by leaf, the
    membership, and the members' heads rows against freshly computed ones)."""
    wa, glen, gt, _wv = victim_order._heads_cache(state)
    kept = (wa.copy(), glen.copy(), gt.copy())  # (before anything below refreshes the state's rows)
    saved = state._victims_heads
    state._victims_heads = None
    try:
        fresh = victim_order.LeafRuns(state)
    finally:
        state._victims_heads = saved
    out = []
    if not (fresh.member == runs.member).all():
        out.append("member")
    if not (fresh.n == runs.n).all():
        out.append("n")
    for q in range(state.Q):
        a, b = int(runs.lo[q]), int(runs.lo[q] + runs.n[q])
        if runs.cj[a:b].tolist() != fresh.cj[a:a + int(fresh.n[q])].tolist():
            out.append(f"run of queue {q}")
    members = np.flatnonzero(fresh.member)
    fwa, fglen, fgt, _ = _fresh_heads(state, members)
    if kept[0][members].tobytes() != fwa[members].tobytes() or not (kept[1][members] == fglen[members]).all():
        out.append("heads rows")
    start = state.job_start
    for j in members.tolist():
        g0 = int(start[j])
        if kept[2][g0:g0 + int(fglen[j])].tolist() != fgt[g0:g0 + int(fglen[j])].tolist():
            out.append(f"tasks to evict of job {j}")
    return out


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed", [
    (60, 400, 20, "mixed", 3),
    (80, 600, 30, "one-gpu", 2),
    (120, 900, 40, "mixed", 7),
])
def test_leaf_runs_patched_per_commit_are_the_rebuilt_ones(monkeypatch, nodes, jobs, queues, shape, seed):
    """Reclaim's per-leaf runs kept across its job loop and patched after each commit from the journal
    (``LeafRuns.sync``) are, at every sync, bit for bit the runs built from scratch on the state (each
    leaf's run, the membership) and their members' heads rows the freshly computed ones. Without the
    patch (a sync that only moves its mark), they go stale."""
    from scheduler_engine import bench

    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    real_sync = victim_order.LeafRuns.sync
    patched, bad = [], []

    def checked(self):
        grew = len(self.state._journal) > self.jlen
        real_sync(self)
        patched.append(grew)
        bad.extend(_runs_differ(self.state, self))

    with monkeypatch.context() as m:
        m.setattr(victim_order.LeafRuns, "sync", checked)
        _cycle(snap)
    assert sum(patched) >= 3  # commits patched the runs
    assert not bad

    def stale(self):
        self._mark()  # (the commits since the last sync are not read)
        bad.extend(_runs_differ(self.state, self))

    with monkeypatch.context() as m:
        m.setattr(victim_order.LeafRuns, "sync", stale)
        try:
            _cycle(snap)
        except ValueError:  # (a stale run may offer a job with nothing active left to evict)
            bad.append("a stale candidate evicted")
    assert bad


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed,features", [
    (60, 400, 20, "mixed", 3, {}),
    (80, 600, 30, "one-gpu", 2, {}),
    (50, 360, 20, "mixed", 5, {"dra_nodes": 0.3}),
])
def test_sync_reads_the_entries_tasks_from_the_numeric_journal(monkeypatch, nodes, jobs, queues, shape, seed,
                                                               features):
    """``LeafRuns.sync`` takes the tasks of the journal entries since its last sync from the numeric half
    (``_ji[:, 0]``): at every sync of whole cycles (DRA claims too) that column is each entry's
    object half's task, entry by entry. (Reclaim keeps no runs on a cluster with subgroups.)"""
    from scheduler_engine import bench

    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    if features:
        snap = bench.with_features(snap, seed=seed, **features)
    real_sync = victim_order.LeafRuns.sync
    read = []

    def checked(self):
        jo, k = self.state._journal, self.jlen
        if len(jo) > k:
            assert self.state._ji[k:len(jo), 0].tolist() == [e[0] for e in jo[k:]]
            read.append(len(jo) - k)
        real_sync(self)

    with monkeypatch.context() as m:
        m.setattr(victim_order.LeafRuns, "sync", checked)
        _cycle(snap)
    assert len(read) >= 2


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed", [
    (60, 400, 20, "mixed", 3),
    (80, 600, 30, "one-gpu", 2),
    (120, 900, 40, "mixed", 7),
])
def test_bound_from_the_leaves_is_candidate_gpu_bit_for_bit(monkeypatch, nodes, jobs, queues, shape, seed):
    """The prefix search's bound for reclaim's candidates named by their leaves, summed from the leaf
    mask and the runs' membership (``LeafRuns.bound``, no job array), is at every search - with and
    without recorded victims - bit for bit what ``candidate_gpu`` adds for their job array, and a
    cycle decides the same with it switched off."""
    from scheduler_engine import bench
    from scheduler_engine.kernels import victim_run
    from scheduler_engine.snapshot import GPU
    from scheduler_engine.solvers import accumulation

    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    real = accumulation._candidate_gpu
    seen = {"runs": 0, "runs_rec": 0, "other": 0}
    bad = []

    def checked(state, cands, out):
        ref = out.copy()
        victim_run.candidate_gpu(np.asarray(cands, dtype=np.int64), state.job_start, state.job_count, state.task_state,
                                 accumulation._ACTIVE_LUT, state.task_job, state.task_node, state.task_alloc[:, GPU],
                                 ref)
        hit = isinstance(cands, victim_order.RunCandidates) and 8 * cands.size > state.J  # (LeafRuns.bound)
        seen["other" if not hit else ("runs_rec" if out.any() else "runs")] += 1
        real(state, cands, out)
        if out.tobytes() != ref.tobytes():
            bad.append(np.flatnonzero(out != ref).tolist())

    with monkeypatch.context() as m:
        m.setattr(accumulation, "_candidate_gpu", checked)
        kept = _cycle(snap)
    assert not bad
    assert seen["runs"] >= 5 and (seen["runs_rec"] >= 1 or shape == "one-gpu"), seen  # (one-gpu: no prefix 2)
    with monkeypatch.context() as m:
        m.setattr(accumulation, "USE_RUNS_BOUND", False)
        assert _cycle(snap) == kept


@pytest.mark.parametrize("seed", range(4))
def test_leaf_task_nodes_are_the_distinct_nodes(seed):
    """``victim_bound.leaf_task_nodes`` (a new leaf mask's nodes to sum again, ``LeafRuns._near_bound``): the
    set of nodes of the leaves' member jobs' placed tasks, with the stamped nodes when asked, each once,
    its mark row clean after; past the limit it stops with a count above it."""
    from scheduler_engine.kernels import victim_bound
    rng = np.random.default_rng(seed)
    N, J, Q = 50, 40, 6
    job_count = rng.integers(1, 6, J)
    job_start = np.r_[0, np.cumsum(job_count)[:-1]].astype(np.int64)
    task_node = rng.integers(-1, N, int(job_count.sum())).astype(np.int64)
    leaf_of = rng.integers(0, Q, J)
    cj = np.argsort(leaf_of, kind="stable").astype(np.int64)
    n = np.bincount(leaf_of, minlength=Q).astype(np.int64)
    lo = (np.cumsum(n) - n).astype(np.int64)
    epoch = rng.integers(0, 4, N).astype(np.int64)
    mark, out = np.zeros(N, dtype=np.bool_), np.empty(N, dtype=np.int64)
    for leaves in ([0], [1, 3], list(range(Q))):
        lv = np.asarray(leaves, dtype=np.int64)
        jobs = [int(j) for q in leaves for j in cj[lo[q]:lo[q] + n[q]]]
        tasks = [t for j in jobs for t in range(job_start[j], job_start[j] + job_count[j])]
        for stamped in (False, True):
            want = {int(task_node[t]) for t in tasks if task_node[t] >= 0}
            if stamped:
                want |= set(np.flatnonzero(epoch > 2).tolist())
            m = victim_bound.leaf_task_nodes(lv, cj, lo, n, job_start, job_count, task_node, stamped, epoch, 2, N,
                                             mark, out)
            assert sorted(out[:m].tolist()) == sorted(want) and m == len(want) and not mark.any()
            if len(want) > 3:
                m = victim_bound.leaf_task_nodes(lv, cj, lo, n, job_start, job_count, task_node, stamped, epoch, 2, 2,
                                                 mark, out)
                assert m > 2 and not mark.any()


def _task_lists_differ(state: CycleState, runs) -> list[int]:
    """The nodes whose task list in ``runs`` (``t_head`` / ``t_next``) is not every task on the node,
    ascending (and tasks whose ``t_where`` is not their node)."""
    bad = [int(t) for t in np.flatnonzero(runs.t_where != state.task_node)]
    for n in range(state.N):
        walk, t = [], int(runs.t_head[n])
        while t >= 0 and len(walk) <= state.T:
            walk.append(t)
            t = int(runs.t_next[t])
        if walk != np.flatnonzero(state.task_node == n).tolist():
            bad.append(n)
    return bad


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed", [
    (60, 400, 20, "mixed", 3),
    (80, 600, 30, "one-gpu", 2),
    (120, 900, 40, "mixed", 7),
])
def test_bound_kept_across_commits_is_the_full_pass(monkeypatch, nodes, jobs, queues, shape, seed):
    """The bound kept per leaf mask across the job loop's commits (patched on the nodes each sync says
    changed) and taken for a search with recorded victims but on their nodes is, at every call, bit for
    bit the full pass (``victim_bound.member_gpu`` from the recorded victims' sums), and so is a new
    mask's bound taken from a recent mask's (its differing leaves' nodes summed again); the per-node task
    lists are, after every sync, every node's tasks ascending. A sync that moves the lists but does not
    say which nodes changed leaves stale sums (the check sees them)."""
    from scheduler_engine import bench
    from scheduler_engine.kernels import victim_bound
    from scheduler_engine.snapshot import GPU

    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    real_bound, real_sync = victim_order.LeafRuns.bound, victim_order.LeafRuns.sync
    made, bad = [], []

    def bound(self, keep, active, out):
        s = self.state
        ref = out.copy()
        victim_bound.member_gpu(True, np.zeros(0, dtype=np.int64), self.t_head, self.t_next, keep, self.member,
                                s.job_queue_arr, s.task_job, s.task_state, active, s.task_node, s.task_alloc[:, GPU], ref)
        real_bound(self, keep, active, out)
        if out.tobytes() != ref.tobytes():
            bad.append(np.flatnonzero(out != ref).tolist())
        if self not in made:
            made.append(self)

    def sync(self):
        real_sync(self)
        bad.extend(_task_lists_differ(self.state, self))

    with monkeypatch.context() as m:
        m.setattr(victim_order.LeafRuns, "bound", bound)
        m.setattr(victim_order.LeafRuns, "sync", sync)
        kept = _cycle(snap)
    assert not bad
    counts = made[0].bound_counts
    assert counts["patched"] >= 3, counts
    assert counts["recorded"] >= 1 or shape == "one-gpu", counts  # (one-gpu: no prefix 2)
    with monkeypatch.context() as m:  # (a new mask from a near one however many nodes that sums again)
        m.setattr(victim_order.LeafRuns, "bound", bound)
        m.setattr(victim_order.LeafRuns, "sync", sync)
        m.setattr(victim_order.LeafRuns, "NEAR_ROWS_DIV", 1)
        made.clear()
        assert _cycle(snap) == kept
    assert not bad
    assert made[0].bound_counts["near"] >= 1, made[0].bound_counts
    with monkeypatch.context() as m:
        m.setattr(victim_order.LeafRuns, "KEEP_BOUNDS", False)
        assert _cycle(snap) == kept

    real_move = victim_bound.move_tasks

    def silent(tasks, task_node, where, head, nxt, changed):
        real_move(tasks, task_node, where, head, nxt, changed)
        return 0

    with monkeypatch.context() as m:
        m.setattr(victim_order.LeafRuns, "bound", bound)
        m.setattr(victim_bound, "move_tasks", silent)
        _cycle(snap)
    assert bad


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed", [
    (60, 400, 20, "mixed", 3),
    (80, 600, 30, "one-gpu", 2),
    (40, 300, 10, "mixed", 9),
])
def test_candidates_named_by_leaves_decide_as_the_job_arrays(monkeypatch, nodes, jobs, queues, shape, seed):
    """Reclaim's candidates handed to the search as ``RunCandidates`` (their leaves; the job array
    never made) decide as the job arrays of ``LeafRuns.jobs_of`` do: the same count in the texts, the
    same bound and victim queues. The handle's array is that array, and its size its length."""
    from scheduler_engine import bench

    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    if shape == "mixed" and seed == 9:
        snap = bench.with_features(snap, seed=seed, sub_groups=0.3)  # (no runs: the arrays' path)
    real = victim_order.LeafRuns.candidates
    made = []

    def checked(self, keep):
        h = real(self, keep)
        arr = self.jobs_of(keep)
        assert h.size == len(h) == arr.size and np.asarray(h, dtype=np.int64).tolist() == arr.tolist()
        made.append(h)
        return real(self, keep)  # (a fresh handle: its array not made)

    with monkeypatch.context() as m:
        m.setattr(victim_order.LeafRuns, "candidates", checked)
        kept = _cycle(snap)
    assert len(made) >= 3 or seed == 9
    with monkeypatch.context() as m:
        m.setattr(victim_order.LeafRuns, "candidates", lambda self, keep: self.jobs_of(keep))
        assert _cycle(snap) == kept


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed,features", [
    (60, 400, 20, "mixed", 3, {}),
    (80, 600, 30, "one-gpu", 2, {}),
    (50, 360, 20, "mixed", 4, {"dra_nodes": 0.3}),
])
def test_victim_queue_starts_with_its_live_leaves(monkeypatch, nodes, jobs, queues, shape, seed, features):
    """A victim queue made from runs or from the compiled per-leaf sort knows its live leaves from the
    start: the set its scan of the runs (``_leaves``) gives."""
    from scheduler_engine import bench

    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    if features:
        snap = bench.with_features(snap, seed=seed, **features)
    real_init = victim_order.VictimQueue.__init__
    seen = []

    def init(self, state, jobs, proto=None):
        real_init(self, state, jobs, proto)
        if self._live is not None and proto is None:
            assert self._live == set(self._leaves())
            seen.append(len(self._live))

    with monkeypatch.context() as m:
        m.setattr(victim_order.VictimQueue, "__init__", init)
        _cycle(snap)
    assert len(seen) > 5 and max(seen) > 1


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed", [
    (60, 400, 20, "mixed", 3),
    (80, 600, 30, "one-gpu", 2),
])
def test_victim_queue_from_runs_is_the_sorted_one(monkeypatch, nodes, jobs, queues, shape, seed):
    """A victim queue over reclaim's candidates made from the runs (``LeafRuns.jobs_of``, started from
    the leaves' slots) holds, leaf by leaf, what the queue built from the same jobs by
    ``victim_run.leaf_runs`` holds, and its heads rows are the fresh ones for every candidate; whole
    cycles with and without the runs decide the same."""
    from scheduler_engine import bench
    from scheduler_engine.actions import reclaim

    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    real_init = victim_order.VictimQueue.__init__
    seen = []

    def init(self, state, jobs, proto=None):
        real_init(self, state, jobs, proto)
        if self._runs is None or proto is not None:
            return
        wa, glen, gt = (x.copy() for x in self.heads())
        other = victim_order.VictimQueue.__new__(victim_order.VictimQueue)
        real_init(other, state, np.array(jobs, copy=True))
        assert other._runs is None
        assert other._cands == self._cands
        for q in self._cands:
            assert (self.cj[self.ptr[q]:self.hi[q]].tolist() == other.cj[other.ptr[q]:other.hi[q]].tolist())
        cands = np.asarray(jobs)
        fwa, fglen, fgt, _ = _fresh_heads(state, cands)
        assert wa[cands].tobytes() == fwa[cands].tobytes() and (glen[cands] == fglen[cands]).all()
        seen.append(len(self._cands))

    with monkeypatch.context() as m:
        m.setattr(victim_order.VictimQueue, "__init__", init)
        with_runs = _cycle(snap)
    assert len(seen) > 5 and max(seen) > 1
    with monkeypatch.context() as m:
        m.setattr(reclaim, "USE_LEAF_RUNS", False)
        assert _cycle(snap) == with_runs


@pytest.mark.parametrize("seed", range(12))
def test_victim_rekey_of_the_compiled_loop_writes_the_full_keys(seed):
    """``victim_keys.rekey_path`` with ``share_only`` (the compiled victim loop's re-key, column 4 only) leaves
    every key, representative and next leaf exactly as the full re-key in victim order does,
    pop after pop from the keys ``build`` wrote (what a leaf gives up grows, leaves die)."""
    from scheduler_engine.kernels import victim_keys as vk

    rng = random.Random(seed)
    s = CycleState(load_dict(_random_cluster(rng, chain=True)))
    jobs = np.flatnonzero(s.job_preemptible_arr & (s.job_num_active_arr > 0))
    vq = victim_order.VictimQueue(s, jobs)
    if not vq or not vq.run_ready():
        pytest.skip("no victim to order")
    path, kid_ptr, kids, stat, tot, prio, tb, leaf_live, req, key, vrep = vq._k
    full = [leaf_live.copy(), req.copy(), key.copy(), vrep.copy()]
    part = [leaf_live.copy(), req.copy(), key.copy(), vrep.copy()]
    nxt = vq._knext
    steps = 0
    while nxt >= 0:
        leaf = nxt
        add = np.array([rng.choice([0.0, 0.5, 1.0, 2.0, 1.0 / 3.0]), rng.choice([0.0, 1.0, 7.0]), rng.random() * 9])
        die = rng.random() < 0.3
        for ll, rq, _k, _v in (full, part):
            rq[leaf] += add
            if die:
                ll[leaf] = False
        a = vk.rekey_path(True, leaf, path, kid_ptr, kids, stat, tot, prio, tb, s.queue_alloc, *full, False)
        b = vk.rekey_path(True, leaf, path, kid_ptr, kids, stat, tot, prio, tb, s.queue_alloc, *part, True)
        assert a == b
        assert np.array_equal(full[2], part[2]) and np.array_equal(full[3], part[3])
        nxt = a
        steps += 1
    assert steps >= 1


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed,features", [
    (60, 400, 20, "mixed", 3, {}),
    (80, 600, 30, "one-gpu", 2, {}),
    (50, 360, 20, "mixed", 4, {"dra_nodes": 0.3}),
])
def test_fresh_queue_keys_filled_in_the_kernel_are_builds(monkeypatch, nodes, jobs, queues, shape, seed, features):
    """A fresh victim queue's keys (``_heap_build(fresh=True)``: ``victim_keys.build_fresh`` fills the
    live leaves and what each gives up in the kernel, from the queue's leaves with candidates when
    they are still its live set; reclaim's from the keys of every leaf with members kept across
    commits, ``LeafRuns.full_keys``, brought up to date and the other leaves taken out) are bit for
    bit what ``victim_keys.build`` gives over the rows filled in numpy from the live set, as before:
    live leaves, requests, keys, representatives, next leaf. Taking every leaf out of the kept keys
    leaves nothing live; not re-keying the queues whose allocations changed fails it."""
    from scheduler_engine import bench
    from scheduler_engine.kernels import victim_keys as vk
    from scheduler_engine.ordering import kernel_static

    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    if features:
        snap = bench.with_features(snap, seed=seed, **features)
    real = victim_order.VictimQueue._heap_build
    seen = []

    def checked(self, fresh=False):
        real(self, fresh)
        if not fresh:
            return
        s = self.state
        by_depth, _path, kid_ptr, kids, stat, tot, prio = kernel_static(s)
        leaf_live = np.zeros(s.Q, dtype=np.bool_)
        req = np.zeros((s.Q, 3))
        live = np.fromiter(self._live, dtype=np.int64, count=len(self._live))
        leaf_live[live] = True
        req[live] = self.heads()[0][self.cj[self.ptr[live]]]
        key = np.zeros((s.Q, 6))
        vrep = np.full(s.Q, -1, dtype=np.int64)
        nxt = vk.build(True, by_depth, kid_ptr, kids, stat, tot, prio, self._k[6], s.queue_alloc, leaf_live, req,
                       key, vrep)
        assert nxt == self._knext
        for mine, ref in zip(self._k[7:], (leaf_live, req, key, vrep)):
            assert mine.tobytes() == ref.tobytes()
        seen.append(len(live))
        if self._runs is not None:
            counts.append(dict(self._runs.key_counts))
            full = self._runs._keys
            if full is not None:  # (every leaf out: nothing live, no next leaf)
                ll, rq, ky, vp = (x.copy() for x in full[2:6])
                gone = np.flatnonzero(ll)
                assert vk.without_leaves(gone, _path, kid_ptr, kids, stat, tot, prio, self._k[6], s.queue_alloc, ll,
                                         rq, ky, vp) == -1
                assert not ll.any() and (vp == -1).all() and not rq.any() and not ky.any()

    counts = []
    with monkeypatch.context() as m:
        m.setattr(victim_order.VictimQueue, "_heap_build", checked)
        kept = _cycle(snap)
    assert len(seen) > 5 and max(seen) > 1
    assert counts and counts[-1]["built"] >= 1
    with monkeypatch.context() as m:  # (the kept keys for every fresh queue of reclaim: a cycle's worth of them)
        m.setattr(victim_order.VictimQueue, "_heap_build", checked)
        m.setattr(victim_order.LeafRuns, "KEYS_GONE_SHARE", 1e9)
        counts.clear()
        assert _cycle(snap) == kept
    assert counts[-1]["built"] >= 1 and counts[-1]["refreshed"] >= 5
    with monkeypatch.context() as m:
        m.setattr(victim_order.LeafRuns, "KEEP_KEYS", False)
        assert _cycle(snap) == kept


@pytest.mark.parametrize("seed", range(4))
def test_runs_rebuilt_in_the_kernel_are_the_sorted_ones(seed):
    """``victim_rows.rebuild_runs`` (a commit's leaves rebuilt in one call: per (leaf, priority) group of
    the static order, the members above, at and below minAvailable) writes every leaf's run and count
    as ``LeafRuns._rebuild_leaf`` does (members of the leaf's static range, stably sorted by group and
    elastic state descending), on random memberships and active counts mixing the three states
    within groups; the cycle's own patched runs are checked in
    ``test_leaf_runs_patched_per_commit_are_the_rebuilt_ones``."""
    from scheduler_engine import bench
    from scheduler_engine.kernels import victim_rows

    snap = bench.generate(nodes=40, jobs=500, queues=8, seed=seed, shape="mixed")
    s = CycleState(snap)
    s._journal = []
    runs = victim_order.LeafRuns(s)
    rng = np.random.default_rng(seed)
    for _ in range(5):
        runs.member[:] = rng.random(s.J) < 0.7
        s.job_num_active_arr[:] = s.job_min_available + rng.integers(-1, 2, s.J)
        leaves = np.arange(s.Q, dtype=np.int64)
        for q in leaves.tolist():
            runs._rebuild_leaf(q)
        want_cj, want_n = runs.cj.copy(), runs.n.copy()
        runs.cj[:] = -7
        runs.n[:] = -7
        victim_rows.rebuild_runs(leaves, runs.by_static, runs.lo, runs.end, runs.member, runs.group,
                                 s.job_num_active_arr, s.job_min_available, runs.cj, runs.n)
        assert (runs.n == want_n).all()
        for q in leaves.tolist():
            lo = int(runs.lo[q])
            assert runs.cj[lo:lo + int(runs.n[q])].tolist() == want_cj[lo:lo + int(want_n[q])].tolist()
        assert want_n.sum() > 50
