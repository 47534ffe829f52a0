"""The victim solver shared by the evicting actions (consolidation, reclaim, preempt).

Spec sections c, d, g and i; the algorithm follows KAI's job solver (``solvers/job_solver.go``):

* The beneficiary's next tasks (the missing gang, or one elastic task) are solved **one more task
  at a time**: first for task 1, then tasks 1..2 starting from the victims that solved 1, and so
  on; only the solution for all of them is kept (all-or-nothing), earlier ones are undone.
* For each prefix, scenarios are built by **accumulating** candidate victims in victim order
  (:mod:`.accumulation`, :mod:`.victim_order`) and filtered by GPU count (:mod:`.idle_gpus`).
* A scenario is **simulated** on the shared :class:`~scheduler_engine.state.CycleState`
  (:mod:`.simulation`): evict every victim, then place the beneficiary and re-place the evicted
  victims in normal queue/job order. The first scenario that fits and passes the action's
  validator wins.

Pruning (reclaim and preempt; issue #8; spec k.1 leaves the choice among possible victim sets
open). Accumulating every victim tried so far made a solve quadratic: most failed scenarios were
victims whose own queue the re-placement serves before the beneficiary, so they simply took
their room back, and every later "all accumulated" scenario re-placed them again. After a
failed scenario of a prefix, therefore:

* a victim that was re-placed before the beneficiary's turn (back on its node or elsewhere)
  leaves the accumulated set, and later candidates of its leaf are passed over: with its own
  victims evicted that leaf is served before the beneficiary again;
* when the validator refused because of what a queue gave up (the strategy check on B*, or the
  sibling saturation check on S), the victims under that queue leave the set and later ones
  under it are passed over: more victims from there only lower its remaining share.

Victims recorded from the previous prefix are kept. Consolidation does not prune (moving victims
is its point) but, as KAI's ``--max-consolidation-preemptees``, looks at no more than
``config.max_consolidation_preemptees`` victim jobs (default 16) per pending job. Reclaim and
preempt give a job up for the cycle once its search took ``config.scenario_search_budget`` steps
(victims examined plus victims simulated, default 5000), as KAI bounds its scenario search.

``VictimSolver(state, action, candidates, validator)``; ``solve(j, tasks)`` -> :class:`Solution`
or ``None`` (``last_reason`` then says why).
"""
from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping
from typing import Callable, Iterable, Sequence

import numpy as np

from ..kernels import scenario as _scenario_k
from ..kernels import search as _search_k
from ..state import ACTIVE_STATES, CycleState
from .accumulation import PrefixSearch
from .simulation import Scenario, Simulation


_ACTIVE_LUT = np.zeros(max(ACTIVE_STATES) + 1, dtype=np.bool_)
_ACTIVE_LUT[list(ACTIVE_STATES)] = True
_NO_TASKS = np.zeros(0, dtype=np.int64)


@dataclass
class Solution:
    scenario: Scenario
    scenarios_tried: int = 0

    @property
    def released(self) -> list[int]:
        return self.scenario.released

    @property
    def moved(self) -> list[int]:
        return self.scenario.moved


class RowsByTask(Mapping):
    """``dict(zip(tasks, rows))``, made on its first read: a scenario's ``orig_alloc``. The compiled
    reclaim validator reads the rows as an array (``Scenario.valloc``), so the dict of row views (~0.3 us
    per victim) is made only for a scenario whose victims are described (a commit) or validated in
    Python; the same keys and the very same row views either way."""

    __slots__ = ("_tasks", "_rows", "_d")

    def __init__(self, tasks: list[int], rows: np.ndarray) -> None:
        self._tasks = tasks
        self._rows = rows
        self._d: dict | None = None

    def _dict(self) -> dict:
        d = self._d
        if d is None:
            d = self._d = dict(zip(self._tasks, self._rows))
        return d

    def __getitem__(self, t):
        return self._dict()[t]

    def __iter__(self):
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())


