"""Shared victim-scenario solver of the evicting actions (consolidation, reclaim, preempt).

Spec sections c, d, g and i; the algorithm follows KAI's job solver:

* The beneficiary's next tasks (the missing gang, or one elastic task) are solved **one more task
  at a time**: first for task 1, then tasks 1..2 starting from the victims that solved 1, and so
  on; only the solution for all of them is kept (all-or-nothing), earlier ones are undone.
* For each prefix, scenarios are built by **accumulating** candidate victims in victim order
  (:class:`VictimQueue`: reversed queue order with the popped victims subtracted, reversed job
  order). An elastic victim gives up one surplus task per step (reverse task order) and goes back
  into the queue with the rest; a job at or below its ``minAvailable`` gives up all its tasks.
  After each addition the scenarios tried are: per node of the newest victim, the recorded
  victims plus the accumulated victims of the jobs on that node (node-local, as KAI's by-node
  scenarios), then every accumulated victim (fallback for multi-node placements). Victim sets
  that cannot fit by per-node GPU count (free + releasing + victims) are never simulated, and a
  prefix for which even evicting every candidate could not fit fails at once.
* A scenario is **simulated** on the shared :class:`~scheduler_engine.state.CycleState` (undo
  journal): evict every victim task, then place the beneficiary and re-place the evicted victims
  in normal queue/job order, every placement pipelined. A victim put back on its own node (same
  device for a shared GPU) is un-evicted and stays Running; one placed elsewhere is Pipelined
  there (its old node keeps the resources as releasing). The beneficiary must fit entirely or the
  scenario fails. The first scenario that fits and passes the action's validator wins.

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

Why the simulation instead of arithmetic: it exercises the same node order, device choice, GPU
sharing, topology domains and queue capacity checks as a real placement, so the engine never
evicts for a placement that would then not happen.

Public API
----------
``VictimSolver(state, action, candidates, validator)``; ``solve(j, tasks)`` -> :class:`Solution`
or ``None`` (``last_reason`` then says why); :func:`commit_events` writes the
explanations. Helpers used by the actions: :func:`is_elastic`, :func:`tasks_to_evict`,
:func:`preempt_min_runtime`, :func:`reclaim_min_runtime`, :func:`min_runtime_protected`,
:func:`within_preemption_delay`, :func:`job_ready`, :class:`FailedShapes` (scheduling signatures),
:func:`protected_non_elastic`, :func:`place_job_pipelined`, and the job loop reclaim and preempt
share: :func:`run_evicting` driven by an :class:`EvictingAction`.

Helpers this module adds on top of ``state.py`` (kept here so state.py stays the allocate owner's):
``_unevict`` (Releasing -> Running again through the state's undo journal) and ``_place_released``
(placing a task that is Releasing, which ``CycleState.place`` only accepts for Pending tasks).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from ..ordering import JobQueue, job_order_key, next_tasks_to_allocate, queue_less, task_order

try:  # the allocate action's node order, so simulations place exactly as a real placement would
    from .allocate import node_keys as _node_keys
except ImportError:  # pragma: no cover
    _node_keys = None
try:  # its incrementally maintained per-shape fit masks and node keys (first node in that order)
    from .allocate import _ShapeIndex, _node_key_one
except ImportError:  # pragma: no cover
    _ShapeIndex = _node_key_one = None

try:  # the comparator's parts, to cache one queue's profile across comparisons (same package)
    from ..ordering import _QueueProfile, _profile_less
except ImportError:  # pragma: no cover - fall back to the public comparator
    _QueueProfile = _profile_less = None
try:
    from ..ordering import _dom
except ImportError:  # pragma: no cover
    _dom = None
from ..ordering import _alloc_part, _queue_key, _static, chain_tiebreaks
from ..snapshot import CPU, GPU, MEM, NRES, TaskState
from ..state import EPS, CycleState, fmt_amount

_PEND = int(TaskState.PENDING)
_RUN = int(TaskState.RUNNING)
_REL = int(TaskState.RELEASING)
_BIND = int(TaskState.BINDING)
_PIPE = int(TaskState.PIPELINED)
_SUCC = int(TaskState.SUCCEEDED)
_ACTIVE = (_RUN, _BIND, _PIPE)
_ACTIVE_LUT = np.zeros(max(int(x) for x in TaskState) + 1, dtype=bool)
_ACTIVE_LUT[list(_ACTIVE)] = True
_ZERO_REQ = np.zeros(NRES)
_ZERO_REQ.flags.writeable = False


# ================================================================================ job helpers
def is_elastic(state: CycleState, j: int) -> bool:
    """KAI ``IsElastic``: fewer tasks are required (minAvailable) than the job has."""
    return int(state.job_min_available[j]) < int(state.job_count[j])


def job_ready(state: CycleState, j: int) -> bool:
    """Ready for scheduling: active plus pending tasks can reach ``minAvailable``."""
    return state.job_num_active(j) + len(state.job_pending_tasks(j)) >= int(state.job_min_available[j])


def within_preemption_delay(state: CycleState, j: int) -> bool:
    """A job younger than its ``preemptionDelay`` may not cause evictions (spec i)."""
    delay = float(state.jobs.preemption_delay[j])
    if math.isnan(delay) or delay <= 0:
        return False
    return float(state.jobs.created_minutes_ago[j]) * 60.0 < delay


def tasks_to_evict(state: CycleState, tasks: Sequence[int], min_available: int) -> tuple[list[int], bool]:
    """KAI ``GetTasksToEvict`` on a victim representative holding ``tasks`` (its active tasks).

    Above ``minAvailable`` only one surplus task goes (the last in task order: lowest task
    priority, unlabelled before labelled, newest); at or below it the whole remaining gang goes.
    Returns ``(tasks, more)`` where ``more`` says the job keeps tasks that may be taken later.
    """
    active = [t for t in tasks if state.task_state[t] in _ACTIVE]
    if not active:
        return [], False
    if len(active) == 1:  # the usual single-task victim: task order of one is itself
        return active, min_available < 1
    rev = list(reversed(task_order(state, active)))
    if min_available < len(rev):
        return [rev[0]], True
    return rev, False


def _started_seconds_ago(state: CycleState, j: int) -> float:
    v = float(state.jobs.started_minutes_ago[j])
    return v * 60.0 if not math.isnan(v) else math.nan


def min_runtime_protected(state: CycleState, j: int, min_runtime: float) -> bool:
    """``now < lastStart + minRuntime``; a job that never started is not protected."""
    ago = _started_seconds_ago(state, j)
    if math.isnan(ago) or not min_runtime or min_runtime <= 0:
        return False
    return ago < min_runtime


def protected_non_elastic(state: CycleState, min_runtime: float) -> np.ndarray:
    """(J,) bool: non-elastic jobs started less than ``min_runtime`` seconds ago (vectorised filter)."""
    ago = np.asarray(state.jobs.started_minutes_ago, dtype=float) * 60.0
    elastic = state.job_min_available < state.job_count
    with np.errstate(invalid="ignore"):
        young = ago < min_runtime
    return young & ~np.isnan(ago) & ~elastic & (min_runtime > 0)


def protected_non_elastic_by(state: CycleState, min_runtime: np.ndarray) -> np.ndarray:
    """(J,) bool: :func:`protected_non_elastic` with a per-job ``min_runtime`` (J,) array."""
    ago = np.asarray(state.jobs.started_minutes_ago, dtype=float) * 60.0
    elastic = state.job_min_available < state.job_count
    with np.errstate(invalid="ignore"):
        young = ago < min_runtime
    return young & ~np.isnan(ago) & ~elastic & (min_runtime > 0)


def _walk_up(state: CycleState, q: int, field_values: np.ndarray) -> float:
    for a in state.queue_path[q]:
        v = float(field_values[int(a)])
        if not math.isnan(v):
            return v
    return math.nan


def preempt_min_runtime(state: CycleState, victim_leaf: int) -> float:
    """Spec d: from the victim's leaf up to the root, the first ``preemptMinRuntime`` set; else default."""
    v = _walk_up(state, victim_leaf, state.queues.preempt_min_runtime)
    return float(state.config.default_preempt_min_runtime or 0.0) if math.isnan(v) else v


def reclaim_min_runtime(state: CycleState, reclaimer_leaf: int, victim_leaf: int) -> float:
    """Spec d: ``reclaimMinRuntime`` by ``config.reclaimMinRuntimeResolution`` (lca | queue)."""
    field_values = state.queues.reclaim_min_runtime
    default = float(state.config.default_reclaim_min_runtime or 0.0)
    method = (state.config.reclaim_min_runtime_resolution or "lca").lower()
    if method == "queue":
        v = _walk_up(state, victim_leaf, field_values)
        return default if math.isnan(v) else v
    rpath = [int(x) for x in state.queue_path[reclaimer_leaf]][::-1]  # top .. leaf
    vpath = [int(x) for x in state.queue_path[victim_leaf]][::-1]
    if rpath[0] != vpath[0]:
        v = float(field_values[vpath[0]])
        return default if math.isnan(v) else v
    depth = 0
    while depth < min(len(rpath), len(vpath)) and rpath[depth] == vpath[depth]:
        depth += 1
    # vpath[depth - 1] is the lowest common ancestor; one level down toward the victim
    start = vpath[depth] if depth < len(vpath) else vpath[-1]
    v = _walk_up(state, start, field_values)
    return default if math.isnan(v) else v


