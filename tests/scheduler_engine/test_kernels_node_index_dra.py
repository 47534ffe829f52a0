"""The shape index's compiled query on clusters with DRA devices (``node_index.query_whole_dra`` /
``query_shared_dra``): the same fit flags and placement keys, bit for bit, as the generic Python
update (``CycleState.fit_one`` + ``nodeplacement.node_key_one``), on random clusters whose nodes have
classic GPUs, DRA devices of a gpu class and of a class that does not count as gpu (alone or
together), with device claims on pending and on running / releasing tasks, through random
placements (bound and pipelined, claims included) and evictions. And whole victim scenarios on such
clusters in the compiled scenario kernel (``kernels.scenario.run_scenario``, which takes the DRA
GPUs into its node order) leave the state the Python steps with the generic update leave."""
from __future__ import annotations

import random

import numpy as np
import pytest

from scheduler_engine import clusters
from scheduler_engine.kernels import node_index
from scheduler_engine.loader import load_dict
from scheduler_engine.plugins import nodeplacement
from scheduler_engine.snapshot import TaskState
from scheduler_engine.state import CycleState
from tests.scheduler_engine.test_reference import random_scenario

GPU_CLASS, CD_CLASS = "gpu.nvidia.com", "compute-domain.nvidia.com"
_PEND = int(TaskState.PENDING)
_ACTIVE = (int(TaskState.RUNNING), int(TaskState.BINDING), int(TaskState.PIPELINED))


def _interpreted(f):
    return getattr(f, "py_func", f)


def dra_scenario(seed: int, spread: bool) -> dict:
    """``random_scenario`` with DRA devices on most nodes (some with classic GPUs too), running and
    releasing tasks holding claimed devices, and pending tasks claiming devices of either class
    (a gpu-class claim alone; a compute-domain claim beside whole GPUs, a GPU fraction or nothing)."""
    rnd = random.Random(1000 + seed)
    d = random_scenario(seed, 10, 26, 4, spread)
    d["deviceClasses"] = [{"name": GPU_CLASS, "countsAs": "gpu"}, {"name": CD_CLASS}]
    leaves = sorted({j["queue"] for j in d["jobs"]})
    dra_nodes = []
    for k, node in enumerate(d["nodes"]):
        if rnd.random() < 0.7:
            node["devices"] = {GPU_CLASS: rnd.choice([0, 2, 4, 8, 8]), CD_CLASS: rnd.choice([0, 1, 2])}
            if node["devices"][GPU_CLASS]:
                dra_nodes.append(node)
            if node["devices"][CD_CLASS] and rnd.random() < 0.6:  # a compute domain in use, maybe releasing
                d["jobs"].append({"name": f"cd-run{k}", "queue": rnd.choice(leaves), "priority": 50,
                                  "createdMinutesAgo": 3, "startedMinutesAgo": 1,
                                  "tasks": [{"cpu": "500m", "node": node["name"],
                                             "state": "Releasing" if rnd.random() < 0.5 else "Running",
                                             "claims": [{"deviceClass": CD_CLASS, "count": 1}]}]})
    for k, node in enumerate(dra_nodes):
        left = node["devices"][GPU_CLASS]
        while left > 0 and rnd.random() < 0.6:
            c = rnd.randint(1, left)
            left -= c
            state = "Releasing" if rnd.random() < 0.35 else "Running"
            d["jobs"].append({"name": f"dra-run{k}-{left}", "queue": rnd.choice(leaves), "priority": 50,
                              "createdMinutesAgo": 3, "startedMinutesAgo": 1,
                              "tasks": [{"cpu": "500m", "state": state, "node": node["name"],
                                         "claims": [{"deviceClass": GPU_CLASS, "count": c}]}]})
    for i in range(14):
        kind = (0.1, 0.5, 0.7, 0.9)[i] if i < 4 else rnd.random()  # every kind at least once
        base = {"cpu": rnd.choice(["500m", 1]), "memory": "1Gi"}
        if kind < 0.45:
            task = dict(base, claims=[{"deviceClass": GPU_CLASS, "count": rnd.choice([1, 2, 4, 8])}])
            if rnd.random() < 0.3:
                task["claims"].append({"deviceClass": CD_CLASS, "count": 1})
        elif kind < 0.65:
            task = dict(base, gpu=rnd.choice([1, 2]), claims=[{"deviceClass": CD_CLASS, "count": 1}])
        elif kind < 0.85:
            task = dict(base, gpu=rnd.choice([0.25, 0.5]), claims=[{"deviceClass": CD_CLASS, "count": 1}])
        else:
            task = dict(base, claims=[{"deviceClass": CD_CLASS, "count": rnd.choice([1, 2])}])
        d["jobs"].append({"name": f"dra-pend{i}", "queue": rnd.choice(leaves), "priority": 100,
                          "createdMinutesAgo": 1, "tasks": [task] * rnd.choice([1, 1, 2])})
    return d


