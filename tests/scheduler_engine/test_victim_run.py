"""The compiled accumulation loop (``kernels.victim_run.run_victims``) pops and accumulates exactly
what the Python loop of ``solvers.accumulation.PrefixSearch`` does.

Two levels: (1) on random trees and candidate sets (elastic, multi-task, recorded victims, passed
over leaves), draining the victim order through the kernel (Python popping the heads it hands
back) gives the same victims in the same order as Python's pops, with the same per-node GPU sums;
(2) whole cycles on generated clusters (subgroups, DRA pools, small search / victim-job budgets)
decide the same with the kernel switched off (``accumulation.USE_KERNEL``).
"""
from __future__ import annotations

import random

import numpy as np
import pytest

from scheduler_engine import bench
from scheduler_engine.actions import get_action
from scheduler_engine.kernels import victim_run
from scheduler_engine.loader import load_dict
from scheduler_engine.plugins.elastic import tasks_to_evict
from scheduler_engine.snapshot import GPU
from scheduler_engine.solvers import accumulation, victim_order
from scheduler_engine.state import CycleState

from tests.scheduler_engine.test_victim_order import _random_cluster

ACTIONS = ["allocate", "consolidation", "reclaim", "preempt", "stalegangeviction"]


def _python_step(state: CycleState, vq, vj: int, vtasks, skip: set[int], rec: set[int], out: list,
                 gpu: np.ndarray) -> None:
    """What Python's loop does with one popped victim (no scenarios): pass over skipped leaves and
    recorded tasks, push back elastic remainders, add the evicted tasks' GPUs per node."""
    if int(state.job_queue_arr[vj]) in skip:
        return
    evict, more = tasks_to_evict(state, vtasks, int(state.job_min_available[vj]))
    if not evict:
        return
    if any(t in rec for t in evict):
        rest = [t for t in vtasks if t not in rec]
        if rest:
            vq.push(vj, rest)
        return
    if more:
        vq.push(vj, [t for t in vtasks if t not in set(evict)])
    out.append((vj, tuple(evict)))
    for t in evict:
        if state.task_node[t] >= 0:
            gpu[int(state.task_node[t])] += state.task_alloc[t, GPU]


def _python_drain(state: CycleState, cands, skip: set[int], rec: set[int]) -> tuple[list, np.ndarray]:
    """Python's loop (no scenarios): pop and take each victim's step."""
    vq = victim_order.VictimQueue(state, cands)
    gpu = np.zeros(state.N)
    out = []
    while vq:
        popped = vq.pop()
        if popped is None:
            break
        _python_step(state, vq, *popped, skip, rec, out, gpu)
    return out, gpu


def _kernel_drain(state: CycleState, cands, skip: set[int], rec: set[int]) -> tuple[list, np.ndarray, list]:
    """The same through ``run_victims`` (never stopping to emit), Python popping the heads it hands back."""
    vr = victim_run
    vq = victim_order.VictimQueue(state, cands)
    out = []
    in_kernel = []  # per victim the kernel accumulated: how many tasks
    ti = np.zeros((2, state.T), np.int64)
    ti[vr.TI_REC, list(rec)] = 1
    ti[vr.TI_POS] = -1
    if not vq.run_ready():
        return _python_drain(state, cands, skip, rec) + ([],)
    vq.qi[vr.QI_SKIP, list(skip)] = 1
    walloc, glen, gt = vq.heads()
    T, N, J = state.T, state.N, state.J
    nf = np.zeros((7, N))
    gpu = nf[vr.NF_ALL_GPU]
    ni = np.zeros((8, N), np.int64)
    ni[vr.NI_TSTAMP] = ni[vr.NI_NODE_HEAD] = -1
    pi = np.zeros((8, T + 1), np.int64)
    ji = np.full((2, J), -1, np.int64)
    tt, pool = np.zeros((4, 64), np.int64), np.zeros(T + 1, np.int64)
    ist = np.zeros(28, dtype=np.int64)
    ist[vr.IS_PHASE] = -1
    ist[vr.IS_GEN] = 1
    ist[vr.IS_BUDGET] = ist[vr.IS_MAX_JOBS] = -1
    ist[vr.IS_REC] = len(rec)
    ist[vr.IS_SINGLE] = 1  # no node can hold the beneficiary: never stop to emit
    fst = np.array([0.0, 0.0, np.inf, 0.0])
    while vq:
        path, kid_ptr, kids, stat, tot, prio, tb, leaf_live, req, key, vrep = vq._k
        ist[vr.IS_NEXT] = vq._knext
        ist[vr.IS_EMPTIED] = 0
        steps0 = int(ist[vr.IS_STEPS])
        code = vr.run_victims(path, kid_ptr, kids, stat, tot, prio, tb, state.queue_alloc, leaf_live, req, key, vrep,
                              vq.qi, vq.popped, vq.cj, walloc, glen, state.job_start, gt, ti, state.task_node,
                              state.task_alloc[:, GPU], nf, ni, pi, ji, np.zeros(0), np.zeros(0, np.int64),
                              np.zeros((0, N), np.bool_), tt, pool, ist, fst)
        vq.after_run(vq.qi[vr.QI_EMPTIED], int(ist[vr.IS_EMPTIED]), int(ist[vr.IS_NEXT]),
                     int(ist[vr.IS_STEPS]) > steps0)
        p0, p1 = int(ist[vr.IS_POT0]), int(ist[vr.IS_POT])
        prev = -1
        for j, t in zip(pi[vr.PI_JOB, p0:p1].tolist(), pi[vr.PI_POT, p0:p1].tolist()):
            if j != prev:  # a job's tasks come together, in the order Python evicts them
                out.append((j, (t,)))
                in_kernel.append(1)
                prev = j
            else:
                out[-1] = (j, out[-1][1] + (t,))
                in_kernel[-1] += 1
        if code == vr.END:
            break
        assert code == vr.PY
        _python_step(state, vq, *vq.pop(), skip, rec, out, gpu)
    return out, gpu.copy(), in_kernel