# ================================================================================ signatures
def _constraint_signature(state: CycleState, j: int) -> tuple:
    """Scheduling-constraint signature (node selectors, topology): not the resource shape."""
    sel = tuple(sorted({state.task_selector_key[t] for t in state.job_task_range(j)}))
    return (sel, state.jobs.topology_required[j], state.jobs.topology_preferred[j])


def _sorted_requests(state: CycleState, tasks: Iterable[int]) -> list[tuple]:
    return sorted(tuple(float(x) for x in state.task_order_req[t]) for t in tasks)


def _le(a: tuple, b: tuple) -> bool:
    return all(x <= y + EPS for x, y in zip(a, b))


class FailedShapes:
    """Scheduling signatures (spec i): after a job fails, skip same-signature jobs that are not easier.

    One instance per queue (reclaim, preempt) or per action (consolidation), as upstream.
    """

    def __init__(self, state: CycleState) -> None:
        self.state = state
        self.reps: dict[tuple, int] = {}

    def blocking(self, j: int) -> int | None:
        """The failed job that makes ``j`` not worth trying, or ``None``."""
        rep = self.reps.get(_constraint_signature(self.state, j))
        if rep is None or self._easier(j, rep):
            return None
        return rep

    def _easier(self, j: int, rep: int) -> bool:
        p1 = self.state.job_pending_tasks(j)
        p2 = self.state.job_pending_tasks(rep)
        if not p1 or not p2:
            return False
        if len(p2) > len(p1):
            return True
        r1, r2 = _sorted_requests(self.state, p1), _sorted_requests(self.state, p2)
        for i, a in enumerate(r1):
            if i >= len(r2):
                return False
            if _le(a, r2[i]):
                if _le(r2[i], a):
                    continue
                return True
        return False

    def record(self, j: int) -> None:
        key = _constraint_signature(self.state, j)
        cur = self.reps.get(key)
        if cur is not None and not self._smaller(j, cur):
            return
        self.reps[key] = j

    def _smaller(self, j: int, cur: int) -> bool:
        p1 = self.state.job_pending_tasks(j)
        p2 = self.state.job_pending_tasks(cur)
        if not p1 or not p2 or len(p1) > len(p2):
            return False
        r1, r2 = _sorted_requests(self.state, p1), _sorted_requests(self.state, p2)
        return all(_le(a, b) for a, b in zip(r1, r2))


# ================================================================================ victim order
def _active_tasks(state: CycleState, j: int) -> list[int]:
    """Active tasks of job j (small jobs: a plain loop beats numpy's per-call overhead)."""
    st = state.task_state
    s0 = int(state.job_start[j])
    return [t for t in range(s0, s0 + int(state.job_count[j])) if st[t] in _ACTIVE]


class _Rep:
    """A victim job representative: the job and the active tasks it still offers."""

    __slots__ = ("job", "tasks", "alloc", "seq")

    def __init__(self, state: CycleState, job: int, tasks: Sequence[int], seq: int) -> None:
        self.job = job
        self.tasks = list(tasks)
        act = [t for t in self.tasks if state.task_state[t] in _ACTIVE]
        # a tuple of Python floats: the victim order adds and compares it per pop, where numpy's
        # per-call overhead on 3-element vectors dominated (same values: the sums are numpy's)
        if len(act) == 1:
            self.alloc = tuple(state.task_alloc[act[0]].tolist())
        else:
            self.alloc = tuple(state.task_alloc[act].sum(axis=0).tolist()) if act else (0.0, 0.0, 0.0)
        self.seq = seq


def _name_rank(state: CycleState) -> np.ndarray:
    """Rank of every job name (ascending), cached on the state (victim order reverses names)."""
    r = getattr(state, "_victims_name_rank", None)
    if r is None:
        names = state.jobs.names
        order = sorted(range(len(names)), key=names.__getitem__)
        r = np.empty(len(names), dtype=np.int64)
        r[order] = np.arange(len(names))
        state._victims_name_rank = r
    return r


def _queue_kids(state: CycleState) -> dict[int, list[int]]:
    """Children of every queue with children (-1: the top level), in queue order; cached on the state."""
    hit = getattr(state, "_victims_queue_kids", None)
    if hit is None:
        hit = {}
        for q, p in enumerate(state.queues.parent):
            hit.setdefault(int(p) if int(p) >= 0 else -1, []).append(q)
        state._victims_queue_kids = hit
    return hit


def _victim_tiebreaks(state: CycleState) -> list[int] | None:
    """Rules 7-8 of the victim order as one integer per queue, or ``None`` if they are no total order.

    Every parent's (and the top level's) children must pass :func:`ordering.chain_tiebreaks`
    (allocatable vectors form a chain); then, queue ranks being unique, the reversed comparator is
    a strict total order. Static for the cycle: cached on the state.
    """
    hit = getattr(state, "_victims_tiebreaks", False)
    if hit is not False:
        return hit
    static = _static(state)
    tb: list[int] | None = [0] * state.Q
    for ks in _queue_kids(state).values():
        part = chain_tiebreaks(static, ks, True, state.Q)
        if part is None:
            tb = None
            break
        for c, v in part.items():
            tb[c] = v
    state._victims_tiebreaks = tb
    return tb


def _victim_static_ranks(state: CycleState) -> tuple[np.ndarray, np.ndarray]:
    """Per job: dense rank of its (leaf, priority) pair, and its rank by (older first, name
    descending) among all jobs. Both static for the cycle: cached on the state."""
    hit = getattr(state, "_victims_static_ranks", None)
    if hit is None:
        s = state
        prio = np.asarray(s.jobs.priority).astype(np.int64)
        leaves = s.job_queue_arr.astype(np.int64)
        created = np.asarray(s.jobs.created_minutes_ago, dtype=float)
        nr = _name_rank(s)
        order = np.lexsort((-nr, created))
        rank = np.empty(s.J, dtype=np.int64)
        rank[order] = np.arange(s.J)
        pairs = np.lexsort((prio, leaves))
        new = np.ones(s.J, dtype=bool)
        if s.J:
            new[1:] = (leaves[pairs][1:] != leaves[pairs][:-1]) | (prio[pairs][1:] != prio[pairs][:-1])
        group = np.empty(s.J, dtype=np.int64)
        group[pairs] = np.cumsum(new) - 1
        hit = state._victims_static_ranks = (group, rank)
    return hit


