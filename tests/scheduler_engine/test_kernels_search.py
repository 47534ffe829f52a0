"""The compiled victim search (kernels/search.py): the victim loop with the scenarios that do not place
the beneficiary simulated, rolled back and pruned in compiled code (``accumulation.USE_SEARCH_KERNEL``).

Why these tests: a kept scenario skips every Python step Python's ``VictimSolver._try`` takes for it
(the counters, the journal's object half and its restore, the rollback's bookkeeping, the pruning), so
the kernel has to leave exactly what those steps leave. Compared with the search kernel off, on
generated clusters (whole and shared GPUs, gangs, subgroups, DRA, small search budgets):

* every prefix search: its outcome, ``tried``, ``steps``, the sets it tried, the leaves it passed over,
  and what the state looks like after it (``resources_freed``, ``_protect_len``, gpuGroup
  maps and device marks, gpuGroup lists, the released set the next rollback reads);
* after every prefix search, each shape row of the compiled scenarios caught up on the change log from
  its position answers as a fresh index (the kernel drops a kept scenario's log entries and catches up
  the rows it queried instead of logging its nodes twice);
* every solve's ``last_reason`` (including "search budget exhausted after N scenarios" and "gave up
  after N scenarios", which count the kept scenarios);
* whole cycles (decisions, events);
* with a wall-clock budget, the kernel hands back every ``SEARCH_YIELD`` scenarios (Python reads the
  clock between calls) and decides the same.

Each test also checks that scenarios were kept in the kernel, so that a search kernel that is never
used cannot pass.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

from scheduler_engine import bench
from scheduler_engine.actions import get_action
from scheduler_engine.cycle import run_cycle_with_state
from scheduler_engine.kernels import scenario, search, victim_run
from scheduler_engine.solvers import accumulation
from scheduler_engine.solvers.job_solver import VictimSolver
from scheduler_engine.state import CycleState

ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")

CLUSTERS = [
    (40, 320, 12, "mixed", 3, {}, {}),
    (60, 400, 30, "one-gpu", 2, {}, {}),
    (40, 300, 10, "mixed", 9, {"sub_groups": 0.3}, {}),
    (40, 300, 16, "mixed", 4, {"dra_nodes": 0.3}, {}),
    (50, 360, 20, "mixed", 5, {}, {"scenario_search_budget": 40, "max_consolidation_preemptees": 2}),
    (120, 900, 40, "mixed", 7, {}, {}),
    (150, 1000, 40, "mixed", 2, {}, {}),  # (kept scenarios that made a gpuGroup: taken back)
]


def _snap(nodes, jobs, queues, shape, seed, features, config):
    snap = bench.generate(nodes=nodes, jobs=jobs, queues=queues, seed=seed, shape=shape)
    if features:
        snap = bench.with_features(snap, seed=seed, **features)
    for k, v in config.items():
        setattr(snap.config, k, v)
    return snap


def _state_digest(s: CycleState, solver: VictimSolver) -> str:
    """What a search leaves behind that Python reads later (beyond the decisions)."""
    h = hashlib.sha256()
    for a in (s.task_state, s.task_node, s.task_alloc, s.dev_shared, s.dev_free, s.dev_rel, s._node_both,
              s._queue_alloc_both, s.job_num_active_arr, s.job_version, s.queue_version):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(repr((s.resources_freed, s._protect_len, len(s._journal), len(s.events))).encode())
    h.update(repr([sorted(g.items()) for g in s.dev_group]).encode())
    h.update(repr(list(s.task_gpu_groups)).encode())
    h.update(repr(sorted(solver.sim.placer.released)).encode())
    return h.hexdigest()


def _rows_caught_up(s: CycleState) -> int:
    """Check that every shape row of the compiled scenarios answers, once caught up on the change log
    from its position, what a fresh index over every node answers (the same fit flags, the same keys
    of fitting nodes, the same best node). The compiled search drops a kept scenario's log entries
    (``scenario.forget_log``), so the log differs with the search kernel on; what must not differ is
    what its readers get out of it. Returns the rows checked."""
    ka = s.__dict__.get("_victims_scenario_arrays")
    if not ka:
        return 0
    log = s.node_log
    every = np.arange(s.N, dtype=np.int64)
    for r in range(ka.S):
        fixed = (ka.sint, ka.sfl, ka.sched, ka.sel, ka._no_sel, ka._no_frac, ka.ndev, ka.cap)
        state = (s._node_both, s.dev_free, s.dev_rel, s.dev_shared, *ka.dra)
        kept = [a.copy() for a in (ka.idle_ok, ka.any_ok, ka.key, ka.hk, ka.hn, ka.hs)]
        delta = np.ascontiguousarray(log.buf[int(ka.pos[r]):log.n])
        n_kept = scenario.query_row(r, delta, *fixed, *kept, *state)
        fresh = [a.copy() for a in (ka.idle_ok, ka.any_ok, ka.key, ka.hk, ka.hn, ka.hs)]
        fresh[5][r, 0] = 0  # (an empty heap, every node evaluated: 8 N > N)
        n_fresh = scenario.query_row(r, every, *fixed, *fresh, *state)
        assert n_kept == n_fresh, r
        assert np.array_equal(kept[0][r], fresh[0][r]) and np.array_equal(kept[1][r], fresh[1][r]), r
        fit = fresh[1][r]
        assert np.array_equal(kept[2][r][fit], fresh[2][r][fit]), r
    return ka.S


def _record(monkeypatch, snap, on: bool, max_scenarios: int | None = None):
    """Run a cycle with the search kernel on or off; every prefix search and every solve recorded,
    and how many scenarios the kernel kept / handed back simulated / yielded after."""
    searches: list = []
    solves: list = []
    counts = {"kept": 0, "simulated": 0, "yield": 0, "calls": 0, "max_kept": 0, "groups": 0, "learnt": 0, "rows": 0}
    real_run, real_solve, real_call, real_learn = (accumulation.PrefixSearch.run, VictimSolver.solve,
                                                   accumulation.PrefixSearch._search_call,
                                                   accumulation.PrefixSearch._learn)

    def learn(self, d):
        ok = real_learn(self, d)
        counts["learnt"] += ok
        return ok

    def run(self):
        res = real_run(self)
        sv = self.solver
        searches.append((sv.action, self.j, tuple(self.partial), tuple(self.recorded),
                         None if res is None else list(res[0].victims), sv.tried, sv.steps,
                         sorted(tuple(sorted(k)) for k in self.tried_all()), sorted(self.retook),
                         sorted(self.blocked), sv.out_of_time, _state_digest(self.state, sv)))
        counts["rows"] += _rows_caught_up(self.state)
        return res

    def solve(self, j, tasks):
        if max_scenarios is not None:
            self.max_scenarios = max_scenarios
        res = real_solve(self, j, tasks)
        solves.append((self.action, j, res is not None, self.tried, self.last_reason))
        return res

    def call(self, d):
        code = real_call(self, d)
        kept = int(d["ds"][search.D_KEPT])
        counts["calls"] += 1
        counts["kept"] += kept
        counts["max_kept"] = max(counts["max_kept"], kept)
        counts["simulated"] += code == search.SIMULATED
        counts["yield"] += code == search.YIELD
        counts["groups"] = max(counts["groups"], int(d["ds"][search.D_GROUPS]))  # (per search, summed over calls)
        return code

    with monkeypatch.context() as m:
        m.setattr(accumulation.PrefixSearch, "run", run)
        m.setattr(VictimSolver, "solve", solve)
        m.setattr(accumulation.PrefixSearch, "_search_call", call)
        m.setattr(accumulation.PrefixSearch, "_learn", learn)
        m.setattr(accumulation, "USE_SEARCH_KERNEL", on)
        state = CycleState(snap)
        for a in ACTIONS:
            get_action(a)(state)
    return searches, solves, [repr(e) for e in state.events], counts


@pytest.mark.parametrize("nodes,jobs,queues,shape,seed,features,config", CLUSTERS)
def test_searches_are_the_same_with_and_without_the_search_kernel(monkeypatch, nodes, jobs, queues, shape, seed,
                                                                  features, config):
    """Search by search (outcome, tried, steps, tried sets, pruned leaves, the state after it), solve by
    solve (``last_reason``) and event by event, the kernel-kept scenarios leave what Python's steps leave."""
    snap = _snap(nodes, jobs, queues, shape, seed, features, config)
    s_on, v_on, e_on, n_on = _record(monkeypatch, snap, True)
    s_off, v_off, e_off, n_off = _record(monkeypatch, snap, False)
    # scenarios stayed in the kernel, placing ones came back, sets with jobs not looked at yet went back to
    # be looked at and were simulated in the kernel then
    assert n_on["kept"] > 0 and n_on["simulated"] > 0 and n_on["learnt"] > 0 and n_on["rows"] > 0
    assert n_off["calls"] == 0  # (off: the search kernel is never called)
    assert len(s_on) == len(s_off)
    for a, b in zip(s_on, s_off):
        assert a == b
    assert v_on == v_off
    assert e_on == e_off
    if config.get("scenario_search_budget"):
        assert any("search budget exhausted after" in r[4] for r in v_on)
    if seed == 2 and shape == "mixed":
        assert n_on["groups"] > 0  # a kept scenario made a gpuGroup (the device's mark is taken back)