def _random_change(s: CycleState, rng: np.random.Generator) -> None:
    """A legal evict or place (bind or pipeline; claimed devices chosen by ``place``)."""
    if rng.random() < 0.4:
        act = np.flatnonzero(np.isin(s.task_state, _ACTIVE))
        if act.size:
            s.evict(int(rng.choice(act)))
            return
    pend = np.flatnonzero((s.task_state == _PEND) & (s.task_node < 0))
    for t in rng.permutation(pend)[:12].tolist():
        pipelined = bool(rng.random() < 0.5)
        for n in rng.permutation(s.N)[:6].tolist():
            fi, fa = s.fit_one(t, n)
            if (fa if pipelined else fi) and s.choose_devices(t, n, pipelined) is not None:
                s.place(t, n, pipelined=pipelined)
                return


def _brute_best(s: CycleState, t: int, col: int, spread: bool) -> int:
    best, bn = None, -1
    for n in range(s.N):
        fi, fa = s.fit_one(t, n)
        if fa:
            k = nodeplacement.node_key_one(s, t, n, fi, col, spread)
            if best is None or k < best:
                best, bn = k, n
    return bn


def _index(s: CycleState, t: int, placement: dict, compiled: bool) -> nodeplacement.ShapeIndex:
    col, sp = nodeplacement.placement_strategy(s, placement, t)
    old = nodeplacement.ShapeIndex.compiled
    nodeplacement.ShapeIndex.compiled = compiled
    try:
        return nodeplacement.ShapeIndex(s, t, col, sp)
    finally:
        nodeplacement.ShapeIndex.compiled = old


def _fitting(ix) -> tuple[bytes, bytes, list[float]]:
    ok = ix.any_ok
    return ix.idle_ok.tobytes(), ok.tobytes(), ix.key[ok].tolist()


@pytest.mark.parametrize("seed", range(8))
def test_compiled_dra_query_equals_the_generic_update(seed):
    """Through random changes, the compiled index, the Python (generic) index, the interpreted kernel
    on a copy of the compiled index and the brute force agree on the best node, and both indexes on
    every node's fit flags and (fitting nodes') keys, bit for bit."""
    spread = seed % 2 == 1
    s = CycleState(load_dict(dra_scenario(seed, spread)))
    assert s.has_dra_gpus
    placement = dict(s.config.placement or {})
    rng = np.random.default_rng(seed)
    shapes = {s.task_signature(t): t for t in np.flatnonzero(s.task_state == _PEND).tolist()}
    pairs = {t: (_index(s, t, placement, True), _index(s, t, placement, False)) for t in shapes.values()}
    kinds = set()
    for t, (ix, gen) in pairs.items():
        assert ix._cq is not None and ix._dra is not None and gen._cq is None
        # compiled callers (the scenario kernels, which take the DRA GPUs too) may use the index of a
        # task without claims
        assert (ix._fast is ix._cq) is not s._claims_list[t]
        kinds.add((bool(s.task_is_shared[t]), bool(s._claims_list[t]), ix.col))
    assert {(False, True, 0), (True, True, 0), (False, False, 0)} <= kinds
    checked = found = full = 0
    for step in range(40):
        for _ in range(int(rng.choice([1, 1, 2, 4, 12]))):
            _random_change(s, rng)
        for t, (ix, gen) in pairs.items():
            lo, hi = ix.pos, len(s.node_log)
            full += (hi - lo) * 8 > s.N
            arrs = [a.copy() for a in (ix.idle_ok, ix.any_ok, ix.key, ix.hk, ix.hn, ix.hs)]
            log = np.asarray(s.node_log, dtype=np.int64)
            if ix._shared:
                sched, sel, rc, rm, frac, ndev, top, fgpu = ix._cq
                other = _interpreted(node_index.query_shared_dra)(
                    log, lo, hi, sched, sel, rc, rm, frac, fgpu, ndev, top, ix.spread, s._node_both, s.dev_free,
                    s.dev_rel, s.dev_shared, *arrs, *ix._dra)
            else:
                sched, sel, rc, rm, k, ndev, top, cap = ix._cq
                other = _interpreted(node_index.query_whole_dra)(
                    log, lo, hi, sched, sel, rc, rm, k, ndev, top, cap, ix.col, ix.spread, s._node_both,
                    s.dev_free, s.dev_rel, *arrs, *ix._dra)
            got = ix.query()
            assert got == gen.query() == other == _brute_best(s, t, ix.col, ix.spread), (step, t)
            assert _fitting(ix) == _fitting(gen), (step, t)
            assert (arrs[0].tobytes(), arrs[1].tobytes()) == (ix.idle_ok.tobytes(), ix.any_ok.tobytes())
            checked += 1
            found += got >= 0
    assert checked >= 300 and found > 150 and full > 0


