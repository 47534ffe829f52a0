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

from . import subgroups
from .kernels import victim_keys
from .kernels.victim_run import EntryCall
from .snapshot import NRES, UNLIMITED, TaskState
from .task_order import task_order

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


def queue_kids(state) -> dict[int, list[int]]:
    """Children of every queue with children (-1: the top level), in queue order; cached on the state."""
    hit = getattr(state, "_victims_queue_kids", None)
    if hit is None:
        hit = {}
        for q, p in enumerate(state.queues.parent):
            hit.setdefault(int(p) if int(p) >= 0 else -1, []).append(q)
        state._victims_queue_kids = hit
    return hit


def kernel_static(state) -> tuple:
    """The queue tree and the static per-queue values as :mod:`~scheduler_engine.kernels.victim_keys`
    takes them: queues deepest first, paths padded with -1, children in CSR form with the top level
    as parent Q, fair share / deserved / allocatable (Q, 9), total, priority; cached on the state."""
    hit = getattr(state, "_victims_kernel_static", None)
    if hit is None:
        Q = state.Q
        kids = queue_kids(state)
        counts = np.zeros(Q + 2, dtype=np.int64)
        flat: list[int] = []
        for par in list(range(Q)) + [-1]:
            ks = kids.get(par, [])
            counts[(par if par >= 0 else Q) + 1] = len(ks)
            flat.extend(ks)
        kid_ptr = np.cumsum(counts)
        paths = state.queue_path_list
        depth = max((len(p) for p in paths), default=1)
        path = np.full((Q, depth), -1, dtype=np.int64)
        for q, p in enumerate(paths):
            path[q, :len(p)] = p
        by_depth = np.array(sorted(range(Q), key=lambda q: -len(paths[q])), dtype=np.int64)
        stat = np.hstack([np.asarray(state.fair_share, dtype=np.float64), np.asarray(state.queue_deserved, dtype=np.float64),
                          np.asarray(_alloc_rows(state), dtype=np.float64).reshape(Q, 3)])
        hit = state._victims_kernel_static = (
            by_depth, path, kid_ptr, np.asarray(flat, dtype=np.int64), np.ascontiguousarray(stat),
            np.asarray(state.total, dtype=np.float64), np.asarray(state.queues.priority, dtype=np.int64).reshape(Q))
    return hit


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
    if state._sg_list[j]:
        return subgroups.elastic_state(state, j)
    act = state.job_num_active(j)
    m = int(state.job_min_available[j])
    return 0 if act < m else (1 if act == m else 2)


def job_order_key(state, j: int) -> tuple:
    jobs = state.jobs
    return (-int(jobs.priority[j]), elastic_state(state, j), -float(jobs.created_minutes_ago[j]), jobs.names[j])


#: keep the next tasks of a job with several tasks on the state per ``job_version`` (False: compute
#: them at every call; the tests compare both on whole cycles)
CACHE_NEXT_TASKS = True


def next_tasks_to_allocate(state, j: int) -> list[int]:
    if state.job_count[j] == 1 and not state._sg_list[j]:  # fast path: single-task job
        t = int(state.job_start[j])
        return [t] if state.task_state[t] == _PENDING else []
    if state._sg_list[j]:
        return subgroups.tasks_to_allocate(state, j)
    if not CACHE_NEXT_TASKS:
        return _next_tasks(state, j)
    # every action asks again for the jobs it pops (and the job queues for their requests): about
    # four times per job and cycle, ~5 us each for a gang (a pending-task list, its task order). The
    # answer reads the job's own tasks only (their states, the active count, static priorities and
    # minAvailable), and ``job_version`` is bumped by every change of them, rollbacks included
    cache = state.__dict__.get("_next_tasks_cache")
    if cache is None:
        cache = state._next_tasks_cache = {}
    ver = int(state.job_version[j])
    hit = cache.get(j)
    if hit is None or hit[0] != ver:
        hit = cache[j] = (ver, _next_tasks(state, j))
    return list(hit[1])  # (a list of the caller's own)