class VictimQueue:
    """Candidate victims in victim order (spec b, reversed), with push-back of elastic remainders.

    Queue nodes are compared with the queue comparator reversed, each leaf represented by the
    victims already popped from it plus its next one (their allocations are subtracted, rule 5);
    inside a leaf jobs come in reversed job order (lowest priority, above minAvailable, newest).

    The initial candidates of each leaf are sorted once with numpy (lazy: a representative object
    is only built for a leaf's head); pushed-back remainders live in a small heap per leaf.

    Which leaf comes next: when the allocatable vectors of every parent's children form a chain
    (:func:`_victim_tiebreaks`, the usual case) the comparator is a strict total order, so every
    queue keeps its rules-1..6 key (negated: victim order) plus a static rules-7..8 integer in a
    lazy heap of its parent, and a pop or push re-keys only the queues on that leaf's path:
    O(depth x log children) per victim instead of rescanning every sibling on the path. The
    winner is the one the sequential scan picks (with a strict total order the scan returns the
    maximum). Otherwise the winners are kept per node and rescanned in children order
    (:meth:`_tournament`), which resolves incomparable ties exactly as the comparator's scan.
    """

    def __init__(self, state: CycleState, jobs: Iterable[int]) -> None:
        self.state = state
        s = state
        jobs = np.fromiter((int(j) for j in jobs), dtype=np.int64) if not isinstance(jobs, np.ndarray) \
            else jobs.astype(np.int64)
        self.sorted: dict[int, np.ndarray] = {}
        self.ptr: dict[int, int] = {}
        self.heaps: dict[int, list] = {}
        self.head_rep: dict[int, _Rep] = {}
        self.popped_alloc: dict[int, np.ndarray] = {}
        self._seq = 0
        self._ver: dict[int, int] = {}  # bumped when a leaf's head or popped victims change
        self._cmp: dict[int, tuple] = {}  # queue -> (leaf, leaf version, profile): valid while both hold
        self._base: dict[int, object] = {}
        self._total = state.total.tolist()
        self._tree = None
        self._live: set[int] | None = None
        self._rep: dict[int, int] | None = None  # node -> leaf representing it in victim order
        self._dirty: set[int] = set()  # leaves popped from / pushed to since the winners were computed
        # heap mode (class docstring): per queue its key entry in its parent's heap (root = -1)
        self._tb = _victim_tiebreaks(state)
        self._qheap: dict[int, list] | None = None
        self._vrep: dict[int, int] = {}  # queue -> leaf it is represented by
        self._qkey: dict[int, tuple] = {}
        self._qstamp: dict[int, int] = {}
        self._qlive: set[int] = set()
        self._static = _static(state) if self._tb is not None else None
        self._kids = _queue_kids(state)
        self._qver = state.queue_version
        memo = getattr(state, "_victims_key_memo", None)
        if memo is None or len(memo) != state.Q:
            memo = state._victims_key_memo = [None] * state.Q
        self._memo = memo
        reps = getattr(state, "_victims_whole_reps", None)
        if reps is None:
            reps = state._victims_whole_reps = {}
        self._reps = reps
        if jobs.size:
            act = s.job_num_active_arr[jobs]
            m = s.job_min_available[jobs]
            el = np.where(act < m, 0, np.where(act == m, 1, 2))
            # victim order inside each leaf, leaves grouped: one sort of one integer key, then
            # split at leaf bounds. The key is (leaf, priority) group, elastic state descending,
            # then the static (older first, name descending) rank: the lexsort of those five
            # columns, with the static parts ranked once per cycle (_victim_static_ranks)
            group, rank = _victim_static_ranks(s)
            order = np.argsort((group[jobs] * 3 + (2 - el)) * s.J + rank[jobs], kind="stable")
            jobs = jobs[order]
            leaves = s.job_queue_arr[jobs]
            cuts = np.flatnonzero(leaves[1:] != leaves[:-1]) + 1
            for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, leaves.size].tolist()):
                q = int(leaves[lo])
                self.sorted[q] = jobs[lo:hi]
                self.ptr[q] = 0

    def _key_of(self, j: int, n_active: int, seq: int) -> tuple:
        s = self.state
        m = int(s.job_min_available[j])
        el = 0 if n_active < m else (1 if n_active == m else 2)
        return (int(s.jobs.priority[j]), -el, float(s.jobs.created_minutes_ago[j]), -int(_name_rank(s)[j]), seq)

    def push(self, j: int, tasks: Sequence[int]) -> None:
        if not tasks:
            return
        self._seq += 1
        rep = _Rep(self.state, j, tasks, self._seq)
        n_act = sum(1 for t in rep.tasks if self.state.task_state[t] in _ACTIVE)
        q = int(self.state.job_queue_arr[j])
        heapq.heappush(self.heaps.setdefault(q, []), (self._key_of(j, n_act, self._seq), self._seq, rep))
        self.head_rep.pop(q, None)
        if self._live is not None and q not in self._live:
            self._live.add(q)
            self._tree = None  # a leaf came back: rebuild the tree at the next pop
        self._ver[q] = self._ver.get(q, 0) + 1
        self._dirty.add(q)
        if self._qheap is not None:
            self._rekey_path(q)

    def _head(self, q: int) -> tuple[str, _Rep] | None:
        """The leaf's next victim: ("heap", rep) or ("sorted", rep); cached until popped/pushed."""
        rep = self.head_rep.get(q)
        if rep is not None:
            return rep
        h = self.heaps.get(q)
        arr = self.sorted.get(q)
        i = self.ptr.get(q, 0)
        cand_sorted = None
        if arr is not None and i < arr.size:
            j = int(arr[i])
            # the order key is only needed against a pushed-back remainder
            cand_sorted = (self._key_of(j, self.state.job_num_active(j), 0) if h else None, j)
        if h and (cand_sorted is None or h[0][0] < cand_sorted[0]):
            out = ("heap", h[0][2])
        elif cand_sorted is not None:
            out = ("sorted", self._whole_rep(cand_sorted[1]))
        else:
            return None
        self.head_rep[q] = out
        return out

    def _whole_rep(self, j: int) -> _Rep:
        """A candidate's first representative: all its active tasks and what they hold.

        The same jobs head their leaves in solve after solve; what they offer changes only with
        the job (``job_version``, bumped by every change of its tasks, rollbacks included), so it
        is kept on the state across victim queues.
        """
        s = self.state
        cache = self._reps
        ver = int(s.job_version[j])
        hit = cache.get(j)
        if hit is None or hit[0] != ver:
            hit = cache[j] = (ver, _Rep(s, j, _active_tasks(s, j), 0))
        return hit[1]  # shared: nobody mutates a representative (the solver only reads its tasks)

    def _leaves(self) -> list[int]:
        out = []
        for q in set(self.sorted) | set(self.heaps):
            arr = self.sorted.get(q)
            if (arr is not None and self.ptr[q] < arr.size) or self.heaps.get(q):
                out.append(q)
        return out

    def _nonempty(self, q: int) -> bool:
        arr = self.sorted.get(q)
        return bool((arr is not None and self.ptr[q] < arr.size) or self.heaps.get(q))

    def __bool__(self) -> bool:
        if self._live is None:
            self._live = set(self._leaves())
        return bool(self._live)

    def _leaf_victims(self, q: int) -> tuple:
        """What leaf q gives up in the victim order: its popped victims plus its next one."""
        nxt = self._head(q)[1].alloc
        base = self.popped_alloc.get(q)
        return nxt if base is None else (base[0] + nxt[0], base[1] + nxt[1], base[2] + nxt[2])

    def _tree_of(self, leaves):
        """Active queue tree (children lists, top-level nodes) over the non-empty leaves.

        Built when first needed or after a leaf came back; an emptied leaf is taken out in place
        (:meth:`_remove_leaf`), which leaves the others in the order a rebuild would give.
        """
        if self._tree is not None:
            return self._tree[1], self._tree[2]
        s = self.state
        children: dict[int, list[int]] = {}
        tops: list[int] = []
        seen: set[int] = set()
        for lq in sorted(leaves):
            path = [int(x) for x in s.queue_path[lq]]
            for child, par in zip(path, path[1:] + [-1]):
                if child in seen:
                    break
                seen.add(child)
                (children.setdefault(par, []) if par >= 0 else tops).append(child)
        self._tree = (None, children, tops)
        return children, tops

    def _remove_leaf(self, leaf: int) -> None:
        if self._tree is None:
            return
        _, children, tops = self._tree
        path = self.state.queue_path_list[leaf]
        for child, par in zip(path, path[1:] + [-1]):
            kids = tops if par < 0 else children.get(par)
            kids.remove(child)
            if kids or par < 0:
                break
            del children[par]  # the parent lost its last active child: remove it one level up

    def _profile(self, q: int, lq: int):
        """Victim-order profile of queue q represented by leaf lq's victims (popped + next).

        Only rule 5 (dominant share with the victims subtracted) depends on the victims, and the
        queue state does not change while the queue is in use: the rest is computed once per queue.
        """
        ver = self._ver.get(lq, 0)
        hit = self._cmp.get(q)  # one slot per queue: (leaf, its version, profile)
        if hit is not None and hit[0] == lq and hit[1] == ver:
            return hit[2]
        s = self.state
        v = self._leaf_victims(lq)
        if _dom is None:
            p = _QueueProfile(s, q, list(v), True)
        else:
            base = self._base.get(q)
            if base is None:
                base = self._base[q] = _QueueProfile(s, q, None, True)
            a = s.queue_alloc[q]
            dom = _dom([float(a[0] - v[0]), float(a[1] - v[1]), float(a[2] - v[2])], base.allocatable, self._total)
            p = _LightProfile(base.key[:4] + (round(dom, 12),) + base.key[5:], base.allocatable, base.rank)
        self._cmp[q] = (lq, ver, p)
        return p

    def _first(self, c: int, b: int) -> bool:
        """Victim order is the queue order reversed: is node c taken before node b?"""
        rep = self._rep
        if _QueueProfile is None:
            return not queue_less(self.state, c, b, self._leaf_victims(rep[c]), self._leaf_victims(rep[b]),
                                  victim=True)
        return not _profile_less(self._profile(c, rep[c]), self._profile(b, rep[b]))

    def _scan(self, nodes: list[int]) -> int:
        b = nodes[0]
        if _QueueProfile is None:
            for c in nodes[1:]:
                if self._first(c, b):
                    b = c
            return b
        rep = self._rep
        pb = self._profile(b, rep[b])
        for c in nodes[1:]:  # same comparisons as _first, each node's profile looked up once
            pc = self._profile(c, rep[c])
            if not _profile_less(pc, pb):
                b, pb = c, pc
        return b

    def _tournament(self, children: dict[int, list[int]], tops: list[int]) -> int:
        """The leaf whose victim comes next: winners kept per node, recomputed on changed paths only.

        A node's winner depends only on its children's profiles, and a pop or push changes one
        leaf's profile (and possibly the tree above it): so only the nodes on the paths of leaves
        changed since the last call are rescanned, deepest first, children in the same order as a
        full walk (identical winners, ties included).
        """
        rep = self._rep
        paths = self.state.queue_path_list
        if rep is None:
            rep = self._rep = {}

            def build(q: int) -> None:
                kids = children.get(q)
                if kids:
                    for c in kids:
                        build(c)
                    rep[q] = rep[self._scan(kids)]
                else:
                    rep[q] = q

            for q in tops:
                build(q)
        else:
            nodes: set[int] = set()
            for lq in self._dirty:
                nodes.update(paths[lq])
            for q in sorted(nodes, key=lambda x: -len(paths[x])):
                kids = children.get(q)
                if kids:
                    rep[q] = rep[self._scan(kids)]
                elif q in self._live:
                    rep[q] = q
                else:
                    rep.pop(q, None)
        self._dirty.clear()
        return rep[self._scan(tops)]

    def pop(self) -> tuple[int, list[int]] | None:
        if self._live is None:
            self._live = set(self._leaves())
        if not self._live:
            return None
        if len(self._live) == 1:
            leaf = next(iter(self._live))
        elif self._tb is not None:
            if self._qheap is None:
                self._heap_build()
            leaf = self._vrep[self._heap_best(-1)]
        else:
            children, tops = self._tree_of(self._live)
            leaf = self._tournament(children, tops)
        where, rep = self._head(leaf)
        if where == "heap":
            heapq.heappop(self.heaps[leaf])
        else:
            self.ptr[leaf] += 1
        self.head_rep.pop(leaf, None)
        self._ver[leaf] = self._ver.get(leaf, 0) + 1
        self._dirty.add(leaf)
        base = self.popped_alloc.get(leaf)
        a = rep.alloc
        self.popped_alloc[leaf] = a if base is None else (base[0] + a[0], base[1] + a[1], base[2] + a[2])
        if not self._nonempty(leaf):
            self._live.discard(leaf)
            self._remove_leaf(leaf)
        if self._qheap is not None:
            self._rekey_path(leaf)
        return rep.job, rep.tasks

    # ---------------------------------------------------------------- heap mode
    def _heap_build(self) -> None:
        """Key every queue above a live leaf, level by level from the leaves up, into its parent's
        heap (each heap built once with heapify: a fresh build has no stale entries)."""
        s = self.state
        paths = s.queue_path_list
        heaps: dict[int, list] = {}
        self._qheap = heaps
        levels: dict[int, set[int]] = {}
        for lq in self._live:
            for q in paths[lq]:
                levels.setdefault(len(paths[q]), set()).add(q)
        vrep, qkey, qstamp, qlive, tb = self._vrep, self._qkey, self._qstamp, self._qlive, self._tb
        for depth in sorted(levels, reverse=True):
            touched: list[list] = []
            for q in sorted(levels[depth]):
                h = heaps.get(q)
                if h:  # an inner queue: its children's heap is complete (deeper level)
                    lq = vrep[h[0][2]]
                elif q in self._live:
                    lq = q
                else:
                    continue
                vrep[q] = lq
                key = qkey[q] = self._key(q, self._leaf_victims(lq))
                qlive.add(q)
                st = qstamp[q] = qstamp.get(q, 0) + 1
                par = paths[q][1] if depth > 1 else -1
                ph = heaps.get(par)
                if ph is None:
                    ph = heaps[par] = []
                    touched.append(ph)
                ph.append((key, tb[q], q, st))
            for ph in touched:
                heapq.heapify(ph)
        self._dirty.clear()

    def _key(self, q: int, req: tuple) -> tuple:
        """Queue q's victim-order key (rules 1-6, negated) when it gives up ``req``.

        Memoised per queue on the state: (queue_version, allocation part, {request: key}); the
        version only grows (undo bumps it too), so equal versions mean equal allocations.
        """
        ver = int(self._qver[q])
        memo = self._memo[q]
        if memo is None or memo[0] != ver:
            memo = self._memo[q] = (ver, _alloc_part(self._static[q], self.state.queue_alloc[q].tolist()), {})
        key = memo[2].get(req)
        if key is None:
            key = memo[2][req] = _queue_key(self._static[q], memo[1], req, True)
        return key

    def _set_key(self, q: int, par: int, lq: int, req: tuple | None) -> None:
        """Queue q is represented by leaf ``lq`` (-1: none left) giving up ``req``: (re)enter its
        key in its parent's heap if it changed."""
        if lq < 0:
            self._vrep.pop(q, None)
            if q in self._qlive:
                self._qlive.discard(q)
                self._qstamp[q] = self._qstamp.get(q, 0) + 1
            return
        self._vrep[q] = lq
        key = self._key(q, req)
        qlive = self._qlive
        if q in qlive and self._qkey.get(q) == key:
            return
        self._qkey[q] = key
        qlive.add(q)
        st = self._qstamp[q] = self._qstamp.get(q, 0) + 1
        h = self._qheap.get(par)
        if h is None:
            h = self._qheap[par] = []
        if h and h[0][2] == q:
            # q's previous entry is on top (after a pop q was its parent's winner): replace it
            heapq.heapreplace(h, (key, self._tb[q], q, st))
            return
        heapq.heappush(h, (key, self._tb[q], q, st))
        if len(h) > 2 * len(self._kids[par]) + 8:  # drop stale entries now and then
            stamps = self._qstamp
            h[:] = [e for e in h if e[2] in qlive and stamps[e[2]] == e[3]]
            heapq.heapify(h)

    def _heap_best(self, par: int) -> int:
        """The child of ``par`` (-1: the top level) whose victims come first, or -1."""
        h = self._qheap.get(par)
        if not h:
            return -1
        stamps, live = self._qstamp, self._qlive
        while h:
            e = h[0]
            if e[2] in live and stamps[e[2]] == e[3]:
                return e[2]
            heapq.heappop(h)
        return -1

    def _rekey_path(self, leaf: int) -> None:
        """After a pop from / push to ``leaf``: re-key the queues on its path, bottom-up."""
        path = self.state.queue_path_list[leaf]
        lq = leaf if leaf in self._live else -1
        req = self._leaf_victims(lq) if lq >= 0 else None
        last = len(path) - 1
        for i, q in enumerate(path):
            if i:
                b = self._heap_best(q)
                nl = self._vrep[b] if b >= 0 else -1
                if nl != lq:
                    lq = nl
                    req = self._leaf_victims(nl) if nl >= 0 else None
            self._set_key(q, path[i + 1] if i < last else -1, lq, req)
        self._dirty.clear()