@pytest.mark.parametrize("spread", [False, True])
def test_single_node_updates_equal_fit_one_and_node_key_one(spread):
    """Every node of random DRA clusters, one at a time (no batching): the compiled update's flags
    and key are ``fit_one`` and ``node_key_one``; claims that fit only on releasing devices and
    classes with fewer devices than claimed both occur."""
    checked = claims_rel = short = dra_key = 0
    for seed in range(12):
        s = CycleState(load_dict(dra_scenario(seed, spread)))
        placement = dict(s.config.placement or {})
        for t in {s.task_signature(t): t for t in np.flatnonzero(s.task_state == _PEND).tolist()}.values():
            ix = _index(s, t, placement, True)
            for n in range(s.N):
                ix._update(n)
                fi, fa = s.fit_one(t, n)
                assert (bool(ix.idle_ok[n]), bool(ix.any_ok[n])) == (fi, fa), (seed, t, n)
                if fa:
                    assert ix.key[n] == nodeplacement.node_key_one(s, t, n, fi, ix.col, ix.spread), (seed, t, n)
                    checked += 1
                    dra_key += bool(ix.col == 0 and s.node_dra[n].any())
                if s._claims_list[t]:
                    ci, ca = s.claims_fit(t, n)
                    claims_rel += ca and not ci
                    short += bool((s.node_dra[n] < s.task_claims[t]).any())
    assert checked > 300 and claims_rel > 5 and short > 50 and dra_key > 50


def test_claims_fit_and_dra_gpu_free_equal_the_state():
    """The two DRA helpers against ``CycleState.claims_fit`` / ``dra_gpu_whole_one`` on every node and
    pending claim row, compiled and interpreted, and the rows they rely on: a device slot a node does
    not have stays 0 free and 0 releasing after placements and evictions."""
    for seed in range(6):
        s = CycleState(load_dict(dra_scenario(seed, False)))
        rng = np.random.default_rng(seed)
        for step in range(30):
            _random_change(s, rng)
            assert not s.dra_free[~s.dra_valid].any() and not s.dra_rel[~s.dra_valid].any()
        gcap, dgpu, _, free, rel = s.dra_query_args(0)
        assert gcap.tolist() == s.node_capacity[:, 0].tolist()
        for t in np.flatnonzero(s.task_has_claims).tolist():
            claims = s.dra_query_args(t)[2]
            for n in range(s.N):
                want = {(True, True): 2, (False, True): 1, (False, False): 0}[s.claims_fit(t, n)]
                for f in (node_index.claims_fit, _interpreted(node_index.claims_fit)):
                    assert f(n, claims, free, rel) == want, (seed, t, n)
        for n in range(s.N):
            for f in (node_index.dra_gpu_free, _interpreted(node_index.dra_gpu_free)):
                assert float(f(n, dgpu, free, rel)) == s.dra_gpu_whole_one(n)