def _compare(seed: int) -> tuple[list, int]:
    rng = random.Random(seed)
    state = CycleState(load_dict(_random_cluster(rng, chain=True)))
    running = [j for j in range(state.J) if state.job_num_active(j) > 0]
    cands = [j for j in running if rng.random() < 0.8] or running
    leaves = sorted({int(state.job_queue_arr[j]) for j in cands})
    skip = {q for q in leaves if rng.random() < 0.2}
    tasks = [t for j in cands for t in range(int(state.job_start[j]), int(state.job_start[j] + state.job_count[j]))]
    rec = {t for t in tasks if rng.random() < 0.1}
    want, want_gpu = _python_drain(state, cands, skip, rec)
    got, got_gpu, in_kernel = _kernel_drain(state, cands, skip, rec)
    assert got == want
    assert got_gpu.tolist() == want_gpu.tolist()
    return in_kernel, len(want)


@pytest.mark.parametrize("seed", range(80))
def test_kernel_drains_the_victim_order_like_python(seed):
    _compare(seed)


def test_plain_victims_go_through_the_kernel():
    """Single-task victims and whole gangs are the kernel's (half or more of these trees' victims,
    the rest elastic surpluses and their remainders; single-task victims alone were 42 %)."""
    runs = [_compare(seed) for seed in range(200, 230)]
    in_kernel = [n for k, _ in runs for n in k]
    total = sum(t for _, t in runs)
    assert len(in_kernel) > 0.5 * total
    assert sum(n > 1 for n in in_kernel) > 20  # gangs of several tasks among them


def _cycle(snap) -> tuple:
    st = CycleState(snap)
    for a in ACTIONS:
        get_action(a)(st)
    return st.task_state.tolist(), st.task_node.tolist(), [repr(e) for e in st.events]


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed,features,config", [
    (30, 240, 12, "mixed", 1, {}, {}),
    (60, 400, 30, "one-gpu", 2, {}, {}),
    (40, 300, 10, "mixed", 9, {"sub_groups": 0.3}, {}),
    (40, 300, 16, "mixed", 4, {"dra_nodes": 0.3}, {}),
    (50, 360, 20, "mixed", 5, {}, {"scenario_search_budget": 40, "max_consolidation_preemptees": 2}),
    (120, 900, 40, "mixed", 7, {}, {}),
])
def test_cycles_decide_the_same_without_the_kernel(monkeypatch, nodes, jobs, queues, shape, seed, features, config):
    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    if features:
        snap = bench.with_features(snap, seed=seed, **features)
    for k, v in config.items():
        setattr(snap.config, k, v)
    calls = []
    real = accumulation.PrefixSearch._kernel_step
    with monkeypatch.context() as m:
        m.setattr(accumulation.PrefixSearch, "_kernel_step",
                  lambda self, *a: calls.append(1) or real(self, *a))
        compiled = _cycle(snap)
    with monkeypatch.context() as m:
        m.setattr(accumulation, "USE_KERNEL", False)
        plain = _cycle(snap)
    assert calls  # the kernel ran
    assert compiled == plain


def _with_selectors(snap, frac: float, seed: int):
    """Node selectors (a rack or a zone of the generated labels) on a fraction of the pending tasks."""
    rng = random.Random(seed)
    racks = sorted({lab["kai.scheduler/rack"] for lab in snap.nodes.labels})
    zones = sorted({lab["topology.kubernetes.io/zone"] for lab in snap.nodes.labels})
    sel = list(snap.tasks.node_selector)
    for t, n in enumerate(np.asarray(snap.tasks.node).tolist()):
        if n < 0 and rng.random() < frac:
            sel[t] = ({"kai.scheduler/rack": rng.choice(racks)} if rng.random() < 0.7
                      else {"topology.kubernetes.io/zone": rng.choice(zones)})
    snap.tasks.node_selector = sel
    return snap


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed", [(60, 400, 20, "one-gpu", 2), (80, 600, 20, "mixed", 5),
                                                          (300, 1500, 30, "one-gpu", 3)])
def test_selector_beneficiaries_settled_in_the_kernel(monkeypatch, nodes, jobs, queues, shape, seed):
    """A single GPU task with a node selector is filtered in the kernel (best-fit packing on its
    nodes): victims whose sets cannot fit it are passed over without Python, and the cycle decides
    the same as the Python loop; the tried sets stay the same too."""
    snap = _with_selectors(bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape), 0.5, seed)
    settled = []
    real = accumulation.PrefixSearch._kernel_step

    def step(self, vq, *a):
        p0 = int(self.kst["ist"][victim_run.IS_POT])
        code = real(self, vq, *a)
        if len(self.partial) == 1 and self.state.task_selector_key[self.partial[0]]:
            # victims accumulated by this call whose scenarios were not handed to Python
            settled.append(max(0, int(self.kst["ist"][victim_run.IS_POT]) - p0 - (code == victim_run.SIM)))
        return code

    with monkeypatch.context() as m:
        m.setattr(accumulation.PrefixSearch, "_kernel_step", step)
        compiled = _cycle(snap)
    with monkeypatch.context() as m:
        m.setattr(accumulation, "USE_KERNEL", False)
        plain = _cycle(snap)
    assert compiled == plain
    assert sum(settled) > 0
    assert _searches(monkeypatch, snap, True) == _searches(monkeypatch, snap, False)


def _searches(monkeypatch, snap, use_kernel: bool) -> list:
    """Every prefix search of a cycle: beneficiary, prefix, recorded victims, outcome and the sets
    it tried (Python's and the compiled loop's table)."""
    out = []
    real = accumulation.PrefixSearch.run

    def run(self):
        res = real(self)
        out.append((self.j, tuple(self.partial), tuple(self.recorded), res is not None,
                    sorted(tuple(sorted(k)) for k in self.tried_all())))
        return res

    with monkeypatch.context() as m:
        m.setattr(accumulation.PrefixSearch, "run", run)
        m.setattr(accumulation, "USE_KERNEL", use_kernel)
        _cycle(snap)
    return out


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed", [(60, 400, 20, "mixed", 3), (150, 1000, 40, "mixed", 2),
                                                          (80, 600, 20, "mixed", 5)])