class _LightProfile:
    """Duck-typed queue profile (``key``, ``allocatable``, ``rank``) for ``ordering._profile_less``."""

    __slots__ = ("key", "allocatable", "rank")

    def __init__(self, key, allocatable, rank) -> None:
        self.key = key
        self.allocatable = allocatable
        self.rank = rank


# ================================================================================ placement
def _unevict(state: CycleState, t: int) -> bool:
    """Releasing (evicted in this cycle) -> Running again on its node, through the undo journal.

    Only possible while the resources it releases are not promised to a pipelined task.
    """
    if state.task_state[t] != _REL:
        return False
    n = int(state.task_node[t])
    alloc = state.task_alloc[t]
    r0, r1, r2 = state.node_releasing[n].tolist()
    a0, a1, a2 = alloc.tolist()
    if r0 < a0 - EPS or r1 < a1 - EPS or r2 < a2 - EPS:
        return False
    devs = state.task_devices[t]
    per = float(alloc[GPU]) if state.task_is_shared[t] else 1.0
    drel = state.dev_rel[n]  # row view (element access is cheaper than [n, d])
    if any(drel[d] < per - EPS for d in devs):
        return False
    state._record(t, n)
    state.node_releasing[n] -= alloc
    for d in devs:
        drel[d] -= per
    state.task_state[t] = _RUN
    j = int(state.task_job[t])
    state._queues_add(j, alloc, 1)
    state.job_num_active_arr[j] += 1
    return True


def _place_released(state: CycleState, t: int, n: int, devices) -> None:
    """Pipeline a Releasing victim onto node n (``CycleState.place`` only takes Pending tasks)."""
    state.task_state[t] = _PEND
    try:
        state.place(t, n, pipelined=True, devices=devices)
    except Exception:
        state.task_state[t] = _REL
        raise


class _PlaceFail(Exception):
    pass


