"""Kernels of the scenario simulation (kernels/scenario.py, the journal's ``unevict``).

* ``queue_over_capacity`` (compiled comparisons, message built in Python) answers exactly what a
  plain restatement of spec a.7 answers (the leaf first, then each ancestor; limit before the
  non-preemptible quota; only requested resources), refusal messages included, on generated
  clusters with limits and quotas on random allocations.
* ``simulation.unevict`` through the compiled call leaves the state bitwise as the Python code
  does, and refuses in the same cases (resources or devices promised to a pipelined task).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from scheduler_engine import bench
from scheduler_engine.result import PENDING_LIMIT, PENDING_QUOTA
from scheduler_engine.snapshot import UNLIMITED, TaskState
from scheduler_engine.solvers import simulation
from scheduler_engine.state import EPS, CycleState

from tests.scheduler_engine.test_state_journal import _assert_mirror_canonical, _image, _snapshot, _step

_RUN = int(TaskState.RUNNING)
_REL = int(TaskState.RELEASING)
_CODES_MET: dict[int, int] = {}  # return codes of the compiled placement seen by the simulation tests


def _reference_over_capacity(s: CycleState, q: int, req, nonpre: bool):
    """Spec a.7 restated: (queue, resource, kind) of the first refusal, or None."""
    for a in s.queue_path_list[q]:
        for r in range(3):
            lim = s.queue_limit[a, r]
            if req[r] > EPS and lim != UNLIMITED and s.queue_alloc[a, r] + req[r] > lim + EPS:
                return a, r, PENDING_LIMIT
        if nonpre:
            for r in range(3):
                des = s.queue_deserved[a, r]
                if req[r] > EPS and des != UNLIMITED and s.queue_alloc_np[a, r] + req[r] > des + EPS:
                    return a, r, PENDING_QUOTA
    return None


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_queue_over_capacity_matches_the_rule(seed):
    s = CycleState(bench.generate(nodes=20, jobs=150, queues=30, seed=seed))
    rng = np.random.default_rng(seed)
    # tighten some limits and quotas so that refusals of both kinds happen on every level
    Q = s.Q
    s.queue_limit = s.queue_limit.copy()
    s.queue_deserved = s.queue_deserved.copy()
    pick = rng.random((Q, 3)) < 0.3
    s.queue_limit[pick] = np.round(rng.random(pick.sum()) * 4, 1) * np.array([1.0, 2e3, 4e9])[np.nonzero(pick)[1]]
    pick = rng.random((Q, 3)) < 0.3
    s.queue_deserved[pick] = np.round(rng.random(pick.sum()) * 4, 1) * np.array([1.0, 2e3, 4e9])[np.nonzero(pick)[1]]
    s._lim_rows = None
    s._queue_alloc_both[:] = rng.random((Q, 2, 3)) * np.array([3.0, 3e3, 3e9])
    seen = {None: 0, PENDING_LIMIT: 0, PENDING_QUOTA: 0}
    leaves = np.flatnonzero(s.queue_is_leaf)
    for _ in range(800):
        q = int(rng.choice(leaves))
        req = np.array([rng.choice([0.0, 0.5, 1.0, 4.0]), rng.choice([0.0, 500.0, 4e3]), rng.choice([0.0, 1e9])])
        nonpre = bool(rng.integers(2))
        want = _reference_over_capacity(s, q, req, nonpre)
        got = s.queue_over_capacity(q, req, nonpre)
        if want is None:
            assert got is None
            seen[None] += 1
            continue
        a, r, kind = want
        assert got is not None and got.category == kind, (q, req, nonpre)
        assert got.startswith(f"queue {s.queues.names[a]} ") and ("gpu", "cpu", "memory")[r] in got
        seen[kind] += 1
    assert min(seen.values()) > 20, seen  # every answer was exercised


@pytest.mark.parametrize("seed,shape,sg,dra", [(1, "mixed", 0.0, 0.0), (2, "one-gpu", 0.0, 0.0),
                                               (4, "mixed", 0.0, 0.3)])
def test_compiled_unevict_equals_the_python_code(seed, shape, sg, dra):
    snap = _snapshot(seed, shape, sg, dra)
    fast, slow = CycleState(snap), CycleState(snap)
    slow.fast_paths = False
    outcomes = {True: 0, False: 0}
    for k in range(6):
        rngs = (np.random.default_rng(seed + k), np.random.default_rng(seed + k))
        cps = (fast.checkpoint(), slow.checkpoint())
        run = np.flatnonzero(fast.task_state == _RUN)
        victims = np.random.default_rng(k).permutation(run)[:12].tolist()
        for s in (fast, slow):
            for t in victims:
                s.evict(t)
        for _ in range(8):  # placements that may pipeline onto what the victims release
            _step(fast, rngs[0])
            _step(slow, rngs[1])
        assert _image(fast) == _image(slow)
        for t in victims:
            a = simulation.unevict(fast, t)
            b = simulation.unevict(slow, t)
            assert a == b
            outcomes[a] += 1
            assert _image(fast) == _image(slow)
            assert fast.node_log == slow.node_log
            assert (fast.queue_version == slow.queue_version).all() and (fast.job_version == slow.job_version).all()
        _assert_mirror_canonical(fast)
        fast.rollback(cps[0])
        slow.rollback(cps[1])
        assert _image(fast) == _image(slow)
    assert outcomes[True] > 0 and outcomes[False] > 0, outcomes


@pytest.mark.parametrize("seed,shape,sg,dra", [(1, "mixed", 0.0, 0.0), (2, "one-gpu", 0.0, 0.0),
                                               (3, "mixed", 0.3, 0.0), (5, "mixed", 0.2, 0.2)])
def test_compiled_placement_simulates_like_the_python_path(seed, shape, sg, dra, monkeypatch):
    """Whole scenarios (evict victims, re-place the beneficiary and them in queue order) with the
    compiled single-task placement (``kernels.scenario.place_one_whole``) leave the state, the
    change log and the outcome of the Python path, scenario after scenario and after each rollback;
    every return code of the kernel is met."""
    codes: dict[int, int] = {}
    compiled = simulation.Placer._place_one_compiled

    def counting(self, t, idx, released, old, qcheck):
        r = compiled(self, t, idx, released, old, qcheck)
        key = r if r < 0 else 0
        codes[key] = codes.get(key, 0) + 1
        return r

    monkeypatch.setattr(simulation.Placer, "_place_one_compiled", counting)
    monkeypatch.setattr(simulation.Simulation, "use_kernel", False)  # (the whole-scenario kernel: below)
    snap = _snapshot(seed, shape, sg, dra)
    fast, slow = CycleState(snap), CycleState(snap)
    slow.fast_paths = False
    for s in (fast, slow):  # the same placements of this cycle first (binds and pipelines)
        r = np.random.default_rng(seed)
        for _ in range(30):
            _step(s, r)
    # limits just above today's allocation on some queues, so that queue checks refuse some jobs
    pick = np.random.default_rng(seed).random(fast.Q) < 0.3
    lim = np.where(pick[:, None], fast.queue_alloc + np.array([2.0, 4e3, 8e9]), UNLIMITED)
    for s in (fast, slow):
        s.queue_limit = lim.copy()
        s._lim_rows = None
    sims = (simulation.Simulation(fast), simulation.Simulation(slow))
    rng = np.random.default_rng(seed + 7)
    placed = {True: 0, False: 0}
    for k in range(60):
        act = np.flatnonzero(np.isin(fast.task_state, (_RUN, int(TaskState.BINDING), int(TaskState.PIPELINED))))
        victims = rng.permutation(act)[:int(rng.integers(1, 12))].tolist()
        pend_jobs = np.unique(fast.task_job[(fast.task_state == int(TaskState.PENDING)) & (fast.task_node < 0)])
        j = int(rng.choice(pend_jobs))
        partial = fast.job_pending_tasks(j)[:max(1, int(fast.job_min_available[j]))]
        if k % 10 == 5 and sims[0]._ka is not None:
            sims[0]._ka.clear = np.zeros((1, 2), dtype=np.int64)  # too short: the call asks for room first
        if k % 4 == 1:  # a failure point of allocate above: rolling back below it bumps resources_freed
            fast._protect_len = slow._protect_len = len(fast._journal) + 10_000
        cps = (fast.checkpoint(), slow.checkpoint())
        a = sims[0].run(j, partial, victims)
        b = sims[1].run(j, partial, victims)
        assert a == b, k
        placed[a] += 1
        assert _image(fast) == _image(slow), k
        assert fast.node_log == slow.node_log
        assert sims[0].outcome(victims) == sims[1].outcome(victims)
        _assert_mirror_canonical(fast)
        if k % 3 == 2 and a:  # keep some scenarios: later ones start from them
            continue
        sims[0].rollback(cps[0])
        sims[1].rollback(cps[1])
        assert _image(fast) == _image(slow)
    assert placed[True] > 0 and placed[False] > 0, placed
    assert codes.get(0, 0) > 20 and sum(v for c, v in codes.items() if c < 0) > 0, codes
    _CODES_MET.update(codes)


_SCENARIO_CODES: dict[int, int] = {}  # return codes of kernels.scenario.run_scenario seen below


def _victim_sets(s: CycleState, rng: np.random.Generator, k: int) -> list[int]:
    """Victims as the solvers pick them (every active task of 1-5 jobs, gangs included; or part of
    them), now and then a few random active tasks (moved ones and shared GPUs among them)."""
    act = np.flatnonzero(np.isin(s.task_state, (_RUN, int(TaskState.BINDING), int(TaskState.PIPELINED))))
    if k % 5 == 4:
        return rng.permutation(act)[:int(rng.integers(1, 12))].tolist()
    jobs = np.unique(s.task_job[act])
    if k % 2:  # jobs of one leaf queue: their order inside the leaf decides
        jobs = jobs[s.job_queue_arr[jobs] == s.job_queue_arr[int(rng.choice(jobs))]]
    jobs = rng.permutation(jobs)[:int(rng.integers(1, 6))]
    out = []
    for jj in jobs.tolist():
        ts = act[s.task_job[act] == jj].tolist()
        if len(ts) > 1 and rng.random() < 0.4:  # part of an elastic job / a gang
            ts = ts[:int(rng.integers(1, len(ts)))]
        out += ts
    return out


def _with_gpu_memory(snap, seed: int):
    """Half of the Running half-GPU tasks ask for half of their node's device memory instead (the
    bench clusters' GPU-memory tasks are all pending): GPU-memory victims, moved ones among them."""
    tasks = snap.tasks
    req = np.array(tasks.request, dtype=float).copy()
    gm = np.array(tasks.gpu_memory, dtype=float).copy()
    node = np.asarray(tasks.node)
    half = np.flatnonzero((np.asarray(tasks.state) == _RUN) & (req[:, 0] == 0.5))
    pick = np.random.default_rng(seed).permutation(half)[:half.size // 2]
    gm[pick] = 0.5 * np.asarray(snap.nodes.gpu_memory, dtype=float)[node[pick]]
    req[pick, 0] = 0.0
    return dataclasses.replace(snap, tasks=dataclasses.replace(tasks, request=req, gpu_memory=gm))


def _with_shared_gangs(snap, seed: int):
    """A third of the pending gangs ask for GPU fractions (0.25, 0.5 or 0.75 per task; the bench
    clusters' shared tasks are all single): gangs that make gpuGroups (0.75: mostly new ones, on
    devices of their own) and are rolled back part-way."""
    tasks, jobs = snap.tasks, snap.jobs
    req = np.array(tasks.request, dtype=float).copy()
    rng = np.random.default_rng(seed)
    start, count = np.asarray(jobs.task_start), np.asarray(jobs.task_count)
    state = np.asarray(tasks.state)
    for jj in np.flatnonzero(count > 1).tolist():
        ts = np.arange(start[jj], start[jj] + count[jj])
        if (state[ts] == int(TaskState.PENDING)).all() and rng.random() < 0.33:
            req[ts, 0] = rng.choice([0.25, 0.5, 0.75])
    return dataclasses.replace(snap, tasks=dataclasses.replace(tasks, request=req))


def _move(s: CycleState, rng: np.random.Generator, count: int) -> None:
    """Move ``count`` Running tasks (whole GPUs, a GPU fraction, GPU memory) as consolidation does
    (evict, then pipeline the Releasing task on another node): evicting such a task again sends it
    back to its input node (device and gpuGroup)."""
    run = np.flatnonzero(s.task_state == _RUN)
    for t in rng.permutation(run)[:count].tolist():
        s.evict(t)
        for n in rng.permutation(s.N).tolist():
            if n == int(s.task_node[t]) or not s.node_schedulable[n]:
                continue
            idle_ok, any_ok = s.fit_masks(t, None)
            devs = s.choose_devices(t, n, pipelined=True) if any_ok[n] else None
            if devs is not None:
                simulation.place_released(s, t, n, devs)
                break


@pytest.mark.parametrize("seed,shape,sg,gpu", [(1, "mixed", 0.0, "binpack"), (2, "one-gpu", 0.0, "binpack"),
                                               (3, "mixed", 0.2, "binpack"), (4, "mixed", 0.0, "binpack"),
                                               (6, "one-gpu", 0.2, "binpack"), (7, "mixed", 0.0, "binpack"),
                                               (8, "mixed", 0.0, "spread"), (9, "mixed", 0.1, "spread")])
def test_compiled_scenario_simulates_like_the_python_steps(seed, shape, sg, gpu, monkeypatch):
    """Whole scenarios in one compiled call (``kernels.scenario.run_scenario``) leave the state, the
    change log, the journal's object half (gpuGroup maps included), ``resources_freed`` and the
    outcome of the Python steps (``Simulation.use_kernel = False``), scenario after scenario and
    after each rollback; the kernel simulates most of them (placed and not placed), those with
    shared-GPU tasks (GPU fractions: device choice, gpuGroups made and joined, binpack and spread)
    among them, and hands the others back."""
    codes = _SCENARIO_CODES
    from scheduler_engine.kernels import scenario

    run = scenario.run_scenario

    def counting(*a):
        r = run(*a)
        codes[r] = codes.get(r, 0) + 1
        return r

    monkeypatch.setattr(scenario, "run_scenario", counting)
    snap = _snapshot(seed, shape, sg, 0.0)
    snap = dataclasses.replace(snap, config=dataclasses.replace(snap.config, placement={"gpu": gpu, "cpu": "binpack"}))
    if shape == "mixed":
        snap = _with_shared_gangs(_with_gpu_memory(snap, seed), seed)
    fast, slow = CycleState(snap), CycleState(snap)
    for s in (fast, slow):  # the same placements of this cycle first (binds and pipelines), and moves
        r = np.random.default_rng(seed)
        for _ in range(30):
            _step(s, r)
        _move(s, np.random.default_rng(seed + 3), 8)
    assert (fast.task_state == int(TaskState.PIPELINED)).sum() > 0
    # GPU limits a little above today's allocation on some queues: queue checks refuse some jobs, a
    # GPU-memory task on some nodes only (its fraction differs by the node's device memory)
    lrng = np.random.default_rng(seed + 5)
    pick = lrng.random(fast.Q) < 0.4
    lim = np.full((fast.Q, 3), UNLIMITED)
    lim[pick, 0] = fast.queue_alloc[pick, 0] + lrng.choice([0.3, 0.6, 2.0], int(pick.sum()))
    for s in (fast, slow):
        s.queue_limit = lim.copy()
        s._lim_rows = None
    sims = (simulation.Simulation(fast), simulation.Simulation(slow))
    sims[1].use_kernel = False
    rng = np.random.default_rng(seed + 11)
    placed = {True: 0, False: 0}
    before = dict(codes)
    shared_ran = mem_ran = 0  # scenarios with a shared-GPU (a GPU-memory) task the kernel simulated
    for k in range(80):
        victims = _victim_sets(fast, rng, k)
        pend_jobs = np.unique(fast.task_job[(fast.task_state == int(TaskState.PENDING)) & (fast.task_node < 0)])
        j = int(rng.choice(pend_jobs))
        partial = fast.job_pending_tasks(j)[:max(1, int(fast.job_min_available[j]))]
        if k % 7 == 3 and len(partial) > 1:
            partial = partial[::-1]  # (the kernel puts them into task order as place_job does)
        ka = sims[0]._ka
        if k % 10 == 5 and ka is not None:
            ka.clear = np.zeros((1, 2), dtype=np.int64)  # too short: the call asks for room first
        if k % 10 == 8 and ka is not None:  # scratch narrower than the scenario: refused, room made
            ka.wi = np.zeros((scenario.WI_ROWS, 1), dtype=np.int64)
        if ka is not None and k % 2 == 0:
            # the kernel's scratch rows hold what the last scenario left or, here, anything: it must
            # write every entry it reads (a job's offsets, its order request when it places nothing)
            ka.wi.fill(1)
            ka.wf.fill(np.nan)
        if k % 4 == 1:  # a failure point of allocate above: rolling back below it bumps resources_freed
            fast._protect_len = slow._protect_len = len(fast._journal) + 10_000
        sims[0].check_first = k % 6 != 0  # (now and then the kernel's own checks refuse)
        jobs = {j, *fast.task_job[victims].tolist()}
        has_shared = any(fast.task_is_shared[fast.job_task_range(x)].any() for x in jobs)
        has_mem = any(fast.task_is_mem[fast.job_task_range(x)].any() for x in jobs)
        n_ran = codes.get(1, 0) + codes.get(0, 0)
        cps = (fast.checkpoint(), slow.checkpoint())
        a = sims[0].run(j, partial, victims)
        b = sims[1].run(j, partial, victims)
        assert a == b, k
        placed[a] += 1
        if sims[0]._ka is not None:  # (distinct_nodes' marks: all False again)
            assert not sims[0]._ka.seen.any(), k
        kernel_ran = codes.get(1, 0) + codes.get(0, 0) > n_ran
        shared_ran += has_shared and kernel_ran
        mem_ran += has_mem and kernel_ran
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
    assert placed[True] > 0, placed  # (failed scenarios: code 0 below, on the mixed clusters)
    ran = {c: n - before.get(c, 0) for c, n in codes.items()}
    assert ran.get(1, 0) + ran.get(0, 0) > (10 if sg == 0 else 4), ran  # (subgroup jobs stay in Python)
    assert ran.get(scenario.ROOM, 0) > 0, ran  # (the narrowed clear / scratch rows were met)
    if shape == "mixed":  # (GPU fractions and GPU memory among the beneficiaries and victims)
        assert shared_ran > 15 and mem_ran > 2, (shared_ran, mem_ran)


def test_compiled_scenario_undoes_the_gpu_group_of_a_gang_rolled_back():
    """A gang of GPU fractions whose first task opens a gpuGroup on the only free device and whose
    second task fits nowhere: the kernel rolls the gang back, and the device carries no group
    again (``dev_shared``), as the Python rollback leaves it from the journaled gpuGroup map."""
    from scheduler_engine.kernels import scenario as scenario_k
    from scheduler_engine.loader import load_dict
    from tests.scheduler_engine.test_reclaim import job, node, pending, queue, running, scenario

    qs = [queue("dept"), queue("a", parent="dept")]
    nodes = [node("n0", gpus=2), node("n1", gpus=2)]
    jobs = [job("w0", "a", [running("w0-0", "n0", gpu=1)], age=10),
            job("w1", "a", [running("w1-0", "n1", gpu=2)], age=10),
            job("c", "a", [running("c-0", "n1", gpu=0)], age=10),
            job("g", "a", [pending("g-0", gpu=0.75), pending("g-1", gpu=0.75)], age=1, minAvailable=2)]
    snap = load_dict(scenario(nodes, qs, jobs, ["reclaim"]))
    fast, slow = CycleState(snap), CycleState(snap)
    sims = (simulation.Simulation(fast), simulation.Simulation(slow))
    sims[1].use_kernel = False
    j = fast.jobs.index["g"]
    partial = fast.job_pending_tasks(j)
    victims = [fast.tasks.index["c-0"]]
    calls = []
    run = scenario_k.run_scenario

    def counting(*a):
        calls.append(run(*a))
        return calls[-1]

    scenario_k.run_scenario = counting
    try:
        assert sims[0].run(j, partial, victims) is False
    finally:
        scenario_k.run_scenario = run
    assert sims[1].run(j, partial, victims) is False
    assert calls == [0]  # (the kernel simulated it)
    assert _image(fast) == _image(slow)
    assert not fast.dev_shared.any() and fast.dev_group == [{}, {}]
    assert fast.node_log == slow.node_log
    assert [e[:4] for e in fast._journal] == [e[:4] for e in slow._journal]
    assert fast.resources_freed == slow.resources_freed


def test_every_return_code_of_the_compiled_scenario_was_met():
    """(Runs after the cases above: placed, not placed, a job not looked at yet, a scenario the
    kernel hands back, and too little room.)"""
    from scheduler_engine.kernels import scenario

    if not _SCENARIO_CODES:
        pytest.skip("run together with test_compiled_scenario_simulates_like_the_python_steps")
    assert set(_SCENARIO_CODES) == {1, 0, scenario.UNKNOWN_JOB, scenario.NOT_PLAIN, scenario.ROOM}, _SCENARIO_CODES


def test_every_return_code_of_the_compiled_placement_was_met():
    """(Runs after the cases above, which collect the codes: placed, no node, old node, scan.)"""
    if not _CODES_MET:
        pytest.skip("run together with test_compiled_placement_simulates_like_the_python_path")
    assert set(_CODES_MET) == {0, -1, -3, -4}, _CODES_MET


@pytest.mark.parametrize("seed,shape,dra", [(1, "mixed", 0.0), (2, "one-gpu", 0.0), (6, "mixed", 0.0),
                                            (7, "mixed", 0.3)])
def test_old_node_key_is_node_key_one(seed, shape, dra):
    """The compiled key of a victim's own node (as a node that does not fit on free resources)
    is ``nodeplacement.node_key_one`` bit for bit, on GPU and CPU columns, binpack and spread, on a
    cluster with DRA GPUs too (their devices count as GPUs)."""
    from scheduler_engine.kernels import scenario
    from scheduler_engine.plugins.nodeplacement import ShapeIndex, node_key_one, placement_strategy

    s = CycleState(_snapshot(seed, shape, 0.0, dra))
    rng = np.random.default_rng(seed)
    for _ in range(40):
        _step(s, rng)
    checked = 0
    gcap, dgpu, _claims, dra_free, dra_rel = s.dra_query_args(0)
    assert (gcap.shape[0] > 0) == (dra > 0)
    dra = (gcap, dgpu, dra_free, dra_rel)
    tasks = [t for t in range(s.T) if not s.task_is_shared[t] and not s._claims_list[t]]
    for t in rng.permutation(tasks)[:30].tolist():
        for spread in (False, True):
            col, _sp = placement_strategy(s, {}, t)
            idx = ShapeIndex(s, t, col, spread)
            if idx._fast is None:
                continue
            _sched, _sel, _rc, _rm, _k, ndev, top, cap = idx._fast
            for n in range(s.N):
                got = scenario.old_node_key(n, ndev, top, cap, col, spread, s._node_both, s.dev_free, s.dev_rel,
                                            *dra)
                want = node_key_one(s, t, n, False, col, spread)
                assert np.float64(got).tobytes() == np.float64(want).tobytes(), (t, n, col, spread)
                checked += 1
    assert checked > 500


@pytest.mark.parametrize("seed,gpu,dra", [(1, "binpack", 0.0), (4, "spread", 0.0), (6, "binpack", 0.0),
                                          (7, "binpack", 0.3), (8, "spread", 0.3)])
def test_shared_device_choice_and_old_node_key_are_the_python_code(seed, gpu, dra):
    """The compiled shared-GPU pieces of a scenario equal the Python code they stand for, on every
    node of a cluster with placements, evictions, fractions and GPU memory (compiled and
    interpreted): ``devices.choose_shared`` = ``CycleState.choose_devices``' shared branch (free
    only and pipelined, binpack and spread) and ``scenario.old_node_key_shared`` =
    ``nodeplacement.node_key_one`` of a node that does not fit on free resources, bit for bit."""
    from scheduler_engine.kernels import devices, scenario
    from scheduler_engine.plugins.nodeplacement import node_key_one

    snap = _with_gpu_memory(_snapshot(seed, "mixed", 0.0, dra), seed)
    snap = dataclasses.replace(snap, config=dataclasses.replace(snap.config, placement={"gpu": gpu, "cpu": "binpack"}))
    s = CycleState(snap)
    rng = np.random.default_rng(seed)
    spread = gpu == "spread"
    shared = np.flatnonzero(s.task_is_shared)
    assert s.task_is_mem[shared].any() and (~s.task_is_mem[shared]).any()
    fns = [(devices.choose_shared, scenario.old_node_key_shared)]
    if hasattr(devices.choose_shared, "py_func"):
        fns.append((devices.choose_shared.py_func, scenario.old_node_key_shared.py_func))
    seen = {"none": 0, "dev": 0, "tier": 0}
    gcap, dgpu, _claims, dra_free, dra_rel = s.dra_query_args(0)
    dra = (gcap, dgpu, dra_free, dra_rel)
    top = float(max(s.node_capacity[:, 0].max(), 1.0)) if s.has_dra_gpus else float(max(s.G, 1))
    for _ in range(6):
        for _ in range(15):
            _step(s, rng)
        for t in rng.permutation(shared)[:12].tolist():
            for n in range(s.N):
                f = s._shared_fraction(t, n)
                for pipelined in (False, True):
                    want = s.choose_devices(t, n, pipelined)
                    for choose, _key in fns:
                        got = choose(s.dev_free, s.dev_rel, n, int(s.node_devices[n]), f, pipelined, spread)
                        assert (want is None and got == -1) or want == [got], (t, n, pipelined)
                    seen["none" if want is None else "dev"] += 1
                want = node_key_one(s, t, n, False, 0, spread)
                seen["tier"] += want < -1000
                for _choose, key in fns:
                    got = key(n, s.node_devices, top, spread, f, s.dev_free, s.dev_rel, s.dev_shared, *dra)
                    assert np.float64(got).tobytes() == np.float64(want).tobytes(), (t, n)
    assert seen["none"] > 100 and seen["dev"] > 100 and (spread or seen["tier"] > 20), seen


def test_stable_order_into_is_a_stable_argsort():
    """``kernels.scenario.stable_order_into`` (the scenario kernel's sorts of its jobs, the scan's sort)
    is numpy's stable argsort, ties (many equal keys) in input order, compiled and interpreted, on every
    length around the merge widths, into scratch rows that hold anything before."""
    from scheduler_engine.kernels.scenario import stable_order_into

    fns = [stable_order_into] + ([stable_order_into.py_func] if hasattr(stable_order_into, "py_func") else [])
    rng = np.random.default_rng(5)
    for m in list(range(0, 34)) + [63, 64, 65, 1000, 4097]:
        for hi in (2, 7, 1000):
            keys = rng.integers(0, hi, m).astype(np.float64)
            want = np.argsort(keys, kind="stable")
            for fn in fns:
                a, b = rng.integers(-3, m + 3, m), rng.integers(-3, m + 3, m)
                fn(keys, m, a, b)
                assert (a == want).all(), m


def test_stable_order_into_sorts_a_prefix_into_the_callers_arrays():
    """``stable_order_into`` (the scan's sort, on the scenario's scratch rows): the stable argsort of
    ``keys[:m]`` in ``a[:m]`` whatever the scratch holds and whether the merge passes end in ``a`` or
    in ``b`` (odd and even pass counts), the rest of ``a`` untouched; compiled and interpreted."""
    from scheduler_engine.kernels.scenario import stable_order_into

    fns = [stable_order_into] + ([stable_order_into.py_func] if hasattr(stable_order_into, "py_func") else [])
    rng = np.random.default_rng(11)
    for m in [0, 1, 2, 3, 4, 5, 8, 9, 16, 17, 33, 100, 257]:
        keys = rng.integers(0, 5, m + 7).astype(np.float64)  # (longer than m: only the prefix counts)
        want = np.argsort(keys[:m], kind="stable")
        for fn in fns:
            a = np.full(m + 7, -5, dtype=np.int64)
            b = rng.integers(-9, 9, m + 7)
            fn(keys, m, a, b)
            assert (a[:m] == want).all(), m
            assert (a[m:] == -5).all(), m


def test_distinct_nodes_into_a_scratch_row():
    """``distinct_nodes``: first occurrences of ``log[lo:hi]`` in order into ``out``, their count,
    and ``seen`` all False again; compiled and interpreted."""
    from scheduler_engine.kernels.scenario import distinct_nodes

    fns = [distinct_nodes] + ([distinct_nodes.py_func] if hasattr(distinct_nodes, "py_func") else [])
    rng = np.random.default_rng(12)
    for _ in range(20):
        log = rng.integers(0, 30, 200)
        lo, hi = sorted(rng.integers(0, 200, 2).tolist())
        want = list(dict.fromkeys(log[lo:hi].tolist()))
        for fn in fns:
            seen = np.zeros(30, dtype=np.bool_)
            out = np.full(30, -1, dtype=np.int64)
            m = fn(log, lo, hi, seen, out)
            assert out[:m].tolist() == want
            assert not seen.any()


def _decisions(snap) -> str:
    from scheduler_engine.cycle import run_cycle_with_state

    state, _result = run_cycle_with_state(snap)
    return bench.decision_digest(state)


@pytest.mark.parametrize("seed,shape,features", [(3, "mixed", {}), (4, "one-gpu", {}),
                                                 (5, "mixed", {"dra_nodes": 0.3})])
def test_entry_point_calls_decide_as_dispatcher_calls(monkeypatch, seed, shape, features):
    """``ScenarioArrays.call`` through the compiled version's entry point decides what calls through
    the dispatcher decide (whole cycles: reclaim, preempt and consolidation simulate scenarios), and
    the entry point is used when allowed."""
    snap = bench.generate(nodes=60, jobs=420, queues=20, seed=seed, shape=shape)
    if features:
        snap = bench.with_features(snap, seed=seed, **features)
    made = []
    init = simulation.ScenarioArrays.__init__

    def keep(self, *a, **k):
        init(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(simulation.ScenarioArrays, "__init__", keep)
    monkeypatch.setattr(simulation.ScenarioArrays, "use_entry_point", False)
    off = _decisions(snap)
    assert made and sum(ka.entry_calls for ka in made) == 0
    made.clear()
    monkeypatch.setattr(simulation.ScenarioArrays, "use_entry_point", True)
    calls = []
    call = simulation.ScenarioArrays.call

    def counting(self):
        calls.append(1)
        return call(self)

    monkeypatch.setattr(simulation.ScenarioArrays, "call", counting)
    on = _decisions(snap)
    assert on == off
    from scheduler_engine.kernels import JIT_ENABLED, scenario

    if JIT_ENABLED and len(scenario.run_scenario.overloads) == 1:
        # (most scenarios of these cycles run inside the compiled search; of those Python's steps call
        # here, all but the first per argument tuple go through the entry point)
        assert len(calls) >= 4
        assert sum(ka.entry_calls for ka in made) >= len(calls) // 2


def _scenario_entry_check() -> tuple[int, int]:
    """Cycles with ``victim_run.CHECK_ENTRY`` on (every call through an entry point asserts the
    version's numba types and the same argument objects); returns the scenario calls made through the
    entry point and all checked calls."""
    from pathlib import Path

    from scheduler_engine.check import check_snapshot
    from scheduler_engine.cycle import run_cycle
    from scheduler_engine.kernels import victim_run
    from scheduler_engine.loader import load_scenario

    victim_run.CHECK_ENTRY = True
    made = []
    init = simulation.ScenarioArrays.__init__

    def keep(self, *a, **k):
        init(self, *a, **k)
        made.append(self)

    simulation.ScenarioArrays.__init__ = keep
    for nodes, jobs, queues, shape, seed, features in [
            (60, 400, 20, "mixed", 3, {}), (80, 600, 20, "one-gpu", 5, {}),
            (40, 300, 10, "mixed", 9, {"sub_groups": 0.3}), (40, 300, 16, "mixed", 4, {"dra_nodes": 0.3}),
            (400, 2400, 40, "mixed", 6, {})]:
        snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
        if features:
            snap = bench.with_features(snap, seed=seed, **features)
        run_cycle(snap)
    golden = Path(__file__).resolve().parents[2].parent / "shared" / "scenarios" / "reclaim_preempt"
    for f in sorted(golden.glob("*.yaml")) if golden.is_dir() else []:
        check_snapshot(load_scenario(f))
    return sum(ka.entry_calls for ka in made), len(victim_run.CHECKED)


@pytest.mark.skipif(not __import__("scheduler_engine.kernels").kernels.JIT_ENABLED,
                    reason="no entry point without the JIT")
def test_scenario_entry_point_calls_have_the_versions_types():
    """Every call of the scenario kernel through its entry point (no type check of its own: a
    mismatched array would be read wrongly) passes the numba types of the version it runs and the
    argument objects it was looked up with, on generated clusters (plain, one-GPU, subgroups, DRA,
    400 nodes: stack, log and journal arrays grown and the tuple rebuilt) and the reclaim / preempt
    golden scenarios; and such calls happen. In a fresh process (one compiled version)."""
    from tests.support.fresh_process import fresh_process_ints

    calls, checked = fresh_process_ints("tests.scheduler_engine.test_kernels_scenario:_scenario_entry_check")
    assert checked >= calls > 200


def _fns(k):
    return [k] + ([k.py_func] if hasattr(k, "py_func") else [])


def test_job_order_into_is_the_four_stable_sorts():
    """``scenario.job_order_into`` (the scenario's pop order in one merge sort) gives the permutation of
    the four stable sorts it replaced (rank, then elastic state, then priority, then leaf, each keyed as
    float64; the input in reverse job order, the beneficiary's elastic state 0), with many ties in every
    key, on lengths around the merge widths; compiled and interpreted."""
    from scheduler_engine.kernels import scenario as sk

    rng = np.random.default_rng(21)
    J = 50
    for m in list(range(0, 20)) + [31, 32, 33, 64, 65, 100]:
        for _ in range(4):
            jl = rng.choice(J, size=m, replace=m > J).astype(np.int64)
            jst = np.zeros((J, 6), dtype=np.int64)
            jst[:, sk.J_PRIO] = rng.integers(-2, 2, J)
            jst[:, sk.J_RANK] = rng.integers(0, 4, J)
            jst[:, sk.J_MIN] = rng.integers(0, 3, J)
            num_active = rng.integers(0, 3, J).astype(np.int64)
            job_queue = rng.integers(0, 3, J).astype(np.int64)
            ordr = np.arange(m - 1, -1, -1, dtype=np.int64)
            for level in range(4):  # (the former passes, least significant key first)
                kk = np.zeros(m)
                for x in range(m):
                    li = int(ordr[x])
                    jj = jl[li]
                    if level == 0:
                        kk[x] = jst[jj, sk.J_RANK]
                    elif level == 1:
                        act, mn = num_active[jj], jst[jj, sk.J_MIN]
                        kk[x] = 0 if li == 0 else (0 if act < mn else (1 if act == mn else 2))
                    elif level == 2:
                        kk[x] = jst[jj, sk.J_PRIO]
                    else:
                        kk[x] = job_queue[jj]
                ordr = ordr[np.argsort(kk, kind="stable")]
            for fn in _fns(sk.job_order_into):
                a = np.full(m + 3, -7, dtype=np.int64)
                a[:m] = np.arange(m - 1, -1, -1)
                b = rng.integers(-9, 9, m + 3)
                fn(a, m, b, jl, jst, num_active, job_queue)
                assert a[:m].tolist() == ordr.tolist(), m
                assert (a[m:] == -7).all()


def test_build_paths_keys_as_build_on_the_leaves_paths():
    """``scenario.build_paths`` (the scenario tournament's keys over its leaves' paths only) returns
    the leaf ``victim_keys.build`` (placement keys, every queue reset first) returns, with the same
    representative on every queue and the same key on each represented one, for random leaf sets
    (leaves of several depths, inner queues holding jobs, dead leaves among them, shared ancestors,
    equal requests) in a row on the same arrays, each put back to "no live leaf" on its paths after
    it as the scenario kernel does; compiled and interpreted."""
    from scheduler_engine.kernels import scenario as sk
    from scheduler_engine.kernels import victim_keys as vk
    from scheduler_engine.ordering import kernel_static

    for seed, queues in ((1, 40), (2, 120)):
        s = CycleState(bench.generate(nodes=40, jobs=300, queues=queues, seed=seed, shape="mixed"))
        by_depth, path, kid_ptr, kids, stat, tot, prio = kernel_static(s)
        Q = s.Q
        depths = {int((path[q] >= 0).sum()) for q in range(Q)}
        assert len(depths) > 1  # (queues at several depths: the order of the levels matters)
        rng = np.random.default_rng(seed)
        tb = rng.permutation(Q).astype(np.int64)
        for fn in _fns(sk.build_paths):
            live2, req2 = np.zeros(Q, dtype=np.bool_), np.zeros((Q, 3))
            key2, vrep2 = np.zeros((Q, 6)), np.full(Q, -1, dtype=np.int64)
            for _ in range(150):
                n = int(rng.integers(1, 10))
                leaves = rng.choice(Q, size=n, replace=False).astype(np.int64)
                live, req = np.zeros(Q, dtype=np.bool_), np.zeros((Q, 3))
                key, vrep = np.zeros((Q, 6)), np.full(Q, -1, dtype=np.int64)
                for q in leaves[rng.random(n) < 0.8].tolist():
                    live[q] = live2[q] = True
                    req[q] = req2[q] = rng.integers(0, 3, 3) * 0.5
                want = vk.build(False, by_depth, kid_ptr, kids, stat, tot, prio, tb, s.queue_alloc, live, req, key,
                                vrep)
                got = fn(leaves, n, path, kid_ptr, kids, stat, tot, prio, tb, s.queue_alloc, live2, req2, key2, vrep2)
                assert got == want
                assert (vrep2 == vrep).all()
                on = vrep >= 0
                assert (key2[on] == key[on]).all()
                for q in leaves.tolist():  # (run_scenario's clean-up)
                    live2[q] = False
                    vrep2[path[q][path[q] >= 0]] = -1
                assert not live2.any() and (vrep2 == -1).all()


def test_scenario_tournament_rows_left_clean_after_cycles(monkeypatch):
    """The scenario kernel's tournament rows (live leaves, representatives) are back at "no live leaf"
    after every call, as ``build_paths`` assumes of the next one: whole cycles whose scenarios hold
    several leaves leave them so."""
    made = []
    init = simulation.ScenarioArrays.__init__

    def keep(self, *a, **k):
        init(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(simulation.ScenarioArrays, "__init__", keep)
    for seed, shape in ((3, "mixed"), (4, "one-gpu")):
        _decisions(bench.generate(nodes=60, jobs=420, queues=20, seed=seed, shape=shape))
    assert made
    for ka in made:
        live, vrep = ka._tour[8], ka._tour[11]
        assert live.dtype == np.bool_ and not live.any()
        assert vrep.dtype == np.int64 and (vrep == -1).all()


def test_learn_refuses_jobs_with_claims(monkeypatch):
    """``ScenarioArrays.learn`` flags a job whose tasks hold DRA claims as not plain (the scenario kernel
    does not take claims): whole cycles on a cluster with a DRA pool learn such jobs and flag each 0,
    while the jobs it flags 1 hold none (``_any_claims`` lets a cluster without claims skip the per-task
    look)."""
    made = []
    init = simulation.ScenarioArrays.__init__

    def keep(self, *a, **k):
        init(self, *a, **k)
        made.append(self)

    monkeypatch.setattr(simulation.ScenarioArrays, "__init__", keep)
    snap = bench.with_features(bench.generate(nodes=60, jobs=420, queues=20, seed=5, shape="mixed"),
                               seed=5, dra_nodes=0.3)
    _decisions(snap)
    from scheduler_engine.kernels import scenario as sk

    claimed_seen = 0
    for ka in made:
        s = ka.state
        assert ka._any_claims
        ok = ka.jst[:, sk.J_OK]
        for j in np.flatnonzero(ok >= 0).tolist():
            t0, cnt = int(s.job_start[j]), int(s.job_count[j])
            claimed = bool(s.task_has_claims[t0:t0 + cnt].any())
            claimed_seen += claimed
            if claimed:
                assert ok[j] == 0, j
    assert claimed_seen > 0
