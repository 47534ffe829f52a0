"""Queue order (spec b), job order inside a queue (spec f) and the hierarchical job queue.

Public API
----------

* ``allocatable_share(state)`` -> (Q, 3): spec a.6 allocatable (``-1`` = unlimited).
* ``dominant_share(state, q, alloc)`` -> float: spec a.6 dominant resource share of ``alloc``.
* ``queue_less(state, l, r, l_req, r_req, victim=False)`` -> bool: True iff queue ``l`` is served
  before queue ``r`` (rules 1-8 of spec b) when their representative jobs would add ``l_req`` /
  ``r_req``. With ``victim=True`` the requests are *subtracted* in rule 5 (candidate victims) and
  only rule 5 sees them (the victim side asks for nothing).
* ``job_order_key(state, j)``: sort key, smaller first: higher priority, then elastic state
  (below minAvailable, at it, above it), then older, then name.
* ``task_order(state, tasks)``: tasks of a job in KAI task order (task priority desc, unset last,
  then input order).
* ``next_tasks_to_allocate(state, j)``: pending tasks of the next attempt of job j: the missing
  ``minAvailable - active`` (gang) or one elastic task once the gang is satisfied.
* ``JobQueue(state, jobs, victim=False, request_fn=None)``: the hierarchical priority queue:
  top-level queues -> ... -> leaf -> best job; ``pop()`` returns the next job (or ``None``),
  ``push(j)`` puts a job back (elastic growth; also the cheap way to end a ``pop(refresh=False)``), ``refresh(q)`` recomputes the order on the path of
  leaf q after its allocation changed (``pop``/``push`` do it for their own leaf), ``refresh_all()``
  after changes elsewhere. ``victim=True`` reverses every comparison (queue and job order) for
  picking victims; ``request_fn(j)`` then gives the resources the job would give back (default:
  what its active tasks hold).
"""
from __future__ import annotations

import heapq
import math
from typing import Callable, Iterable

import numpy as np

from .snapshot import NRES, UNLIMITED, TaskState

_EPS = 1e-9
_PENDING = int(TaskState.PENDING)
_M = 1 << 40  # rank multiplier in integer heap keys (more jobs than this never occur)
_INF = math.inf


def allocatable_share(state) -> np.ndarray:
    """Spec a.6: ``L`` if ``D == -1`` (fair share ignored), else ``max(D, F)`` capped by ``L``."""
    d, f, lim = state.queue_deserved, state.fair_share, state.queue_limit
    out = np.maximum(d, f)
    capped = (lim != UNLIMITED) & (lim < out)
    out = np.where(capped, lim, out)
    return np.where(d == UNLIMITED, lim, out)


def _dom(alloc, allocatable, total) -> float:
    best = 0.0
    for r in range(NRES):
        a = alloc[r]
        al = allocatable[r]
        if al == UNLIMITED:
            den = total[r]
            ratio = a / den if den > 0 else (0.0 if a <= 0 else _INF)
        elif al <= 0:
            ratio = a * 1000.0
        else:
            ratio = a / al
        if ratio > best:
            best = ratio
    return best


def dominant_share(state, q: int, alloc) -> float:
    return _dom(list(alloc), _alloc_rows(state)[q], state.total.tolist())


def _alloc_rows(state) -> list:
    cache = getattr(state, "_ordering_allocatable", None)
    if cache is None:
        cache = allocatable_share(state).tolist()
        state._ordering_allocatable = cache
    return cache


def _le_inf(x: float, cap: float) -> bool:
    """compareQuantities: ``cap == -1`` is +infinity."""
    return cap == UNLIMITED or x <= cap + _EPS