class Placer:
    """Pipelined-only, all-or-nothing placement used inside victim simulations.

    Node order: binpack = least available (free plus releasing) first, spread = most available
    first, on GPU for GPU tasks and on CPU otherwise; ties by node index. A required topology
    restricts all tasks of the attempt to one domain of the label (tightest domain first).
    """

    def __init__(self, state: CycleState) -> None:
        self.state = state
        self.placement = dict(state.config.placement or {})
        self.released: set[int] = set()  # tasks evicted from Running in the current scenario
        # task signature -> its shape index (one dict per state, so per cycle), or None: no index
        self._index_of: dict | None = None
        if _ShapeIndex is not None:
            self._index_of = state.__dict__.setdefault("_victims_shape_index", {})

    def fix_after_rollback(self) -> None:
        """Rolling back a ``_place_released`` restores the interim Pending state: make it Releasing."""
        s = self.state
        for t in self.released:
            if s.task_state[t] == _PEND and s.task_node[t] >= 0:
                s.task_state[t] = _REL

    def rollback(self, cp) -> None:
        self.state.rollback(cp)
        self.fix_after_rollback()

    def node_order(self, t: int, cand: np.ndarray, idle_ok: np.ndarray | None = None) -> list[int]:
        """Candidate nodes in the allocate action's KAI node order (:func:`allocate.node_keys`).

        Shared-GPU group fit, then fits-on-free (nodeavailability), then binpack / spread on free
        plus releasing; ties by node index. The same order as a real placement, so a simulation
        decides exactly what the cycle then does.
        """
        s = self.state
        idx = np.flatnonzero(cand)
        if idx.size <= 1:
            return [int(i) for i in idx]
        cpu_only = s.task_request[t, GPU] <= EPS and s.task_gpu_memory[t] <= 0
        col = CPU if cpu_only else GPU
        spread = self.placement.get("cpu" if cpu_only else "gpu", "binpack") == "spread"
        idle = np.zeros(idx.size, dtype=bool) if idle_ok is None else idle_ok[idx]
        if _node_keys is not None:
            keys = _node_keys(s, t, idx, idle.astype(float), col, spread)
            return idx[np.argsort(keys, kind="stable")].tolist()
        avail = s.node_idle[idx, col] + s.node_releasing[idx, col]
        key = -avail if spread else avail
        order = np.lexsort((idx, key, (~idle).astype(float)))
        return [int(i) for i in idx[order]]

    def place_job(self, j: int, tasks: Sequence[int]) -> bool:
        """Place ``tasks`` of job j (pipelined) all-or-nothing; the state is unchanged on failure."""
        s = self.state
        if not tasks:
            return True
        q = int(s.job_queue_arr[j])
        if len(tasks) == 1:  # (one row: the same values as the one-row sum; nothing to order)
            if s.queue_over_capacity(q, s.task_quota_req[tasks[0]], not s.job_preemptible_arr[j]):
                return False
            tasks = list(tasks)
        else:
            if s.queue_over_capacity(q, s.task_quota_req[list(tasks)].sum(axis=0), not s.job_preemptible_arr[j]):
                return False
            tasks = task_order(s, tasks)
        required = s.jobs.topology_required[j]
        preferred = s.jobs.topology_preferred[j]
        if required:
            for mask in self._domains(required, None, tasks):
                if self._place_preferred(j, tasks, mask, preferred):
                    return True
            return False
        return self._place_preferred(j, tasks, None, preferred)

    def _place_preferred(self, j, tasks, within, preferred) -> bool:
        if preferred:
            for mask in self._domains(preferred, within, tasks):
                if self._place_all(j, tasks, mask):
                    return True
        return self._place_all(j, tasks, within)

    def _domains(self, label: str, within, tasks) -> list[np.ndarray]:
        s = self.state
        values = s.label_values(label)
        groups: dict[str, list[int]] = {}
        for n, v in enumerate(values):
            if v is None or not s.node_schedulable[n] or (within is not None and not within[n]):
                continue
            groups.setdefault(v, []).append(n)
        gpu_job = bool(s.task_request[list(tasks), GPU].sum() > 0 or s.task_gpu_memory[list(tasks)].sum() > 0)
        col = GPU if gpu_job else CPU
        spread = self.placement.get("gpu" if gpu_job else "cpu", "binpack") == "spread"
        out = []
        for v, ns in sorted(groups.items()):
            mask = np.zeros(s.N, dtype=bool)
            mask[ns] = True
            avail = float((s.node_idle[ns, col] + s.node_releasing[ns, col]).sum())
            out.append((-avail if spread else avail, mask))
        out.sort(key=lambda x: x[0])
        return [m for _, m in out]

    def _place_all(self, j: int, tasks: Sequence[int], within) -> bool:
        s = self.state
        cp = s.checkpoint()
        for t in tasks:
            if not self._place_one(j, t, within):
                self.rollback(cp)
                return False
        return True

    def _shape_index(self, t: int):
        """The per-shape node index of task t's shape (:class:`allocate._ShapeIndex`), shared by
        every simulation of the cycle: kept on the state, it catches up through ``state.node_log``
        with the nodes changed since its last query (placements, evictions and their rollbacks)."""
        s = self.state
        sig = s.task_signature(t)
        idx = self._index_of.get(sig)
        if idx is None:
            cpu_only = s.task_request[t, GPU] <= EPS and s.task_gpu_memory[t] <= 0
            col = CPU if cpu_only else GPU
            spread = self.placement.get("cpu" if cpu_only else "gpu", "binpack") == "spread"
            idx = self._index_of[sig] = _ShapeIndex(s, t, col, spread)
        return idx

    def _place_one(self, j: int, t: int, within) -> bool:
        s = self.state
        released = s.task_state[t] == _REL
        old = int(s.task_node[t]) if released else -1
        q = s.job_queue(j)
        nonpre = not s.job_is_preemptible(j)
        if within is None and self._index_of is not None:
            # fast path: the first node in placement order from the shape index, which nearly
            # always takes the task; if it does not, the full scan below walks the same order
            # (it retries this node first: every check before a placement is side-effect free)
            idx = self._shape_index(t)
            n = idx.query()
            if released and old >= 0 and not idx.any_ok[old] and s.node_schedulable[old]:
                # the old node is a candidate outside the fit mask (key as node_keys gives it)
                ko = _node_key_one(s, t, old, False, idx.col, idx.spread)
                if n < 0 or ko < idx.key[n] or (ko == idx.key[n] and old < n):
                    if self._try_node(t, old, released, old, q, nonpre):
                        return True
                    if n < 0:
                        return False  # the old node was the only candidate
                    # n is the next candidate in order
                if self._try_node(t, n, released, old, q, nonpre):
                    return True
            elif n < 0:
                return False
            elif self._try_node(t, n, released, old, q, nonpre):
                return True
        idle_ok, any_ok = s.fit_masks(t, within)
        if released and old >= 0:
            any_ok = any_ok.copy()
            any_ok[old] = bool(s.node_schedulable[old]) and (within is None or bool(within[old]))
        if not any_ok.any():
            return False
        for n in self.node_order(t, any_ok, idle_ok):
            if self._try_node(t, n, released, old, q, nonpre):
                return True
        return False

    def _try_node(self, t: int, n: int, released: bool, old: int, q: int, nonpre: bool) -> bool:
        """Place task t on node n if it can go there (True); no state change otherwise."""
        s = self.state
        if s.task_is_mem[t] and s.queue_over_capacity(q, s.task_request_on_node(t, n), nonpre):
            return False
        if released and n == old:
            if s.task_is_shared[t]:
                devs = s.choose_devices(t, n, pipelined=True)
                if devs is None:
                    return False
                if list(devs) == list(s.task_devices[t]):
                    return _unevict(s, t)
                _place_released(s, t, n, devs)  # moved to another device of the same node
                return True
            return _unevict(s, t)
        devs = s.choose_devices(t, n, pipelined=True)
        if devs is None:
            return False
        if released:
            _place_released(s, t, n, devs)
        else:
            s.place(t, n, pipelined=True, devices=devs)
        return True


def place_job_pipelined(state: CycleState, j: int, tasks: Sequence[int]) -> bool:
    """Convenience: pipeline ``tasks`` of job j all-or-nothing (see :class:`Placer`)."""
    return Placer(state).place_job(j, tasks)


# ================================================================================ solver
@dataclass
class Scenario:
    """What a validator sees: the beneficiary, its tasks, and how every victim task ended."""

    job: int
    tasks: list[int]  # beneficiary tasks of this attempt (all placed)
    victims: list[int]  # every victim task of the scenario, in the order they were added
    released: list[int]  # victims that end Releasing (or Pending: placed earlier this cycle)
    moved: list[int]  # victims re-placed on another node / device (Pipelined)
    kept: list[int]  # victims put back where they were (un-evicted, Running)
    orig_alloc: dict[int, np.ndarray]
    orig_node: dict[int, int]
    # set by a validator that refuses: the queue whose released victims made it refuse (more
    # victims from under it cannot help), or -1
    blocked: int = -1


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


Validator = Callable[[Scenario], "str | None"]  # None = accept, else the reason it is refused
Candidates = Callable[[], Iterable[int]]