# None = accept, else the reason it is refused: its text, or a function that writes it (called only
# when the text is shown: the last refusal of a failed solve, :meth:`VictimSolver.failure_text`)
Validator = Callable[[Scenario], "str | Callable[[], str] | None"]
Candidates = Callable[[], Iterable[int]]


class VictimSolver:
    """KAI's job solver: prefixes of the beneficiary's tasks, each searched by :class:`PrefixSearch`,
    every scenario simulated by :meth:`_try` (module docstring)."""

    def __init__(self, state: CycleState, action: str, candidates: Candidates, validator: Validator | None,
                 max_scenarios: int = 100000, prune: bool = False, max_victim_jobs: int = -1,
                 search_budget: int = -1, memo: dict | None = None) -> None:
        self.state = state
        # what every search computes from the cluster alone (per-node GPU base, the bound), shared by
        # the solves of one job loop between two commits: the cluster is the same at the start of
        # each of them (failed scenarios and prefixes are rolled back); the caller empties it when
        # the cluster changes (run_evicting, at a commit). None: computed per search
        self.memo = memo
        self.action = action
        self.candidates = candidates
        self.validator = validator
        self.sim = Simulation(state)
        self.max_scenarios = max_scenarios
        # victims examined + victims simulated (summed over scenarios) for one job, all prefixes;
        # -1 = no limit
        # (config.scenarioSearchBudget; KAI bounds its scenario search the same way, by time)
        self.search_budget = search_budget
        # set when the cycle's time budget ran out inside a search (scheduler_engine.budget): the job
        # was not decided, so the action reports it as not tried instead of failed
        self.out_of_time = False
        self.steps = 0
        # prune (reclaim, preempt): after a failed scenario, victims that took their place back
        # before the beneficiary's turn, and victims under a queue the validator refused to take
        # from, are no longer accumulated (module docstring, "Pruning")
        self.prune = prune
        # at most this many distinct victim jobs are accumulated per prefix (-1 = no limit)
        self.max_victim_jobs = max_victim_jobs
        # set by the last failed _try: its victims re-placed before the beneficiary's turn, and the
        # queue the validator refused to take from (-1)
        self._served_first: list[int] = []
        self._served_arr = _NO_TASKS  # the same as an array (the compiled pruning's input)
        self._blocked_fail = -1
        self.last_reason = ""
        self.tried = 0
        self.refusals: list = []  # the validator's refusals (texts, or functions that write them)
        # after a failed solve: the prefix reason when no scenario was simulated, else None
        self.unsimulated_failure: str | None = None

    # ---------------------------------------------------------------- driver
    def solve(self, j: int, tasks: Sequence[int]) -> Solution | None:
        s = self.state
        tasks = list(tasks)
        self.tried = 0
        self.steps = 0
        self.refusals = []
        self.last_reason = ""
        recorded: list[int] = []
        cp0 = s.checkpoint()
        result: Scenario | None = None
        self.unsimulated_failure = None
        for k in range(1, len(tasks) + 1):
            partial = tasks[:k]
            res = self._solve_partial(j, partial, recorded)
            if res is None:
                self.sim.rollback(cp0)
                raw = self.last_reason
                if self.tried == 0:
                    # nothing was simulated (so k == 1): the outcome depended only on the candidate
                    # set, the first task's GPU request and node selector, and the cluster state
                    self.unsimulated_failure = raw
                self.last_reason = self.failure_text(raw, k, len(tasks), self.tried, self.refusals)
                return None
            scenario, cp = res
            recorded = list(scenario.victims)
            if k < len(tasks):
                self.sim.rollback(cp)
            result = scenario
        if result is None:
            return None
        return Solution(result, self.tried)

    @staticmethod
    def failure_text(raw: str, k: int, n: int, tried: int, refusals: Sequence) -> str:
        """``last_reason`` after prefix k of n tasks failed (``raw``: the prefix's own reason or "")."""
        what = f"{k} of {n} tasks" if n > 1 else "its task"
        if raw:
            return f"for {what}: {raw}"
        if refusals:
            why = refusals[-1]
            return f"no acceptable victim set for {what}: {why if isinstance(why, str) else why()}"
        if tried == 0:
            return f"no eligible victims for {what}"
        return f"no victim set among the eligible ones makes room for {what} ({tried} scenarios simulated)"

    def _solve_partial(self, j: int, partial: list[int], recorded: list[int]):
        """Scenarios for one prefix of the beneficiary's tasks; the first that fits and validates wins
        (``(scenario, checkpoint)``), else ``None``."""
        return PrefixSearch(self, j, partial, recorded).run()

    # ---------------------------------------------------------------- one scenario
    def _try(self, j: int, partial: list[int], victims: list[int], arr: np.ndarray | None = None):
        """Simulate one victim set; ``(scenario, checkpoint)`` if the beneficiary fits and the
        validator accepts, else ``None`` with the state rolled back. ``arr``: ``victims`` as an int64
        array when the caller has it (the compiled loop's sets), else it is converted here."""
        s = self.state
        self.tried += 1
        self.steps += len(victims)
        cp = s.checkpoint()
        # what the victims held before (one gather each; the per-task dicts are built only for a
        # scenario that places, most do not)
        v = np.asarray(victims, dtype=np.int64) if arr is None else arr  # (for the gathers)
        orig_allocs = s.task_alloc.take(v, axis=0)  # (the rows; take: ~2 us less than the fancy index)
        orig_nodes = s.task_node.take(v).tolist()
        placed = self.sim.run(j, partial, victims)
        return self._tried(j, partial, victims, v, cp, placed, orig_allocs, orig_nodes)

    def finish_simulated(self, j: int, partial: list[int], r: int):
        """:meth:`_try` of the scenario the compiled victim search simulated and handed back
        (:data:`kernels.search.SIMULATED`: it placed the beneficiary, or its journal entries have an
        object half; ``r``: the scenario kernel's result): counted there, its victims and what they held
        before in the scenario kernel's rows, its results in ``io``; from here on as :meth:`_try` after
        ``Simulation.run``."""
        s, sim = self.state, self.sim
        ka = sim._ka
        io = ka.io
        nb, nv = int(io[_scenario_k.IO_NP]), int(io[_scenario_k.IO_NV])
        v = ka.pv[nb:nb + nv].copy()
        victims = v.tolist()
        cp = s.checkpoint()  # (the journal's object half is not written yet: its length is the scenario's start)
        orig_allocs = ka.va[:nv].copy()
        orig_nodes = ka.vs[_search_k.VS_NODE, :nv].tolist()
        sim.placer.released = {t for t, x in zip(victims, ka.vs[_search_k.VS_RUN, :nv].tolist()) if x}
        placed = sim.after_compiled(nv, int(io[_scenario_k.IO_I0]), r) == 1
        return self._tried(j, partial, victims, v, cp, placed, orig_allocs, orig_nodes)

    def _tried(self, j: int, partial: list[int], victims: list[int], v: np.ndarray, cp, placed: bool,
               orig_allocs: np.ndarray, orig_nodes: list[int]):
        """:meth:`_try` after the simulation: the victims served first and the rollback of a scenario
        that did not place, else the outcome and the validator (rolled back when it refuses)."""
        s = self.state
        self._served_first = []
        self._served_arr = _NO_TASKS
        self._blocked_fail = -1
        if not placed:
            if self.prune:
                # re-placed before the beneficiary's turn (back on their node, or elsewhere)
                self._served_arr = v[_ACTIVE_LUT[s.task_state[v]]]
                self._served_first = self._served_arr.tolist()
            self.sim.rollback(cp)
            return None
        released, moved, kept = self.sim.outcome(victims)
        orig_alloc = RowsByTask(victims, orig_allocs)  # rows of the gathered copy
        orig_node = dict(zip(victims, orig_nodes))
        scenario = Scenario(j, list(partial), list(victims), released, moved, kept, orig_alloc, orig_node,
                            varr=v, valloc=orig_allocs)
        if self.validator is not None:
            why = self.validator(scenario)
            if why:
                self._blocked_fail = scenario.blocked
                self.refusals.append(why)
                self.sim.rollback(cp)
                return None
        return scenario, cp