class _QueueProfile:
    """Everything the comparator needs about one queue with one representative job."""

    __slots__ = ("q", "over", "starved", "prio", "violates", "dom_with", "dom_without", "allocatable", "rank", "key")

    def __init__(self, state, q: int, req, victim: bool) -> None:
        static = _static(state)
        f, d, al, tot, prio, rank = static[q]
        a = state.queue_alloc[q].tolist()
        a0, a1, a2 = a
        if req is None:
            req = (0.0, 0.0, 0.0)
        self.q = q
        self.over = f[0] < a0 - _EPS and f[1] < a1 - _EPS and f[2] < a2 - _EPS
        if victim:
            job = (0.0, 0.0, 0.0)
            with_job = [a0 - req[0], a1 - req[1], a2 - req[2]]
        else:
            job = req
            with_job = [a0 + req[0], a1 + req[1], a2 + req[2]]
        self.starved = (_le_inf(a0 + job[0], d[0]) and _le_inf(a1 + job[1], d[1]) and _le_inf(a2 + job[2], d[2]))
        self.prio = prio
        self.violates = ((al[0] == 0 and a0 + job[0] > _EPS) or (al[1] == 0 and a1 + job[1] > _EPS)
                         or (al[2] == 0 and a2 + job[2] > _EPS))
        self.dom_with = _dom(with_job, al, tot)
        self.dom_without = _dom(a, al, tot)
        self.allocatable = al
        self.rank = rank
        # rules 1-6 as one lexicographic key (smaller = served first); rules 7-8 break its ties
        self.key = (self.over, not self.starved, -prio, self.violates, round(self.dom_with, 12),
                    round(self.dom_without, 12))


def _static(state) -> list:
    """Per-queue values that do not change during a cycle (fair share, deserved, allocatable, ...)."""
    st = getattr(state, "_ordering_static", None)
    if st is None or st[0] is not getattr(state, "_ordering_allocatable", None):
        al = _alloc_rows(state)
        f = state.fair_share.tolist()
        d = state.queue_deserved.tolist()
        tot = state.total.tolist()
        prio = [int(p) for p in state.queues.priority]
        rank = [int(r) for r in _ranks(state)]
        st = (al, [(f[q], d[q], al[q], tot, prio[q], rank[q]) for q in range(state.Q)])
        state._ordering_static = st
    return st[1]


def _ranks(state) -> np.ndarray:
    r = getattr(state, "_ordering_rank", None)
    if r is None:
        r = state.queues.order_rank()
        state._ordering_rank = r
    return r


def _weaker(a, b) -> bool:
    """Allocatable ``a <= b`` in every resource and ``<`` in one (``-1`` is +infinity)."""
    def le(x, y):
        return y == UNLIMITED or (x != UNLIMITED and x <= y)

    def lt(x, y):
        return (y == UNLIMITED and x != UNLIMITED) or (x != UNLIMITED and y != UNLIMITED and x < y)

    return all(le(x, y) for x, y in zip(a, b)) and any(lt(x, y) for x, y in zip(a, b))


def _profile_less(lp: _QueueProfile, rp: _QueueProfile) -> bool:
    """Rules 1-8 of spec b: True iff ``lp`` is served first.

    1 not over fair share (all resources); 2 stays within deserved with its job; 3 higher queue
    priority; 4 no zero-share violation; 5 smaller dominant share with the job; 6 without it;
    7 weaker allocatable vector; 8 older (then name: the format's documented tie-break).
    """
    if lp.key != rp.key:
        return lp.key < rp.key
    if _weaker(lp.allocatable, rp.allocatable):
        return True
    if _weaker(rp.allocatable, lp.allocatable):
        return False
    return lp.rank < rp.rank


def queue_less(state, l: int, r: int, l_req, r_req, victim: bool = False) -> bool:
    """True iff queue ``l`` is served before queue ``r`` (negate for victim order)."""
    return _profile_less(_QueueProfile(state, l, l_req, victim), _QueueProfile(state, r, r_req, victim))


# ---------------------------------------------------------------------------- jobs and tasks
def elastic_state(state, j: int) -> int:
    act = state.job_num_active(j)
    m = int(state.job_min_available[j])
    return 0 if act < m else (1 if act == m else 2)


def job_order_key(state, j: int) -> tuple:
    jobs = state.jobs
    return (-int(jobs.priority[j]), elastic_state(state, j), -float(jobs.created_minutes_ago[j]), jobs.names[j])


def task_order(state, tasks: Iterable[int]) -> list[int]:
    prio = state.tasks.priority

    def key(t):
        p = prio[t]
        return (1, 0.0, t) if math.isnan(p) else (0, -float(p), t)

    return sorted(tasks, key=key)


def next_tasks_to_allocate(state, j: int) -> list[int]:
    if state.job_count[j] == 1:  # fast path: single-task job
        t = int(state.job_start[j])
        return [t] if state.task_state[t] == _PENDING else []
    pending = task_order(state, state.job_pending_tasks(j))
    if not pending:
        return []
    missing = int(state.job_min_available[j]) - state.job_num_active(j)
    if missing > 0:
        return pending[:missing] if len(pending) >= missing else []
    return pending[:1]