class VictimSolver:
    """KAI's job solver + pod-accumulated scenario builder + by-pod simulation (module docstring)."""

    def __init__(self, state: CycleState, action: str, candidates: Candidates, validator: Validator | None,
                 max_scenarios: int = 100000, prune: bool = False, max_victim_jobs: int = -1,
                 search_budget: int = -1) -> None:
        self.state = state
        self.action = action
        self.candidates = candidates
        self.validator = validator
        self.placer = Placer(state)
        self.max_scenarios = max_scenarios
        # victims examined + victims simulated (summed over scenarios) for one job, all prefixes;
        # -1 = no limit
        # (config.scenarioSearchBudget; KAI bounds its scenario search the same way, by time)
        self.search_budget = search_budget
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
        self._blocked_fail = -1
        self.last_reason = ""
        self.tried = 0
        self.refusals: list[str] = []
        # after a failed solve: the prefix reason when no scenario was simulated, else None
        self.unsimulated_failure: str | None = None
        # leaves with jobs to place -> (children, tops) of their queue tree (queue paths are fixed)
        self._tree_cache: dict[frozenset, tuple] = {}
        # (id of a cached tree, leaf emptied) -> the tree without that leaf (cached trees live as
        # long as the solver, so their ids are stable): no leaf set to rebuild after every pop
        self._tree_next: dict[tuple[int, int], tuple] = {}

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
                self.placer.rollback(cp0)
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
                self.placer.rollback(cp)
            result = scenario
        if result is None:
            return None
        return Solution(result, self.tried)

    @staticmethod
    def failure_text(raw: str, k: int, n: int, tried: int, refusals: Sequence[str]) -> str:
        """``last_reason`` after prefix k of n tasks failed (``raw``: the prefix's own reason or "")."""
        what = f"{k} of {n} tasks" if n > 1 else "its task"
        if raw:
            return f"for {what}: {raw}"
        if refusals:
            return f"no acceptable victim set for {what}: {refusals[-1]}"
        if tried == 0:
            return f"no eligible victims for {what}"
        return f"no victim set among the eligible ones makes room for {what} ({tried} scenarios simulated)"

    def _solve_partial(self, j: int, partial: list[int], recorded: list[int]):
        """Scenarios for one prefix of the beneficiary's tasks, first that fits and validates wins.

        The recorded victims (those that solved the previous prefix) are tried alone first. Then
        victims accumulate in victim order; after each addition the scenarios emitted are, in
        order: for each node of the newest victim, the recorded victims plus the accumulated
        victims of every job present on that node (node-local: no unrelated eviction elsewhere),
        then all accumulated victims (the fallback for placements that need several nodes).
        Identical victim sets are simulated once; sets that cannot fit by GPU count are skipped.
        """
        s = self.state
        recorded_set = set(recorded)
        if recorded:
            res = self._try(j, partial, list(recorded))
            if res is not None:
                return res
        cands = self.candidates()
        cands = np.asarray(list(cands) if not isinstance(cands, np.ndarray) else cands, dtype=np.int64)
        base = self._fit_base()
        rec_gpu = np.zeros(s.N)
        for t in recorded:
            if s.task_node[t] >= 0:
                rec_gpu[int(s.task_node[t])] += s.task_alloc[t, GPU]
        if cands.size == 0:
            return None
        # bound: even evicting every candidate must leave room somewhere, else no scenario can fit
        is_cand = np.zeros(s.J, dtype=bool)
        is_cand[cands] = True
        act = _ACTIVE_LUT[s.task_state] & is_cand[s.task_job] & (s.task_node >= 0)
        if recorded:
            every = rec_gpu.copy()
            np.add.at(every, s.task_node[act], s.task_alloc[act, GPU])
        else:  # the same per-node sums in the same (task) order, without add.at's overhead
            every = np.bincount(s.task_node[act], weights=s.task_alloc[act, GPU], minlength=s.N).astype(float)
        if not self._may_fit(partial, base, every):
            self.last_reason = ("even evicting every eligible victim would not free enough GPUs on the nodes "
                                f"({len(cands)} eligible jobs)")
            return None
        single = len(partial) == 1 and not s.task_selector_key[partial[0]]
        need1 = float(s.task_order_req[partial[0], GPU]) if single else 0.0
        cap_all = base + rec_gpu
        best_all = float(cap_all.max()) if cap_all.size else 0.0
        # single whole task without a node selector: _may_fit is "some node has free + releasing +
        # victims >= need". Kept incrementally instead of an O(nodes) pass per victim: the nodes
        # where it holds with every (non-dropped) accumulated victim, and the best node with only
        # the recorded victims (adding victims' GPUs never lowers a node's sum: rounding is monotone)
        fast = single and need1 > EPS and s.N > 0
        if fast:
            thr = need1 - 1e-9
            rec_best = best_all
            base_l = base.tolist()
            good_l = (cap_all >= thr).tolist()
            n_good = sum(good_l)
        # several tasks (or a node selector): the all-accumulated filter packs on the nodes that
        # could hold the smallest GPU task, kept incrementally as the accumulated victims change
        gneed = s.task_order_req[partial, GPU]
        multi = not fast and len(partial) > 1 and bool(np.any(gneed > EPS)) and s.N > 0
        if multi:
            mthr = float(gneed[gneed > EPS].min()) - 1e-9
            base_l = base.tolist()
            mgood = set(np.flatnonzero(cap_all >= mthr).tolist())
        # per-node sums updated once per victim: Python floats (the same IEEE additions as numpy's
        # scalars, without their per-element overhead)
        cap_l = cap_all.tolist()
        task_gpu = s.task_alloc[:, GPU]
        vq = VictimQueue(s, cands)
        potential: list[int] = []  # accumulated potential victim tasks, in order
        all_gpu = rec_gpu.copy()
        jobs_on_node: dict[int, set[int]] = {}
        job_potential: dict[int, list[int]] = {}
        pos: dict[int, int] = {}
        tried: set[frozenset] = {frozenset(recorded)} if recorded else set()
        dropped: set[int] = set()  # pruned potential victims (self.prune)
        blocked: set[int] = set()  # queues whose subtree gives no more victims (self.prune)
        retook: set[int] = set()  # leaves whose victims were served before the beneficiary (self.prune)
        own = int(s.job_queue_arr[j])

        def track(n: int) -> None:
            """Node n's accumulated victims changed: update the incremental GPU-count filter."""
            nonlocal n_good
            v = base_l[n] + float(all_gpu[n])
            if fast:
                ok = v >= thr
                if ok != good_l[n]:
                    good_l[n] = ok
                    n_good += 1 if ok else -1
            elif v >= mthr:
                mgood.add(n)
            else:
                mgood.discard(n)

        def drop(ts: Iterable[int]) -> None:
            for t in ts:
                if t in pos and t not in dropped:
                    dropped.add(t)
                    n = int(s.task_node[t])
                    if n >= 0:
                        all_gpu[n] -= task_gpu[t]
                        if fast or multi:
                            track(n)

        def prune() -> None:
            """After a failed scenario (module docstring, "Pruning")."""
            kept = [t for t in self._served_first if t not in recorded_set]
            drop(kept)
            # their leaves are served before the beneficiary's: the rest of their candidates
            # would take their own resources back just the same
            retook.update(q for q in (int(s.job_queue_arr[int(s.task_job[t])]) for t in kept) if q != own)
            b = self._blocked_fail
            if b >= 0:
                blocked.add(b)
                drop([t for t in potential if b in s.queue_path_list[int(s.job_queue_arr[int(s.task_job[t])])]])

        while vq:
            if self.tried >= self.max_scenarios:
                self.last_reason = f"gave up after {self.tried} scenarios"
                return None
            self.steps += 1
            if 0 <= self.search_budget < self.steps:
                self.last_reason = (f"search budget exhausted after {self.tried} scenarios (victims examined plus "
                                    f"victims simulated > scenarioSearchBudget {self.search_budget})")
                return None
            popped = vq.pop()
            if popped is None:
                break
            vj, vtasks = popped
            if retook or blocked:
                vleaf = int(s.job_queue_arr[vj])
                if vleaf in retook or not blocked.isdisjoint(s.queue_path_list[vleaf]):
                    continue
            evict, more = tasks_to_evict(s, vtasks, int(s.job_min_available[vj]))
            if not evict:
                continue
            if any(t in recorded_set for t in evict):
                rest = [t for t in vtasks if t not in recorded_set]
                if rest:
                    vq.push(vj, rest)
                continue
            if vj not in job_potential and 0 <= self.max_victim_jobs <= len(job_potential):
                break  # the victim-job budget is spent
            if more:
                ev = set(evict)
                vq.push(vj, [t for t in vtasks if t not in ev])
            for t in evict:
                pos[t] = len(potential)
                potential.append(t)
            job_potential.setdefault(vj, []).extend(evict)
            hosts = []
            for t in evict:
                n = int(s.task_node[t])
                if n >= 0:
                    g = float(task_gpu[t])
                    all_gpu[n] += g
                    if fast or multi:
                        track(n)
                    c = cap_l[n] = cap_l[n] + g
                    if c > best_all:
                        best_all = c
                    jobs_on_node.setdefault(n, set()).add(vj)
                    if n not in hosts:
                        hosts.append(n)
            if single and best_all < need1 - 1e-9:
                continue  # no node can hold the task yet, whatever subset is evicted
            # node-local emissions (small), then all accumulated victims; the latter is only
            # listed (O(accumulated)) once it passes the GPU-count filter, so a long run of
            # victims that cannot help costs O(1) each, not O(accumulated) time and memory
            live = len(potential) - len(dropped)
            same_as_all = False
            for n in sorted(hosts):
                local = sorted((t for x in jobs_on_node[n] for t in job_potential[x] if t not in dropped),
                               key=pos.__getitem__)
                if not local:
                    continue
                if len(local) == live:
                    same_as_all = True
                key = frozenset(local) | frozenset(recorded)
                if key in tried:
                    continue
                tried.add(key)
                if fast:
                    # only the victims' nodes change: the same sums, in the same order, per node
                    if rec_best < thr:
                        touched: dict[int, float] = {}
                        for t in local:
                            tn = int(s.task_node[t])
                            if tn >= 0:
                                touched[tn] = touched.get(tn, float(rec_gpu[tn])) + float(s.task_alloc[t, GPU])
                        if not any(base_l[tn] + v >= thr for tn, v in touched.items()):
                            continue
                else:
                    gpu = rec_gpu.copy()
                    for t in local:
                        if s.task_node[t] >= 0:
                            gpu[int(s.task_node[t])] += s.task_alloc[t, GPU]
                    if not self._may_fit(partial, base, gpu):
                        continue
                res = self._try(j, partial, list(recorded) + local)
                if res is not None:
                    return res
                if self.prune:
                    prune()
                    live = len(potential) - len(dropped)
            if same_as_all or live <= 0:
                continue
            if fast:
                if n_good == 0:
                    continue
            elif multi and len(mgood) <= 64:  # few candidate nodes: pack on them only
                idx = np.fromiter(sorted(mgood), dtype=np.int64, count=len(mgood))
                if not self._pack(partial, idx, base[idx] + all_gpu[idx]):
                    continue
            elif not self._may_fit(partial, base, all_gpu):  # (many: one vectorised pass finds them)
                continue
            extra = [t for t in potential if t not in dropped] if dropped else list(potential)
            key = frozenset(extra) | frozenset(recorded)
            if key in tried:
                continue
            tried.add(key)
            res = self._try(j, partial, list(recorded) + extra)
            if res is not None:
                return res
            if self.prune:
                prune()
        return None

    # ---------------------------------------------------------------- cheap necessary condition
    def _fit_base(self) -> np.ndarray:
        """Per-node GPUs a pipelined task could use now (free + releasing); unschedulable nodes 0."""
        s = self.state
        base = s.node_idle_gpus() + s.node_releasing_gpus()
        return np.where(s.node_schedulable, base, 0.0)

    def _may_fit(self, partial: list[int], base: np.ndarray, victim_gpu: np.ndarray) -> bool:
        """Idle-GPU filter (upstream accumulated-scenario filters): could the tasks' GPUs fit at all?

        Per node: free + releasing + the victims' GPUs there; tasks are packed best-fit, largest
        first, honouring node selectors. A necessary condition only: scenarios failing it are never
        simulated, the others are.
        """
        s = self.state
        if len(partial) == 1:
            t = partial[0]
            need = float(s.task_order_req[t, GPU])
            if need <= EPS:
                return True
            key = s.task_selector_key[t]
            cap = base + victim_gpu
            if key:
                cap = np.where(s.selector_mask(key), cap, 0.0)
            return float(cap.max()) >= need - 1e-9
        g = s.task_order_req[partial, GPU]
        pos_g = g > EPS
        if not np.any(pos_g):
            return True
        cap = base + victim_gpu
        # only nodes that could hold the smallest GPU task take part (the same choices: a node
        # below that can never pass a task's test, and argmin's first index keeps index order)
        idx = np.flatnonzero(cap >= float(g[pos_g].min()) - 1e-9)
        return self._pack(partial, idx, cap[idx])

    def _pack(self, partial: list[int], idx: np.ndarray, cap: np.ndarray) -> bool:
        """:meth:`_may_fit`'s best-fit packing of several tasks on nodes ``idx`` (ascending: the
        nodes that could hold the smallest GPU task) with per-node GPUs ``cap`` (consumed)."""
        s = self.state
        if idx.size == 0:
            return False
        g = s.task_order_req[partial, GPU]
        for t in [partial[i] for i in np.argsort(-g, kind="stable")]:
            need = float(s.task_order_req[t, GPU])
            if need <= EPS:
                continue
            ok = cap >= need - 1e-9
            key = s.task_selector_key[t]
            if key:
                ok &= s.selector_mask(key)[idx]
            if not ok.any():
                return False
            n = int(np.argmin(np.where(ok, cap, np.inf)))
            cap[n] -= need
        return True

    # ---------------------------------------------------------------- one scenario
    def _try(self, j: int, partial: list[int], victims: list[int]):
        s = self.state
        self.tried += 1
        self.steps += len(victims)
        self._served_first = []
        self._blocked_fail = -1
        cp = s.checkpoint()
        # what the victims held before (one gather each; the per-task dicts are built only for a
        # scenario that places, most do not)
        orig_allocs = s.task_alloc[victims]
        orig_nodes = s.task_node[victims].tolist()
        released_running = set()
        for t in victims:
            if s.task_state[t] == _RUN:
                released_running.add(t)
            s.evict(t)
        self.placer.released = released_running
        victim_jobs = list(dict.fromkeys(s.task_job[victims].tolist()))  # distinct, first-seen order
        victim_task_set = set(victims)
        ok = self._allocate_in_order(j, partial, victim_jobs, victim_task_set)
        if not ok:
            if self.prune:
                # re-placed before the beneficiary's turn (back on their node, or elsewhere)
                self._served_first = [t for t in victims if s.task_state[t] in _ACTIVE]
            self.placer.rollback(cp)
            return None
        released, moved, kept = [], [], []
        for t in victims:
            st = int(s.task_state[t])
            if st == _RUN:
                kept.append(t)
            elif st in (_PIPE, _BIND):
                moved.append(t)
            else:
                released.append(t)
        orig_alloc = dict(zip(victims, orig_allocs))  # rows of the gathered copy
        orig_node = dict(zip(victims, orig_nodes))
        scenario = Scenario(j, list(partial), list(victims), released, moved, kept, orig_alloc, orig_node)
        if self.validator is not None:
            why = self.validator(scenario)
            if why:
                self._blocked_fail = scenario.blocked
                self.refusals.append(why)
                self.placer.rollback(cp)
                return None
        return scenario, cp

    def _victim_tasks_to_allocate(self, vj: int, evicted: set[int]) -> list[int]:
        """Tasks a victim job would re-allocate: its pending and just-evicted tasks (gang or one)."""
        s = self.state
        st = s.task_state
        t0 = int(s.job_start[vj])
        cnt = int(s.job_count[vj])
        if cnt == 1:  # single-task job: nothing to order
            x = st[t0]
            cand = [t0] if (x == _PEND or (x == _REL and t0 in evicted)) else []
        else:
            cand = [t for t in range(t0, t0 + cnt) if (st[t] == _PEND) or (t in evicted and st[t] == _REL)]
            if len(cand) > 1:
                cand = task_order(s, cand)
        if not cand:
            return []
        missing = int(s.job_min_available[vj]) - s.job_num_active(vj)
        if missing > 0:
            return cand[:missing] if len(cand) >= missing else []
        return cand[:1]

    def _allocate_in_order(self, j: int, partial: list[int], victim_jobs: list[int], evicted: set[int]) -> bool:
        """Place the beneficiary and re-place victims in normal queue/job order (KAI jobs-to-allocate).

        What each job would place, and its order inside its leaf, is fixed once the victims are
        evicted (a job's own placement is the only thing that changes it); the order between leaves
        is re-evaluated after every placement, as queue allocations move.
        """
        s = self.state
        tasks_of: dict[int, list[int]] = {j: list(partial)}
        for vj in victim_jobs:
            if vj != j:
                tasks_of[vj] = self._victim_tasks_to_allocate(vj, evicted)
        order_req = s.task_order_req
        # (a one-task job's request is its row: the same values as the one-row sum)
        reqs = {jj: (order_req[ts[0]] if len(ts) == 1 else order_req[ts].sum(axis=0) if ts else _ZERO_REQ)
                for jj, ts in tasks_of.items()}
        by_leaf: dict[int, list[int]] = {}
        jq = s.job_queue_arr
        for jj in tasks_of:
            by_leaf.setdefault(int(jq[jj]), []).append(jj)
        for q, lst in by_leaf.items():
            if len(lst) > 1:
                lst.sort(key=lambda jj: self._job_key(jj, j), reverse=True)  # pop() from the end = best
        placed_beneficiary = False
        tour = None
        while by_leaf:
            if len(by_leaf) == 1:
                leaf = next(iter(by_leaf))
            else:
                if tour is None:
                    tour = _LeafTournament(self, by_leaf, reqs)
                leaf = tour.best()
            lst = by_leaf[leaf]
            nxt = lst.pop()
            emptied = not lst
            if emptied:
                del by_leaf[leaf]
            if tour is not None:
                tour.changed(leaf, emptied)
            ts = tasks_of[nxt]
            if nxt == j:
                if not self.placer.place_job(j, ts):
                    return False
                placed_beneficiary = True
            elif ts:
                self.placer.place_job(nxt, ts)
        return placed_beneficiary

    def _tree(self, by_leaf) -> tuple[dict[int, list[int]], list[int]]:
        """Queue tree (children lists, top-level queues) over the leaves still holding jobs.

        Built in ``sorted(leaves)`` order, so each node's children are ordered by the smallest
        leaf beneath them; cached per leaf set (queue paths are fixed).
        """
        key = frozenset(by_leaf)
        tree = self._tree_cache.get(key)
        if tree is None:
            s = self.state
            children: dict[int, list[int]] = {}
            tops: list[int] = []
            seen: set[int] = set()
            for leaf in sorted(by_leaf):
                path = s.queue_path_list[leaf]
                for child, par in zip(path, path[1:] + [-1]):
                    if child in seen:
                        break
                    seen.add(child)
                    (children.setdefault(par, []) if par >= 0 else tops).append(child)
            tree = self._tree_cache[key] = (children, tops)
        return tree

    def _job_key(self, jj: int, beneficiary: int) -> tuple:
        k = job_order_key(self.state, jj)
        if jj == beneficiary:
            # the partial representative of the beneficiary is below its (partial) gang
            k = (k[0], 0) + tuple(k[2:])
        return k