def test_kernel_tries_the_sets_python_tries(monkeypatch, nodes, jobs, queues, shape, seed):
    """The compiled loop emits each victim's scenarios as Python's emission does: the sets it looks up
    in its tried-set table (and rules out by GPU count, or hands to Python to simulate) are exactly
    the ones Python adds to its tried sets, so a later set is skipped as already tried just the same."""
    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    ruled_out = []
    real = accumulation.PrefixSearch._kernel_step

    def step(self, vq, *a):
        n0 = int(self.kst["ist"][victim_run.IS_TRIED])
        code = real(self, vq, *a)
        ruled_out.append(int(self.kst["ist"][victim_run.IS_TRIED]) - n0 - (code == victim_run.SIM))
        return code

    with monkeypatch.context() as m:
        m.setattr(accumulation.PrefixSearch, "_kernel_step", step)
        compiled = _searches(monkeypatch, snap, True)
    plain = _searches(monkeypatch, snap, False)
    assert sum(ruled_out) > 0  # the kernel did decide some victims' sets itself
    assert compiled == plain


@pytest.mark.parametrize("seed", range(6))
def test_tried_table_is_a_set_of_sets(seed):
    """``tried_add`` answers as a Python set of tuples (new / tried already) on random ascending
    position sets with many repeats and hash-table growth (``ROOM``, ``tried_grown``); a new
    generation (the next search) finds every slot empty."""
    vr = victim_run
    rng = random.Random(seed)
    tt, pool = np.zeros((4, 8), np.int64), np.zeros(16, np.int64)
    ist = np.zeros(28, np.int64)
    for gen in (1, 2):
        ist[vr.IS_GEN], ist[vr.IS_TRIED], ist[vr.IS_POOL] = gen, 0, 0
        seen: set[tuple] = set()
        grown = 0
        for _ in range(400):
            key = tuple(sorted(rng.sample(range(40), rng.randint(1, 5))))
            loc = np.array(key + (7,) * 3, np.int64)  # (only the first cnt positions count)
            while True:
                r = vr.tried_add(loc, len(key), tt, pool, ist)
                if r >= 0:
                    break
                grown += 1
                if 2 * (int(ist[vr.IS_TRIED]) + 1) > tt.shape[1]:
                    tt = vr.tried_grown(tt, gen)
                if int(ist[vr.IS_POOL]) + len(key) > pool.shape[0]:
                    pool = np.concatenate([pool, np.zeros(pool.shape[0], np.int64)])
            assert r == (key not in seen)
            seen.add(key)
        assert int(ist[vr.IS_TRIED]) == len(seen)
        assert gen == 2 or grown > 3


@pytest.mark.parametrize("seed", range(20))
def test_heads_are_the_whole_representatives(seed):
    """The per-candidate arrays the kernel pops from hold what Python's first representative of
    each job holds (its active tasks' allocation, its single active task), also after tasks of the
    candidates changed state (job versions moved on: the cache is refreshed)."""
    rng = random.Random(seed)
    state = CycleState(load_dict(_random_cluster(rng, chain=True)))
    cands = [j for j in range(state.J) if state.job_num_active(j) > 0]
    for round_ in range(2):
        vq = victim_order.VictimQueue(state, cands)
        walloc, glen, gt = vq.heads()
        assert len(vq.cj) == len(cands)
        for j in vq.cj.tolist():
            rep = vq._whole_rep(j)
            assert tuple(walloc[j].tolist()) == rep.alloc
            evict, more = tasks_to_evict(state, rep.tasks, int(state.job_min_available[j]))
            plain = rep.tasks and not state._sg_list[j] and (len(rep.tasks) == 1 or not more)
            g0 = int(state.job_start[j])
            assert gt[g0:g0 + glen[j]].tolist() == (evict if plain else [])
        # evict one task of a few candidates: their versions move, their heads change
        for j in rng.sample(cands, min(3, len(cands))):
            t = int(state.job_start[j])
            if state.task_state[t] in (1, 6, 7):
                state.evict(t)


