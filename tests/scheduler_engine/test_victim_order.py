"""The victim order (``solvers.victim_order.VictimQueue``): its heap mode pops exactly what the sibling scan pops.

Issue #8: the victim queue re-keys only the queues on the popped leaf's path in per-parent heaps
when the comparator is a strict total order (allocatable vectors of every parent's children form
a chain); otherwise it rescans siblings in children order. Both must give the same victims in the
same order, elastic remainders pushed back included, or reclaim and preempt would pick other
victims depending on how the tree happens to be shaped.
"""
from __future__ import annotations

import random

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
