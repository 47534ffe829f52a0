"""The allocate action: place pending jobs on free (Binding) or releasing (Pipelined) resources.

Jobs are taken in hierarchical queue order (spec b) and job order (spec f). Each attempt places
the job's next tasks (the missing ``minAvailable`` of a gang, all-or-nothing, or one elastic task
once the gang is satisfied; spec g) and is rolled back entirely if any task fails. A task goes to
the first node in placement order (binpack / spread per resource, ``config.placement``) where it fits
on free plus releasing resources: on free resources it is Binding, otherwise Pipelined; once one
task of a job is pipelined the whole job is pipelined, as KAI does (its later elastic tasks too).
Queue limits and the non-preemptible quota are checked per attempt and per task per node (spec a.7).

Every job that stays Pending gets an ``Unschedulable`` event naming the blocking reason with
numbers, and its ``category`` (``result.PENDING_CATEGORIES``: capacity, quota, limit, gang): the
queue checks and the gang check answer ``result.Reason`` texts of their category, every wrapper
keeps the category of what it wraps, and a plain placement failure text is ``capacity``. Identical job shapes that failed are not retried against the cluster in the same cycle
until resources are freed (failure cache keyed by ``CycleState.job_signature``). A task shape that
fits no node at all is remembered across queues too (``Allocator.nofit``, keyed by
``CycleState.task_signature``): within one allocate pass resources only shrink until
``resources_freed`` moves, so a single-task job of that shape in any queue fails the same way
(after its own queue-capacity check, which comes first) without looking at a node. Its message is
the explanation computed when the shape first failed (the same convention as the job-shape cache).
"""
from __future__ import annotations


import numpy as np

from .. import subgroups
from ..collector import cyclic_gc_paused
from ..kernels import allocate as _attempt_k
from ..ordering import JobQueue, next_tasks_to_allocate, task_order
from ..plugins.nodeplacement import ShapeIndex, node_keys, placement_strategy
from ..plugins.topology import allocation_domains, domain_nodes, preferred_tiers
from ..result import PENDING_GANG, Reason, reason_category
from ..snapshot import CPU, GPU, MEM, UNLIMITED, TaskState
from ..state import EPS, CycleState, fmt_amount

_add_reduce = np.add.reduce
_PEND = int(TaskState.PENDING)
_BIND = int(TaskState.BINDING)
_PIPE = int(TaskState.PIPELINED)
_RUN = int(TaskState.RUNNING)


