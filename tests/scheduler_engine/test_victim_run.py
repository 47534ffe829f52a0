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


def _kernel_drain(state: CycleState, cands, skip: set[int], rec: set[int]) -> tuple[list, np.ndarray, int]:
    """The same through ``run_victims`` (never stopping to emit), Python popping the heads it hands back."""
    vq = victim_order.VictimQueue(state, cands)
    gpu = np.zeros(state.N)
    out = []
    in_kernel = 0
    skip_leaf = np.zeros(state.Q, dtype=np.bool_)
    skip_leaf[list(skip)] = True
    is_rec = np.zeros(state.T, dtype=np.bool_)
    is_rec[list(rec)] = True
    if not vq.run_ready():
        return _python_drain(state, cands, skip, rec) + (0,)
    calloc, ctask = vq.heads()
    T, N, J = state.T, state.N, state.J
    pot, pot_job, pot_node, pot_next, drop_seq = (np.zeros(T + 1, np.int64) for _ in range(5))
    job_first, job_last = np.full(J, -1, np.int64), np.full(J, -1, np.int64)
    node_head, ent_job, ent_next = np.full(N, -1, np.int64), np.zeros(T + 1, np.int64), np.zeros(T + 1, np.int64)
    log, emptied = np.zeros((max(vq.cj.size, 1), 4), np.int64), np.empty(state.Q, np.int64)
    cap, good = np.zeros(N), np.zeros(N, dtype=np.bool_)
    ist = np.array([0, 0, -1, 0, -1, 0, 0, 0, 0, 0, 0, 0, len(rec), 0], dtype=np.int64)
    while vq:
        path, kid_ptr, kids, stat, tot, prio, tb, leaf_live, req, key, vrep = vq._k
        ist[0] = vq._knext
        ist[7] = 0
        fst = np.zeros(1)
        steps0 = int(ist[1])
        code = victim_run.run_victims(path, kid_ptr, kids, stat, tot, prio, tb, state.queue_alloc, leaf_live, req,
                                      key, vrep, vq.cj, vq.hi, vq.ptr, vq.popped, vq.has_popped, vq.heap_live, calloc,
                                      ctask, skip_leaf, is_rec, state.task_node, state.task_alloc[:, GPU], gpu, cap,
                                      np.zeros(N), good, np.zeros(N), False, 0.0, True, np.inf, False, False, 0.0, np.zeros(0),
                                      np.zeros(0, np.int64), np.zeros((0, N), np.bool_), np.zeros(N, np.int64),
                                      np.zeros(N), pot, pot_job,
                                      pot_node, pot_next, drop_seq, job_first, job_last, node_head, ent_job, ent_next,
                                      np.zeros(N), np.full(N, -1, np.int64), np.zeros(T + 1, np.int64), log, emptied,
                                      ist, fst)
        vq.after_run(emptied, int(ist[7]), int(ist[0]), int(ist[1]) > steps0)
        p0, p1 = int(ist[13]), int(ist[5])
        in_kernel += p1 - p0
        out.extend((int(j), (int(t),)) for j, t in zip(pot_job[p0:p1], pot[p0:p1]))
        if code == victim_run.END:
            break
        assert code == victim_run.PY
        _python_step(state, vq, *vq.pop(), skip, rec, out, gpu)
    return out, gpu, in_kernel


def _compare(seed: int) -> tuple[int, int]:
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
    """Single-task victims are the kernel's (a third or more of these trees' victims, the rest multi-task / elastic)."""
    in_kernel, total = np.sum([_compare(seed) for seed in range(200, 230)], axis=0)
    assert in_kernel > total / 3


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


def _searches(monkeypatch, snap, use_kernel: bool) -> list:
    """Every prefix search of a cycle: beneficiary, prefix, recorded victims, outcome and the sets
    it tried (the kernel's logged node-local sets rebuilt)."""
    out = []
    real = accumulation.PrefixSearch.run

    def run(self):
        res = real(self)
        self._tried_logged(None, self.tried_sets)
        out.append((self.j, tuple(self.partial), tuple(self.recorded), res is not None,
                    sorted(tuple(sorted(k)) for k in self.tried_sets)))
        return res

    with monkeypatch.context() as m:
        m.setattr(accumulation.PrefixSearch, "run", run)
        m.setattr(accumulation, "USE_KERNEL", use_kernel)
        _cycle(snap)
    return out


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed", [(60, 400, 20, "mixed", 3), (150, 1000, 40, "mixed", 2),
                                                          (80, 600, 20, "mixed", 5)])
def test_kernel_tries_the_sets_python_tries(monkeypatch, nodes, jobs, queues, shape, seed):
    """The node-local sets the kernel rules out by GPU count (logged, not built) are exactly the
    ones Python adds to its tried sets: so a later set is skipped as already tried just the same."""
    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    logged = []
    real = accumulation.PrefixSearch._tried_logged
    with monkeypatch.context() as m:
        m.setattr(accumulation.PrefixSearch, "_tried_logged",
                  lambda self, size, tried: logged.append(int(self.kst["ist"][10]) if self.kst else 0)
                  or real(self, size, tried))
        compiled = _searches(monkeypatch, snap, True)
    plain = _searches(monkeypatch, snap, False)
    assert sum(logged) > 0  # the kernel did decide some victims' sets itself
    assert compiled == plain


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
        calloc, ctask = vq.heads()
        assert len(calloc) == len(vq.cj) == len(cands)
        for i, j in enumerate(vq.cj.tolist()):
            rep = vq._whole_rep(j)
            assert tuple(calloc[i].tolist()) == rep.alloc
            assert ctask[i] == (rep.tasks[0] if len(rep.tasks) == 1 and not state._sg_list[j] else -1)
        # evict one task of a few candidates: their versions move, their heads change
        for j in rng.sample(cands, min(3, len(cands))):
            t = int(state.job_start[j])
            if state.task_state[t] in (1, 6, 7):
                state.evict(t)
