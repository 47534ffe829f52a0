"""What the actions share (KAI ``actions/common``): job readiness, scheduling signatures, the
reclaim / preempt job loop and the explanations of a committed victim solution.

* :func:`job_ready`, :func:`within_preemption_delay`: which pending jobs may try.
* :class:`FailedShapes` (KAI ``minimal_job_comparison``): after a job fails, skip same-signature
  jobs that are not easier.
* :class:`EvictingAction` + :func:`run_evicting`: the job loop reclaim and preempt share (delay,
  gate, signature skip, check, candidates, solve, commit).
* :func:`commit_events`: the events of a committed solution ("why evicted").
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np

from .. import subgroups
from ..collector import cyclic_gc_paused
from ..ordering import JobQueue, next_tasks_to_allocate
from ..snapshot import CPU, GPU, MEM, TaskState
from ..solvers.job_solver import Candidates, Solution, Validator, VictimSolver
from ..state import EPS, CycleState, fmt_amount

_RUN = int(TaskState.RUNNING)
_PEND = int(TaskState.PENDING)
_BIND = int(TaskState.BINDING)
_PIPE = int(TaskState.PIPELINED)


def job_ready(state: CycleState, j: int) -> bool:
    """Ready for scheduling: active plus pending tasks can reach ``minAvailable`` (a job with
    subgroups: every required subgroup can, :func:`scheduler_engine.subgroups.job_ready`)."""
    if state._sg_list[j]:
        return subgroups.job_ready(state, j)
    return state.job_num_active(j) + len(state.job_pending_tasks(j)) >= int(state.job_min_available[j])


def pending_ready_jobs(state: CycleState) -> list[int]:
    """Jobs of leaf queues with a pending task that are ready (:func:`job_ready`), ascending: the
    jobs reclaim and preempt try. One pass over the tasks instead of a pending-task list per job;
    jobs with subgroups ask :func:`scheduler_engine.subgroups.job_ready`."""
    s = state
    if s.J == 0:
        return []
    npend = np.bincount(s.task_job[s.task_state == _PEND], minlength=s.J)
    leaf = np.asarray(s.queue_is_leaf, dtype=bool)[s.job_queue_arr]
    out = []
    for j in np.flatnonzero(leaf & (npend > 0)).tolist():
        if s._sg_list[j]:
            if subgroups.job_ready(s, j):
                out.append(j)
        elif int(s.job_num_active_arr[j]) + int(npend[j]) >= int(s.job_min_available[j]):
            out.append(j)
    return out


def within_preemption_delay(state: CycleState, j: int) -> bool:
    """A job younger than its ``preemptionDelay`` may not cause evictions (spec i).

    Both fields are the job's static input: the answer for every job is computed once per state
    (:func:`_in_preemption_delay`), the job loops ask for each job they pop."""
    m = state.__dict__.get("_in_preemption_delay")
    if m is None:
        m = state._in_preemption_delay = _in_preemption_delay(state)
    return m[j]


def _in_preemption_delay(state: CycleState) -> list[bool]:
    """:func:`within_preemption_delay` of every job: a positive (not NaN) delay longer than the job's
    age in seconds (the same float64 product and comparison, job by job)."""
    delay = np.asarray(state.jobs.preemption_delay, dtype=np.float64).reshape(-1)
    ago = np.asarray(state.jobs.created_minutes_ago, dtype=np.float64).reshape(-1)
    with np.errstate(invalid="ignore"):
        return ((delay > 0) & (ago * 60.0 < delay)).tolist()


def _constraint_signature(state: CycleState, j: int) -> tuple:
    """Scheduling-constraint signature (node selectors, topology): not the resource shape."""
    sel = tuple(sorted({state.task_selector_key[t] for t in state.job_task_range(j)}))
    if state._sg_list[j]:  # its subgroup tree constrains it: compared with no other job
        return (sel, ("subgroups", j), None)
    if state.D:  # DRA claims constrain where tasks go, like selectors
        claims = tuple(sorted({tuple(state.task_claims[t].tolist()) for t in state.job_task_range(j)}))
        return (sel, state.jobs.topology_required[j], state.jobs.topology_preferred[j], claims)
    return (sel, state.jobs.topology_required[j], state.jobs.topology_preferred[j])


def _sorted_requests(state: CycleState, tasks: Iterable[int]) -> list[tuple]:
    """The tasks' request rows as tuples of Python floats, sorted (one gather and ``tolist``: the
    same floats as ``float()`` of each element)."""
    tasks = list(tasks)
    if not tasks:
        return []
    return sorted(map(tuple, state.task_order_req[tasks].tolist()))


def _signature(state: CycleState, j: int) -> tuple:
    """:func:`_constraint_signature` of job j, kept on the state: it reads the job's static fields
    only (selectors, subgroups, topology, DRA claims of all its tasks)."""
    cache = getattr(state, "_constraint_sigs", None)
    if cache is None:
        cache = state._constraint_sigs = {}
    sig = cache.get(j)
    if sig is None:
        sig = cache[j] = _constraint_signature(state, j)
    return sig


def _pending_requests(state: CycleState, j: int) -> tuple[int, list[tuple]]:
    """How many pending tasks job j has and their requests sorted (:func:`_sorted_requests`)."""
    hit = _pending_entry(state, j)
    return hit[1], hit[2]


def _pending_entry(state: CycleState, j: int) -> tuple:
    """``(job_version, n, requests, shape id)`` of job j: :func:`_pending_requests`' pair, kept on the
    state per job and ``job_version`` (bumped by every change of the job's tasks, rollbacks
    included): the signature checks compare the same jobs again and again within an action. The
    shape id is equal exactly for equal pairs (interned per state), the key of the comparisons'
    memo (:class:`FailedShapes`)."""
    cache = state.__dict__.get("_pending_reqs")
    if cache is None:
        cache = state._pending_reqs = {}
        state._pending_shape_ids = {}
    ver = int(state.job_version[j])
    hit = cache.get(j)
    if hit is None or hit[0] != ver:
        p = state.job_pending_tasks(j)
        reqs = _sorted_requests(state, p) if p else []
        ids = state._pending_shape_ids
        shape = (len(p), tuple(reqs))
        sid = ids.get(shape)
        if sid is None:
            sid = ids[shape] = len(ids)
        hit = cache[j] = (ver, len(p), reqs, sid)
    return hit


def prime_job_entries(state: CycleState, jobs: list[int]) -> None:
    """Make :func:`_signature` and :func:`_pending_entry` of every job of ``jobs`` that has none (or,
    for the pending entry, one of another ``job_version``), together: the same values as those
    functions make one job at a time (the selector keys of each job's task range as a sorted set; the
    request rows of its Pending tasks, ascending, from one gather and ``tolist`` for all the jobs, each
    job's sorted; the shape ids interned in ``jobs`` order). Consolidation's end-of-loop check reads
    both for every job left (~36,600 at 10,000 nodes, ~7.7 us each one by one: 0.28 s of the phase).
    Jobs with subgroups or DRA claims get their signature from :func:`_signature` itself."""
    if not jobs:
        return
    sigs = state.__dict__.get("_constraint_sigs")
    if sigs is None:
        sigs = state._constraint_sigs = {}
    keys = state.task_selector_key
    starts = state.job_start.tolist() if len(jobs) * 4 > state.J else None
    treq, tpref, sg = state.jobs.topology_required, state.jobs.topology_preferred, state._sg_list
    plain = not state.D
    for j in jobs:
        if j in sigs:
            continue
        if plain and not sg[j]:
            a = starts[j] if starts is not None else int(state.job_start[j])
            c = int(state.job_count[j])
            sel = (keys[a],) if c == 1 else tuple(sorted(set(keys[a:a + c])))
            sigs[j] = (sel, treq[j], tpref[j])
        else:
            sigs[j] = _constraint_signature(state, j)
    cache = state.__dict__.get("_pending_reqs")
    if cache is None:
        cache = state._pending_reqs = {}
        state._pending_shape_ids = {}
    ja = np.asarray(jobs, dtype=np.int64)
    vers = state.job_version[ja].tolist()
    todo = [i for i, (j, v) in enumerate(zip(jobs, vers)) if (h := cache.get(j)) is None or h[0] != v]
    if not todo:
        return
    tj = ja[todo]
    st = state.job_start[tj].astype(np.int64)
    cnt = state.job_count[tj].astype(np.int64)
    seg = np.repeat(np.arange(tj.size), cnt)  # each task's position in ``todo``
    tasks = np.arange(seg.size, dtype=np.int64) + np.repeat(st - (np.cumsum(cnt) - cnt), cnt)
    pend = state.task_state[tasks] == _PEND
    npend = np.bincount(seg[pend], minlength=tj.size).tolist()
    rows = state.task_order_req[tasks[pend]].tolist()
    ids = state._pending_shape_ids
    a = 0
    for i, n in zip(todo, npend):
        reqs = sorted(map(tuple, rows[a:a + n])) if n else []
        a += n
        shape = (n, tuple(reqs))
        sid = ids.get(shape)
        if sid is None:
            sid = ids[shape] = len(ids)
        cache[jobs[i]] = (vers[i], n, reqs, sid)


def _le(a: tuple, b: tuple) -> bool:
    return all(x <= y + EPS for x, y in zip(a, b))


def _easier_shape(n1: int, r1: list, n2: int, r2: list) -> bool:
    """:meth:`FailedShapes.blocking`'s test: pending tasks ``(n1, r1)`` are easier than ``(n2, r2)``."""
    if not n1 or not n2:
        return False
    if n2 > n1:
        return True
    for i, a in enumerate(r1):
        if i >= len(r2):
            return False
        if _le(a, r2[i]):
            if _le(r2[i], a):
                continue
            return True
    return False


def _smaller_shape(n1: int, r1: list, n2: int, r2: list) -> bool:
    """:meth:`FailedShapes.record`'s test: ``(n1, r1)`` is no larger than ``(n2, r2)``."""
    if not n1 or not n2 or n1 > n2:
        return False
    return all(_le(a, b) for a, b in zip(r1, r2))


#: memoise the two shape comparisons per pair of shape ids (False: compare at every call; the
#: tests compare both on whole cycles)
MEMO_SHAPES = True


class FailedShapes:
    """Scheduling signatures (spec i): after a job fails, skip same-signature jobs that are not easier.

    One instance per queue (reclaim, preempt) or per action (consolidation), as upstream.

    The two comparisons read nothing but the two jobs' pending shapes (count and sorted requests),
    so their outcomes are memoised per pair of shape ids on the state (:func:`_pending_entry`): a
    preempt pass skips thousands of jobs of a few shapes against a few failed ones (~16,000 checks
    at 2,000 nodes, ~5-10 us each when compared afresh).
    """

    def __init__(self, state: CycleState) -> None:
        self.state = state
        self.reps: dict[tuple, int] = {}
        memo = state.__dict__.get("_shape_cmp_memo")
        if memo is None:
            memo = state._shape_cmp_memo = ({}, {})
        self._memo_easier, self._memo_smaller = memo

    def blocking(self, j: int) -> int | None:
        """The failed job that makes ``j`` not worth trying, or ``None``."""
        if not self.reps:
            return None
        rep = self.reps.get(_signature(self.state, j))
        if rep is None or self._easier(j, rep):
            return None
        return rep

    def _easier(self, j: int, rep: int) -> bool:
        return self._compare(self._memo_easier, _easier_shape, j, rep)

    def record(self, j: int) -> None:
        key = _signature(self.state, j)
        cur = self.reps.get(key)
        if cur is not None and not self._smaller(j, cur):
            return
        self.reps[key] = j

    def _smaller(self, j: int, cur: int) -> bool:
        return self._compare(self._memo_smaller, _smaller_shape, j, cur)

    def _compare(self, memo: dict, shape_cmp, j: int, other: int) -> bool:
        """``shape_cmp`` of the two jobs' pending shapes, memoised in ``memo`` per pair of shape ids."""
        e1 = _pending_entry(self.state, j)
        e2 = _pending_entry(self.state, other)
        if not MEMO_SHAPES:
            return shape_cmp(e1[1], e1[2], e2[1], e2[2])
        key = (e1[3], e2[3])
        v = memo.get(key)
        if v is None:
            v = memo[key] = shape_cmp(e1[1], e1[2], e2[1], e2[2])
        return v


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
    if not jobs:
        return
    # the cyclic collector is paused for the loop (as allocate pauses it): the searches allocate
    # millions of small tuples, lists and sets and make no reference cycles, and at 10,000 nodes the
    # collector's repeated full scans of the live state took ~4 % of reclaim (perf); its state is
    # restored after, and the young generations collected once there
    with cyclic_gc_paused():
        _job_loop(state, jobs, action)


def _job_loop(state: CycleState, jobs: Sequence[int], action: EvictingAction) -> None:
    """:func:`run_evicting`'s loop."""
    s = state
    jq = JobQueue(s, list(jobs))
    failed: dict[int, FailedShapes] = {}
    unsimulated: dict[tuple, str] = {}  # (candidate-set key, GPU request, selector) -> raw reason
    memo: dict = {}  # the solvers' per-cluster-state values (VictimSolver.memo), emptied at a commit
    popped: set[int] = set()
    while True:
        j = jq.pop()
        if j is None:
            break
        if s.budget.expired():
            stop_for_budget(s, action.name, action.refused, jobs, popped)
            break
        popped.add(j)
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
                              search_budget=s.config.scenario_search_budget, memo=memo)
        sol = solver.solve(j, tasks)
        if sol is None and solver.out_of_time:  # interrupted, not failed: j counts as not tried
            popped.discard(j)
            stop_for_budget(s, action.name, action.refused, jobs, popped, mid_search=True)
            break
        if sol is None:
            shapes.record(j)
            if solver.unsimulated_failure is not None:
                unsimulated[share_key] = solver.unsimulated_failure
            s.add_event(j, action.refused, action.fail_text(j, leaf, solver.last_reason))
            continue
        bind_what_waits_for_nothing(s, sol)
        commit_events(s, sol, action.evicted, detail=action.detail(j, leaf))
        unsimulated.clear()
        memo.clear()
        action.committed()
        # the commit changed the beneficiary's and the victims' jobs and the allocations on their
        # queue paths only (failed scenarios were rolled back): re-order those paths, not all
        # queues (JobQueue.refresh_all is O(queues) per commit)
        for q in sorted({leaf} | {int(s.job_queue_arr[int(s.task_job[t])]) for t in sol.scenario.victims}):
            jq.refresh(q)