def test_bench_dra_pool_cycle_uses_the_compiled_queries():
    """On the bench's DRA pool (DRA-only nodes, claims on running and pending tasks) every shape index
    the cycle built is compiled, and the cycle decides as with the generic update."""
    snap = clusters.with_features(clusters.generate(nodes=48, jobs=320, queues=10, seed=4, shape="mixed"),
                                  dra_nodes=0.35, seed=4)
    from scheduler_engine.cycle import run_cycle_with_state

    out = []
    for compiled in (True, False):
        old = nodeplacement.ShapeIndex.compiled
        nodeplacement.ShapeIndex.compiled = compiled
        try:
            s, _res = run_cycle_with_state(snap)
        finally:
            nodeplacement.ShapeIndex.compiled = old
        idx = list(s.__dict__.get("_victims_shape_index", {}).values())
        assert idx and all((ix._cq is not None) == compiled for ix in idx)
        out.append((s.task_state.tobytes(), s.task_node.tobytes(), repr(s.task_devices), repr(s.task_dra),
                    repr(s.events)))
    assert out[0] == out[1]


@pytest.mark.parametrize("seed,kind", [(1, "random"), (2, "random"), (3, "random"), (4, "random"), (5, "bench"),
                                       (6, "bench")])
def test_compiled_scenarios_on_dra_clusters_simulate_like_the_python_steps(seed, kind, monkeypatch):
    """Victim scenarios on clusters with DRA GPUs (nodes with classic and DRA GPUs, DRA-only nodes,
    claims on running and pending tasks) in the compiled scenario kernel and the compiled single
    placement leave the state, the change log, the journal's object half, ``resources_freed`` and the
    outcome of the Python steps with the generic index update (``fast_paths = False``,
    ``ShapeIndex.compiled = False``), scenario after scenario and after each rollback; the kernel
    simulates most scenarios (those with a claiming job stay in Python)."""
    from scheduler_engine.kernels import scenario
    from scheduler_engine.solvers import simulation
    from tests.scheduler_engine.test_kernels_scenario import _move, _victim_sets
    from tests.scheduler_engine.test_state_journal import _assert_mirror_canonical, _image, _step

    codes: dict[int, int] = {}
    run = scenario.run_scenario

    def counting(*a):
        r = run(*a)
        codes[r] = codes.get(r, 0) + 1
        return r

    monkeypatch.setattr(scenario, "run_scenario", counting)
    if kind == "random":
        d = dra_scenario(seed, seed % 2 == 0)
        for q in d["queues"]:  # no queue limits: the leaf order is a total order of keys (what the kernel takes)
            for r in q["resources"].values():
                r["limit"] = -1
        snap = load_dict(d)
    else:
        snap = clusters.with_features(clusters.generate(nodes=32, jobs=240, queues=8, seed=seed, shape="mixed"),
                                      dra_nodes=0.5, seed=seed)
    fast, slow = CycleState(snap), CycleState(snap)
    assert fast.has_dra_gpus
    slow.fast_paths = False

    def on(state, f, *a):
        old = nodeplacement.ShapeIndex.compiled
        nodeplacement.ShapeIndex.compiled = state is fast
        try:
            return f(*a)
        finally:
            nodeplacement.ShapeIndex.compiled = old

    for s in (fast, slow):  # the same placements of this cycle first (binds and pipelines), and moves
        r = np.random.default_rng(seed)
        for _ in range(20):
            _step(s, r)
        _move(s, np.random.default_rng(seed + 3), 4)
    assert _image(fast) == _image(slow)
    sims = (simulation.Simulation(fast), simulation.Simulation(slow))
    rng = np.random.default_rng(seed + 11)
    placed = {True: 0, False: 0}
    claims_job = np.zeros(fast.J, dtype=bool)
    claims_job[fast.task_job[fast.task_has_claims]] = True
    for k in range(80):
        victims = _victim_sets(fast, rng, k)
        pend_jobs = np.unique(fast.task_job[(fast.task_state == _PEND) & (fast.task_node < 0)])
        if k % 4:  # mostly jobs without claims (a scenario with a claiming job takes the Python steps)
            victims = [t for t in victims if not claims_job[fast.task_job[t]]] or victims
            pend_jobs = pend_jobs[~claims_job[pend_jobs]]
        j = int(rng.choice(pend_jobs))
        partial = fast.job_pending_tasks(j)[:max(1, int(fast.job_min_available[j]))]
        cps = (fast.checkpoint(), slow.checkpoint())
        a = on(fast, sims[0].run, j, partial, victims)
        b = on(slow, sims[1].run, j, partial, victims)
        assert a == b, k
        placed[a] += 1
        assert _image(fast) == _image(slow), k
        assert fast.node_log == slow.node_log, k
        assert [e[:4] for e in fast._journal] == [e[:4] for e in slow._journal], k
        assert fast.resources_freed == slow.resources_freed, k
        assert sims[0].outcome(victims) == sims[1].outcome(victims)
        _assert_mirror_canonical(fast)
        if k % 3 == 2 and a:  # keep some scenarios: later ones start from them
            continue
        sims[0].rollback(cps[0])
        sims[1].rollback(cps[1])
        assert _image(fast) == _image(slow)
        assert fast.node_log == slow.node_log
    assert placed[True] > 0 and placed[False] > 0, placed
    assert codes.get(1, 0) + codes.get(0, 0) > 25 and codes.get(1, 0) and codes.get(0, 0), codes