def _job_has_task_priority(state) -> list[bool]:
    """Per job: does any of its tasks carry a task priority (static; kept on the state)."""
    hit = state.__dict__.get("_job_task_prio")
    if hit is None:
        prio = np.asarray(state.tasks.priority, dtype=float)
        n = np.bincount(np.asarray(state.task_job)[~np.isnan(prio)], minlength=state.J) if state.T else \
            np.zeros(state.J, dtype=np.int64)
        hit = state._job_task_prio = (n > 0).tolist()
    return hit


def _next_tasks(state, j: int) -> list[int]:
    """:func:`next_tasks_to_allocate` of a job with several tasks and no subgroups, computed."""
    pending = state.job_pending_tasks(j)
    if _job_has_task_priority(state)[j]:
        pending = task_order(state, pending)
    # (else the task order is the input order, which the pending list already is: no sort)
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
def _alloc_part(static_q, a: list) -> tuple:
    """The request-independent part of a queue's key: (allocation, rule 1 over fair share,
    rule 6 dominant share without the job)."""
    f, _d, al, tot, _prio, _rank = static_q
    over = f[0] < a[0] - _EPS and f[1] < a[1] - _EPS and f[2] < a[2] - _EPS
    return a, over, round(_dom(a, al, tot), 12)


def _queue_key(static_q, apart: tuple, req, victim: bool) -> tuple:
    """Rules 1-6 key of one queue (``apart`` from :func:`_alloc_part`, representative request
    ``req``): the same tuple as ``_QueueProfile(...).key`` without building a profile object.
    Negated for victims, so that "smaller first" holds in both directions."""
    _f, d, al, tot, prio, _rank = static_q
    a, over, dwo = apart
    a0, a1, a2 = a
    r0, r1, r2 = req
    if victim:
        j0 = j1 = j2 = 0.0
        w = [a0 - r0, a1 - r1, a2 - r2]
    else:
        j0, j1, j2 = r0, r1, r2
        w = [a0 + r0, a1 + r1, a2 + r2]
    d0, d1, d2 = d
    starved = ((d0 == UNLIMITED or a0 + j0 <= d0 + _EPS) and (d1 == UNLIMITED or a1 + j1 <= d1 + _EPS)
               and (d2 == UNLIMITED or a2 + j2 <= d2 + _EPS))
    violates = ((al[0] == 0 and a0 + j0 > _EPS) or (al[1] == 0 and a1 + j1 > _EPS)
                or (al[2] == 0 and a2 + j2 > _EPS))
    dw = round(_dom(w, al, tot), 12)
    if victim:
        return (-int(over), -int(not starved), prio, -int(violates), -dw, -dwo)
    return (over, not starved, -prio, violates, dw, dwo)


def chain_tiebreaks(static: list, kids: list[int], victim: bool, n_queues: int) -> dict[int, int] | None:
    """Rules 7-8 as one integer per child of one parent, if they are a total order on ``kids``.

    ``static`` is :func:`_static`. When the distinct allocatable vectors of ``kids`` form a chain
    under :func:`_weaker`, "weaker vector first, then older" (reversed for victims; children order
    last) is what a sequential scan over tied children picks, so it can go into a heap entry;
    otherwise ``None`` (ties must then be compared in children order).
    """
    vecs = sorted({tuple(static[c][2]) for c in kids},
                  key=lambda v: tuple(_INF if x == UNLIMITED else x for x in v))
    if any(not _weaker(vecs[i], vecs[i + 1]) for i in range(len(vecs) - 1)):
        return None
    idx = {v: i for i, v in enumerate(vecs)}
    nq, nk = n_queues + 1, len(kids) + 1
    out = {}
    for pos, c in enumerate(kids):
        ci, rk = idx[tuple(static[c][2])], static[c][5]
        if victim:
            ci, rk = len(vecs) - 1 - ci, nq - 1 - rk
        out[c] = (ci * nq + rk) * nk + pos
    return out