_PROFILE_CACHE_MAX = 50_000  # (queue, allocation, request) -> profile entries kept per cycle (~0.5 KB each)


class _LeafTournament:
    """Which leaf places next during a re-placement run: the queue order's winner, kept per node.

    A queue's profile depends only on its own allocation and its representative (head) job, and a
    placement changes the allocation of the placed job's path only. So after each pop only the
    winners on the popped leaf's path are recomputed (bottom-up, scanning children in the same
    order as a full walk), not the whole tree: O(depth x children) per placement, not O(tree).
    """

    def __init__(self, solver: VictimSolver, by_leaf: dict[int, list[int]], reqs: dict[int, np.ndarray]) -> None:
        self.solver = solver
        self.state = solver.state
        self.by_leaf = by_leaf
        self.reqs = reqs
        self.rep: dict[int, int] = {}  # node -> leaf its winning subtree is represented by
        self.prof: dict[int, object] = {}  # node -> its queue profile with its representative's job
        self.cache: dict[tuple, object] = solver.state.__dict__.setdefault("_victims_leaf_profiles", {})
        self.tree = solver._tree(by_leaf)
        self.children, self.tops = self.tree
        self.dirty: list[int] | None = None
        self.root = -1
        for leaf in by_leaf:
            self.rep[leaf] = leaf
        self._full(self.tops)
        self.root = self._scan(self.tops)

    def _full(self, nodes: list[int]) -> None:
        for q in nodes:
            kids = self.children.get(q)
            if kids:
                self._full(kids)
                self.rep[q] = self.rep[self._scan(kids)]

    def _profile(self, q: int):
        # valid until q's path is placed on (changed() drops the popped leaf's path)
        p = self.prof.get(q)
        if p is None:
            # a profile is a function of the queue's allocation and the request only (the rest is
            # fixed for the cycle): shared by value across scenarios and solves, which roll the
            # state back to the same allocations over and over
            req = self.reqs[self.by_leaf[self.rep[q]][-1]]
            a0, a1, a2 = self.state.queue_alloc[q].tolist()
            key = (q, a0, a1, a2, req[0], req[1], req[2])
            p = self.cache.get(key)
            if p is None:
                cache = self.cache
                if len(cache) >= _PROFILE_CACHE_MAX:
                    cache.clear()
                p = cache[key] = _QueueProfile(self.state, q, list(req), False)
            self.prof[q] = p
        return p

    def _scan(self, nodes: list[int]) -> int:
        b = nodes[0]
        if len(nodes) == 1:
            return b  # nothing to compare (profiles are computed lazily, from the same state)
        if _QueueProfile is None:
            s, reqs, by_leaf, rep = self.state, self.reqs, self.by_leaf, self.rep
            for c in nodes[1:]:
                if queue_less(s, c, b, reqs[by_leaf[rep[c]][-1]], reqs[by_leaf[rep[b]][-1]]):
                    b = c
            return b
        pb = self._profile(b)
        for c in nodes[1:]:
            pc = self._profile(c)
            if _profile_less(pc, pb):
                b, pb = c, pc
        return b

    def changed(self, leaf: int, emptied: bool) -> None:
        """``leaf``'s head was popped (and it is gone if ``emptied``); recompute at the next best()."""
        if emptied:
            k = (id(self.tree), leaf)
            tree = self.solver._tree_next.get(k)
            if tree is None:
                tree = self.solver._tree_next[k] = self.solver._tree(self.by_leaf)
            self.tree = tree
            self.children, self.tops = tree
            self.rep.pop(leaf, None)
        path = self.dirty = self.state.queue_path_list[leaf]
        prof = self.prof
        for q in path:  # their allocation (the placement) or head job changes; nothing else does
            prof.pop(q, None)

    def best(self) -> int:
        path = self.dirty
        if path is not None:
            self.dirty = None
            for q in path[1:]:
                kids = self.children.get(q)
                if kids:
                    self.rep[q] = self.rep[self._scan(kids)]
                else:
                    self.rep.pop(q, None)
            self.root = self._scan(self.tops)
        return self.rep[self.root]