@pytest.mark.parametrize("seed,kind", [(1, "random"), (2, "random"), (3, "bench")])
def test_evict_many_of_mixed_victims_equals_one_by_one(seed, kind, monkeypatch):
    """``evict_many`` / ``evict`` of victims that mix tasks with DRA claims (their devices given back in
    Python after the compiled numeric half) with others and with moved tasks (one by one, between
    batched runs): the state, change log, journal object half (DRA rows as they were before each
    entry) and counters are those of ``evict`` called task by task with the general Python code;
    then both roll back."""
    from scheduler_engine.kernels import journal
    from tests.scheduler_engine.test_kernels_scenario import _move
    from tests.scheduler_engine.test_state_journal import _image, _step

    batches = []
    orig = journal.evict_many

    def counting(i0, ts, *a):
        batches.append(len(ts))
        return orig(i0, ts, *a)

    monkeypatch.setattr(journal, "evict_many", counting)
    if kind == "random":
        snap = load_dict(dra_scenario(seed, False))
    else:
        snap = clusters.with_features(clusters.generate(nodes=32, jobs=240, queues=8, seed=seed, shape="mixed"),
                                      dra_nodes=0.5, seed=seed)
    batch, single = CycleState(snap), CycleState(snap)
    single.fast_paths = False
    for s in (batch, single):  # the same placements first (binds and pipelines of this cycle), and moves
        r = np.random.default_rng(seed)
        for _ in range(30):
            _step(s, r)
        _move(s, np.random.default_rng(seed + 3), 4)
    assert _image(batch) == _image(single)
    rng = np.random.default_rng(seed + 100)
    mixed = 0
    for k in range(30):
        act = np.flatnonzero(np.isin(batch.task_state, _ACTIVE))
        cl = act[batch.task_has_claims[act]]
        plain = act[~batch.task_has_claims[act]]
        victims = []
        for _ in range(int(rng.integers(1, 5))):  # runs of plain tasks of 0-5 between claiming ones
            victims += rng.choice(plain, int(rng.integers(0, 6)), replace=False).tolist()
            if cl.size:
                victims.append(int(rng.choice(cl)))
        victims = list(dict.fromkeys(victims))
        mixed += bool(batch.task_has_claims[victims].any()) and not batch.task_has_claims[victims].all()
        cps = (batch.checkpoint(), single.checkpoint())
        before = _image(batch)
        batch.evict_many(victims)
        for t in victims:
            single.evict(t)
        assert _image(batch) == _image(single), k
        assert batch.node_log == single.node_log and batch.resources_freed == single.resources_freed
        assert (batch.queue_version == single.queue_version).all() and (batch.job_version == single.job_version).all()
        assert [e[:4] for e in batch._journal] == [e[:4] for e in single._journal], k
        assert repr([e[4] for e in batch._journal]) == repr([e[4] for e in single._journal]), k
        batch.rollback(cps[0])
        single.rollback(cps[1])
        assert _image(batch) == _image(single) == before
    assert mixed > 20 and len(batches) > 8, (mixed, batches)