@pytest.mark.parametrize("seed", range(30))
def test_leaf_runs_is_the_victim_order_inside_leaves(seed):
    """The compiled per-leaf runs (``victim_run.leaf_runs``, used when no job has subgroups) are the
    victim order inside each leaf: (leaf, priority) group, elastic state descending (0 below, 1 at,
    2 above minAvailable), then the static rank (older first, name descending); each leaf's run
    ``[ptr, hi)`` in ``qi``. Repeated candidates are refused (the caller's own sort keeps each
    occurrence). Reference: a plain lexsort of those columns."""
    rng = random.Random(seed)
    state = CycleState(load_dict(_random_cluster(rng, chain=bool(seed % 2))))
    group, rank, by_static = victim_order._victim_static_ranks(state)
    act = state.job_num_active_arr
    # some candidates at, below and above minAvailable: move a few tasks out of the active states
    for j in rng.sample(range(state.J), min(4, state.J)):
        t = int(state.job_start[j])
        if state.task_state[t] in (1, 6, 7):
            state.evict(t)
    act = state.job_num_active_arr
    cands = np.array(rng.sample(range(state.J), rng.randint(1, state.J)), dtype=np.int64)  # (any order)
    el = np.where(act[cands] < state.job_min_available[cands], 0,
                  np.where(act[cands] == state.job_min_available[cands], 1, 2))
    want = cands[np.lexsort((rank[cands], 2 - el, group[cands]))]
    # few candidates (their static places sorted) and many (the static order masked)
    few = cands[:max(1, state.J // 8)]
    cj_few = victim_run.leaf_runs(few, by_static, victim_order._static_pos(state), group, act,
                                  state.job_min_available, state.job_queue_arr, np.zeros((6, state.Q), dtype=np.int64))[0]
    assert cj_few.tolist() == [x for x in want.tolist() if x in set(few.tolist())]
    qi = np.zeros((6, state.Q), dtype=np.int64)
    cj, firsts, done = victim_run.leaf_runs(cands, by_static, victim_order._static_pos(state), group, act,
                                            state.job_min_available,
                                            state.job_queue_arr, qi)
    assert done
    assert cj.tolist() == want.tolist()
    leaves = state.job_queue_arr[want]
    assert firsts.tolist() == [int(q) for k, q in enumerate(leaves.tolist()) if k == 0 or leaves[k - 1] != q]
    for q in firsts.tolist():
        run = np.flatnonzero(leaves == q)
        assert (qi[victim_run.QI_PTR, q], qi[victim_run.QI_HI, q]) == (run[0], run[-1] + 1)
    # the queue built on them pops the same jobs as the reference order allows
    vq = victim_order.VictimQueue(state, cands)
    assert vq.cj.tolist() == want.tolist()
    for twice in (np.concatenate([cands, cands[:1]]), np.concatenate([few, few[:1]])):
        assert not victim_run.leaf_runs(twice, by_static, victim_order._static_pos(state), group, act,
                                        state.job_min_available, state.job_queue_arr,
                                        np.zeros((6, state.Q), dtype=np.int64))[2]


@pytest.mark.parametrize("seed", range(10))
def test_candidate_gpu_adds_in_task_order(seed):
    """The prefix search's bound (``victim_run.candidate_gpu``) is bit for bit the per-node sums
    ``np.add.at`` and the weighted ``np.bincount`` give in task order, from zero or from the
    recorded victims' sums (fractions whose sum depends on the order)."""
    rng = np.random.default_rng(seed)
    T, J, N = 400, 60, 13
    task_job = np.sort(rng.integers(0, J, T)).astype(np.int64)
    task_node = rng.integers(-1, N, T).astype(np.int64)
    task_state = rng.integers(0, 8, T).astype(np.int8)
    gpu = rng.choice([0.1, 0.2, 0.3, 1 / 3, 0.7, 1.0, 0.0], T)
    lut = accumulation._ACTIVE_LUT
    # jobs own contiguous task ranges (some jobs none); candidates in any order, one repeated
    job_count = np.bincount(task_job, minlength=J).astype(np.int64)
    job_start = (np.cumsum(job_count) - job_count).astype(np.int64)
    cands = rng.permutation(np.flatnonzero(rng.random(J) < 0.6)).astype(np.int64)
    cands = np.concatenate([cands, cands[:1]])
    is_c = np.zeros(J, dtype=bool)
    is_c[cands] = True
    act = lut[task_state] & is_c[task_job] & (task_node >= 0)
    for start in (np.zeros(N), rng.choice([0.0, 0.1, 0.7], N)):
        want = start.copy()
        np.add.at(want, task_node[act], gpu[act])
        got = start.copy()
        victim_run.candidate_gpu(cands, job_start, job_count, task_state, lut, task_job, task_node, gpu, got)
        assert got.tobytes() == want.tobytes()
        few = cands[:max(1, J // 10)]  # (few candidates: their task ranges; many: a pass over the tasks)
        want_few = start.copy()
        act_few = lut[task_state] & np.isin(task_job, few) & (task_node >= 0)
        np.add.at(want_few, task_node[act_few], gpu[act_few])
        got_few = start.copy()
        victim_run.candidate_gpu(np.concatenate([few, few[:1]]), job_start, job_count, task_state, lut, task_job,
                                 task_node, gpu, got_few)
        assert got_few.tobytes() == want_few.tobytes()
    zero = np.zeros(N)
    victim_run.candidate_gpu(cands, job_start, job_count, task_state, lut, task_job, task_node, gpu, zero)
    assert zero.tobytes() == np.bincount(task_node[act], weights=gpu[act], minlength=N).astype(float).tobytes()


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed,features", [
    (60, 400, 20, "mixed", 3, {}),
    (80, 600, 30, "one-gpu", 2, {}),
    (40, 300, 10, "mixed", 9, {"sub_groups": 0.3}),
    (40, 300, 16, "mixed", 4, {"dra_nodes": 0.3}),
])
def test_job_loop_memo_decides_as_fresh_searches(monkeypatch, nodes, jobs, queues, shape, seed, features):
    """``VictimSolver.memo`` (the per-node GPU base, the no-recorded bound and the fresh victim queue
    per candidate set, kept by the reclaim / preempt job loop between two commits) decides what
    searches computing them afresh decide; it is used (hits) and emptied at each commit (kept
    across one, the cycles differ)."""
    from scheduler_engine.solvers import job_solver
    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    if features:
        snap = bench.with_features(snap, seed=seed, **features)
    real_init = job_solver.VictimSolver.__init__
    hits = []
    real_fit_base = accumulation.fit_base

    def no_memo(self, *a, **kw):
        kw["memo"] = None
        real_init(self, *a, **kw)

    real_vq = victim_order.VictimQueue.__init__
    restored = []

    def vq_init(self, state, jobs, proto=None):
        restored.append(proto is not None)
        real_vq(self, state, jobs, proto)

    with monkeypatch.context() as m:
        m.setattr(accumulation, "fit_base", lambda s, *rows: hits.append(1) or real_fit_base(s, *rows))
        m.setattr(victim_order.VictimQueue, "__init__", vq_init)
        with_memo = _cycle(snap)
    n_memo = len(hits)
    assert any(restored) or shape == "one-gpu"  # (one-gpu: no candidate set repeats between commits)
    with monkeypatch.context() as m:
        m.setattr(job_solver.VictimSolver, "__init__", no_memo)
        m.setattr(accumulation, "fit_base", lambda s, *rows: hits.append(1) or real_fit_base(s, *rows))
        fresh = _cycle(snap)
    assert len(hits) - n_memo > n_memo  # fewer fit_base computations with the memo
    assert with_memo == fresh


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed,features", [
    (60, 400, 20, "mixed", 3, {}),
    (80, 600, 30, "one-gpu", 2, {}),
    (40, 300, 10, "mixed", 9, {"sub_groups": 0.3}),
    (50, 360, 20, "mixed", 5, {"dra_nodes": 0.3}),
])
def test_victim_rows_lent_to_each_search_come_back_clean(monkeypatch, nodes, jobs, queues, shape, seed, features):
    """The per-job / per-task rows of the accumulated victims are kept on the state and lent to
    one prefix search after another (``accumulation._scratch``): each search gets them in the state
    fresh rows have (every job -1, every task unrecorded and not accumulated), and the cycle decides
    as with fresh rows per search. The kept per-node rows come back clean as well, reset only where
    the last search wrote them: no recorded or accumulated GPUs, no node entry, ``NF_BASE`` and
    ``NF_CAP`` bit for bit the base they are tagged with, the single-task filter's marks that base's
    nodes at its threshold (and their count), every stamp below the next one. The lent per-victim
    columns and the scratch per-node rows (``pi``, ``NF_TSUM`` / ``NF_CAPBUF``, ``NI_IDXBUF`` /
    ``NI_HOSTS`` / ``NI_RECN``: not reset between searches) are overwritten before each search with
    "kept" / 0 / -1, then with a drop number / NaN / node 3: a search that read an entry it did not
    write would decide otherwise in one of the two. In a third run the kept rows are poisoned too and
    their tag dropped, so the search rewrites them. (The packing filters' marks get -1, below every
    mark; the sorted base is poisoned too and its tag dropped, so it is sorted again.)"""
    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    if features:
        snap = bench.with_features(snap, seed=seed, **features)
    real = accumulation._scratch
    vr = victim_run
    lent = []
    scratch_f, scratch_i = (vr.NF_TSUM, vr.NF_CAPBUF), (vr.NI_IDXBUF, vr.NI_HOSTS, vr.NI_RECN)

    def checked(state, poison=None, all_rows=False):
        sc = real(state)
        assert (sc[0] == -1).all() and (sc[1][vr.TI_REC] == 0).all() and (sc[1][vr.TI_POS] == -1).all()
        nf, ni, kept = sc[7], sc[8], sc[11]
        if kept["tag"] is not None:
            assert (nf[vr.NF_ALL_GPU] == 0.0).all() and (nf[vr.NF_REC_GPU] == 0.0).all()
            assert (ni[vr.NI_NODE_HEAD] == -1).all() and (ni[vr.NI_TSTAMP] <= kept["stamp"]).all()
            assert kept["recn"].shape[0] == 0
            assert np.array_equal(nf[vr.NF_BASE], kept["tag"]) and np.array_equal(nf[vr.NF_CAP], kept["tag"])
            assert kept["max"] == kept["tag"].max()
            if kept["thr"] is not None:
                assert np.array_equal(ni[vr.NI_GOOD], nf[vr.NF_BASE] >= kept["thr"])
                assert kept["cnt"] == np.count_nonzero(ni[vr.NI_GOOD])
        if poison is not None:  # whatever the lent columns and scratch rows hold, the search writes before it reads
            sc[6][:] = poison[0]
            nf[list(scratch_f)] = poison[1]
            ni[list(scratch_i)] = poison[2]
            if all_rows:  # (the kept rows too: with their tag dropped the search rewrites them)
                nf[:], ni[:] = poison[1], poison[2]
                kept["tag"] = None
            # (but the packing filters' marks, which only ever grow - any value below the next mark is
            # stale - and the sorted base, kept for the base it sorts: poisoned, and sorted again)
            ni[vr.NI_OVL] = -1
            sc[9] = None
        lent.append(1)
        return sc

    def fresh(state):
        state._victims_scratch = None
        return real(state)

    for use_kernel in (True, False):  # (without the compiled loop Python accumulates every victim)
        with monkeypatch.context() as m:
            m.setattr(accumulation, "USE_KERNEL", use_kernel)
            m.setattr(accumulation, "_scratch", checked)
            kept = _cycle(snap)
        assert len(lent) > 10
        with monkeypatch.context() as m:
            m.setattr(accumulation, "USE_KERNEL", use_kernel)
            m.setattr(accumulation, "_scratch", fresh)
            assert _cycle(snap) == kept
        for poison in ((-1, 0.0, -1), (5, np.nan, 3)):
            for all_rows in (False, True):
                with monkeypatch.context() as m:
                    m.setattr(accumulation, "USE_KERNEL", use_kernel)
                    m.setattr(accumulation, "_scratch", lambda state: checked(state, poison, all_rows))
                    assert _cycle(snap) == kept


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed,features", [
    (60, 400, 20, "mixed", 3, {}),
    (80, 600, 30, "one-gpu", 2, {}),
    (40, 300, 10, "mixed", 9, {"sub_groups": 0.3}),
    (50, 360, 20, "mixed", 5, {"dra_nodes": 0.3}),
])
def test_fit_base_patched_on_logged_nodes_is_the_full_one(monkeypatch, nodes, jobs, queues, shape, seed, features):
    """The per-node GPU base kept across commits (``accumulation._fit_base``: only the nodes in
    ``state.node_log`` since the last search recomputed) is, bit for bit, what ``fit_base`` gives on
    the whole cluster at every search (shared fractions, DRA GPU classes); patching no row fails."""
    from scheduler_engine.solvers import idle_gpus
    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    if features:
        snap = bench.with_features(snap, seed=seed, **features)
    real = accumulation._fit_base
    patched = []

    def checked(state):
        pos = getattr(state, "_victims_fit_base", (None, len(state.node_log)))[1]
        base = real(state)
        assert base.tobytes() == idle_gpus.fit_base(state).tobytes()
        patched.append(len(state.node_log) > pos)
        return base

    with monkeypatch.context() as m:
        m.setattr(accumulation, "_fit_base", checked)
        _cycle(snap)
    assert sum(patched) > 5

    def unpatched(state):
        hit = getattr(state, "_victims_fit_base", None)
        if hit is not None:
            return hit[0]
        return real(state)

    with monkeypatch.context() as m:
        m.setattr(accumulation, "_fit_base", unpatched)
        stale = []
        orig_may_fit = accumulation.may_fit

        def may_fit(state, partial, base, gpu, dem=None):
            stale.append(base.tobytes() != idle_gpus.fit_base(state).tobytes())
            return orig_may_fit(state, partial, base, gpu, dem)

        m.setattr(accumulation, "may_fit", may_fit)
        _cycle(snap)
    assert any(stale)


