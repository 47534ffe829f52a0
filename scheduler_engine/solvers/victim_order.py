"""The victim order (KAI ``JobsOrderByQueues`` with the victim comparators; spec b reversed).

Candidate victims come in reversed queue order, each leaf represented by the victims already taken
from it plus its next one (their allocations subtracted, rule 5), and inside a leaf in reversed job
order (lowest priority, above minAvailable, newest). :class:`VictimQueue` pops them one by one and
takes back an elastic victim's remaining tasks (push).
"""
from __future__ import annotations

import heapq
from typing import Iterable, Sequence

import numpy as np

from ..kernels import victim_bound, victim_keys, victim_rows, victim_run
from ..ordering import (_QueueProfile, _dom, _profile_less, _static, chain_tiebreaks, kernel_static,
                        queue_kids)
from .. import subgroups
from ..plugins.elastic import tasks_to_evict
from ..snapshot import GPU
from ..state import ACTIVE_STATES, CycleState


_ACTIVE_LUT = np.zeros(max(ACTIVE_STATES) + 1, dtype=np.bool_)
_ACTIVE_LUT[list(ACTIVE_STATES)] = True
_NO_ROWS = np.zeros(0, dtype=np.int64)


def _active_tasks(state: CycleState, j: int) -> list[int]:
    """Active tasks of job j (small jobs: a plain loop beats numpy's per-call overhead)."""
    st = state.task_state
    s0 = int(state.job_start[j])
    return [t for t in range(s0, s0 + int(state.job_count[j])) if st[t] in ACTIVE_STATES]


class _Rep:
    """A victim job representative: the job and the active tasks it still offers."""

    __slots__ = ("job", "tasks", "alloc", "seq")

    def __init__(self, state: CycleState, job: int, tasks: Sequence[int], seq: int) -> None:
        self.job = job
        self.tasks = list(tasks)
        act = [t for t in self.tasks if state.task_state[t] in ACTIVE_STATES]
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
    for ks in queue_kids(state).values():
        part = chain_tiebreaks(static, ks, True, state.Q)
        if part is None:
            tb = None
            break
        for c, v in part.items():
            tb[c] = v
    state._victims_tiebreaks = tb
    return tb


def _victim_static_ranks(state: CycleState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per job: dense rank of its (leaf, priority) pair, and its rank by (older first, name
    descending) among all jobs; all jobs sorted by those two. Static for the cycle: cached on the state."""
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
        hit = state._victims_static_ranks = (group, rank, np.argsort(group * max(s.J, 1) + rank, kind="stable"))
    return hit


def _static_pos(state: CycleState) -> np.ndarray:
    """Each job's place in the static victim order (the inverse of :func:`_victim_static_ranks`'
    sorted jobs); cached on the state."""
    hit = getattr(state, "_victims_static_pos", None)
    if hit is None:
        by_static = _victim_static_ranks(state)[2]
        hit = np.empty(by_static.shape[0], dtype=np.int64)
        hit[by_static] = np.arange(by_static.shape[0], dtype=np.int64)
        state._victims_static_pos = hit
    return hit


def queue_tiebreaks(state: CycleState, victim: bool) -> np.ndarray | None:
    """Rules 7-8 as one integer per queue for the queue order (``victim``: reversed), or ``None``
    when some parent's children are not totally ordered by them (:func:`ordering.chain_tiebreaks`);
    cached on the state."""
    cache = state.__dict__.setdefault("_queue_tiebreaks", {})
    if victim not in cache:
        if victim:
            tb = _victim_tiebreaks(state)
        else:
            static = _static(state)
            tb = [0] * state.Q
            for ks in queue_kids(state).values():
                part = chain_tiebreaks(static, ks, False, state.Q)
                if part is None:
                    tb = None
                    break
                for c, v in part.items():
                    tb[c] = v
        cache[victim] = None if tb is None else np.asarray(tb, dtype=np.int64)
    return cache[victim]


def _whole_rep(state: CycleState, j: int) -> _Rep:
    """A candidate's first representative: all its active tasks and what they hold.

    The same jobs head their leaves in solve after solve; what they offer changes only with the
    job (``job_version``, bumped by every change of its tasks, rollbacks included), so it is kept on
    the state across victim queues.
    """
    cache = getattr(state, "_victims_whole_reps", None)
    if cache is None:
        cache = state._victims_whole_reps = {}
    ver = int(state.job_version[j])
    hit = cache.get(j)
    if hit is None or hit[0] != ver:
        hit = cache[j] = (ver, _Rep(state, j, _active_tasks(state, j), 0))
    return hit[1]  # shared: nobody mutates a representative (the solver only reads its tasks)


def _heads_cache(state: CycleState) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The state's heads rows (:meth:`VictimQueue.heads`): per job its whole allocation, how many tasks
    Python evicts when it pops the job whole and (at the job's task slot) which, the version seen."""
    cache = getattr(state, "_victims_heads", None)
    if cache is None:
        s = state
        cache = s._victims_heads = (np.zeros((s.J, 3)), np.zeros(s.J, dtype=np.int64),
                                    np.full(s.T, -1, dtype=np.int64), np.full(s.J, -1, dtype=np.int64))
    return cache