def unique_rows(cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(cols, axis=0, return_index=True, return_inverse=True, return_counts=True)``
    without the unique rows themselves: ``(first, inverse, counts)``, groups in the same
    (lexicographic) order, ``first`` the first occurrence of each. One ``lexsort`` over the
    columns instead of a sort of structured rows (about 4x faster on 50,000 rows)."""
    n = cols.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.lexsort(cols.T[::-1])
    sc = cols[order]
    new = np.ones(n, dtype=bool)
    new[1:] = (sc[1:] != sc[:-1]).any(axis=1)
    starts = np.flatnonzero(new)
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return order[starts], inverse, np.diff(np.append(starts, n))


#: tests: every call of the attempt kernel through its entry point (``Allocator._entry_point``) first
#: checks that each argument's type is the compiled version's, and appends to :data:`CHECKED`
CHECK_TYPES = False
CHECKED: list[int] = []


def rows_sum(rows: np.ndarray, tasks: list[int]) -> np.ndarray:
    """``rows[tasks].sum(axis=0)`` of a (T, k) array. When ``tasks`` is a range in ascending order
    (a gang's first attempt) and ``rows`` is C-contiguous, the rows summed are a slice: the same rows
    in the same order and layout (C-contiguous (m, k)), so the same reduction gives the same floats,
    without gathering them into a new array; ``np.add.reduce`` is what ``ndarray.sum`` calls (its
    Python wrappers were ~1 us of a gang's ~3-5 us sum)."""
    a = tasks[0]
    m = len(tasks)
    if tasks == list(range(a, a + m)) and rows.flags.c_contiguous:
        return _add_reduce(rows[a:a + m], axis=0)
    return _add_reduce(rows[tasks], axis=0)


class _Fail(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def run(state: CycleState) -> None:
    """Run one allocate pass. The cyclic garbage collector is paused meanwhile: the pass allocates
    hundreds of thousands of small tuples (heap entries, cache keys) and creates no reference
    cycles, and at 10,000 nodes the collector's repeated scans of the live state cost 10-20 %."""
    with cyclic_gc_paused(collect_young=False):
        Allocator(state).run()


class Allocator:
    """One allocate pass; reusable pieces (``try_job``, ``place_tasks``) serve other actions too.

    ``use_index = False`` disables the incremental per-shape node index (every task then scans
    all nodes in placement order): same decisions, slower; the tests compare the two.
    """

    use_index = True
    #: ``False``: every attempt goes through the Python placement code (same decisions; tests)
    use_kernel = True

    def __init__(self, state: CycleState) -> None:
        self.state = state
        self.placement = dict(state.config.placement or {})
        self.fail_cache: dict[tuple, tuple[int, str]] = {}
        # the entry of ``fail_cache`` for each first-attempt group's signature, by group (``_fail``
        # writes both; the driver reads a group's entry without hashing its signature)
        self._gfail: list[tuple[int, str] | None] = []
        self._gid: dict[tuple, int] = {}
        # task shape -> (resources_freed, explanation): the shape fits no node (any queue)
        self.nofit: dict[tuple, tuple[int, str]] = {}
        self._nofit_new: list[tuple] = []  # shapes recorded since the driver last looked
        self._base = -1  # journal length at the start of the current attempt
        self.failures: dict[int, str] = {}
        self.shape_index: dict[tuple, ShapeIndex] = {}
        self._index_of: dict[tuple, ShapeIndex] = {}  # task shape -> its index (strategy is per shape)
        self._unbounded: tuple[list[bool], list[bool]] | None = None  # see _over_capacity
        # task shape -> its node index when attempts of that shape can run compiled, else None
        self._kernel_shape: dict[tuple, ShapeIndex | None] = {}
        self._limits: tuple[np.ndarray, np.ndarray] | None = None  # (Q, 3) limits / deserved, inf = none
        self._kio = np.empty(0, dtype=np.int64)  # the compiled attempt's out buffer (grown on demand)
        self._t1 = np.empty(1, dtype=np.int64)  # a single-task attempt's task
        self._no_task_prio: bool | None = None  # no task of the cycle has a priority (see _task_order)

    # ------------------------------------------------------------------ driver
    def candidate_jobs(self) -> list[int]:
        s = self.state
        if s.T == 0:
            return []
        pend = np.zeros(s.J, dtype=bool)
        pend[s.task_job[s.task_state == _PEND]] = True
        leaf = s.queue_is_leaf[s.job_queue_arr]
        for j in np.flatnonzero(pend & ~leaf):  # the loader refuses these; the engine still explains
            self.failures[int(j)] = f"queue {s.queues.names[s.job_queue(int(j))]} is not a leaf queue"
        return np.flatnonzero(pend & leaf).tolist()

    def run(self) -> None:
        s = self.state
        jobs = self.candidate_jobs()
        if not jobs:
            self._emit({})
            return
        jq = JobQueue(s, jobs)
        placed_any: set[int] = set()
        # Early exit bookkeeping: the initial shape of every job not popped yet. Once every such
        # shape is known to fail (a valid cached failure of the job shape, or a single-task shape
        # that fits no node) and no pushed-back job is waiting, nothing left can be placed this
        # cycle: the remaining jobs get their explanation without a scan (see ``_drain``).
        group, gsig, count = self._initial_signatures(jobs)
        left = len(jobs) - int((group[np.asarray(jobs, dtype=np.int64)] < 0).sum())  # jobs with a group
        group = group.tolist()  # read and written per job below: plain lists index faster
        job_leaf = s.job_queue_arr.tolist()
        single = ((s.job_count == 1) & ~s.job_has_sg).tolist() if s.any_sg else (s.job_count == 1).tolist()
        alive = [g for g in range(len(gsig)) if count[g] > 0]  # groups with a job not popped yet
        uncached = {g for g in alive if not self._dead(g)}
        seen_freed = s.resources_freed
        pushed: set[int] = set()
        gfail = self._gfail
        shape_groups = self._shape_groups
        first = self._first
        jstart = s.job_start.tolist()
        # every popped job's leaf is refreshed before the next pop: by that pop (``after``; the early
        # exit below reads only the job heaps, which a refresh leaves as they are)
        after = -1
        while True:
            if not pushed and not uncached and left:
                self._drain(jq, group)
                break
            j = jq.pop(refresh=False, after=after)
            if j is None:
                break
            g = group[j]
            sig = None
            if g >= 0:
                group[j] = -1
                left -= 1
                sig = gsig[g]
                c = count[g] - 1
                count[g] = c
                if c == 0:
                    uncached.discard(g)
            after = job_leaf[j]
            if sig is not None:
                # fast path: a first attempt whose shape already failed (nothing changed since)
                hit = gfail[g]  # (``fail_cache.get(sig)``: sig is group g's signature)
                if hit is not None and hit[0] == s.resources_freed:
                    self.failures[j] = hit[1]
                    continue
            pushed.discard(j)
            if g >= 0 and single[j]:
                tasks = [jstart[j]]  # a first attempt exists: the job's one task (pending)
            else:
                ft = first.get(j) if g >= 0 else None
                tasks = list(range(*ft)) if ft is not None else next_tasks_to_allocate(s, j)
            if not tasks:
                msg = self._no_attempt_reason(j)
                if msg:
                    self.failures[j] = msg
                continue
            if sig is None:
                sig = s.job_signature(j, tasks)
            ok, pipelined, msg = self.try_job(j, tasks, sig, g)
            if s.resources_freed != seen_freed:
                seen_freed = s.resources_freed
                alive = [k for k in alive if count[k] > 0]  # (counts only go down)
                uncached = {k for k in alive if not self._dead(k)}
            if self._nofit_new:
                for shape in self._nofit_new:
                    uncached.difference_update(shape_groups.get(shape, ()))
                self._nofit_new.clear()
            if not ok:
                self.failures[j] = msg
                if g >= 0:
                    uncached.discard(g)
                elif uncached:
                    k = self._gid.get(sig)
                    if k is not None:
                        uncached.discard(k)
                continue
            placed_any.add(j)
            self.failures.pop(j, None)
            # KAI pushes a job back whenever it still has tasks to allocate, pipelined or not
            # (further tasks of a pipelined job are pipelined too); a placed single-task job has none
            if not single[j] and s.job_pending_tasks(j):
                jq.push(j, refresh=False)  # (its leaf refreshed by the next pop)
                pushed.add(j)
        self._emit(placed_any)

    def _no_attempt_reason(self, j: int) -> str | None:
        """Why a pending job has no next attempt (a gang with too few pending tasks), or None."""
        s = self.state
        if s._sg_list[j]:
            if subgroups.root_satisfied(s, j):
                return None
            return Reason("gang of subgroups cannot start: its tasks placed or pending do not satisfy it ("
                          + subgroups.unsatisfied_text(s, j, (_PEND, _BIND, _PIPE, int(TaskState.RUNNING)))
                          + ")", PENDING_GANG)
        if s.job_num_active(j) < int(s.job_min_available[j]):
            n_pend = len(s.job_pending_tasks(j))
            return Reason(f"gang needs minAvailable={int(s.job_min_available[j])} tasks but only "
                          f"{s.job_num_active(j)} are running and {n_pend} pending", PENDING_GANG)
        return None

    def _emit(self, placed_any) -> None:
        s = self.state
        names = s.jobs.names
        events = s.events
        # a failure message is one object shared by every job of the shape that failed: its text
        # and category once per object (keyed by id: every message in ``failures`` stays alive here)
        seen: dict[int, tuple[str, str]] = {}
        for j, msg in self.failures.items():
            if j in placed_any:
                if not s.job_pending_tasks(j):
                    continue
                msg = Reason.wrap(f"elastic growth stopped: {msg}", msg)
                text, cat = str(msg), reason_category(msg)
            else:
                hit = seen.get(id(msg))
                if hit is None:
                    hit = seen[id(msg)] = (str(msg), reason_category(msg))
                text, cat = hit
            events.append({"job": names[j], "reason": "Unschedulable", "message": text, "category": cat})

    def _initial_signatures(self, jobs: list[int]) -> tuple[np.ndarray, list[tuple], list[int]]:
        """Group candidate jobs by the signature of their first attempt.

        Returns ``group`` (J,) int (-1 = no attempt possible), the signature of each group and
        how many jobs are in it. Single-task jobs without running tasks or topology (the bulk of a
        large cycle) are grouped with one vectorised ``np.unique`` over their shape columns.
        """
        s = self.state
        group = np.full(s.J, -1, dtype=np.int64)
        gsig: list[tuple] = []
        count: list[int] = []
        self._gid: dict[tuple, int] = {}
        self._first: dict[int, tuple[int, int]] = {}  # untouched gang -> task range of its first attempt
        self._gtask: list[int] = []  # a task of the group's first attempt (single-task groups)
        ja = np.asarray(jobs, dtype=np.int64)
        treq, tpref = s.jobs.topology_required, s.jobs.topology_preferred
        topo = np.fromiter((treq[j] is not None or tpref[j] is not None for j in jobs), bool, len(jobs))
        simple = (s.job_count[ja] == 1) & (s.job_num_active_arr[ja] == 0) & ~topo
        simple &= s.task_state[s.job_start[ja]] == _PEND
        if s.any_sg:
            simple &= ~s.job_has_sg[ja]
        sj = ja[simple]
        if sj.size:
            st = s.job_start[sj]
            keys = s.task_selector_key
            sel_ids: dict[tuple, int] = {(): 0}
            if any(keys[t] for t in st.tolist()):
                sel = np.asarray([sel_ids.setdefault(keys[t], len(sel_ids)) for t in st.tolist()], dtype=float)
            else:
                sel = np.zeros(sj.size)
            cols = np.column_stack([s.job_queue_arr[sj].astype(float), s.job_preemptible_arr[sj].astype(float),
                                    s.task_request[st], s.task_gpu_memory[st], sel]
                                   + ([s.task_claims[st].astype(float)] if s.D else []))
            first, inverse, counts = unique_rows(cols)
            # ``job_signature`` of a single-task job without subgroups or topology, built here
            # (its queue, preemptibility, no topology, its one task shape, not tied to a domain)
            tsig = s.task_signature
            gid = self._gid
            gtask = self._gtask
            for q, pre, t, c in zip(s.job_queue_arr[sj[first]].tolist(), s.job_preemptible_arr[sj[first]].tolist(),
                                    st[first].tolist(), counts.tolist()):
                sig = (q, bool(pre), None, None, (tsig(t),), -1)
                gid[sig] = len(gsig)
                gsig.append(sig)
                count.append(c)
                gtask.append(t)
            group[sj] = inverse.reshape(-1)
        rest = ja[~simple]
        if rest.size:
            rest = self._group_gangs(rest, topo[~simple], group, gsig, count)
        for j in rest.tolist():
            ts = next_tasks_to_allocate(s, j)
            if not ts:
                continue
            sig = s.job_signature(j, ts)
            k = self._gid.get(sig)
            if k is None:
                k = self._gid[sig] = len(gsig)
                gsig.append(sig)
                count.append(0)
                self._gtask.append(ts[0] if len(ts) == 1 else -1)
            count[k] += 1
            group[j] = k
        self._gsig = gsig
        self._gfail = [self.fail_cache.get(sig) for sig in gsig]
        # single-task groups without topology by task shape (a shape that fits no node kills them all)
        self._gshape: list[tuple | None] = []
        self._shape_groups: dict[tuple, list[int]] = {}
        for k, sig in enumerate(gsig):
            t = self._gtask[k]
            # (a single-task first attempt without topology: its one shape is in the job signature)
            shape = sig[4][0] if (t >= 0 and sig[2] is None and sig[3] is None) else None
            self._gshape.append(shape)
            if shape is not None:
                self._shape_groups.setdefault(shape, []).append(k)
        return group, gsig, count

    def _group_gangs(self, cand: np.ndarray, topo: np.ndarray, group: np.ndarray, gsig: list[tuple],
                     count: list[int]) -> np.ndarray:
        """Vectorised grouping of multi-task jobs whose first attempt is the first ``minAvailable``
        tasks of one shape (all tasks pending, none running, no task priorities, no topology):
        their signature is (queue, preemptibility, that many copies of the shape). Returns the
        candidates left for the per-job loop."""
        s = self.state
        cnt = s.job_count[cand]
        m = s.job_min_available[cand]
        m_eff = np.where(m <= 0, 1, m)
        ok = (cnt > 1) & s.untouched_jobs(cand) & ~topo
        if not ok.any():
            return cand
        gj, m_eff = cand[ok], m_eff[ok]
        starts = s.job_start[gj].astype(np.int64)
        # their first attempt is their first minAvailable tasks (``next_tasks_to_allocate`` of an
        # untouched job), valid until the job's first pop: allocate changes no other job's tasks
        self._first.update(zip(gj.tolist(), zip(starts.tolist(), (starts + m_eff).tolist())))
        # task shape ids over the tasks involved
        keys = s.task_selector_key
        offs = np.concatenate([[0], np.cumsum(m_eff)[:-1]]).astype(np.int64)
        tasks = np.arange(int(m_eff.sum()), dtype=np.int64) + np.repeat(starts - offs, m_eff)  # each job's span
        sel_ids: dict[tuple, int] = {(): 0}
        sel = np.asarray([sel_ids.setdefault(keys[t], len(sel_ids)) for t in tasks.tolist()], dtype=float) \
            if any(keys[t] for t in tasks.tolist()) else np.zeros(tasks.size)
        tcols = np.column_stack([s.task_request[tasks], s.task_gpu_memory[tasks], sel]
                                + ([s.task_claims[tasks].astype(float)] if s.D else []))
        tshape = unique_rows(tcols)[1]
        lo = np.minimum.reduceat(tshape, offs)
        hi = np.maximum.reduceat(tshape, offs)
        homo = lo == hi
        if not homo.any():
            return cand
        hj, hm, hshape, hstart = gj[homo], m_eff[homo], lo[homo], starts[homo]
        cols = np.column_stack([s.job_queue_arr[hj], s.job_preemptible_arr[hj].astype(np.int64), hshape, hm])
        first, inverse, counts = unique_rows(cols)
        kmap = np.empty(first.size, dtype=np.int64)
        # ``job_signature`` of such a job, built here: its tasks are of one shape (equal request,
        # GPU memory, selector and claims rows give equal task signatures), no subgroups
        # (``untouched_jobs``), no topology
        tsig = s.task_signature
        gid = self._gid
        for u, (q, pre, a, mm, c) in enumerate(zip(cols[first, 0].tolist(), cols[first, 1].tolist(),
                                                   hstart[first].tolist(), hm[first].tolist(), counts.tolist())):
            sig = (q, bool(pre), None, None, (tsig(a),) * mm, -1)
            k = gid.get(sig)
            if k is None:
                k = gid[sig] = len(gsig)
                gsig.append(sig)
                count.append(0)
                self._gtask.append(a if mm == 1 else -1)
            count[k] += c
            kmap[u] = k
        group[hj] = kmap[inverse.reshape(-1)]
        left = np.ones(cand.size, dtype=bool)
        left[np.flatnonzero(ok)[homo]] = False
        return cand[left]

    def _fail(self, sig: tuple, entry: tuple[int, str], g: int = -1) -> None:
        """``fail_cache[sig] = entry``, and the entry of sig's first-attempt group if it has one
        (``g`` >= 0: that group, known to the caller)."""
        self.fail_cache[sig] = entry
        k = g if g >= 0 else self._gid.get(sig)
        if k is not None:
            self._gfail[k] = entry

    def _cached(self, sig: tuple) -> bool:
        hit = self.fail_cache.get(sig)
        return hit is not None and hit[0] == self.state.resources_freed

    def _dead(self, g: int) -> bool:
        """Group g's first attempt is known to fail: its job shape failed, or (single task) its
        task shape fits no node."""
        if self._cached(self._gsig[g]):
            return True
        shape = self._gshape[g]
        if shape is None:
            return False
        hit = self.nofit.get(shape)
        return hit is not None and hit[0] == self.state.resources_freed

    def _group_message(self, g: int) -> str:
        """The failure message of group g's first attempt (``_dead(g)`` holds): what ``try_job``
        would answer, without trying."""
        s = self.state
        sig = self._gsig[g]
        hit = self.fail_cache.get(sig)
        if hit is not None and hit[0] == s.resources_freed:
            return hit[1]
        t = self._gtask[g]
        shape = self._gshape[g]
        hit = self.nofit.get(shape) if shape is not None else None
        if hit is None or hit[0] != s.resources_freed:
            raise RuntimeError(f"allocate early exit: group {g} ({sig}) is not known to fail")
        msg = self._over_capacity(sig[0], s.task_quota_req[t], not sig[1]) or hit[1]
        self._fail(sig, (s.resources_freed, msg))
        return msg

    def _drain(self, jq: JobQueue, group: list[int]) -> None:
        """Every remaining job is of a shape known to fail: record the reason for each. Nothing is
        placed from here on, so each job's outcome is the failure of its first attempt."""
        msgs: dict[int, str] = {}
        for h in jq.heaps:
            for _, j in h:
                g = group[j]
                if g >= 0:
                    m = msgs.get(g)
                    if m is None:
                        m = msgs[g] = self._group_message(g)
                    self.failures[j] = m
                else:  # never had an attempt (the driver's "no next tasks" case)
                    m = self._no_attempt_reason(j)
                    if m:
                        self.failures[j] = m
            h.clear()

    # ------------------------------------------------------------------ one attempt
    def try_job(self, j: int, tasks: list[int], sig: tuple | None = None, g: int = -1) -> tuple[bool, bool, str]:
        """Place ``tasks`` of job j all-or-nothing. Returns ``(placed, pipelined, failure message)``.

        ``g`` >= 0: ``sig`` is first-attempt group g's signature and the caller found no valid cached
        failure for it (``_gfail[g]``) in this very state, so it is not looked up again (hashing a
        gang's signature is ~1 us) and a failure is recorded in the group's slot directly."""
        s = self.state
        if sig is None:
            sig = s.job_signature(j, tasks)
        if g < 0:
            hit = self.fail_cache.get(sig)
            if hit is not None and hit[0] == s.resources_freed:
                return False, False, hit[1]
        if len(tasks) == 1 and sig[2] is None and sig[3] is None:
            # a single task whose shape fits no node: fails in any queue (after the queue check)
            t = tasks[0]
            hit = self.nofit.get(sig[4][0])  # (the job signature's one task shape: task t's signature)
            if hit is not None and hit[0] == s.resources_freed:
                msg = self._over_capacity(sig[0], s.task_quota_req[t], not sig[1]) or hit[1]
                self._fail(sig, (s.resources_freed, msg), g)
                return False, False, msg
        cp = s.checkpoint()
        self._base = cp[0]
        try:
            self._attempt(j, tasks, sig)
        except _Fail as f:
            s.rollback(cp)
            self._fail(sig, (s.resources_freed, f.message), g)
            s.mark_failure_point()
            return False, False, f.message
        a, c = int(s.job_start[j]), int(s.job_count[j])
        if c == 1:  # single-task job: nothing else to pipeline
            return True, bool(s.task_state[a] == _PIPE), ""
        states = s.task_state[a:a + c]
        pipelined = bool((states == _PIPE).any())
        if pipelined:
            for i in np.flatnonzero(states == _BIND):
                s.mark_pipelined(a + int(i))
        return True, pipelined, ""

    def _over_capacity(self, q: int, req: np.ndarray, nonpre: bool) -> str | None:
        """``state.queue_over_capacity``, answered ``None`` without looking when no queue on leaf
        q's path has a limit (nor, for a non-preemptible job, a deserved quota): then nothing
        can be over it."""
        free = self._unbounded
        if free is None:
            s = self.state
            lim = (np.where(s.queue_limit == UNLIMITED, np.inf, s.queue_limit) == np.inf).all(axis=1).tolist()
            des = (np.where(s.queue_deserved == UNLIMITED, np.inf, s.queue_deserved) == np.inf).all(axis=1).tolist()
            free = self._unbounded = (
                [all(lim[a] for a in p) for p in s.queue_path_list],
                [all(lim[a] and des[a] for a in p) for p in s.queue_path_list])
        if free[nonpre][q]:
            return None
        return self.state.queue_over_capacity(q, req, nonpre)

    def _attempt(self, j: int, tasks: list[int], sig: tuple | None = None) -> None:
        s = self.state
        if sig is not None and sig[2] is None and sig[3] is None and self.use_kernel:
            # no subgroups, no topology: one compiled call when every task is of one plain shape
            shapes = sig[4]
            idx = None
            if shapes[0] == shapes[-1]:  # sorted: all equal
                idx = self._kernel_shape.get(shapes[0], False)
                if idx is False:
                    idx = self._kernel_index(tasks[0])
            if idx is not None:
                cp = s.checkpoint()
                if self._attempt_kernel(j, tasks, idx):
                    return
                s.rollback(cp)  # (not expected) the Python attempt decides from the same state
        q = s.job_queue(j)
        nonpre = not s.job_is_preemptible(j)
        req = s.task_quota_req[tasks[0]] if len(tasks) == 1 else rows_sum(s.task_quota_req, tasks)
        msg = self._over_capacity(q, req, nonpre)
        if msg:
            raise _Fail(msg)
        if len(tasks) > 1:
            tasks = task_order(s, tasks)
        if s._sg_list[j]:
            self._attempt_tree(j, tasks)
            return
        required = s.jobs.topology_required[j]
        preferred = s.jobs.topology_preferred[j]
        if not required and not preferred:
            self.place_tasks(j, tasks, None)
            return
        candidates, why_none = allocation_domains(s, j, tasks, required, preferred)
        if not candidates:
            raise _Fail(why_none)
        # KAI's topology node score (plugins/topology calculateNodeScores): with a preferred level,
        # nodes are tried domain tier by domain tier, the roomiest domain first
        tiers = preferred_tiers(s, preferred, None, tasks) if preferred else None
        last = None
        last_msg = ""
        for desc, mask in candidates:
            cp = s.checkpoint()
            try:
                self.place_tasks(j, tasks, mask, tiers=tiers)
                return
            except _Fail as f:
                s.rollback(cp)
                last, last_msg = f"{desc}: {f.message}", f.message
        label = required or preferred
        raise _Fail(Reason.wrap(f"topology: no domain of {label} can hold all {len(tasks)} tasks (last tried {last})",
                                last_msg))

    def _kernel_index(self, t: int) -> ShapeIndex | None:
        """The node index of task t's shape if attempts of that shape can run compiled
        (:func:`kernels.allocate.attempt`: whole GPUs or none, no DRA claims, the state's compiled
        placement), else None; remembered per shape."""
        s = self.state
        idx = None
        if (self.use_index and s.fast_paths and s._journal is not None and not s.task_is_shared[t]
                and not s._claims_list[t] and not s.has_dra_gpus):
            idx = self._index_for(t)
            if idx._fast is None or idx._shared:
                idx = None
        self._kernel_shape[s.task_signature(t)] = idx
        return idx

    def _attempt_kernel(self, j: int, tasks: list[int], idx: ShapeIndex) -> bool:
        """Place ``tasks`` of job j in one compiled call (:func:`kernels.allocate.attempt`): the
        same queue checks, node choice, devices and journal entries as the Python attempt. Returns
        True when every task was placed; raises ``_Fail`` with the message the Python attempt
        gives (from the same state: the tasks placed before the failing one are still placed, the
        caller rolls back). False (not expected): the caller rolls back and runs the Python attempt."""
        s = self.state
        m = len(tasks)
        q = int(s.job_queue_arr[j])
        nonpre = not s._preempt_list[j]
        if m == 1:
            req = s.task_quota_req[tasks[0]]
            ta = self._t1
            ta[0] = tasks[0]
        else:
            req = rows_sum(s.task_quota_req, tasks)
            tasks = self._task_order(tasks)
            ta = np.array(tasks, dtype=np.int64)
        # the node log's own int64 buffer (``state.NodeLog``) with room for m more: the kernel reads
        # ``log[idx.pos:hi]`` and writes each placement's node after ``hi``; the journal's object
        # half below appends the same nodes to ``state.node_log`` (the same values in the same slots)
        slog = s.node_log
        hi = len(slog)
        log = slog.reserve(m)
        i0 = len(s._journal)
        if i0 + m > s._ji.shape[0]:
            s._journal_room_for(i0 + m)
        io = self._kio
        if io.shape[0] < 2 + m:
            io = self._kio = np.empty(2 + max(m, 64), dtype=np.int64)
        ka = idx._kargs
        if ka is None:  # the index's constants and arrays (fixed for a compiled-update index)
            sched, sel, rc, rm, k, ndev, top, cap = idx._fast
            ka = idx._kargs = [(sched, sel, rc, rm, k, ndev, top, cap, idx.col, idx.spread, idx.idle_ok,
                                idx.any_ok, idx.key, idx.hk, idx.hn, idx.hs), None, None]
        lim, des = self._limits or self._limit_rows()
        args = (ta, req, q, nonpre, lim, des, log, idx.pos, hi, *ka[0], i0, *s._jarrays, s._ji, s._jf,
                s.task_request, io)
        disp = _attempt_k.attempt
        if ka[1] is disp:
            placed = ka[2](*args)
        else:
            placed = disp(*args)
            ka[1], ka[2] = disp, self._entry_point(disp)
        out = io[:2 + m].tolist()
        idx.pos = out[0]
        if placed:
            # the journal's object half in the entries' order, as ``CycleState._record_objects`` writes
            # it for these tasks (not shared, no DRA claims: no gpuGroup map, no DRA part), each
            # task's gpuGroup list cleared as ``place`` leaves it (devices are in the state's arrays);
            # the node log's entries are the kernel's ``log[hi:hi + placed]`` (the placements' nodes,
            # which ``_record_objects`` would append to the same slots)
            slog.set_len(hi + placed)
            tg = s.task_gpu_groups
            jo = s._journal
            for t, n in zip(tasks[:placed], out[2:2 + placed]):
                g = tg[t]
                jo.append((t, n, g, None, None))
                if g:
                    tg[t] = []
        why = out[1]
        if why == _attempt_k.DONE:
            return True
        # the failure as place_tasks / place_task / _attempt word it
        if why == _attempt_k.QUEUE:
            msg = self._over_capacity(q, req, nonpre)
        elif why == _attempt_k.TASK_QUEUE:
            msg = self._over_capacity(q, s.task_request[tasks[placed]], nonpre)
        elif why == _attempt_k.NO_NODE:
            msg = self._no_fit(tasks[placed])
        else:
            msg = None
        if not msg:
            return False
        if m > 1 and why != _attempt_k.QUEUE:
            raise _Fail(Reason.wrap(f"gang of {m} needs {m} tasks placed together; only {placed} fit: {msg}", msg))
        raise _Fail(msg)

    def _entry_point(self, disp):
        """The compiled version's entry point of the attempt kernel ``disp``, just called through the
        dispatcher with one shape index's arguments, for that index's next attempts (or ``disp``).

        Why: the dispatcher types each of the kernel's 49 arguments on every call (~2 us of a ~10 us
        call, ~18,000 attempts at 10,000 nodes). Why it is safe: the entry point unboxes each
        argument as the version's signature says, without checking, so it is used only when ``disp``
        holds exactly one version after the dispatcher ran it with this index's arguments (their
        types are that version's), and only for that index (its constants and arrays, fixed until the
        index drops its argument tuple, ``ShapeIndex._kargs``). What varies between one index's calls
        has one type by construction: the tasks (an int64 array of this module's), the request (a row
        of the C-contiguous ``task_quota_req`` or a sum of its rows; the entry point is not used if
        that array is not C-contiguous), Python ints and a bool, the state's arrays (same dtypes when
        regrown) and the out buffer. With :data:`CHECK_TYPES` each call checks every argument's type
        against the signature (tests)."""
        overloads = getattr(disp, "overloads", None)
        if not overloads or len(overloads) != 1 or not self.state.task_quota_req.flags.c_contiguous:
            return disp
        ep = next(iter(dict.values(overloads))).entry_point
        if not CHECK_TYPES:
            return ep
        from numba import typeof

        sig = tuple(next(iter(dict.keys(overloads))))

        def checked(*a):
            assert tuple(typeof(x) for x in a) == sig, "the attempt's entry point called with other types"
            CHECKED.append(1)
            return ep(*a)

        return checked

    def _task_order(self, tasks: list[int]) -> list[int]:
        """:func:`task_order`; when no task of the cycle has a priority that is the index order."""
        if self._no_task_prio is None:
            self._no_task_prio = bool(np.isnan(np.asarray(self.state.tasks.priority, dtype=float)).all())
        return sorted(tasks) if self._no_task_prio else task_order(self.state, tasks)

    def _limit_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(Q, 3) queue limits and deserved quotas with inf for unlimited (the compiled queue check)."""
        lims = self._limits
        if lims is None:
            s = self.state
            lims = self._limits = (np.where(s.queue_limit == UNLIMITED, np.inf, s.queue_limit).astype(np.float64),
                                   np.where(s.queue_deserved == UNLIMITED, np.inf, s.queue_deserved).astype(np.float64))
        return lims

    def _attempt_tree(self, j: int, tasks: list[int]) -> None:
        """A job with subgroups: member by member, each subgroup inside one domain of its topology
        level within its parent's (:func:`scheduler_engine.subgroups.place_tree`)."""
        s = self.state
        tree = subgroups.tree_of(s, j)

        def domains(tr, i, ts, within):
            req, pref = tr.topo[i]
            if not req and not pref:
                return [("", within)], ""
            active = [t for t in tr.subtree_tasks(i) if s.task_state[t] in (_BIND, _PIPE, _RUN)]
            cands, why = allocation_domains(s, j, ts, req, pref, within=within, active=active)
            if cands:
                return cands, why
            if tr.is_leaf[i]:
                return [], self._leaf_probe(j, tr.names[i], ts, req, within, active)
            return [], f"{tr.label(i)}: {why}"

        def place_leaf(i, ts, within):
            for k, t in enumerate(task_order(s, ts) if len(ts) > 1 else ts):
                try:
                    self.place_task(j, t, within, check_queue=True)
                except _Fail as f:
                    return k, f.message
            return len(ts), ""

        try:
            subgroups.place_tree(s, tree, tasks, None, domains, place_leaf)
        except subgroups.PlaceFailure as f:
            raise _Fail(Reason.wrap(f.message, f.inner)) from None

    def _leaf_probe(self, j: int, name: str, ts: list[int], label: str, within, active: list[int]) -> str:
        """A leaf subgroup no domain of ``label`` has room for: how many of its tasks fit in the best
        one (each domain tried task by task, then rolled back), for the explanation."""
        s = self.state
        values = s.label_values(label)
        allowed = {values[int(s.task_node[t])] for t in active if s.task_node[t] >= 0} if active else None
        groups = domain_nodes(s, label, within, allowed)
        best, why = 0, ""
        for v in sorted(groups):
            mask = np.zeros(s.N, dtype=bool)
            mask[groups[v]] = True
            cp = s.checkpoint()
            k = 0
            for t in ts:
                try:
                    self.place_task(j, t, mask, check_queue=True)
                except _Fail as f:
                    if k >= best:
                        why = f.message
                    break
                k += 1
            s.rollback(cp)
            best = max(best, k)
        where = f" in any {label}" + (" holding its running tasks" if allowed else "")
        if not groups:
            return f"subgroup {name} needs {len(ts)}: no schedulable node has a {label} label" + (
                " in its parent's domain" if within is not None else "")
        return f"subgroup {name} needs {len(ts)}, {best} fit{where}" + (f": {why}" if why else "")

    # ------------------------------------------------------------------ tasks -> nodes
    def place_tasks(self, j: int, tasks: list[int], within: np.ndarray | None,
                    tiers: list[np.ndarray] | None = None) -> None:
        """Place every task (in order) or raise ``_Fail``; the caller rolls back. ``tiers``
        (:func:`~scheduler_engine.plugins.topology.preferred_tiers`): node sets tried in turn for
        each task, inside ``within``."""
        gang = len(tasks) > 1
        if tiers is not None:
            tiers = [m if within is None else (m & within) for m in tiers]
            tiers = [m for m in tiers if m.any()]
            if len(tiers) <= 1:
                tiers = None  # one domain (or none): the plain node order
        for i, t in enumerate(tasks):
            try:
                if tiers is None:
                    self.place_task(j, t, within, check_queue=gang)
                else:
                    self._place_tiered(j, t, tiers, gang)
            except _Fail as f:
                if gang:
                    raise _Fail(Reason.wrap(f"gang of {len(tasks)} needs {len(tasks)} tasks placed together; "
                                            f"only {i} fit: {f.message}", f.message)) from None
                raise

    def _place_tiered(self, j: int, t: int, tiers: list[np.ndarray], check_queue: bool) -> None:
        first = None
        for m in tiers:
            try:
                self.place_task(j, t, m, check_queue=check_queue)
                return
            except _Fail as f:
                first = first or f
        raise first

    def node_order(self, t: int, cand: np.ndarray, idle_ok: np.ndarray) -> np.ndarray:
        """Candidate node indices in placement order (see :func:`node_keys`); ties by node index."""
        s = self.state
        idx = np.flatnonzero(cand)
        if idx.size <= 1:
            return idx
        col, spread = placement_strategy(s, self.placement, t)
        keys = node_keys(s, t, idx, idle_ok[idx], col, spread)
        return idx[np.argsort(keys, kind="stable")]

    def place_task(self, j: int, t: int, within: np.ndarray | None, check_queue: bool = True) -> None:
        s = self.state
        mem = s.task_is_mem[t]
        if mem or check_queue:
            q = s.job_queue(j)
            nonpre = not s.job_is_preemptible(j)
        if not mem:
            # the queue check does not depend on the node: do it once (a single-task attempt was
            # already checked as a whole by the caller)
            msg = self._over_capacity(q, s.task_request[t], nonpre) if check_queue else None
            if msg:
                raise _Fail(msg)
        if within is None and self.use_index:
            idx = self._index_for(t)
            n = idx.query()
            if n < 0:
                raise _Fail(self._no_fit(t))
            if not mem:
                self._put(t, n, bool(idx.idle_ok[n]))
                return
            # GPU memory: the queue check depends on the node's device memory. The first node in
            # placement order usually passes it; otherwise the scan below walks the same order.
            if (not s.queue_over_capacity(q, s.task_request_on_node(t, n), nonpre)
                    and self._put(t, n, bool(idx.idle_ok[n]))):
                return
        idle_ok, any_ok = s.fit_masks(t, within)
        if not any_ok.any():
            raise _Fail(self._no_fit(t) if within is None else self.explain(t, within))
        node_quota_msg = None
        for n in self.node_order(t, any_ok, idle_ok):
            n = int(n)
            if s.task_is_mem[t]:
                msg = s.queue_over_capacity(q, s.task_request_on_node(t, n), nonpre)
                if msg:
                    node_quota_msg = node_quota_msg or msg
                    continue
            if self._put(t, n, bool(idle_ok[n])):
                return
        if node_quota_msg:
            raise _Fail(Reason.wrap(node_quota_msg + " on every node where it fits", node_quota_msg))
        raise _Fail(self.explain(t, within))

    def _index_for(self, t: int) -> ShapeIndex:
        """The node index of task t's shape (one per shape and placement strategy)."""
        s = self.state
        tsig = s.task_signature(t)
        idx = self._index_of.get(tsig)
        if idx is None:
            col, spread = placement_strategy(s, self.placement, t)
            key = (tsig, col, spread)
            idx = self.shape_index.get(key)
            if idx is None:
                idx = self.shape_index[key] = ShapeIndex(s, t, col, spread)
            self._index_of[tsig] = idx
        return idx

    def _put(self, t: int, n: int, fits_idle: bool) -> bool:
        """Bind (free resources) or pipeline (releasing) task t on node n, as KAI decides per node."""
        s = self.state
        if s.task_is_shared[t]:
            # KAI: the preferred device is chosen counting releasing load; the task is
            # pipelined if that device (or the node) lacks free room
            devs = s.choose_devices(t, n, pipelined=True)
            if devs is None:
                return False
            f = s.task_request_on_node(t, n)[GPU]
            fits_free = fits_idle and s.dev_free[n, devs[0]] >= f - EPS
            s.place(t, n, pipelined=not fits_free, devices=devs)
            return True
        s.place(t, n, pipelined=not fits_idle)
        return True

    # ------------------------------------------------------------------ explanations
    def _no_fit(self, t: int) -> str:
        """Explanation for task t fitting no node of the cluster, remembered per task shape.

        Recorded (and reused) only when the current attempt has placed nothing yet, i.e. in a
        state that stays (until ``resources_freed`` moves) at least as full as now; inside a
        partly placed gang the state is about to be rolled back and the answer is computed fresh.
        """
        s = self.state
        if s.checkpoint()[0] != self._base:
            return self.explain(t, None)
        shape = s.task_signature(t)
        hit = self.nofit.get(shape)
        if hit is not None and hit[0] == s.resources_freed:
            return hit[1]
        msg = self.explain(t, None)
        self.nofit[shape] = (s.resources_freed, msg)
        self._nofit_new.append(shape)
        s.mark_failure_point()  # a rollback below this point may free room: it bumps resources_freed
        return msg

    def explain(self, t: int, within: np.ndarray | None) -> str:
        """Why task t fits no node, with numbers (no task name: the message is cached and shared by
        every job of the same shape)."""
        s = self.state
        base = s.node_schedulable.copy()
        if within is not None:
            base &= within
        if not base.any():
            return "no schedulable node" + (" in the domain" if within is not None else "")
        key = s.task_selector_key[t]
        if key:
            base &= s.selector_mask(key)
            if not base.any():
                sel = ", ".join(f"{k}={v}" for k, v in key)
                return f"no schedulable node matches nodeSelector {sel}"
        idx = np.flatnonzero(base)
        avail = s.node_idle[idx] + s.node_releasing[idx]
        req = s.task_request[t]
        parts = []
        if s.task_whole[t] > 0:
            k = int(s.task_whole[t])
            whole = ((s.dev_free[idx] + s.dev_rel[idx] >= 1 - EPS) & s.dev_valid[idx]).sum(axis=1)
            if whole.max() < k:
                parts.append(f"no node has {k} free GPUs (largest free: {int(whole.max())})")
        elif s.task_is_frac[t]:
            room = np.where(s.dev_valid[idx], s.dev_free[idx] + s.dev_rel[idx], 0.0)
            best = float(room.max()) if room.size else 0.0
            if best < req[GPU] - EPS:
                parts.append(f"no GPU device has {req[GPU]:.3g} of a GPU free (largest free fraction: {best:.3g})")
        elif s.task_is_mem[t]:
            room = np.where(s.dev_valid[idx], s.dev_free[idx] + s.dev_rel[idx], 0.0) * s.node_gpu_memory[idx, None]
            best = float(room.max()) if room.size else 0.0
            if best < s.task_gpu_memory[t] - EPS:
                parts.append(f"no GPU device has {s.task_gpu_memory[t]:g} MiB GPU memory free "
                             f"(largest free: {best:g} MiB)")
        if s._claims_list[t]:
            names = s.snap.device_classes.names
            row = s.task_claims[t]
            for c in np.flatnonzero(row).tolist():
                have = ((s.dra_free[idx, c] + s.dra_rel[idx, c] >= 1 - EPS) & s.dra_valid[idx, c]).sum(axis=1)
                if have.max() < row[c]:
                    parts.append(f"claim of {int(row[c])} {names[c]}: no node has {int(row[c])} free {names[c]} "
                                 f"devices (largest free: {int(have.max())})")
        for r, label in ((CPU, "cpu"), (MEM, "memory")):
            if req[r] > 0 and avail[:, r].max() < req[r] - EPS:
                parts.append(f"no node has {fmt_amount(r, req[r])} free {label} "
                             f"(largest free: {fmt_amount(r, float(avail[:, r].max()))})")
        if parts:
            return "; ".join(parts)
        want = f"gpu={fmt_amount(GPU, req[GPU] if not s.task_is_mem[t] else 0)}"
        if s.task_is_mem[t]:
            want = f"gpuMemory={s.task_gpu_memory[t]:g}MiB"
        if s._claims_list[t]:
            classic = float(req[GPU]) - float(s.task_claims[t][s.dc_gpu].sum())
            want = (f"gpu={fmt_amount(GPU, classic)}, " if classic > EPS else "") + f"claims {s.claims_text(t)}"
        return (f"no single node has {want}, cpu={fmt_amount(CPU, req[CPU])}, "
                f"memory={fmt_amount(MEM, req[MEM])} free together ({idx.size} candidate nodes)")