def test_the_scenario_limit_counts_the_kept_scenarios(monkeypatch):
    """``max_scenarios`` reached inside a kept stretch: the loop ends the victim's emission and Python
    gives up with the same count ("gave up after N scenarios") as without the kernel."""
    snap = _snap(*CLUSTERS[-1])
    on = _record(monkeypatch, snap, True, max_scenarios=6)
    off = _record(monkeypatch, snap, False, max_scenarios=6)
    assert on[3]["kept"] > 0
    assert any("gave up after" in r[4] for r in on[1])
    assert on[:3] == off[:3]


def test_a_time_budget_hands_back_every_few_scenarios(monkeypatch):
    """With a wall-clock budget the kernel keeps at most ``SEARCH_YIELD`` scenarios per call (Python
    reads the clock between calls); without one, as many as it can. A budget that never runs out
    decides as no budget."""
    snap = _snap(120, 900, 40, "mixed", 7, {}, {})
    counts = {"yield": 0, "max_kept": 0}
    real = accumulation.PrefixSearch._search_call

    def call(self, d):
        code = real(self, d)
        counts["yield"] += code == search.YIELD
        counts["max_kept"] = max(counts["max_kept"], int(d["ds"][search.D_KEPT]))
        return code

    with monkeypatch.context() as m:
        m.setattr(accumulation.PrefixSearch, "_search_call", call)
        m.setattr(accumulation, "SEARCH_YIELD", 3)
        _, timed = run_cycle_with_state(snap, time_budget=1e9, clock=lambda: 0.0)
    assert counts["yield"] > 0 and counts["max_kept"] == 3
    counts["yield"] = counts["max_kept"] = 0
    with monkeypatch.context() as m:
        m.setattr(accumulation.PrefixSearch, "_search_call", call)
        _, free = run_cycle_with_state(snap)
    assert counts["yield"] == 0 and counts["max_kept"] > 3
    assert timed.to_json() == free.to_json()


def test_search_codes_do_not_collide():
    """The search kernel's own codes are new to the loop's (Python's loop tells them apart)."""
    loop = {victim_run.PY, victim_run.END, victim_run.BUDGET, victim_run.JOBS, victim_run.SIM, victim_run.DONE,
            victim_run.ROOM}
    assert len(loop) == 7 and not {search.SIMULATED, search.YIELD} & loop and search.SIMULATED != search.YIELD