def stop_for_budget(state: CycleState, action: str, reason: str, jobs: Sequence[int], tried: set[int],
                    mid_search: bool = False) -> None:
    """The cycle's time budget ran out in ``action``'s job loop (``mid_search``: inside a job's victim
    search, which then counts as not tried): every job it did not reach gets an event saying so
    (``reason`` empty: none), and the budget records the cut."""
    untried = sorted(set(int(j) for j in jobs) - tried)
    if reason:
        text = state.budget.untried_text(action)
        for j in untried:
            state.add_event(j, reason, text)
    state.budget.cut(action, tried=len(tried), untried=len(untried), mid_search=mid_search)


def bind_what_waits_for_nothing(state: CycleState, sol: Solution) -> list[int]:
    """After a committed solution: a job whose new placements took nothing releasing is bound.

    The victim search pipelines every placement it simulates, as KAI's solvers do
    (``common.TryToVirtuallyAllocatePreemptorAndGetVictims`` -> ``AllocateJob(..., isPipelineOnly
    = true)``): there, a victim is always a pod on a node and ``Statement.Evict`` turns its share
    into releasing resources. Here a victim may also be a task that allocate placed earlier in this
    same cycle (``Binding``, KAI's ``Allocated``/``Binding``, an active-allocated status, so a
    candidate): nothing was bound yet, so evicting it only undoes that placement
    (``CycleState.evict``: back to Pending, its share free again, like ``Statement.unallocate``).
    A job that then sits wholly on free resources has nothing to wait for; left Pipelined it
    would be turned back to Pending by the next cycle and the same victims chosen again, forever
    (issue #18). KAI pipelines a job as a whole once one of its tasks waits
    (``PodGroupInfo.ShouldPipelineJob``); so a job stays Pipelined while any of its new
    placements takes releasing resources, and is bound otherwise. Tasks moved from where they ran
    (consolidation) stay Pipelined: their pod has to go first. Returns the tasks bound.
    """
    s = state
    sc = sol.scenario
    tj = s._task_job_list
    jobs = dict.fromkeys([sc.job] + [tj[t] for t in sc.moved])
    bound: list[int] = []
    for jj in jobs:
        # (the job's tasks are the range job_start[jj]:+job_count[jj]: one pass over its two state slices
        # instead of two numpy scalars per task; the same tasks, ascending)
        a = int(s.job_start[jj])
        b = a + int(s.job_count[jj])
        fresh = (np.flatnonzero((s.task_state[a:b] == _PIPE) & (s._input_state[a:b] != _RUN)) + a).tolist()
        if fresh and not any(s.takes_releasing(t) for t in fresh):
            for t in fresh:
                s.mark_binding(t)
            bound.extend(fresh)
    return bound