def test_fit_base_patches_the_distinct_logged_nodes(monkeypatch):
    """``_fit_base`` patches the rows of the distinct nodes logged since its last call, also when the
    log repeats them (each failed scenario logs its nodes twice) past N / 8 entries: such searches
    take the row path, on exactly those nodes, and (test above) give the full array's values. (The
    numpy rows, ``USE_FIT_ROWS`` off; the compiled rows: the next test.)"""
    monkeypatch.setattr(accumulation, "USE_FIT_ROWS", False)
    snap = bench.generate(nodes=120, jobs=900, queues=40, seed=7, shape="mixed")
    real_fb = accumulation.fit_base
    real = accumulation._fit_base
    rows_seen, calls = [], []

    def fb(state, rows=None):
        rows_seen.append(None if rows is None else np.asarray(rows).tolist())
        return real_fb(state, rows)

    def checked(state):
        hit = getattr(state, "_victims_fit_base", None)
        log = np.asarray(state.node_log[hit[1]:len(state.node_log)]) if hit is not None else None
        rows_seen.clear()
        base = real(state)
        if log is not None and log.size:
            distinct = np.unique(log).tolist()
            calls.append((log.size, len(distinct), rows_seen[-1] if rows_seen else "none"))
            if 8 * len(distinct) <= state.N:
                assert rows_seen == [distinct]
            else:
                assert rows_seen == [None]
        return base

    with monkeypatch.context() as m:
        m.setattr(accumulation, "fit_base", fb)
        m.setattr(accumulation, "_fit_base", checked)
        _cycle(snap)
    n = 120
    assert any(raw * 8 > n and isinstance(r, list) for raw, _d, r in calls)  # repeated entries, row path