def _refresh_heads(state: CycleState, jobs: np.ndarray) -> None:
    """Bring the heads rows of ``jobs`` up to date (those whose ``job_version`` moved since they were
    last computed): one-task jobs in the kernel, the others from their representatives."""
    s = state
    wa, glen, gt, wv = _heads_cache(s)
    ver = s.job_version
    sg = s._sg_list
    multi = victim_run.refresh_heads(jobs, ver, wv, s.job_count, s.job_start, s.job_has_sg, s.task_state,
                                     _ACTIVE_LUT, s.task_alloc, wa, glen, gt)
    start = s.job_start
    for j in multi.tolist():
        rep = _whole_rep(s, j)
        wa[j] = rep.alloc
        glen[j] = 0
        if rep.tasks and not sg[j]:
            evict, more = tasks_to_evict(s, rep.tasks, int(s.job_min_available[j]))
            if len(rep.tasks) == 1 or not more:  # (a single task's empty remainder is no push-back)
                g0 = int(start[j])
                gt[g0:g0 + len(evict)] = evict
                glen[j] = len(evict)
        wv[j] = ver[j]


class LeafRuns:
    """Reclaim's candidate victims per leaf, kept for one job loop and patched after each commit.

    Reclaim's candidates are the preemptible jobs with an active task (``member``) of the victim
    leaves a reclaimer may take from; a victim queue wants them per leaf in victim order: the
    (leaf, priority) group, elastic state descending, the static rank (older first, name
    descending) - what :func:`.victim_run.leaf_runs` makes of them. Here every leaf's run of all
    its member jobs is kept in the leaf's slot of ``cj`` (the slot is the leaf's range of the static
    order, ``lo[q]`` .. ``lo[q] + n[q]``), so a victim queue over a set of leaves starts from the
    slots (O(queues), :meth:`VictimQueue.__init__`) instead of masking and partitioning the
    candidates per search (O(jobs) at 10,000 nodes, most searches follow a commit).

    A commit changes the beneficiary's and the victims' jobs only (failed scenarios and prefixes
    are rolled back, and no rollback reaches below the start of a later search: every search of a
    solve starts from the solve's checkpoint), and every change is journaled: :meth:`sync` reads
    the journal entries since the last sync, recomputes those jobs' membership and their leaves'
    runs, and refreshes their heads rows (:func:`_refresh_heads`). Those rows of the other member
    jobs stay as they were computed: their state is the one they were computed on (a version
    moved by a rolled-back scenario only). If the journal was cut below the last sync, or its entry
    there replaced, everything is recomputed.

    ``sets``: candidate arrays made by :meth:`jobs_of` (id -> (array, leaf mask), the array held so
    its id is not reused), how a victim queue recognises its candidates; the owner empties it when
    the arrays are dropped (at a commit).

    The bound of a leaf mask (:meth:`bound`) is kept across commits as well: at 10,000 nodes its pass
    over every task (~0.8 ms) ran ~3,600 times per cycle for ~420 distinct masks, and a commit changes
    the sums of a few nodes only. Patching a node needs its tasks in task order, so the runs also keep
    every node's task list (``t_head`` / ``t_next``, moved by :func:`.victim_bound.move_tasks` at each
    sync) and the sync at which each node's sums last changed (``node_epoch``).
    """

    #: a commit's leaves rebuilt in one kernel call (:func:`.victim_rows.rebuild_runs`; ``False``: each by
    #: :meth:`_rebuild_leaf`, tests compare)
    RUNS_KERNEL = True
    #: bytes of kept bounds (:meth:`bound`; one (N,) row per leaf mask, the least recently used dropped)
    BOUND_BYTES = 32 << 20
    #: keep the bounds across commits (``False``: every bound is the full pass; tests compare)
    KEEP_BOUNDS = True

    def __init__(self, state: CycleState) -> None:
        s = self.state = state
        group, _rank, by_static = _victim_static_ranks(s)
        self.group = group
        self.by_static = by_static
        leaves = s.job_queue_arr[by_static]
        qs = np.arange(s.Q)
        self.lo = np.searchsorted(leaves, qs, side="left").astype(np.int64)
        self.end = np.searchsorted(leaves, qs, side="right").astype(np.int64)
        self.cj = np.zeros(s.J, dtype=np.int64)
        self.n = np.zeros(s.Q, dtype=np.int64)
        self.member = np.zeros(s.J, dtype=np.bool_)
        self.sets: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # per node its tasks, ascending (head, next, the list each task is in); the bounds kept per leaf
        # mask with the sync they were last brought up to, and per node the last sync that changed it
        self.t_head = np.full(s.N, -1, dtype=np.int64)
        self.t_next = np.full(s.T, -1, dtype=np.int64)
        self.t_where = np.full(s.T, -1, dtype=np.int64)
        self.bounds: dict[bytes, tuple[np.ndarray, int]] = {}
        self.epoch = 0
        self.node_epoch = np.zeros(s.N, dtype=np.int64)
        self._bound_cap = max(8, self.BOUND_BYTES // (8 * max(s.N, 1)))
        #: how :meth:`bound` answered: full passes, kept sums as they were, kept sums patched, searches
        #: with recorded victims (tests)
        self.bound_counts = {"full": 0, "kept": 0, "patched": 0, "recorded": 0, "near": 0}
        self._node_buf: tuple | None = None  # (_near_bound's nodes, its clean mark row)
        self._keys: tuple | None = None  # the victim keys of every leaf with members (full_keys)
        self._key_leaves: list[np.ndarray] = []  # leaves whose runs sync patched since (full_keys)
        #: how :meth:`full_keys` answered: built, brought up to date (tests)
        self.key_counts = {"built": 0, "refreshed": 0}
        self._rebuild()

    def _elastic_key(self, jobs: np.ndarray) -> np.ndarray:
        s = self.state
        act = s.job_num_active_arr[jobs]
        m = s.job_min_available[jobs]
        el = np.where(act < m, 0, np.where(act == m, 1, 2))
        return self.group[jobs] * 3 + (2 - el)

    def _rebuild(self) -> None:
        """Every leaf's run from the current state; every member's heads rows."""
        s = self.state
        self.member[:] = s.job_preemptible_arr & (s.job_num_active_arr > 0)
        jobs = self.by_static[self.member[self.by_static]]
        key = self._elastic_key(jobs)
        if key.size > 1 and bool(np.any(key[1:] < key[:-1])):
            jobs = jobs[np.argsort(key, kind="stable")]
        leaves = s.job_queue_arr[jobs]
        self.n[:] = np.bincount(leaves, minlength=s.Q)
        first = np.cumsum(self.n) - self.n  # each leaf's first place among the members
        self.cj[self.lo[leaves] + (np.arange(jobs.size) - first[leaves])] = jobs
        _refresh_heads(s, jobs)
        self._index_tasks()
        self._mark()
        self._keys = None
        self._key_leaves = []

    def _index_tasks(self) -> None:
        """Every node's task list from the current state (ascending task ids); the kept bounds dropped."""
        s = self.state
        placed = np.flatnonzero(s.task_node >= 0)
        order = placed[np.argsort(s.task_node[placed], kind="stable")]  # by node, then task
        on = s.task_node[order]
        self.t_next[:] = -1
        self.t_head[:] = -1
        if order.size:
            same = on[1:] == on[:-1]
            self.t_next[order[:-1][same]] = order[1:][same]
            firsts = np.r_[True, ~same]
            self.t_head[on[firsts]] = order[firsts]
        self.t_where[:] = s.task_node
        self.bounds.clear()

    def _rebuild_leaf(self, q: int) -> None:
        seg = self.by_static[self.lo[q]:self.end[q]]
        seg = seg[self.member[seg]]
        if seg.size > 1:
            key = self._elastic_key(seg)
            if bool(np.any(key[1:] < key[:-1])):
                seg = seg[np.argsort(key, kind="stable")]
        self.cj[self.lo[q]:self.lo[q] + seg.size] = seg
        self.n[q] = seg.size

    def _mark(self) -> None:
        jo = self.state._journal
        self.jlen = len(jo)
        self.last = jo[-1] if jo else None

    def sync(self) -> None:
        """Patch the runs on what was committed since the last sync (class docstring)."""
        s = self.state
        jo = s._journal
        k = self.jlen
        if len(jo) < k or (k and jo[k - 1] is not self.last):
            self._rebuild()
            return
        if len(jo) == k:
            return
        # the entries' tasks from the journal's numeric half (column 0 of ``_ji`` is entry i's task, as its
        # object half's first field: every entry has both); a generator over the object half's tuples was
        # ~0.6 % of a 2,000-node cycle
        tasks = np.unique(s._ji[k:len(jo), 0])
        jobs = np.unique(s.task_job[tasks])
        self.member[jobs] = s.job_preemptible_arr[jobs] & (s.job_num_active_arr[jobs] > 0)
        leaves = np.unique(s.job_queue_arr[jobs])
        if self.RUNS_KERNEL:
            victim_rows.rebuild_runs(leaves, self.by_static, self.lo, self.end, self.member, self.group,
                                     s.job_num_active_arr, s.job_min_available, self.cj, self.n)
        else:
            for q in leaves.tolist():
                self._rebuild_leaf(q)
        if self._keys is not None:
            self._key_leaves.append(leaves)
        _refresh_heads(s, jobs)
        # the changed tasks' nodes, before and after: the only nodes whose bound sums can have changed (a
        # task counts by its own state, node and GPUs, and by its job's membership, which flips only when
        # all its active tasks changed state)
        changed = np.empty(2 * tasks.shape[0], dtype=np.int64)
        m = victim_bound.move_tasks(tasks, s.task_node, self.t_where, self.t_head, self.t_next, changed)
        if m:
            self.epoch += 1
            self.node_epoch[changed[:m]] = self.epoch
        self._mark()

    def bound(self, keep: np.ndarray, active: np.ndarray, out: np.ndarray) -> None:
        """Add to ``out`` (per node) the GPUs of the candidates :meth:`jobs_of` ``(keep)`` gives, as
        :func:`~scheduler_engine.kernels.victim_run.candidate_gpu` adds them for that array: the same
        terms in task order (a task counts when it is active, per ``active``, and placed, and its job a
        member of a kept leaf), without the array or its per-job mark.

        The sums from zero are kept per leaf mask (``active`` is the one active-state table) and
        recomputed on the nodes changed since they were made (:meth:`sync`), or in full when those are
        many. ``out`` holds the recorded victims' GPUs: where it is 0.0 the result is the kept sum
        (0.0 + x is x), its other nodes are summed from their task lists on top of it, so every node
        adds the full pass's terms in its order."""
        s = self.state
        args = (self.t_head, self.t_next, keep, self.member, s.job_queue_arr, s.task_job, s.task_state, active,
                s.task_node, s.task_alloc[:, GPU])
        if not self.KEEP_BOUNDS:
            victim_bound.member_gpu(True, _NO_ROWS, *args, out)
            return
        key = keep.tobytes()
        hit = self.bounds.pop(key, None)
        if hit is not None and hit[1] < self.epoch:
            b = hit[0]
            rows = np.flatnonzero(self.node_epoch > hit[1])
            if 8 * rows.shape[0] > s.N:
                hit = None
            else:
                b[rows] = 0.0
                victim_bound.member_gpu(False, rows, *args, b)
                self.bound_counts["patched"] += 1
        elif hit is not None:
            self.bound_counts["kept"] += 1
        if hit is None:
            if len(self.bounds) >= self._bound_cap:
                del self.bounds[next(iter(self.bounds))]  # (the least recently used)
            b = self._near_bound(keep, args) if self.NEAR_LEAVES else None
            if b is None:
                b = np.zeros(s.N)
                victim_bound.member_gpu(True, _NO_ROWS, *args, b)
                self.bound_counts["full"] += 1
            else:
                self.bound_counts["near"] += 1
        else:
            b = hit[0]
        self.bounds[key] = (b, self.epoch)
        rec = np.flatnonzero(out)
        if rec.shape[0] == 0:
            out[:] = b
            return
        self.bound_counts["recorded"] += 1
        v = out[rec]
        out[:] = b
        out[rec] = v
        victim_bound.member_gpu(False, rec, *args, out)

    #: fresh victim queues of many leaves take their keys from :meth:`full_keys` (``False``: every one
    #: built over all queues; tests compare)
    KEEP_KEYS = True
    #: ... when the leaves to take out are at most this share of the live ones (each taken out re-keys its
    #: path; at 10,000 nodes reclaim's queues leave out ~12 of ~890 leaves, a build re-keys them all)
    KEYS_GONE_SHARE = 0.25

    def full_keys(self, ks: tuple, tb: np.ndarray, walloc: np.ndarray) -> tuple | None:
        """The victim keys (``leaf_live``, ``req``, ``key``, ``vrep``: what :func:`.victim_keys.build_fresh`
        writes) of a fresh victim queue over every leaf with members, kept across searches and commits and
        brought up to date on the queues whose allocations changed and the leaves whose runs :meth:`sync`
        patched since (:func:`.victim_keys.refresh_all`: a leaf's first candidate and what it gives up change
        only with a journaled change of one of its jobs; reading every leaf's was a gather from two
        (J,) arrays, ~40 us per call at 10,000 nodes).
        A fresh queue over most of them starts from a copy and takes the others out
        (:meth:`VictimQueue._heap_build`): at 10,000 nodes reclaim builds ~4,600 queues of ~880 live leaves
        of ~890 per cycle (nearly one per commit), each build keying ~1,000 queues (~70 us). The arrays
        are this object's (read only). None when some queue with children holds members (a leaf of the
        runs that is no leaf of the tree: build represents it by its children, a re-key by itself)."""
        s = self.state
        by_depth, path, kid_ptr, kids, stat, tot, prio = ks
        k = self._keys
        if k is None or k[0] is not ks or k[1] is not tb:
            Q = s.Q
            has_kids = kid_ptr[1:Q + 1] > kid_ptr[:Q]
            below = np.full(Q, -1, dtype=np.int64)  # a leaf below each queue
            for leaf in np.flatnonzero(~has_kids).tolist():
                for q in path[leaf].tolist():
                    if q < 0 or below[q] >= 0:
                        break
                    below[q] = leaf
            # (from nothing live: every leaf is a changed leaf, and refresh_all keys what build would)
            k = self._keys = (ks, tb, np.zeros(Q, dtype=np.bool_), np.zeros((Q, 3)), np.zeros((Q, 6)),
                              np.full(Q, -1, dtype=np.int64), s.queue_alloc.copy(), below,
                              np.empty(2 * Q + 1, dtype=np.int64), np.flatnonzero(has_kids))
            leaves = np.arange(Q, dtype=np.int64)
            self._key_leaves = []
            self.key_counts["built"] += 1
        else:
            kl = self._key_leaves
            leaves = (kl[0] if len(kl) == 1 else np.concatenate(kl)) if kl else _NO_ROWS
            self._key_leaves = []
            self.key_counts["refreshed"] += 1
        victim_keys.refresh_all(path, kid_ptr, kids, stat, tot, prio, tb, s.queue_alloc, k[6], k[7], leaves, self.n,
                                self.lo, self.cj, walloc, k[2], k[3], k[4], k[5], k[8])
        if k[9].shape[0] and bool((self.n[k[9]] > 0).any()):
            return None
        return k[2], k[3], k[4], k[5]

    #: a leaf mask seen for the first time takes the kept bound of a recent mask that differs from it in at
    #: most this many leaves (0: always the full pass)
    NEAR_LEAVES = 64
    #: ... among the most recently used this many, when the nodes to sum again are at most 1 / this of them
    NEAR_TRIES = 8
    NEAR_ROWS_DIV = 8

    def _near_bound(self, keep: np.ndarray, args: tuple) -> np.ndarray | None:
        """The bound of leaf mask ``keep`` from the kept bound of a recently used mask that differs from it
        in a few leaves, or None: a node's sum changes from one mask to the other only if it holds a
        placed task of a member job of a leaf in one mask and not the other, and since the kept sum was
        last brought up to date only if a sync stamped it (:meth:`bound`), so a copy of the kept sums with
        those nodes summed again from their task lists (:func:`.victim_bound.member_gpu`, the full pass's
        terms in its order) is the full pass. At 10,000 nodes reclaim sees ~420 masks per cycle, ~12
        leaves apart, each first full pass ~0.8 ms over every task."""
        s = self.state
        best = None
        for k2 in list(self.bounds)[-self.NEAR_TRIES:]:
            d = np.flatnonzero(np.frombuffer(k2, dtype=np.bool_) != keep)
            if best is None or d.shape[0] < best[1].shape[0]:
                best = (k2, d)
        if best is None or best[1].shape[0] > self.NEAR_LEAVES:
            return None
        b2, ep2 = self.bounds[best[0]]
        if self._node_buf is None:
            self._node_buf = (np.empty(s.N, dtype=np.int64), np.zeros(s.N, dtype=np.bool_))
        # (the nodes in no particular order: each is summed again on its own)
        m = victim_bound.leaf_task_nodes(best[1], self.cj, self.lo, self.n, s.job_start, s.job_count, s.task_node,
                                         ep2 < self.epoch, self.node_epoch, ep2, s.N // self.NEAR_ROWS_DIV,
                                         self._node_buf[1], self._node_buf[0])
        if self.NEAR_ROWS_DIV * m > s.N:
            return None
        rows = self._node_buf[0][:m]
        b = b2.copy()
        b[rows] = 0.0
        victim_bound.member_gpu(False, rows, *args, b)
        return b

    def candidates(self, keep: np.ndarray) -> "RunCandidates":
        """The member jobs of the leaves ``keep`` (bool per queue) as a :class:`RunCandidates` (their
        array, :meth:`jobs_of`, made only if something reads it)."""
        return RunCandidates(self, keep)

    def jobs_of(self, keep: np.ndarray) -> np.ndarray:
        """The member jobs of the leaves ``keep`` (bool per queue), leaf by leaf in victim order (a
        candidate array; registered in ``sets`` with its leaf mask)."""
        qs = np.flatnonzero(keep & (self.n > 0))
        cnt = self.n[qs]
        total = int(cnt.sum())
        # positions lo[q] .. lo[q] + n[q] of each kept leaf, concatenated
        shift = np.repeat(self.lo[qs] - (np.cumsum(cnt) - cnt), cnt)
        out = self.cj[np.arange(total, dtype=np.int64) + shift]
        self.sets[id(out)] = (out, keep)
        return out


class RunCandidates:
    """Reclaim's candidate victim jobs named by their leaves: the member jobs of the leaves ``keep`` of
    ``runs`` (:class:`LeafRuns`), leaf by leaf in victim order.

    What a prefix search reads of its candidates is their number, the bound over their tasks
    (:meth:`LeafRuns.bound`) and the victim queue, which starts from the runs' slots of the kept
    leaves: none of it needs the job array, which at 10,000 nodes was ~12,600 jobs gathered from the
    runs per candidate set and commit (:meth:`LeafRuns.jobs_of`, O(jobs)). It is made when read
    (``np.asarray``, iteration; the same array :meth:`LeafRuns.jobs_of` gives). Valid while the runs
    are (until the next commit's :meth:`LeafRuns.sync`), as the arrays are.
    """

    __slots__ = ("runs", "keep", "size", "_jobs")

    def __init__(self, runs: LeafRuns, keep: np.ndarray) -> None:
        self.runs = runs
        self.keep = keep
        self.size = int(runs.n[keep].sum())
        self._jobs: np.ndarray | None = None

    def __len__(self) -> int:
        return self.size

    def jobs(self) -> np.ndarray:
        """The candidate jobs as an int64 array (:meth:`LeafRuns.jobs_of`, made once)."""
        if self._jobs is None:
            self._jobs = self.runs.jobs_of(self.keep)
        return self._jobs

    def __array__(self, dtype=None, copy=None):
        a = self.jobs()
        if dtype is not None and a.dtype != dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def __iter__(self):
        return iter(self.jobs().tolist())


class VictimQueue:
    """Candidate victims in victim order (spec b, reversed), with push-back of elastic remainders.

    Queue nodes are compared with the queue comparator reversed, each leaf represented by the
    victims already popped from it plus its next one (their allocations are subtracted, rule 5);
    inside a leaf jobs come in reversed job order (lowest priority, above minAvailable, newest).

    The initial candidates of each leaf are sorted once with numpy (lazy: a representative object
    is only built for a leaf's head); pushed-back remainders live in a small heap per leaf.

    Which leaf comes next: when the allocatable vectors of every parent's children form a chain
    (:func:`_victim_tiebreaks`, the usual case) the comparator is a strict total order, so every
    queue keeps its rules-1..6 key (negated: victim order) in a row of a (Q, 6) array beside a
    static rules-7..8 integer, and a pop or push re-keys only the queues on that leaf's path and
    picks each parent's smallest live child (compiled kernels, :mod:`scheduler_engine.kernels.victim_keys`).
    The winner is the one the sequential scan picks (with a strict total order the scan returns
    the maximum). Otherwise the winners are kept per node and rescanned in children order
    (:meth:`_tournament`), which resolves incomparable ties exactly as the comparator's scan.
    """

    def __init__(self, state: CycleState, jobs: Iterable[int], proto: tuple | None = None) -> None:
        self.state = state
        s = state
        # candidates made from reclaim's per-leaf runs (LeafRuns.candidates, or an array of LeafRuns.jobs_of):
        # start from their slots
        if isinstance(jobs, RunCandidates):
            runs, runs_keep = jobs.runs, jobs.keep
        else:
            runs = getattr(s, "_victim_leaf_runs", None)
            hit = runs.sets.get(id(jobs)) if runs is not None else None
            runs_keep = hit[1] if hit is not None and hit[0] is jobs else None
            # (an int64 array as it is: nothing below writes into it; astype copied ~12,600 jobs per search
            # at 10,000 nodes)
            jobs = np.fromiter((int(j) for j in jobs), dtype=np.int64) if not isinstance(jobs, np.ndarray) \
                else np.asarray(jobs, dtype=np.int64)
        self._runs = runs if runs_keep is not None else None  # (the heads rows of its members are kept fresh)
        self._runs_keep = runs_keep
        Q = s.Q
        # each leaf's candidates in victim order: a run [lo, hi) of ``cj`` (all leaves' runs
        # concatenated), ``ptr`` the next position; what each leaf gave up so far in ``popped``
        # (valid where ``has_popped``); ``heap_live``: the leaf holds pushed-back remainders
        # (valid where ``has_popped``); ``heap_live``: the leaf holds pushed-back remainders. The
        # per-leaf integers are rows of one (6, Q) array (``qi``, the compiled loop's layout
        # :data:`.victim_run.QI_HI` ...; its last two rows are the search's, see there)
        self.cj = np.zeros(0, dtype=np.int64)
        self.qi = np.zeros((6, Q), dtype=np.int64)
        self.hi = self.qi[victim_run.QI_HI]
        self.ptr = self.qi[victim_run.QI_PTR]
        self.popped = np.zeros((Q, 3))
        self.has_popped = self.qi[victim_run.QI_HAS_POPPED]
        self.heap_live = self.qi[victim_run.QI_HEAP_LIVE]
        self._cands: list[int] = []  # leaves with candidates
        self._firsts: np.ndarray | None = None  # the same as an array, ascending (when made from one)
        self.heaps: dict[int, list] = {}
        self.head_rep: dict[int, _Rep] = {}
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
        # total-order mode: the queue keys live in arrays updated by compiled kernels (None until
        # the first pop that has to choose between leaves)
        self._k: tuple | None = None
        self._knext = -1  # the leaf whose victim comes next (total-order mode)
        self._kids = queue_kids(state)
        self._heads: tuple | None = None  # per candidate position: whole allocation, tasks to evict (heads)
        reps = getattr(state, "_victims_whole_reps", None)
        if reps is None:
            reps = state._victims_whole_reps = {}
        self._reps = reps
        if proto is not None:  # the same candidates on the same cluster: see proto()
            self._restore(proto)
            return
        if runs_keep is not None:
            firsts = np.flatnonzero(runs_keep & (runs.n > 0))
            self.cj = runs.cj  # (read only; patched by runs.sync after a commit, when no queue of it is left)
            self.ptr[firsts] = runs.lo[firsts]
            self.hi[firsts] = runs.lo[firsts] + runs.n[firsts]
            self._cands = firsts.tolist()
            self._firsts = firsts
            self._live = set(self._cands)  # (every leaf with candidates is live at the start: _leaves)
            return
        if jobs.size:
            # victim order inside each leaf, leaves grouped: the order of (leaf, priority) group,
            # elastic state descending, then the static (older first, name descending) rank (the
            # lexsort of those five columns), split at leaf bounds. All jobs are sorted by the
            # static parts once per cycle (_victim_static_ranks), so distinct candidates come out
            # of that order by a mask, and only the elastic state (dynamic) is sorted in, stably,
            # where it is not uniform within a group
            group, rank, by_static = _victim_static_ranks(s)
            if not s.any_sg:
                # the same order in one compiled pass (distinct candidates, elastic state from the
                # active-task counts); it also writes each leaf's run
                cj, firsts, done = victim_run.leaf_runs(jobs, by_static, _static_pos(s), group, s.job_num_active_arr,
                                                        s.job_min_available, s.job_queue_arr, self.qi)
                if done:
                    self.cj = cj
                    self._cands = firsts.tolist()
                    self._firsts = firsts
                    self._live = set(self._cands)
                    return
            is_c = np.zeros(s.J, dtype=np.bool_)
            is_c[jobs] = True
            uniq = int(np.count_nonzero(is_c)) == jobs.size
            if uniq:
                jobs = by_static[is_c[by_static]]
            act = s.job_num_active_arr[jobs]
            m = s.job_min_available[jobs]
            el = np.where(act < m, 0, np.where(act == m, 1, 2))
            if s.any_sg:
                for i in np.flatnonzero(s.job_has_sg[jobs]).tolist():
                    el[i] = subgroups.elastic_state(s, int(jobs[i]))
            if uniq:
                key = group[jobs] * 3 + (2 - el)
                if key.size > 1 and bool(np.any(key[1:] < key[:-1])):
                    jobs = jobs[np.argsort(key, kind="stable")]
            else:  # (repeated candidates: each occurrence keeps its place, as the full sort gives)
                jobs = jobs[np.argsort((group[jobs] * 3 + (2 - el)) * s.J + rank[jobs], kind="stable")]
            self.cj = jobs
            leaves = s.job_queue_arr[jobs]
            cuts = np.flatnonzero(leaves[1:] != leaves[:-1]) + 1
            lo = np.r_[0, cuts]
            firsts = leaves[lo]
            self.ptr[firsts] = lo
            self.hi[firsts] = np.r_[cuts, leaves.size]
            self._cands = firsts.tolist()
            self._firsts = firsts

    def _key_of(self, j: int, n_active: int, seq: int, tasks: Sequence[int] | None = None) -> tuple:
        s = self.state
        if s._sg_list[j]:  # a job with subgroups: the leaves' elastic state over the tasks it offers
            tree = subgroups.tree_of(s, j)
            el = subgroups.elastic_state(s, j, subgroups.leaf_counts(tree, s.task_state, only=tasks))
        else:
            m = int(s.job_min_available[j])
            el = 0 if n_active < m else (1 if n_active == m else 2)
        return (int(s.jobs.priority[j]), -el, float(s.jobs.created_minutes_ago[j]), -int(_name_rank(s)[j]), seq)

    def push(self, j: int, tasks: Sequence[int]) -> None:
        if not tasks:
            return
        self._seq += 1
        rep = _Rep(self.state, j, tasks, self._seq)
        n_act = sum(1 for t in rep.tasks if self.state.task_state[t] in ACTIVE_STATES)
        q = int(self.state.job_queue_arr[j])
        heapq.heappush(self.heaps.setdefault(q, []), (self._key_of(j, n_act, self._seq, rep.tasks), self._seq, rep))
        self.heap_live[q] = True
        self.head_rep.pop(q, None)
        if self._live is not None and q not in self._live:
            self._live.add(q)
            self._tree = None  # a leaf came back: rebuild the tree at the next pop
        self._ver[q] = self._ver.get(q, 0) + 1
        self._dirty.add(q)
        if self._k is not None:
            self._rekey_path(q)

    def _head(self, q: int) -> tuple[str, _Rep] | None:
        """The leaf's next victim: ("heap", rep) or ("sorted", rep); cached until popped/pushed."""
        rep = self.head_rep.get(q)
        if rep is not None:
            return rep
        h = self.heaps.get(q)
        i = int(self.ptr[q])
        cand_sorted = None
        if i < int(self.hi[q]):
            j = int(self.cj[i])
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
        """A candidate's first representative (:func:`_whole_rep`, kept on the state)."""
        return _whole_rep(self.state, j)

    def _leaves(self) -> list[int]:
        c = np.asarray(self._cands, dtype=np.int64)
        out = set(c[self.ptr[c] < self.hi[c]].tolist())
        out.update(q for q, h in self.heaps.items() if h)
        return list(out)

    def _nonempty(self, q: int) -> bool:
        return bool(self.ptr[q] < self.hi[q] or self.heaps.get(q))

    def __bool__(self) -> bool:
        if self._live is None:
            self._live = set(self._leaves())
        return bool(self._live)

    def _leaf_victims(self, q: int) -> tuple:
        """What leaf q gives up in the victim order: its popped victims plus its next one."""
        nxt = self._head(q)[1].alloc
        if not self.has_popped[q]:
            return nxt
        base = self.popped[q].tolist()
        return (base[0] + nxt[0], base[1] + nxt[1], base[2] + nxt[2])

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
        base = self._base.get(q)
        if base is None:
            base = self._base[q] = _QueueProfile(s, q, None, True)
        a = s.queue_alloc[q]
        dom = _dom([float(a[0] - v[0]), float(a[1] - v[1]), float(a[2] - v[2])], base.allocatable, self._total)
        p = _LightProfile(base.key[:4] + (round(dom, 12),) + base.key[5:], base.allocatable, base.rank)
        self._cmp[q] = (lq, ver, p)
        return p

    def _scan(self, nodes: list[int]) -> int:
        """The node of ``nodes`` whose victims come first: victim order is the queue order
        reversed, so c replaces the best so far b unless c is served before b."""
        b = nodes[0]
        rep = self._rep
        pb = self._profile(b, rep[b])
        for c in nodes[1:]:
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
            if self._k is None:
                self._heap_build()
            leaf = self._knext
        else:
            children, tops = self._tree_of(self._live)
            leaf = self._tournament(children, tops)
        where, rep = self._head(leaf)
        if where == "heap":
            h = self.heaps[leaf]
            heapq.heappop(h)
            if not h:
                self.heap_live[leaf] = False
        else:
            self.ptr[leaf] += 1
        self.head_rep.pop(leaf, None)
        self._ver[leaf] = self._ver.get(leaf, 0) + 1
        self._dirty.add(leaf)
        a = rep.alloc
        if self.has_popped[leaf]:
            base = self.popped[leaf].tolist()
            self.popped[leaf] = (base[0] + a[0], base[1] + a[1], base[2] + a[2])
        else:
            self.popped[leaf] = a
            self.has_popped[leaf] = True
        if not self._nonempty(leaf):
            self._live.discard(leaf)
            self._remove_leaf(leaf)
        if self._k is not None:
            self._rekey_path(leaf)
        return rep.job, rep.tasks

    # ---------------------------------------------------------------- the same queue again
    def proto(self) -> tuple:
        """What a fresh queue (nothing popped or pushed, keys built by :meth:`run_ready`) derived from
        its candidates and the cluster: a queue made with ``proto=`` this, for the same candidates on
        the same cluster, starts where this one started without sorting or keying again."""
        assert self._k is not None and not self.heaps and not self.has_popped.any()
        path, kid_ptr, kids, stat, tot, prio, tb, leaf_live, req, key, vrep = self._k
        return (self.cj, self.qi[[victim_run.QI_HI, victim_run.QI_PTR]].copy(), list(self._cands),
                frozenset(self._live), self._k[:7], leaf_live.copy(), req.copy(), key.copy(), vrep.copy(),
                self._knext, self.heads())

    def _restore(self, proto: tuple) -> None:
        cj, hp, cands, live, static, leaf_live, req, key, vrep, knext, heads = proto
        self.cj = cj  # (read only)
        self.qi[victim_run.QI_HI] = hp[0]
        self.qi[victim_run.QI_PTR] = hp[1]
        self._cands = list(cands)
        self._live = set(live)
        self._k = static + (leaf_live.copy(), req.copy(), key.copy(), vrep.copy())
        self._knext = knext
        self._heads = heads

    # ---------------------------------------------------------------- compiled accumulation
    def run_ready(self) -> bool:
        """Whether :func:`.victim_run.run_victims` may pop from this queue: total-order mode (the
        keys built, :meth:`_heap_build`) with at least one live leaf."""
        if self._tb is None:
            return False
        if self._live is None:
            self._live = set(self._leaves())
        if not self._live:
            return False
        if self._k is None:
            self._heap_build(fresh=not self.heaps and not self.has_popped.any())
        return True

    def heads(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per job (J, 3) its whole allocation (its first representative, :meth:`_whole_rep`),
        ``glen`` (J) how many tasks Python evicts
        when it pops that representative (:func:`.plugins.elastic.tasks_to_evict`: its single
        active task, or a whole gang in reversed task order; 0 when the job is not a plain victim
        for the kernel: no active task, an elastic surplus, subgroups), those tasks in order at
        the job's slot ``gt[job_start[j]:job_start[j] + glen[j]]`` (T).

        Kept on the state per job and ``job_version`` (like :meth:`_whole_rep`): only jobs changed
        since the last victim queue are recomputed, with the very representative Python builds."""
        if self._heads is not None:
            return self._heads
        wa, glen, gt, _wv = _heads_cache(self.state)
        if self._runs is None:  # (from reclaim's runs: its members' rows are fresh, LeafRuns.sync)
            _refresh_heads(self.state, self.cj)
        self._heads = (wa, glen, gt)  # (the state's: valid for the candidates of this queue)
        return self._heads

    def after_run(self, emptied: np.ndarray, n_emptied: int, knext: int, popped_any: bool) -> None:
        """Python's view after the kernel popped: leaves that ran out leave the live set, cached
        heads of popped leaves are stale, the next leaf is the kernel's."""
        self._knext = knext
        if popped_any:
            self.head_rep.clear()
        if n_emptied:
            for q in emptied[:n_emptied].tolist():
                self._live.discard(q)

    # ---------------------------------------------------------------- total-order mode
    def _heap_build(self, fresh: bool = False) -> None:
        """Key every queue above a live leaf (compiled, :func:`.victim_keys.build`): a queue is
        represented by the leaf of its best live child, its key is its rules-1..6 victim key when
        that leaf gives up its victims. ``fresh`` (nothing popped or pushed back yet): what a leaf
        gives up is its first candidate's whole allocation, taken from :meth:`heads` at once."""
        s = self.state
        ks = kernel_static(s)
        by_depth, path, kid_ptr, kids, stat, tot, prio = ks
        tb = queue_tiebreaks(s, True)
        Q = s.Q
        full = None
        if fresh:
            # every leaf with candidates is live (``_firsts`` when the live set is still all of them: the
            # set has no order to keep), each giving up its first candidate
            live = self._firsts
            if live is None or live.shape[0] != len(self._live):
                live = np.fromiter(self._live, dtype=np.int64, count=len(self._live))
            runs = self._runs
            if runs is not None and runs.KEEP_KEYS and live is self._firsts:
                # reclaim's queues start from the keys of every leaf with members (LeafRuns.full_keys) and
                # take the few others out (their paths re-keyed), when they are few
                gone = np.flatnonzero((runs.n > 0) & ~self._runs_keep)
                if gone.shape[0] <= runs.KEYS_GONE_SHARE * live.shape[0]:
                    full = runs.full_keys(ks, tb, self.heads()[0])
        if full is not None:
            leaf_live, req, key, vrep = (x.copy() for x in full)
            self._knext = victim_keys.without_leaves(gone, path, kid_ptr, kids, stat, tot, prio, tb, s.queue_alloc,
                                                     leaf_live, req, key, vrep)
        else:
            leaf_live = np.zeros(Q, dtype=np.bool_)
            req = np.zeros((Q, 3))
            key = np.zeros((Q, 6))
            vrep = np.full(Q, -1, dtype=np.int64)
            if fresh:  # (the live leaves and what they give up filled in the kernel: at 10,000 nodes ~900
                # live leaves, whose rows' gather and scatter in numpy were ~60 us per queue)
                self._knext = victim_keys.build_fresh(True, by_depth, kid_ptr, kids, stat, tot, prio, tb,
                                                      s.queue_alloc, live, self.cj, self.ptr, self.heads()[0],
                                                      leaf_live, req, key, vrep)
            else:
                for lq in self._live:
                    leaf_live[lq] = True
                    req[lq] = self._leaf_victims(lq)
                self._knext = victim_keys.build(True, by_depth, kid_ptr, kids, stat, tot, prio, tb, s.queue_alloc,
                                                leaf_live, req, key, vrep)
        self._k = (path, kid_ptr, kids, stat, tot, prio, tb, leaf_live, req, key, vrep)
        self._dirty.clear()

    def _rekey_path(self, leaf: int) -> None:
        """After a pop from / push to ``leaf``: re-key the queues on its path, bottom-up
        (compiled, :func:`.victim_keys.rekey_path`), and find the next leaf."""
        path, kid_ptr, kids, stat, tot, prio, tb, leaf_live, req, key, vrep = self._k
        live = leaf in self._live
        leaf_live[leaf] = live
        if live:
            req[leaf] = self._leaf_victims(leaf)
        self._knext = victim_keys.rekey_path(True, leaf, path, kid_ptr, kids, stat, tot, prio, tb,
                                             self.state.queue_alloc, leaf_live, req, key, vrep, False)
        self._dirty.clear()


class _LightProfile:
    """Duck-typed queue profile (``key``, ``allocatable``, ``rank``) for ``ordering._profile_less``."""

    __slots__ = ("key", "allocatable", "rank")

    def __init__(self, key, allocatable, rank) -> None:
        self.key = key
        self.allocatable = allocatable
        self.rank = rank