# ================================================================================ shared job loop
class EvictingAction:
    """What reclaim and preempt plug into :func:`run_evicting` (the job loop they share).

    ``candidates`` returns ``(jobs, key)``: ``jobs()`` gives the candidate victim jobs (called only
    when a solve runs, on the unchanged cluster), ``key`` is hashable and equal exactly for equal
    candidate sets while the cluster is unchanged (no commit since): jobs whose attempt failed
    without a simulation share that failure through it (see :func:`run_evicting`).
    """

    name = ""  # the solver's action name
    refused = ""  # event reason when a job does not evict ("NotReclaiming")
    evicted = ""  # event reason of a committed solution ("Reclaimed")

    def delay_text(self, j: int) -> str:
        raise NotImplementedError

    def gate(self, j: int, tasks: list[int], leaf: int) -> str | None:
        """Refusal checked before the scheduling-signature skip (not recorded as a failure)."""
        return None

    def check(self, j: int, tasks: list[int], leaf: int) -> str | None:
        """Refusal checked after the signature skip (recorded as a failed attempt, as upstream)."""
        return None

    def skip_text(self, j: int, rep: int, leaf: int) -> str:
        raise NotImplementedError

    def candidates(self, j: int, tasks: list[int], leaf: int) -> tuple[Candidates, object]:
        """(candidate victim jobs, lazily; a key equal for equal sets in the current cluster state)."""
        raise NotImplementedError

    def validator(self, j: int, tasks: list[int], leaf: int) -> Validator | None:
        return None

    def fail_text(self, j: int, leaf: int, reason: str) -> str:
        raise NotImplementedError

    def detail(self, j: int, leaf: int) -> Callable[[int], str] | None:
        return None

    def committed(self) -> None:
        """The cluster changed (a solution was committed): drop what was cached on its state."""


def run_evicting(state: CycleState, jobs: Sequence[int], action: EvictingAction) -> None:
    """The reclaim / preempt job loop: pending jobs in queue/job order, each solved for victims.

    Per job: preemption delay, ``action.gate``, the per-leaf scheduling-signature skip
    (:class:`FailedShapes`), ``action.check``, then the :class:`VictimSolver` on the action's
    candidates; a solution is committed (events, queue refresh), a failure recorded.

    Identical jobs of *different* leaves do not each rescan the cluster: a solve that failed
    before simulating anything (no candidate, or even evicting every candidate leaves no node
    with room) depended only on the candidate set, the first task's GPU request and node
    selector, and the cluster state. Until the next commit, a job with the same three gets
    that failure (same event text, recorded in its leaf's signatures) without a solve.
    """
    s = state
    if not jobs:
        return
    jq = JobQueue(s, list(jobs))
    failed: dict[int, FailedShapes] = {}
    unsimulated: dict[tuple, str] = {}  # (candidate-set key, GPU request, selector) -> raw reason
    while True:
        j = jq.pop()
        if j is None:
            break
        if within_preemption_delay(s, j):
            s.add_event(j, action.refused, action.delay_text(j))
            continue
        tasks = next_tasks_to_allocate(s, j)
        if not tasks:
            continue
        leaf = s.job_queue(j)
        why = action.gate(j, tasks, leaf)
        if why:
            s.add_event(j, action.refused, why)
            continue
        shapes = failed.get(leaf)
        if shapes is None:
            shapes = failed[leaf] = FailedShapes(s)
        rep = shapes.blocking(j)
        if rep is not None:
            s.add_event(j, action.refused, action.skip_text(j, rep, leaf))
            continue
        why = action.check(j, tasks, leaf)
        if why:
            shapes.record(j)
            s.add_event(j, action.refused, why)
            continue
        cands, cands_key = action.candidates(j, tasks, leaf)
        t0 = tasks[0]
        share_key = (cands_key, float(s.task_order_req[t0, GPU]), s.task_selector_key[t0])
        raw = unsimulated.get(share_key)
        if raw is not None:
            shapes.record(j)
            reason = VictimSolver.failure_text(raw, 1, len(tasks), 0, ())
            s.add_event(j, action.refused, action.fail_text(j, leaf, reason))
            continue
        solver = VictimSolver(s, action.name, cands, action.validator(j, tasks, leaf), prune=True,
                              search_budget=s.config.scenario_search_budget)
        sol = solver.solve(j, tasks)
        if sol is None:
            shapes.record(j)
            if solver.unsimulated_failure is not None:
                unsimulated[share_key] = solver.unsimulated_failure
            s.add_event(j, action.refused, action.fail_text(j, leaf, solver.last_reason))
            continue
        commit_events(s, sol, action.evicted, detail=action.detail(j, leaf))
        unsimulated.clear()
        action.committed()
        # the commit changed the beneficiary's and the victims' jobs and the allocations on their
        # queue paths only (failed scenarios were rolled back): re-order those paths, not all
        # queues (JobQueue.refresh_all is O(queues) per commit)
        for q in sorted({leaf} | {int(s.job_queue_arr[int(s.task_job[t])]) for t in sol.scenario.victims}):
            jq.refresh(q)


# ================================================================================ explanations
def describe_alloc(vec: np.ndarray) -> str:
    parts = []
    for r, name in ((GPU, "gpu"), (CPU, "cpu"), (MEM, "memory")):
        if vec[r] > EPS:
            parts.append(f"{name}={fmt_amount(r, float(vec[r]))}")
    return ", ".join(parts) or "no resources"


def commit_events(state: CycleState, sol: Solution, reason: str, detail: Callable[[int], str] | None = None) -> None:
    """Write the explanations of a committed solution: one event per victim task, one for the job."""
    s = state
    sc = sol.scenario
    bj = sc.job
    bname = s.jobs.names[bj]
    for t in sc.released:
        n = sc.orig_node[t]
        node = s.nodes.names[n] if n >= 0 else "?"
        extra = detail(t) if detail else ""
        s.add_event(int(s.task_job[t]), reason,
                    f"task {s.tasks.names[t]} ({describe_alloc(sc.orig_alloc[t])}) on node {node} evicted to make "
                    f"room for job {bname}" + (f"; {extra}" if extra else ""),
                    task=t, victim_of=bj)
    for t in sc.moved:
        old = sc.orig_node[t]
        new = int(s.task_node[t])
        s.add_event(int(s.task_job[t]), "Consolidated",
                    f"task {s.tasks.names[t]} ({describe_alloc(sc.orig_alloc[t])}) moved from node "
                    f"{s.nodes.names[old]} to node {s.nodes.names[new]} to make room for job {bname}",
                    task=t, victim_of=bj)
    nodes = sorted({s.nodes.names[int(s.task_node[t])] for t in sc.tasks})
    s.add_event(bj, reason,
                f"{len(sc.tasks)} task(s) pipelined on {', '.join(nodes)} after {len(sc.released)} victim task(s) "
                f"evicted and {len(sc.moved)} moved ({sol.scenarios_tried} scenario(s) simulated)")