def test_fit_rows_patches_the_changed_logged_nodes(monkeypatch):
    """The compiled rows (``victim_rows.fit_rows``): at every call of ``_fit_base`` the base is, bit for
    bit, ``fit_base`` on the whole cluster; its change from the last base (``_victims_base_delta``, what the
    clean rows and the sorted base are patched on) names exactly the distinct logged nodes whose value
    changed, ascending, or every row (None) past N / 8 distinct nodes; no value changed: the same array.
    The kernel's mark row is clean after every call."""
    from scheduler_engine.solvers import idle_gpus
    snap = bench.generate(nodes=120, jobs=900, queues=40, seed=7, shape="mixed")
    real = accumulation._fit_base
    seen = {"rows": 0, "full": 0, "same": 0}

    def checked(state):
        hit = getattr(state, "_victims_fit_base", None)
        base = real(state)
        full = idle_gpus.fit_base(state)
        assert base.tobytes() == full.tobytes()
        assert accumulation._fit_rows_buffers(state) is not None
        assert not accumulation._fit_rows_buffers(state)[0].any()
        if hit is None or hit[1] == len(state.node_log):
            return base
        old = hit[0]
        distinct = np.unique(np.asarray(state.node_log[hit[1]:len(state.node_log)]))
        changed = distinct[old[distinct] != full[distinct]]
        if 8 * distinct.shape[0] > state.N:
            seen["full"] += 1
            assert state._victims_base_delta[:2] == (old, base) and state._victims_base_delta[2] is None
        elif changed.shape[0]:
            seen["rows"] += 1
            d = state._victims_base_delta
            assert d[0] is old and d[1] is base and base is not old
            assert d[2].tolist() == changed.tolist()
        else:
            seen["same"] += 1
            assert base is old
        return base

    with monkeypatch.context() as m:
        m.setattr(accumulation, "_fit_base", checked)
        _cycle(snap)
    assert seen["rows"] > 5 and seen["same"] > 0, seen


@pytest.mark.parametrize("seed", range(6))
def test_queues_under_a_blocked_queue(seed):
    """``accumulation._queues_under(state, b)`` (the kernel's skip row's entries for a blocked queue, kept
    per queue) is every queue whose path holds ``b``, ascending, on random trees of several depths; asked
    again, the kept array."""
    rng = random.Random(seed)
    state = CycleState(load_dict(_random_cluster(rng, chain=seed % 2 == 0)))
    for b in range(state.Q):
        want = [q for q in range(state.Q) if b in state.queue_path_list[q]]
        got = accumulation._queues_under(state, b)
        assert got.tolist() == want and b in want
        assert accumulation._queues_under(state, b) is got


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed", [(60, 400, 20, "mixed", 3), (80, 600, 20, "one-gpu", 5),
                                                          (120, 900, 40, "mixed", 7)])
def test_may_fit_compiled_is_the_numpy_filter(monkeypatch, nodes, jobs, queues, shape, seed):
    """``idle_gpus.may_fit`` compiled (``victim_bound.capacity_fits`` / ``pack_fits``) answers as its numpy
    expressions: at every call of whole cycles, and on random per-node GPUs for random task lists (one
    task, several, with and without node selectors, with GPU-less tasks) of a generated cluster, near
    the threshold too (capacities equal to a request); both answers occur."""
    from scheduler_engine.solvers import idle_gpus
    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    real = idle_gpus.may_fit
    seen = {True: 0, False: 0}

    def both(state, partial, base, gpu, dem=None):
        with monkeypatch.context() as m:
            m.setattr(idle_gpus, "USE_KERNEL", False)
            want = real(state, partial, base, gpu, dem)
        got = real(state, partial, base, gpu, dem)
        assert got == want
        seen[got] += 1
        return got

    with monkeypatch.context() as m:
        m.setattr(accumulation, "may_fit", both)
        _cycle(snap)
    state = CycleState(snap)
    rng = np.random.default_rng(seed)
    sel = [t for t in range(state.T) if state.task_selector_key[t]]
    for i in range(300):
        k = 1 if i % 3 == 0 else int(rng.integers(2, 6))
        partial = rng.choice(state.T, size=k, replace=False).tolist()
        if sel and i % 4 == 1:
            partial[0] = sel[int(rng.integers(len(sel)))]
        base = idle_gpus.fit_base(state)
        gpu = np.where(rng.random(state.N) < 0.3, rng.integers(0, 4, state.N) * 0.5, 0.0)
        if i % 5 == 0:  # (a capacity exactly at a request)
            gpu[int(rng.integers(state.N))] = float(state.task_order_req[partial[0], GPU])
            base = np.zeros(state.N)
        dem = idle_gpus.demand(state, partial) if i % 2 else None
        with monkeypatch.context() as m:
            m.setattr(idle_gpus, "USE_KERNEL", False)
            want = idle_gpus.may_fit(state, partial, base, gpu, dem)
        got = idle_gpus.may_fit(state, partial, base, gpu, dem)
        assert got == want, (partial, i)
        seen[got] += 1
    assert seen[True] > 10 and seen[False] > 10, seen