def _default_request(state, j: int) -> list:
    ts = next_tasks_to_allocate(state, j)
    if not ts:
        return [0.0, 0.0, 0.0]
    if len(ts) == 1:
        return state.task_order_req[ts[0]].tolist()
    return state.task_order_req[ts].sum(axis=0).tolist()


def _victim_request(state, j: int) -> list:
    ts = state.job_active_tasks(j)
    if not ts:
        return [0.0, 0.0, 0.0]
    return state.task_alloc[ts].sum(axis=0).tolist()


# ---------------------------------------------------------------------------- hierarchical queue
class JobQueue:
    """Hierarchical priority queue of jobs (spec b): pop the best job of the best leaf."""

    def __init__(self, state, jobs: Iterable[int], victim: bool = False,
                 request_fn: Callable[[int], Iterable[float]] | None = None) -> None:
        self.state = state
        self.victim = victim
        if request_fn is None:
            request_fn = (lambda j: _victim_request(state, j)) if victim else (lambda j: _default_request(state, j))
        self.request_fn = request_fn
        self._req_cache: dict[int, tuple[int, list]] = {}
        self._prof_cache: dict[tuple, tuple[int, _QueueProfile]] = {}
        self._pver = [-1] * state.Q  # queue_version at which profile[q] was computed
        Q = state.Q
        self.paths = [[int(x) for x in p] for p in state.queue_path]
        self.heaps: list[list] = [[] for _ in range(Q)]
        self.children: list[list[int]] = [[] for _ in range(Q)]
        self.top: list[int] = []
        parent = state.queues.parent
        for q in range(Q):
            p = int(parent[q])
            (self.children[p] if p >= 0 else self.top).append(q)
        self.rep = [-1] * Q  # representative job of each queue
        self.profile: list[_QueueProfile | None] = [None] * Q
        self.best_child = [-1] * Q
        jobs = [int(j) for j in jobs]
        # static part of the job order (older first, then name) as one integer rank, so heap
        # keys are plain ints: ((-priority) * 3 + elastic state) * M + rank (reversed for victims)
        self._rank: dict[int, int] = {}
        self._prio = state.jobs.priority
        if jobs:
            ja = np.asarray(jobs, dtype=np.int64)
            names = np.asarray([state.jobs.names[j] for j in jobs])
            created = np.asarray(state.jobs.created_minutes_ago, dtype=float)[ja]
            order = np.lexsort((names, -created))
            rank = np.empty(len(jobs), dtype=np.int64)
            rank[order] = np.arange(len(jobs))
            self._rank = dict(zip(jobs, rank.tolist()))
            act = state.job_num_active_arr[ja]
            mins = state.job_min_available[ja]
            el = np.where(act < mins, 0, np.where(act == mins, 1, 2)).astype(np.int64)
            prio = np.asarray(self._prio, dtype=np.int64)[ja]
            if prio.size and int(np.abs(prio).max()) >= 1 << 20:  # int64 could overflow: Python ints
                keys = np.asarray([self._job_key(j) for j in jobs], dtype=object)
            elif victim:
                keys = (prio * 3 + (2 - el)) * _M + (_M - 1 - rank)
            else:
                keys = (-prio * 3 + el) * _M + rank
            leafq = state.job_queue_arr[ja]
            by_q = np.argsort(leafq, kind="stable")
            bounds = np.flatnonzero(np.diff(leafq[by_q])) + 1
            for part in np.split(by_q, bounds):
                if part.size:
                    h = list(zip(keys[part].tolist(), ja[part].tolist()))
                    heapq.heapify(h)
                    self.heaps[int(leafq[part[0]])] = h
        self.refresh_all()

    # -- jobs inside a leaf
    def _job_key(self, j: int) -> int:
        st = self.state
        act = int(st.job_num_active_arr[j])
        m = int(st.job_min_available[j])
        el = 0 if act < m else (1 if act == m else 2)
        rank = self._rank.get(j)
        if rank is None:  # a job pushed that was not given at construction: after the others
            rank = self._rank[j] = len(self._rank)
        if self.victim:
            return ((int(self._prio[j]) * 3 + (2 - el)) * _M) + (_M - 1 - rank)
        return ((-int(self._prio[j]) * 3 + el) * _M) + rank

    def _heap_push(self, j: int) -> None:
        q = int(self.state.job_queue_arr[j])
        heapq.heappush(self.heaps[q], (self._job_key(j), j))

    # -- order maintenance
    def _less(self, a: int, b: int) -> bool:
        pa, pb = self._prof(a), self._prof(b)
        return _profile_less(pb, pa) if self.victim else _profile_less(pa, pb)

    def _prof(self, q: int) -> _QueueProfile:
        """Profile of queue q with its representative job, computed only when compared."""
        p = self.profile[q]
        if p is None:
            p = self.profile[q] = self._profile(q, self.rep[q])
            self._pver[q] = int(self.state.queue_version[q])
        return p

    def _best_of(self, cands: list[int]) -> int:
        live = [c for c in cands if self.rep[c] >= 0]
        if not live:
            return -1
        if len(live) == 1:
            return live[0]
        keys = [self._prof(c).key for c in live]
        k = max(keys) if self.victim else min(keys)
        tied = [c for c, kc in zip(live, keys) if kc == k]
        best = tied[0]
        for c in tied[1:]:
            if self._less(c, best):
                best = c
        return best

    def _recompute(self, q: int) -> None:
        kids = self.children[q]
        if not kids:
            h = self.heaps[q]
            self.rep[q] = h[0][1] if h else -1
        else:
            best = self._best_of(kids)
            self.best_child[q] = best
            self.rep[q] = self.rep[best] if best >= 0 else -1
        self.profile[q] = None  # stale: recomputed lazily when q is compared with a sibling

    def _request(self, j: int) -> tuple:
        ver = int(self.state.job_version[j])
        hit = self._req_cache.get(j)
        if hit is not None and hit[0] == ver:
            return hit[1]
        req = tuple(self.request_fn(j))
        self._req_cache[j] = (ver, req)
        return req

    def _profile(self, q: int, j: int) -> _QueueProfile:
        req = self._request(j)
        key = (q, req)
        ver = int(self.state.queue_version[q])
        hit = self._prof_cache.get(key)
        if hit is not None and hit[0] == ver:
            return hit[1]
        prof = _QueueProfile(self.state, q, req, self.victim)
        self._prof_cache[key] = (ver, prof)
        return prof

    def refresh(self, leaf: int) -> None:
        """Recompute representatives and order on the path of ``leaf`` (after its state changed)."""
        path = self.paths[leaf]
        old = self.rep[leaf]
        h = self.heaps[leaf]
        new = h[0][1] if h else -1
        if old >= 0 and new >= 0 and old != new and self._request(new) == self._request(old):
            # Fast path (e.g. a job that failed was popped and the next one asks for the same):
            # with the same request and no allocation change on the path every profile and
            # therefore every comparison is unchanged; only the representative moves on.
            ver = self.state.queue_version
            prof, pver = self.profile, self._pver
            if all(prof[q] is None or pver[q] == ver[q] for q in path):
                self.rep[leaf] = new
                prev = leaf
                for q in path[1:]:
                    if self.best_child[q] != prev:
                        break
                    self.rep[q] = new
                    prev = q
                return
        for q in path:
            self._recompute(q)

    def refresh_all(self) -> None:
        order = sorted(range(self.state.Q), key=lambda q: -len(self.state.queue_path[q]))
        for q in order:
            self._recompute(q)

    def best_top(self) -> int:
        return self._best_of(self.top)

    def peek(self) -> int | None:
        q = self.best_top()
        return None if q < 0 else self.rep[q]

    def pop(self, refresh: bool = True) -> int | None:
        """Next job, or None. With ``refresh=False`` the caller must call ``push(j)`` or
        ``refresh(leaf)`` before the next pop (saves one path recomputation per job)."""
        q = self.best_top()
        if q < 0:
            return None
        while self.children[q]:
            q = self.best_child[q]
        _, j = heapq.heappop(self.heaps[q])
        if refresh:
            self.refresh(q)
        return j

    def push(self, j: int) -> None:
        self._heap_push(j)
        self.refresh(int(self.state.job_queue_arr[j]))

    def __bool__(self) -> bool:
        return self.best_top() >= 0