class JobQueue:
    """Hierarchical priority queue of jobs (spec b): pop the best job of the best leaf.

    Incremental: every queue keeps its rules-1..6 key (computed from its allocation and its
    representative job's request) in a lazy heap of its parent (``(key, tie-break, queue,
    stamp)``; an entry is live while its stamp is the queue's current one). ``refresh(leaf)``
    recomputes only the keys on the leaf's path (a key is recomputed only if the queue's
    ``queue_version`` or its representative's request changed) and pushes the changed ones, so
    picking the next job costs O(depth * log(children)) instead of comparing every sibling.

    Rules 7-8 (weaker allocatable vector, then age/name) only break exact key ties. When the
    allocatable vectors of a parent's children form a chain (every two are comparable, the usual
    case) the tie-break is a total order and goes into the heap entry; otherwise the tied entries
    are taken out and compared in children order exactly as a sequential scan would.
    """

    #: False: always the lazy heaps (same order; the tests compare both modes)
    use_kernel = True

    def __init__(self, state, jobs: Iterable[int], victim: bool = False,
                 request_fn: Callable[[int], Iterable[float]] | None = None) -> None:
        self.state = state
        self.victim = victim
        default_request = request_fn is None
        if request_fn is None:
            request_fn = (lambda j: _victim_request(state, j)) if victim else (lambda j: _default_request(state, j))
        self.request_fn = request_fn
        self._req_cache: dict[int, tuple[int, tuple]] = {}
        # the seeded first requests (``_seed_requests``): per job its row in the sums (-1: none), the
        # sums and the job version they were computed at; read by ``_request`` on a miss
        self._seed: tuple[list, np.ndarray, list] | None = None
        Q = state.Q
        self._root = Q  # virtual parent of the top-level queues
        self.paths = state.queue_path_list  # (read only)
        self.heaps: list[list] = [[] for _ in range(Q)]
        self.children: list[list[int]] = [[] for _ in range(Q)]
        self.top: list[int] = []
        parent = state.queues.parent
        self._parent = [Q] * Q
        for q in range(Q):
            p = int(parent[q])
            (self.children[p] if p >= 0 else self.top).append(q)
            if p >= 0:
                self._parent[q] = p
        self._kids = self.children + [self.top]  # children by parent index (root = Q)
        self.rep = [-1] * Q  # representative job of each queue
        self.best_child = [-1] * (Q + 1)
        self._key: list = [None] * Q
        self._kstamp = [0] * Q  # current stamp (an entry with another stamp is stale)
        self._live = [False] * Q  # queue has a live entry in its parent's heap
        self._kver: list = [None] * Q  # (queue_version, request) the key was computed for
        self._kc: list = [None] * Q  # (queue_version, {request: key}, allocation part)
        self._qheap: list[list] = [[] for _ in range(Q + 1)]
        self._static = _static(state)
        self._qver = state.queue_version
        self._order = sorted(range(Q), key=lambda q: -len(self.paths[q]))  # children before parents
        self._tb = [0] * Q
        self._chain = [True] * (Q + 1)
        for p, kids in enumerate(self._kids):
            if len(kids) > 1:
                self._chain[p] = self._tiebreaks(kids)
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
            if state.any_sg:
                for i in np.flatnonzero(state.job_has_sg[ja]).tolist():
                    el[i] = subgroups.elastic_state(state, jobs[i])
            prio = np.asarray(self._prio, dtype=np.int64)[ja]
            if prio.size and int(np.abs(prio).max()) >= 1 << 20:  # int64 could overflow: Python ints
                keys = np.asarray([self._job_key(j) for j in jobs], dtype=object)
            elif victim:
                keys = (prio * 3 + (2 - el)) * _M + (_M - 1 - rank)
            else:
                keys = (-prio * 3 + el) * _M + rank
            if default_request and not victim:
                self._seed_requests(ja)
            leafq = state.job_queue_arr[ja]
            by_q = np.argsort(leafq, kind="stable")
            bounds = np.flatnonzero(np.diff(leafq[by_q])) + 1
            for part in np.split(by_q, bounds):
                if part.size:
                    h = list(zip(keys[part].tolist(), ja[part].tolist()))
                    heapq.heapify(h)
                    self.heaps[int(leafq[part[0]])] = h
        # total-order mode: every parent's children are totally ordered by (rules-1..6 key,
        # tie-break), so the queue keys can live in arrays and a refresh re-keys the leaf's path
        # in one compiled call (kernels.victim_keys, the kernel the victim order and the
        # simulation's re-placement order use); otherwise the lazy heaps below
        self._k = None
        if self.use_kernel and all(self._chain):
            self._init_kernel()
        self.refresh_all()

    def _init_kernel(self) -> None:
        st = self.state
        Q = st.Q
        by_depth, path, kid_ptr, kids, stat, tot, prio = kernel_static(st)
        self._leafq = [q for q in range(Q) if not self.children[q]]
        self._k = (path, kid_ptr, kids, stat, tot, prio, np.asarray(self._tb, dtype=np.int64),
                   np.zeros(Q, dtype=np.bool_), np.zeros((Q, 3)), np.zeros((Q, 6)), np.full(Q, -1, dtype=np.int64))
        self._by_depth = by_depth
        self._next = -1  # the leaf whose best job comes next (-1: none)
        self._jver = st.job_version  # (the state's arrays, updated in place)
        self._alloc = st.queue_alloc
        # per leaf: the request last written to its row of ``req`` (a row is rewritten only when it
        # changes) and the re-key call's argument tuple with its entry point (:meth:`_rekey`)
        self._lreq: list = [None] * Q
        self._rk: dict[int, tuple] = {}
        # the leaf re-keyed last, with the queue version of its path's top-level queue then; -1 after
        # any write to the rows a re-key reads (a leaf's request or live flag, every key: ``build``)
        self._last = -1
        self._last_ver = -1
        self._qv = st.queue_version

    def _set_req(self, leaf: int, r: tuple) -> None:
        """Write ``r`` into the leaf's request row unless the row holds it already: a tuple equal to
        the last one written and without a zero (0.0 == -0.0 would hide a sign) holds, element by
        element, equal non-zero floats or the very same objects (how a tuple compares a NaN), i.e.
        bit for bit what the row holds. A row write from a tuple costs ~0.8 us; consecutive
        refreshes of a leaf usually find jobs of the same request."""
        if r != self._lreq[leaf] or 0.0 in r:
            self._k[8][leaf] = r
            self._lreq[leaf] = r

    def _rekey(self, leaf: int) -> int:
        """``victim_keys.rekey_path`` of ``leaf`` (the job order: ``share_only`` False). Each leaf
        keeps its argument tuple (the queue's arrays, which are never replaced, and the leaf as a
        Python int) and an :class:`~scheduler_engine.kernels.victim_run.EntryCall`: after the
        first call through the dispatcher, the compiled version's entry point (the dispatcher's
        typing of 15 arguments was ~1 us of a ~3.7 us refresh, ~10,000 refreshes per 500-node
        cycle, ~38,000 at 2,000 nodes)."""
        e = self._rk.get(leaf)
        if e is None:
            path, kid_ptr, kids, stat, tot, prio, tb, live, req, key, vrep = self._k
            e = self._rk[leaf] = (EntryCall(), (bool(self.victim), int(leaf), path, kid_ptr, kids, stat, tot, prio,
                                                tb, self._alloc, live, req, key, vrep, False))
        return e[0](victim_keys.rekey_path, e[1])

    def _seed_requests(self, ja: np.ndarray) -> None:
        """Vectorised ``_default_request`` for jobs whose tasks are all pending and carry no task
        priority (their next tasks are the first ``minAvailable`` in input order): the same
        left-to-right sums, computed for all of them at once."""
        st = self.state
        if st.T == 0:
            return
        m = st.job_min_available[ja]
        m_eff = np.where(m <= 0, 1, m)
        ok = st.untouched_jobs(ja)
        jo = ja[ok]
        if not jo.size:
            return
        starts = st.job_start[jo].astype(np.int64)
        ends = starts + m_eff[ok]
        rows = np.vstack([st.task_order_req, np.zeros((1, st.task_order_req.shape[1]))])
        idx = np.empty(2 * jo.size, dtype=np.int64)
        idx[0::2], idx[1::2] = starts, ends
        sums = np.add.reduceat(rows, idx, axis=0)[0::2]
        # kept as arrays, a job's tuple made when it is first asked for (``_request``): a job becomes
        # its leaf's head, and so is asked, only when the jobs before it were popped, and the entry per
        # job was half of the queue's construction (~11,000 jobs at 2,000 nodes, four queues a cycle)
        # (the row per job and the versions as Python lists: ``_request`` reads one entry of each per
        # popped job, and a list index is ~10x cheaper than a numpy scalar read plus ``int``)
        pos = np.full(st.J, -1, dtype=np.int64)
        pos[jo] = np.arange(jo.size, dtype=np.int64)
        self._seed = (pos.tolist(), sums, st.job_version[jo].tolist())

    def _tiebreaks(self, kids: list[int]) -> bool:
        """Rules 7-8 for ``kids`` (:func:`chain_tiebreaks`): True and ``self._tb`` set if a total order."""
        tb = chain_tiebreaks(self._static, kids, self.victim, self.state.Q)
        if tb is None:
            return False
        for c, v in tb.items():
            self._tb[c] = v
        return True

    # -- jobs inside a leaf
    def _job_key(self, j: int) -> int:
        st = self.state
        if st._sg_list[j]:
            el = subgroups.elastic_state(st, j)
        else:
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

    def _request(self, j: int) -> tuple:
        ver = int(self.state.job_version[j])
        hit = self._req_cache.get(j)
        if hit is not None and hit[0] == ver:
            return hit[1]
        seed = self._seed
        if seed is not None:
            i = seed[0][j]
            if i >= 0 and seed[2][i] == ver:  # (seeded at this very version)
                req = tuple(seed[1][i].tolist())
                self._req_cache[j] = (ver, req)
                return req
        req = tuple(self.request_fn(j))
        self._req_cache[j] = (ver, req)
        return req

    # -- order maintenance
    def _set(self, q: int, rep: int, req: tuple | None = None) -> bool:
        """Queue q is now represented by job ``rep`` (-1: no job; ``req`` its request if known):
        update its entry in the parent heap. Returns whether that heap changed (an entry pushed or
        made dead); if not, the parent's best child is still the one computed last."""
        self.rep[q] = rep
        live = self._live
        if rep < 0:
            if live[q]:
                live[q] = False
                self._kstamp[q] += 1
                return True
            return False
        if req is None:
            req = self._request(rep)
        ver = int(self._qver[q])
        kv = self._kver[q]
        if live[q] and kv is not None and kv[0] == ver and kv[1] == req:
            return False  # same allocation, same request: same key, entry still valid
        self._kver[q] = (ver, req)
        kc = self._kc[q]
        if kc is None or kc[0] != ver:  # allocation changed: new per-request key memo
            kc = self._kc[q] = (ver, {}, _alloc_part(self._static[q], self.state.queue_alloc[q].tolist()))
        key = kc[1].get(req)
        if key is None:
            key = kc[1][req] = _queue_key(self._static[q], kc[2], req, self.victim)
        if live[q] and key == self._key[q]:
            return False
        self._key[q] = key
        live[q] = True
        s = self._kstamp[q] = self._kstamp[q] + 1
        p = self._parent[q]
        h = self._qheap[p]
        heapq.heappush(h, (key, self._tb[q], q, s))
        if len(h) > 4 * len(self._kids[p]) + 16:  # drop stale entries
            st = self._kstamp
            h[:] = [e for e in h if st[e[2]] == e[3] and live[e[2]]]
            heapq.heapify(h)
        return True

    def _best(self, p: int) -> int:
        """Best child of parent p (the root = ``Q``), or -1."""
        h = self._qheap[p]
        st, live = self._kstamp, self._live
        while h:
            e = h[0]
            if st[e[2]] == e[3] and live[e[2]]:
                break
            heapq.heappop(h)
        else:
            return -1
        if self._chain[p] or len(h) == 1:
            return e[2]
        k = e[0]
        tied = []
        while h and h[0][0] == k:
            x = heapq.heappop(h)
            if st[x[2]] == x[3] and live[x[2]]:
                tied.append(x)
        for x in tied:
            heapq.heappush(h, x)
        if len(tied) == 1:
            return tied[0][2]
        kids_pos = {c: i for i, c in enumerate(self._kids[p])}
        tied.sort(key=lambda x: kids_pos[x[2]])
        sta = self._static
        best = tied[0][2]
        for x in tied[1:]:
            c = x[2]
            lc, lb = sta[c], sta[best]
            if self.victim:
                lc, lb = lb, lc
            if _weaker(lc[2], lb[2]) or (not _weaker(lb[2], lc[2]) and lc[5] < lb[5]):
                best = c
        return best

    def _leaf_entry(self, leaf: int) -> None:
        """Kernel mode: the leaf is live while it has a job; its request is its best job's."""
        h = self.heaps[leaf]
        k = self._k
        if h:
            k[7][leaf] = True
            self._set_req(leaf, self._request(h[0][1]))
        else:
            k[7][leaf] = False

    def refresh(self, leaf: int) -> None:
        """Recompute representatives and order on the path of ``leaf`` (after its state changed).

        A parent's heap changes only through its children's ``_set``, and every ``_set`` is
        followed by a new ``best_child`` of that parent, so while a child's entry stays as it was
        the parent's best child is still the stored one (no heap access). A queue whose
        allocation (``queue_version``) and representative's request are unchanged keeps its key:
        only its representative is updated (the same test ``_set`` makes first, done inline)."""
        k = self._k
        if k is not None:
            # ``_leaf_entry`` and ``_request`` inline (once per popped job)
            h = self.heaps[leaf]
            live = k[7]
            if h:
                j = h[0][1]
                hit = self._req_cache.get(j)
                if not live[leaf]:
                    live[leaf] = True
                    self._last = -1
                r = hit[1] if hit is not None and hit[0] == self._jver[j] else self._request(j)
                if r != self._lreq[leaf] or 0.0 in r:  # (the row is written: ``_set_req``'s test)
                    self._last = -1
                self._set_req(leaf, r)
            elif live[leaf]:
                live[leaf] = False
                self._last = -1
            # A re-key reads the leaf's path's allocations, the request and live flag of leaves, and the
            # keys of the path's siblings; it writes the path's keys and returns the next leaf. The same
            # leaf re-keyed again with none of those written since (no request or flag written, no other
            # re-key or build; no allocation on the path changed: every change bumps ``queue_version``
            # of each queue on the changed job's path, its top-level queue included) writes the same
            # keys and returns the same leaf: ``_next`` already holds it. (A job loop's refusals pop the
            # same leaf's jobs of one request in a row.)
            ver = int(self._qv[self.paths[leaf][-1]])
            if leaf == self._last and ver == self._last_ver:
                if self.check_skips:
                    self._check_skip(leaf)
                return
            self._next = self._rekey(leaf)
            self._last = leaf
            self._last_ver = ver
            return
        h = self.heaps[leaf]
        j = h[0][1] if h else -1
        req = self._request(j) if j >= 0 else None
        changed = self._set(leaf, j, req)
        rep, bc, best, setq = self.rep, self.best_child, self._best, self._set
        live, kver, qver = self._live, self._kver, self._qver
        for q in self.paths[leaf][1:]:
            if changed:
                b = bc[q] = best(q)
            else:
                b = bc[q]
            r = rep[b] if b >= 0 else -1
            if r != j:
                j = r
                req = self._request(r) if r >= 0 else None
            if r >= 0 and live[q]:
                kv = kver[q]
                if kv is not None and kv[1] == req and kv[0] == int(qver[q]):
                    rep[q] = r
                    changed = False
                    continue
            changed = setq(q, r, req)
        if changed:
            bc[self._root] = best(self._root)

    #: tests: every refresh that keeps ``_next`` without re-keying re-keys anyway and checks that
    #: the keys, representatives and next leaf are what they were (:meth:`_check_skip`)
    check_skips = False
    skipped = 0  # (tests: refreshes that kept ``_next``, counted with ``check_skips``)

    def _check_skip(self, leaf: int) -> None:
        key, vrep = self._k[9], self._k[10]
        before = (key.copy(), vrep.copy(), self._next)
        nxt = self._rekey(leaf)
        assert nxt == before[2] and np.array_equal(key, before[0]) and np.array_equal(vrep, before[1])
        self.skipped += 1

    def refresh_all(self) -> None:
        """Recompute every queue's representative and order (after changes anywhere in the state).

        Bottom-up over all queues; a queue's key is recomputed only if its ``queue_version`` or its
        representative's request changed (the same validity rule as on the refresh path), so a
        refresh after a few evictions costs O(Q) cheap checks plus the changed keys."""
        if self._k is not None:
            self._last = -1
            for q in self._leafq:
                self._leaf_entry(q)
            path, kid_ptr, kids, stat, tot, prio, tb, live, req, key, vrep = self._k
            self._next = victim_keys.build(self.victim, self._by_depth, kid_ptr, kids, stat, tot, prio, tb,
                                           self.state.queue_alloc, live, req, key, vrep)
            return
        for q in self._order:
            if self.children[q]:
                b = self.best_child[q] = self._best(q)
                self._set(q, self.rep[b] if b >= 0 else -1)
            else:
                h = self.heaps[q]
                self._set(q, h[0][1] if h else -1)
        self.best_child[self._root] = self._best(self._root)

    def best_top(self) -> int:
        if self._k is not None:
            return -1 if self._next < 0 else self.paths[self._next][-1]
        return self.best_child[self._root]

    def peek(self) -> int | None:
        if self._k is not None:
            return None if self._next < 0 else self.heaps[self._next][0][1]
        q = self.best_top()
        return None if q < 0 else self.rep[q]

    def pop(self, refresh: bool = True, after: int = -1) -> int | None:
        """Next job, or None. With ``refresh=False`` the caller must call ``push(j)`` or
        ``refresh(leaf)`` before the next pop (saves one path recomputation per job), or pass that
        leaf as ``after`` to the next pop, which refreshes it first (one call per job instead of
        two: allocate's driver pops ~56,000 jobs at 10,000 nodes)."""
        if after >= 0:
            self.refresh(after)
        if self._k is not None:
            q = self._next
            if q < 0:
                return None
            _, j = heapq.heappop(self.heaps[q])
            if refresh:
                self.refresh(q)
            return j
        q = self.best_top()
        if q < 0:
            return None
        while self.children[q]:
            q = self.best_child[q]
        _, j = heapq.heappop(self.heaps[q])
        if refresh:
            self.refresh(q)
        return j

    def push(self, j: int, refresh: bool = True) -> None:
        """Put job j back; ``refresh=False``: its leaf's refresh is left to the caller (``pop(after=leaf)``)."""
        self._heap_push(j)
        if refresh:
            self.refresh(int(self.state.job_queue_arr[j]))

    def __bool__(self) -> bool:
        return self.best_top() >= 0