@pytest.mark.parametrize("G", [0, 1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 64, 127, 128])
def test_masked_row_sum_is_numpys_sum(G):
    """``victim_rows.masked_row_sum`` is numpy's ``(dev * valid).sum(axis=1)`` bit for bit, on rows of
    every length up to a pairwise block (random fractions, whose sums depend on the order of additions:
    a left-to-right loop differs from 8 terms on); ``fit_rows`` gives ``fit_base``'s rows on them."""
    from scheduler_engine.kernels import victim_rows
    rng = np.random.default_rng(G)
    dev = rng.random((400, G)) * 3 - 0.7
    dev[rng.random((400, G)) < 0.2] = 1.0 / 3.0
    valid = rng.random((400, G)) < 0.85
    want = (dev * valid).sum(axis=1) if G else np.zeros(400)
    got = np.array([victim_rows.masked_row_sum(dev, valid, n) for n in range(400)])
    assert got.tobytes() == want.tobytes()
    rel = rng.random((400, G)) * 0.5
    sched = rng.random(400) < 0.9
    base = np.where(sched, np.maximum(want, 0.0) + np.maximum((rel * valid).sum(axis=1) if G else np.zeros(400), 0.0),
                    0.0)
    old = base.copy()
    old[::3] += 1.0
    log = np.array([5, 3, 5, 9, 3, 12, 0, 399, 12], dtype=np.int64)
    mark = np.zeros(400, dtype=np.bool_)
    rows, vals = np.empty(400, dtype=np.int64), np.empty(400)
    m = victim_rows.fit_rows(log, 1, log.shape[0], mark, rows, vals, dev, rel, valid, sched, old)
    exp = [n for n in sorted(set(log[1:].tolist())) if old[n] != base[n]]
    assert rows[:m].tolist() == exp and vals[:m].tobytes() == base[exp].tobytes() and not mark.any()
    many = np.arange(0, 400, 2, dtype=np.int64)  # (more than N / 8 nodes: -1, marks clean)
    assert victim_rows.fit_rows(many, 0, many.shape[0], mark, rows, vals, dev, rel, valid, sched, old) == -1
    assert not mark.any()
    mid = np.arange(300, 220, -2, dtype=np.int64)  # (40 nodes: over 32, under N / 8: the marks' scan)
    mid = np.r_[mid, mid]
    m = victim_rows.fit_rows(mid, 0, mid.shape[0], mark, rows, vals, dev, rel, valid, sched, old)
    exp = [n for n in sorted(set(mid.tolist())) if old[n] != base[n]]
    assert rows[:m].tolist() == exp and vals[:m].tobytes() == base[exp].tobytes() and not mark.any()


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed", [(60, 400, 20, "mixed", 3), (80, 600, 20, "one-gpu", 5),
                                                          (120, 900, 40, "mixed", 7)])
def test_the_bound_of_every_candidate(monkeypatch, nodes, jobs, queues, shape, seed):
    """A prefix search fails at once ("even evicting every eligible victim ...") exactly when the
    GPU-count filter refuses the recorded victims plus every candidate's active tasks, summed in task
    order: for one task the search may skip that O(tasks) sum when the recorded victims alone pass
    (the filter is monotone in the victims' GPUs); it must never skip a bound that fails."""
    from scheduler_engine.solvers.idle_gpus import fit_base, may_fit

    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    seen = {"fails": 0, "skipped": 0, "checked": 0}
    real = accumulation.PrefixSearch.run

    def run(self):
        s = self.state
        cands = np.asarray(self.solver.candidates(), dtype=np.int64)
        if cands.size == 0 or self.recorded:  # (a recorded set tried first may already win)
            return real(self)
        base = fit_base(s)
        every = np.zeros(s.N)
        for t in range(s.T):  # the reference: every candidate's active, placed tasks in task order
            if int(s.task_job[t]) in set(cands.tolist()) and s.task_state[t] in (1, 6, 7) and s.task_node[t] >= 0:
                every[int(s.task_node[t])] += s.task_alloc[t, GPU]
        want_fail = not may_fit(s, self.partial, base, every)
        if len(self.partial) == 1 and may_fit(s, self.partial, base, np.zeros(s.N)):
            seen["skipped"] += 1
        seen["checked"] += 1
        seen["fails"] += want_fail
        res = real(self)
        assert (res is None and self.solver.last_reason.startswith("even evicting every eligible victim")) == want_fail
        return res

    with monkeypatch.context() as m:
        m.setattr(accumulation.PrefixSearch, "run", run)
        _cycle(snap)
    assert seen["checked"] > 0 and seen["skipped"] > 0
    assert seen["fails"] > 0 or shape == "one-gpu"