def describe_alloc(vec: np.ndarray) -> str:
    # (the row as Python floats once: the same values ``float(vec[r])`` gives, without a numpy scalar
    # per resource; one text per victim task of every commit)
    v = vec.tolist() if isinstance(vec, np.ndarray) else [float(x) for x in vec]
    parts = []
    for r, name in ((GPU, "gpu"), (CPU, "cpu"), (MEM, "memory")):
        if v[r] > EPS:
            parts.append(f"{name}={fmt_amount(r, v[r])}")
    return ", ".join(parts) or "no resources"


def commit_events(state: CycleState, sol: Solution, reason: str, detail: Callable[[int], str] | None = None) -> None:
    """Write the explanations of a committed solution: one event per victim task, one for the job.

    A victim that allocate placed earlier in this cycle is not evicted (it never started): its
    placement is undone and it waits again; the events say so."""
    s = state
    sc = sol.scenario
    bj = sc.job
    bname = s.jobs.names[bj]
    unplaced = 0
    for t in sc.released:
        n = sc.orig_node[t]
        node = s.nodes.names[n] if n >= 0 else "?"
        extra = detail(t) if detail else ""
        if s.task_state[t] == _PEND:
            unplaced += 1
            what = (f"placed on node {node} earlier in this cycle, placement undone (nothing was bound) to make "
                    f"room for job {bname}")
        else:
            what = f"on node {node} evicted to make room for job {bname}"
        s.add_event(int(s.task_job[t]), reason,
                    f"task {s.tasks.names[t]} ({describe_alloc(sc.orig_alloc[t])}) {what}" + (f"; {extra}" if extra else ""),
                    task=t, victim_of=bj)
    for t in sc.moved:
        old = sc.orig_node[t]
        new = int(s.task_node[t])
        s.add_event(int(s.task_job[t]), "Consolidated",
                    f"task {s.tasks.names[t]} ({describe_alloc(sc.orig_alloc[t])}) moved from node "
                    f"{s.nodes.names[old]} to node {s.nodes.names[new]} to make room for job {bname}",
                    task=t, victim_of=bj)
    nodes = sorted({s.nodes.names[int(s.task_node[t])] for t in sc.tasks})
    how = "bound" if all(s.task_state[t] == _BIND for t in sc.tasks) else "pipelined"
    evicted = len(sc.released) - unplaced
    undone = f", {unplaced} placement(s) of this cycle undone" if unplaced else ""
    s.add_event(bj, reason,
                f"{len(sc.tasks)} task(s) {how} on {', '.join(nodes)} after {evicted} victim task(s) "
                f"evicted{undone} and {len(sc.moved)} moved ({sol.scenarios_tried} scenario(s) simulated)")