def _entry_point_check() -> int:
    """Cycles with ``victim_run.CHECK_ENTRY`` on (see the test below); returns how many calls went
    through an entry point and were checked."""
    from pathlib import Path

    from scheduler_engine.check import check_snapshot
    from scheduler_engine.loader import load_scenario

    victim_run.CHECK_ENTRY = True
    for nodes, jobs, queues, shape, seed, features, config in [
            (60, 400, 20, "mixed", 3, {}, {}), (80, 600, 20, "one-gpu", 5, {}, {}),
            (40, 300, 10, "mixed", 9, {"sub_groups": 0.3}, {}), (40, 300, 16, "mixed", 4, {"dra_nodes": 0.3}, {}),
            (50, 360, 20, "mixed", 5, {}, {"scenario_search_budget": 40, "max_consolidation_preemptees": 2})]:
        snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
        if features:
            snap = bench.with_features(snap, seed=seed, **features)
        for k, v in config.items():
            setattr(snap.config, k, v)
        _cycle(snap)
    _cycle(_with_selectors(bench.generate(nodes=80, jobs=600, queues=20, seed=5, shape="mixed"), 0.5, 5))
    golden = Path(__file__).resolve().parents[2].parent / "shared" / "scenarios" / "reclaim_preempt"
    for f in sorted(golden.glob("*.yaml")) if golden.is_dir() else []:
        check_snapshot(load_scenario(f))
    return len(victim_run.CHECKED)


def test_entry_point_calls_have_the_versions_types():
    """Every call of the compiled loop through its entry point (``victim_run.entry_point``: no type
    check of its own) passes arguments of exactly the numba types of the version it runs, on
    generated clusters (plain, one-GPU, subgroups, DRA, node selectors, small budgets) and on the
    reclaim / preempt golden scenarios; and such calls happen. In a fresh process: a test that
    called the loop with other types leaves the dispatcher with two versions, and then every call
    goes through the dispatcher (the fallback) and nothing would be checked."""
    from scheduler_engine.kernels import JIT_ENABLED
    from tests.support.fresh_process import fresh_process_ints

    (checked,) = fresh_process_ints("tests.scheduler_engine.test_victim_run:_entry_point_check")
    assert not JIT_ENABLED or checked > 100


@pytest.mark.parametrize("seed", range(40))
def test_sorted_pack_is_the_best_fit_over_every_node(seed):
    """``victim_run.sorted_pack`` (the packing filters' form on the sorted base: an overlay of changed
    nodes, a binary search in the (capacity, node) order for the rest) packs exactly as
    ``gpu_fit.pack_best_fit`` over every node that could hold the smallest request: the same answer,
    and the same capacities left on every node it used. Capacities repeat (ties go to the lowest node)
    and overlay nodes may hold more or less than their base."""
    from scheduler_engine.kernels.gpu_fit import pack_best_fit

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    base = rng.choice([0.0, 0.25, 0.5, 1.0, 1.0, 2.0, 3.0, 4.0, 8.0], size=n)
    cur = base.copy()
    ovl_nodes = rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False)
    cur[ovl_nodes] = base[ovl_nodes] + rng.choice([-0.5, 0.0, 0.125, 0.5, 1.0, 2.0], size=ovl_nodes.size)
    need = np.sort(rng.choice([0.0, 0.25, 0.5, 1.0, 1.0, 2.0, 4.0], size=int(rng.integers(1, 6))))[::-1].copy()
    pos = need[need > 1e-9]
    mthr = float(pos.min()) - 1e-9 if pos.size else 0.0
    idx = np.flatnonzero(cur >= mthr).astype(np.int64)
    cap = cur[idx].copy()
    ref = bool(pack_best_fit(need, np.full(need.size, -1, np.int64), np.zeros((0, n), np.bool_), idx, cap)) \
        if idx.size else not pos.size
    order = np.argsort(base, kind="stable")
    skey, snode = base[order].copy(), order.astype(np.int64)
    ovl = np.zeros(n, np.int64)
    mark = 7
    idxbuf, capbuf = np.zeros(n, np.int64), np.zeros(n)
    for k, v in enumerate(ovl_nodes.tolist()):
        ovl[v] = mark
        idxbuf[k], capbuf[k] = v, cur[v]
    got = bool(victim_run.sorted_pack(need, skey, snode, ovl, mark, idxbuf, capbuf, ovl_nodes.size))
    assert got == ref
    if got and idx.size:  # the capacities left: every node the sorted form touched is in its overlay
        left = cur.copy()
        left[idx] = cap
        touched = np.flatnonzero(ovl == mark)
        m = touched.size
        assert sorted(idxbuf[:m].tolist()) == touched.tolist()
        assert np.array_equal(capbuf[:m][np.argsort(idxbuf[:m])], left[touched])
        untouched = np.setdiff1d(np.arange(n), touched)
        assert np.array_equal(left[untouched], base[untouched])


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed", [
    (60, 400, 20, "mixed", 3),
    (120, 900, 40, "mixed", 7),
    (90, 700, 30, "mixed", 11),
])
def test_packing_filters_on_the_sorted_base_decide_as_the_scan(monkeypatch, nodes, jobs, queues, shape, seed):
    """Whole cycles decide the same with the packing filters on the sorted base (``USE_SORTED_PACK``) as
    with their pass over every node; the sorted base each search gets (patched from the last one on the
    rows ``_fit_base`` changed) is the stable sort of its base, and searches did use it."""
    from scheduler_engine.solvers import accumulation

    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    real = accumulation._sorted_base
    seen = {"sorted": 0, "patched": 0}
    bad = []

    def checked(state, base, skey, snode, tag):
        patch = tag is not base and getattr(state, "_victims_base_delta", (None,))[0] is tag
        out = real(state, base, skey, snode, tag)
        order = np.argsort(base, kind="stable")
        if skey.tobytes() != base[order].tobytes() or not np.array_equal(snode, order):
            bad.append(1)
        seen["sorted"] += 1
        seen["patched"] += patch
        return out

    with monkeypatch.context() as m:
        m.setattr(accumulation, "_sorted_base", checked)
        kept = _cycle(snap)
    assert not bad and seen["sorted"] >= 3 and seen["patched"] >= 1, seen
    with monkeypatch.context() as m:
        m.setattr(accumulation, "USE_SORTED_PACK", False)
        assert _cycle(snap) == kept
