"""Scenario simulation: evict a victim set, then re-place the beneficiary and the victims.

KAI simulates each victim scenario on the session (``by_pod_solver`` / ``job_solver``): the victims
are evicted, then the beneficiary and the evicted victims are placed again in normal queue/job
order (``JobsOrderByQueues``), every placement pipelined. A victim put back on its own node (same
device for a shared GPU) is un-evicted and stays Running; one placed elsewhere is Pipelined there
(its old node keeps the resources as releasing). The beneficiary must fit entirely or the
scenario fails. Everything runs on the shared :class:`~scheduler_engine.state.CycleState` through
its undo journal, so a failed scenario is rolled back.

Why a simulation instead of arithmetic: it exercises the same node order, device choice, GPU
sharing, topology domains and queue capacity checks as a real placement, so the engine never
evicts for a placement that would then not happen.

* :class:`Placer`: pipelined-only, all-or-nothing placement of one job's tasks (the allocate
  action's node order, from its incremental per-shape index when possible).
* :class:`Simulation`: evicts a scenario's victims and re-places everybody in queue/job order
  (:class:`LeafTournament` decides which leaf places next), and sorts the victims by how they ended.
  A scenario whose jobs are all plain (no subgroups, no topology, no DRA claims; whole GPUs, GPU
  fractions, GPU memory) runs in one compiled call (:func:`kernels.scenario.run_scenario` over
  :class:`ScenarioArrays`); the Python steps stay the reference for the rest
  (``Simulation.use_kernel = False`` or ``CycleState.fast_paths = False``: Python for every scenario).
* :class:`Scenario`: what a validator sees.
* ``unevict`` (Releasing -> Running again through the undo journal) and ``place_released``
  (placing a task that is Releasing, which ``CycleState.place`` only accepts for Pending tasks).
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from typing import Mapping, Sequence

import numpy as np

from .. import subgroups
from ..kernels import scenario as _scenario_k
from ..kernels import victim_keys
from ..kernels.victim_run import EntryCall
from ..ordering import _QueueProfile, _profile_less, job_order_key, kernel_static, task_order
from ..plugins.nodeplacement import ShapeIndex, node_key_one, node_keys, placement_strategy
from ..plugins.topology import allocation_domains, preferred_tiers
from ..snapshot import GPU, NRES, TaskState
from ..state import EPS, CycleState
from .victim_order import queue_tiebreaks

_PEND = int(TaskState.PENDING)
_RUN = int(TaskState.RUNNING)
_REL = int(TaskState.RELEASING)
_BIND = int(TaskState.BINDING)
_PIPE = int(TaskState.PIPELINED)
_ZERO_REQ = np.zeros(NRES)
_ZERO_REQ.flags.writeable = False
_NO_NODES = np.zeros(0, dtype=np.int64)


def unevict(state: CycleState, t: int) -> bool:
    """Releasing (evicted in this cycle) -> Running again on its node, through the undo journal.

    Only possible while the resources it releases are not promised to a pipelined task. A task
    without DRA claims goes through one compiled call (``CycleState.unevict_fast``).
    """
    if state.task_state[t] != _REL:
        return False
    if state.fast_paths and not state._claims_list[t]:
        return state.unevict_fast(t)
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
    dra = state.task_dra[t] if state._claims_list[t] else None
    if dra:  # its claimed devices must still be releasing (not promised to a pipelined task)
        rrel = state.dra_rel[n]
        if any(rrel[c, d] < 1 - EPS for c, ds in dra.items() for d in ds):
            return False
    state._record(t, n)
    state.node_releasing[n] -= alloc
    for d in devs:
        drel[d] -= per
    if dra:
        for c, ds in dra.items():
            for d in ds:
                rrel[c, d] -= 1.0
    state.task_state[t] = _RUN
    j = int(state.task_job[t])
    state._queues_add(j, alloc, 1)
    state.job_num_active_arr[j] += 1
    return True


def place_released(state: CycleState, t: int, n: int, devices) -> None:
    """Pipeline a Releasing victim onto node n (``CycleState.place`` only takes Pending tasks)."""
    state.task_state[t] = _PEND
    try:
        state.place(t, n, pipelined=True, devices=devices)
    except Exception:
        state.task_state[t] = _REL
        raise


class Placer:
    """Pipelined-only, all-or-nothing placement used inside victim simulations.

    Node order: binpack = least available (free plus releasing) first, spread = most available
    first, on GPU for GPU tasks and on CPU otherwise; ties by node index. Topology domains and the
    preferred-level node tiers come from the same functions as a real placement
    (``plugins.topology.allocation_domains`` / ``preferred_tiers``: one ranking, as in KAI).

    ``use_index = False``: every task scans all nodes in placement order instead of taking the first
    node from the per-shape index (same decisions, slower; the tests compare the two).
    """

    use_index = True

    def __init__(self, state: CycleState) -> None:
        self.state = state
        self.placement = dict(state.config.placement or {})
        self.released: set[int] = set()  # tasks evicted from Running in the current scenario
        # task signature -> its shape index (one dict per state, so per cycle)
        self._index_of: dict = state.__dict__.setdefault("_victims_shape_index", {})
        self._devs = np.empty(max(state.G, 1), dtype=np.int64)  # the compiled placement's device choice
        # shape index -> the fixed arguments of its compiled placement (its arrays are never replaced,
        # except the heap's, passed per call)
        self._kargs: dict = {}
        # jobs without subgroups and topology: a single task of theirs may take the compiled place_job
        # (one list per state: placers are made per solve)
        self._plain: list[bool] = state.__dict__.get("_victims_plain_jobs")
        if self._plain is None:
            jobs = state.jobs
            self._plain = state.__dict__["_victims_plain_jobs"] = [
                not (sg or req or pref) for sg, req, pref in zip(state._sg_list, jobs.topology_required,
                                                                  jobs.topology_preferred)]

    def fix_after_rollback(self) -> None:
        """Rolling back a ``place_released`` restores the interim Pending state: make it Releasing."""
        s = self.state
        for t in self.released:
            if s.task_state[t] == _PEND and s.task_node[t] >= 0:
                s.task_state[t] = _REL

    def rollback(self, cp) -> None:
        self.state.rollback(cp)
        self.fix_after_rollback()

    def node_order(self, t: int, cand: np.ndarray, idle_ok: np.ndarray) -> list[int]:
        """Candidate nodes in the allocate action's KAI node order (:func:`nodeplacement.node_keys`).

        Shared-GPU group fit, then fits-on-free (nodeavailability), then binpack / spread on free
        plus releasing; ties by node index. The same order as a real placement, so a simulation
        decides exactly what the cycle then does.
        """
        s = self.state
        idx = np.flatnonzero(cand)
        if idx.size <= 1:
            return [int(i) for i in idx]
        col, spread = placement_strategy(s, self.placement, t)
        keys = node_keys(s, t, idx, idle_ok[idx].astype(float), col, spread)
        return idx[np.argsort(keys, kind="stable")].tolist()

    def place_job(self, j: int, tasks: Sequence[int]) -> bool:
        """Place ``tasks`` of job j (pipelined) all-or-nothing; the state is unchanged on failure."""
        s = self.state
        if not tasks:
            return True
        q = int(s.job_queue_arr[j])
        if len(tasks) == 1 and self._plain[j] and self.use_index and s.fast_paths:
            # one task, no subgroups, no topology: the queue check and the placement compiled
            t = tasks[0]
            idx = self._shape_index(t)
            if idx._fast is not None and not idx._shared:
                released = s.task_state[t] == _REL
                r = self._place_one_compiled(t, idx, released, int(s.task_node[t]) if released else -1, True)
                if r >= 0:
                    return True
                if r == _scenario_k.NO_NODE or r == _scenario_k.QUEUE:
                    return False
                return self._place_one(j, t, None, True)  # SCAN (nothing changed: no checkpoint needed)
        if len(tasks) == 1:  # (one row: the same values as the one-row sum; nothing to order)
            if s.queue_over_capacity(q, s.task_quota_req[tasks[0]], not s.job_preemptible_arr[j]):
                return False
            tasks = list(tasks)
        else:
            if s.queue_over_capacity(q, s.task_quota_req[list(tasks)].sum(axis=0), not s.job_preemptible_arr[j]):
                return False
            tasks = task_order(s, tasks)
        if s._sg_list[j]:
            return self._place_tree(j, tasks)
        required = s.jobs.topology_required[j]
        preferred = s.jobs.topology_preferred[j]
        if not required and not preferred:
            return self._place_all(j, tasks, None)
        # the same domains, in the same order, as a real placement (allocation_domains), and the
        # same preferred-level node tiers (KAI: both go through the topology plugin)
        candidates, _why = allocation_domains(s, j, list(tasks), required, preferred)
        tiers = preferred_tiers(s, preferred, None, tasks) if preferred else None
        for _desc, mask in candidates:
            if self._place_all(j, tasks, mask, tiers):
                return True
        return False

    def _place_tree(self, j: int, tasks: Sequence[int]) -> bool:
        """A job with subgroups: member by member, each subgroup in one domain of its topology level
        inside its parent's (:func:`scheduler_engine.subgroups.place_tree`), every task pipelined."""
        s = self.state

        def domains(tr, i, ts, within):
            req, pref = tr.topo[i]
            if not req and not pref:
                return [("", within)], ""
            active = [t for t in tr.subtree_tasks(i) if s.task_state[t] in (_BIND, _PIPE, _RUN)]
            return allocation_domains(s, j, list(ts), req, pref, within=within, active=active)

        def place_leaf(i, ts, within):
            ts = task_order(s, ts) if len(ts) > 1 else list(ts)
            return (len(ts), "") if self._place_all(j, ts, within) else (0, "")

        try:
            subgroups.place_tree(s, subgroups.tree_of(s, j), tasks, None, domains, place_leaf, rollback=self.rollback)
        except subgroups.PlaceFailure:
            return False
        return True

    def _place_all(self, j: int, tasks: Sequence[int], within, tiers=None) -> bool:
        s = self.state
        if tiers is not None:
            tiers = [m if within is None else (m & within) for m in tiers]
            tiers = [m for m in tiers if m.any()]
            if len(tiers) <= 1:
                tiers = None
        cp = s.checkpoint()
        for t in tasks:
            if tiers is None:
                ok = self._place_one(j, t, within)
            else:
                ok = any(self._place_one(j, t, m) for m in tiers)
            if not ok:
                self.rollback(cp)
                return False
        return True

    def _shape_index(self, t: int):
        """The per-shape node index of task t's shape (:class:`nodeplacement.ShapeIndex`), shared by
        every simulation of the cycle: kept on the state, it catches up through ``state.node_log``
        with the nodes changed since its last query (placements, evictions and their rollbacks)."""
        s = self.state
        sig = s.task_signature(t)
        idx = self._index_of.get(sig)
        if idx is None:
            col, spread = placement_strategy(s, self.placement, t)
            idx = self._index_of[sig] = ShapeIndex(s, t, col, spread)
        return idx

    def _place_one(self, j: int, t: int, within, scan: bool = False) -> bool:
        """Place task t of job j (pipelined) inside ``within`` (None: anywhere); ``scan``: the
        compiled placement found that the index's first node refuses it (scan every node)."""
        s = self.state
        released = s.task_state[t] == _REL
        old = int(s.task_node[t]) if released else -1
        if within is None and self.use_index:
            # fast path: the first node in placement order from the shape index, which nearly
            # always takes the task; if it does not, the full scan below walks the same order
            # (it retries this node first: every check before a placement is side-effect free)
            idx = self._shape_index(t)
            if not scan and idx._fast is not None and not idx._shared and s.fast_paths:
                # whole GPUs or none, no claims: query, device choice and placement compiled
                code = self._place_one_compiled(t, idx, released, old, False)
                if code >= 0:
                    return True
                if code == _scenario_k.NO_NODE:
                    return False
                scan = True
        q = s.job_queue(j)
        nonpre = not s.job_is_preemptible(j)
        if within is None and self.use_index and not scan:
            n = idx.query()
            if released and old >= 0 and not idx.any_ok[old] and s.node_schedulable[old]:
                # the old node is a candidate outside the fit mask (key as node_keys gives it)
                ko = node_key_one(s, t, old, False, idx.col, idx.spread)
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

    def _place_one_compiled(self, t: int, idx: ShapeIndex, released: bool, old: int, qcheck: bool) -> int:
        """:func:`kernels.scenario.place_one_whole` on task t's shape index: the nodes changed since
        the index's last query, the index's arrays and the state's journal arrays in one call
        (``qcheck``: t is its job's only task to place, check the queue path first); on a
        placement the journal's object half and the change log are written here, as
        ``CycleState.place`` / ``unevict`` write them. Returns the kernel's code."""
        s = self.state
        ka = s.__dict__.get("_victims_scenario_arrays")
        row = ka.rows.get(idx) if ka else None
        if row is not None:  # an index the compiled scenarios share: their log and position
            hi = ka.sync_log()
            lo = int(ka.pos[row])
            delta = ka.log[lo:hi] if hi != lo else _NO_NODES
            ka.pos[row] = hi
        else:
            log = s.node_log
            hi = len(log)
            delta = np.array(log[idx.pos:hi], dtype=np.int64) if hi != idx.pos else _NO_NODES
        idx.pos = hi
        fixed = self._kargs.get(idx)
        if fixed is None or fixed[10] is not idx.idle_ok:  # (an index rebuilt by its Python path)
            sched, sel, rc, rm, k, ndev, top, cap = idx._fast
            lim, des = s.queue_limit_arrays()
            gcap, dgpu, _claims, dra_free, dra_rel = s.dra_query_args(t)  # (the cluster's DRA GPUs; t has no claims)
            fixed = self._kargs[idx] = (sched, sel, rc, rm, k, ndev, top, cap, idx.col, idx.spread, idx.idle_ok,
                                        idx.any_ok, idx.key, idx.hs, s.task_quota_req, lim, des, s.task_request,
                                        self._devs, gcap, dgpu, dra_free, dra_rel)
        r = _scenario_k.place_one_whole(t, released, old, qcheck, delta, idx.hk, idx.hn, s._journal_room(),
                                        s._preempt_list[s._task_job_list[t]], *fixed, *s._jarrays, s._ji, s._jf)
        if r >= 0:
            s._record_objects(t, r)
            if s.task_state[t] != _RUN and s.task_gpu_groups[t]:
                s.task_gpu_groups[t] = []
        return r

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
                    return unevict(s, t)
                place_released(s, t, n, devs)  # moved to another device of the same node
                return True
            return unevict(s, t)
        devs = s.choose_devices(t, n, pipelined=True)
        if devs is None:
            return False
        if released:
            place_released(s, t, n, devs)
        else:
            s.place(t, n, pipelined=True, devices=devs)
        return True


@dataclass
class Scenario:
    """What a validator sees: the beneficiary, its tasks, and how every victim task ended."""

    job: int
    tasks: list[int]  # beneficiary tasks of this attempt (all placed)
    victims: list[int]  # every victim task of the scenario, in the order they were added
    released: list[int]  # victims that end Releasing (or Pending: placed earlier this cycle)
    moved: list[int]  # victims re-placed on another node / device (Pipelined)
    kept: list[int]  # victims put back where they were (un-evicted, Running)
    orig_alloc: Mapping[int, np.ndarray]
    orig_node: dict[int, int]
    # set by a validator that refuses: the queue whose released victims made it refuse (more
    # victims from under it cannot help), or -1
    blocked: int = -1
    # ``victims`` as an int64 array and what they held before as its (n, 3) rows (``orig_alloc``'s
    # values), when the solver has them: the compiled reclaim validator reads these (read only)
    varr: np.ndarray | None = None
    valloc: np.ndarray | None = None


class Simulation:
    """Evicts a scenario's victims and re-places the beneficiary and them in queue/job order.

    One per solver: it keeps the queue trees of the leaf sets it met (queue paths are fixed).
    """

    #: ``False``: every scenario takes the Python steps below (with the compiled single placements);
    #: the tests compare both (``CycleState.fast_paths = False`` switches this off too)
    use_kernel = True
    #: ``False``: the compiled scenario's callers leave it to the kernel to refuse a scenario with a job
    #: it does not simulate or has not looked at (the tests exercise those checks; a refused call
    #: costs more than the Python look at the victims' jobs)
    check_first = True

    def __init__(self, state: CycleState) -> None:
        self.state = state
        self.placer = Placer(state)
        self._ka: ScenarioArrays | None = None  # the compiled scenario's arrays (per state), on first use
        # leaves with jobs to place -> (children, tops) of their queue tree (queue paths are fixed)
        self._tree_cache: dict[frozenset, tuple] = {}
        # (id of a cached tree, leaf emptied) -> the tree without that leaf (cached trees live as
        # long as the simulation, so their ids are stable): no leaf set to rebuild after every pop
        self._tree_next: dict[tuple[int, int], tuple] = {}

    def rollback(self, cp) -> None:
        self.placer.rollback(cp)

    def run(self, j: int, partial: list[int], victims: list[int]) -> bool:
        """Evict ``victims``, then place job j's ``partial`` tasks and re-place the victims in queue
        order; True iff the beneficiary was placed. The caller rolls back (checkpoint before)."""
        s = self.state
        self.placer.released = {t for t, x in zip(victims, s.task_state[victims].tolist()) if x == _RUN}
        if self.use_kernel and s.fast_paths and self.placer.use_index and s._journal is not None:
            r = self._run_compiled(j, partial, victims)
            if r >= 0:
                return r == 1
        s.evict_many(victims)  # (one compiled call for victims without DRA claims)
        victim_jobs = list(dict.fromkeys(s.task_job[victims].tolist()))  # distinct, first-seen order
        return self._allocate_in_order(j, partial, victim_jobs, set(victims))

    def _run_compiled(self, j: int, partial: list[int], victims: list[int]) -> int:
        """:func:`kernels.scenario.run_scenario`: the whole of :meth:`run` in one compiled call when
        every job of the scenario is plain (see there); then the journal's object half and the
        change log as the Python steps write them. Returns 1 / 0 (placed or not), or -1 when the
        Python steps must simulate this scenario (nothing changed)."""
        s = self.state
        ka = self._ka
        if ka is None:
            ka = self._ka = ScenarioArrays.of(s, self.placer)
            if ka is None:
                return -1
        jok = ka.jst[:, _scenario_k.J_OK]
        if jok[j] == 0:  # (the kernel would say NOT_PLAIN: spare the call)
            return -1
        va = np.asarray(victims, dtype=np.int64)
        # the victims' jobs too, before the call (a refused call costs its dispatch and checks)
        vj = s.task_job[va]
        m = int(jok[vj].min()) if vj.shape[0] else 1
        if not self.check_first:  # (tests: the kernel's own checks)
            m = 1
        elif m < 0 or jok[j] < 0:
            ka.learn([j] + vj.tolist())
            if jok[j] == 0:
                return -1
            m = int(jok[vj].min()) if vj.shape[0] else 1
        if m == 0:
            return -1
        io = ka.io
        nb, nv = len(partial), va.shape[0]
        if nb + nv > ka.pv.shape[0]:
            ka.grow_pv(nb + nv)
        pv = ka.pv
        pv[:nb] = partial
        pv[nb:nb + nv] = va
        io[_scenario_k.IO_J] = j
        io[_scenario_k.IO_NP] = nb
        io[_scenario_k.IO_NV] = nv
        while True:
            lo = ka.sync_log()
            i0 = len(s._journal)
            io[0] = i0
            io[1] = lo
            io[2] = s._protect_len
            r = ka.call()
            if r >= 0:
                break
            if r == _scenario_k.UNKNOWN_JOB:
                ka.learn([j] + s.task_job[va].tolist())
            elif r == _scenario_k.ROOM:
                ka.room(int(io[7]))
                s._journal_room_for(i0 + int(io[7]))
            else:
                return -1
        return self.after_compiled(nv, i0, r)

    def after_compiled(self, nv: int, i0: int, r: int) -> int:
        """What :meth:`_run_compiled` does after the scenario kernel simulated a scenario of ``nv``
        victims from journal entry ``i0`` (its results in ``io``; also after the compiled victim search
        simulated one and handed it back, ``PrefixSearch``): the change log's length, ``_protect_len``,
        ``resources_freed`` and the journal's object half. Returns ``r``."""
        s = self.state
        ka = self._ka
        io = ka.io
        i1, lo1, protect, freed = io[3:7].tolist()
        s.node_log.set_len(lo1)  # (the kernel appended to the log's own buffer: ``ka.log``)
        s._protect_len = protect
        s.resources_freed += nv + freed
        if i1 > i0:
            # the journal's object half, entry by entry as CycleState._record_objects writes it (a
            # shared task's entry copies its node's gpuGroup map), and each task's gpuGroup list as
            # the Python steps leave it (a shared placement names its device's group: new ones here)
            jo, tg, dg, sl = s._journal, s.task_gpu_groups, s.dev_group, s._shared_list
            ji = s._ji
            ts = ji[i0:i1, 0].tolist()
            cs, ds = ka.clear[:i1 - i0].T.tolist()
            if (max(cs) <= _scenario_k.GROUPS_CLEAR and not any(map(sl.__getitem__, ts))
                    and not any(map(tg.__getitem__, ts))):
                # (the usual scenario: no shared task, and every gpuGroup list empty, which a clear
                # leaves as it is: the entries below with no list changed, made in one pass)
                jo.extend(zip(ts, ji[i0:i1, 4].tolist(), map(tg.__getitem__, ts), repeat(None), repeat(None)))
                return r
            for t, n, c, d in zip(ts, ji[i0:i1, 4].tolist(), cs, ds):
                jo.append((t, n, tg[t], dict(dg[n]) if sl[t] and n >= 0 else None, None))
                if c == _scenario_k.GROUPS_CLEAR:
                    if tg[t]:
                        tg[t] = []
                elif c == _scenario_k.GROUPS_INPUT:
                    tg[t] = s._input_groups[t]
                elif c:  # JOIN / NEW
                    gm = dg[n]
                    name = gm.get(d)
                    if name is None:
                        name = gm[d] = s._new_group_name(n, d)  # (the kernel set dev_shared[n, d])
                    tg[t] = [name]
        return r

    def outcome(self, victims: list[int]) -> tuple[list[int], list[int], list[int]]:
        """How the victims of a placed scenario ended: ``(released, moved, kept)``."""
        s = self.state
        released, moved, kept = [], [], []
        for t in victims:
            st = int(s.task_state[t])
            if st == _RUN:
                kept.append(t)
            elif st in (_PIPE, _BIND):
                moved.append(t)
            else:
                released.append(t)
        return released, moved, kept

    def _victim_tasks_to_allocate(self, vj: int, evicted: set[int]) -> list[int]:
        """Tasks a victim job would re-allocate: its pending and just-evicted tasks (gang or one)."""
        s = self.state
        st = s.task_state
        if s._sg_list[vj]:
            return subgroups.tasks_to_allocate(s, vj, lambda t: st[t] == _PEND or (t in evicted and st[t] == _REL))
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
                    tour = LeafTournament(self, by_leaf, reqs)
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


class LeafTournament:
    """Which leaf places next during a re-placement run: the queue order's winner, kept per node.

    A queue's profile depends only on its own allocation and its representative (head) job, and a
    placement changes the allocation of the placed job's path only. So after each pop only the
    winners on the popped leaf's path are recomputed (bottom-up, scanning children in the same
    order as a full walk), not the whole tree: O(depth x children) per placement, not O(tree).
    """

    def __init__(self, sim: Simulation, by_leaf: dict[int, list[int]], reqs: dict[int, np.ndarray]) -> None:
        self.sim = sim
        self.state = sim.state
        self.by_leaf = by_leaf
        self.reqs = reqs
        # total-order mode (the allocatable vectors of every parent's children form a chain, as in
        # JobQueue): keys in arrays, re-keyed by compiled kernels (kernels.victim_keys, victim=False);
        # the winner of a strict total order is what the sequential scan below picks
        tb = queue_tiebreaks(self.state, False)
        self._k = None
        if tb is not None:
            s = self.state
            by_depth, path, kid_ptr, kids, stat, tot, prio = kernel_static(s)
            leaf_live = np.zeros(s.Q, dtype=np.bool_)
            req = np.zeros((s.Q, 3))
            for leaf, lst in by_leaf.items():
                leaf_live[leaf] = True
                req[leaf] = reqs[lst[-1]]
            key = np.zeros((s.Q, 6))
            vrep = np.full(s.Q, -1, dtype=np.int64)
            self._next = victim_keys.build(False, by_depth, kid_ptr, kids, stat, tot, prio, tb, s.queue_alloc,
                                           leaf_live, req, key, vrep)
            self._k = (path, kid_ptr, kids, stat, tot, prio, tb, leaf_live, req, key, vrep)
            self._dirty_leaf = -1
            return
        self.rep: dict[int, int] = {}  # node -> leaf its winning subtree is represented by
        self.prof: dict[int, object] = {}  # node -> its queue profile with its representative's job
        self.cache: dict[tuple, object] = sim.state.__dict__.setdefault("_victims_leaf_profiles", {})
        self.tree = sim._tree(by_leaf)
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
        pb = self._profile(b)
        for c in nodes[1:]:
            pc = self._profile(c)
            if _profile_less(pc, pb):
                b, pb = c, pc
        return b

    def changed(self, leaf: int, emptied: bool) -> None:
        """``leaf``'s head was popped (and it is gone if ``emptied``); recompute at the next best()."""
        if self._k is not None:
            leaf_live, req = self._k[7], self._k[8]
            if emptied:
                leaf_live[leaf] = False
            else:
                req[leaf] = self.reqs[self.by_leaf[leaf][-1]]
            self._dirty_leaf = leaf
            return
        if emptied:
            k = (id(self.tree), leaf)
            tree = self.sim._tree_next.get(k)
            if tree is None:
                tree = self.sim._tree_next[k] = self.sim._tree(self.by_leaf)
            self.tree = tree
            self.children, self.tops = tree
            self.rep.pop(leaf, None)
        path = self.dirty = self.state.queue_path_list[leaf]
        prof = self.prof
        for q in path:  # their allocation (the placement) or head job changes; nothing else does
            prof.pop(q, None)

    def best(self) -> int:
        if self._k is not None:
            leaf = self._dirty_leaf
            if leaf >= 0:  # after the placement of the popped job: its path's allocations moved
                self._dirty_leaf = -1
                path, kid_ptr, kids, stat, tot, prio, tb, leaf_live, req, key, vrep = self._k
                self._next = victim_keys.rekey_path(False, leaf, path, kid_ptr, kids, stat, tot, prio, tb,
                                                    self.state.queue_alloc, leaf_live, req, key, vrep, False)
            return self._next
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



class ScenarioArrays:
    """Per state: what :func:`kernels.scenario.run_scenario` reads besides the journal's arrays.

    * per job (``jst``): first task, task count, minAvailable, a flag (-1 not looked at yet, 0 the
      Python steps simulate its scenarios: subgroups, topology, a task with DRA claims, a task whose
      index is not compiled; 1 the kernel may), ``-priority`` and the rank of
      ``(-age, name)`` (``job_order_key`` without the elastic state);
    * per task (``tst``): its job's tasks in task order (``ordering.task_order``, static), its place in
      that order, its shape row;
    * the simulation's shape indexes (``Placer._shape_index``, one per task shape and state) stacked
      as rows of 2-D arrays (a shared-GPU index: its fraction in ``sfl``, a GPU-memory task's
      fraction per node in its ``cap`` row): an index taken in is re-homed onto its rows (its
      arrays become views of them), so the Python placements and the kernel update the same
      arrays; the kernel keeps each row's position in the change log in ``pos``
      (``Placer._place_one_compiled`` uses it too);
    * ``log``: ``state.node_log``'s buffer (:class:`~scheduler_engine.state.NodeLog`): the kernel
      appends to it and the caller sets the log's new length; re-read before each call (the buffer
      is replaced when the log grows).
    """

    def __init__(self, state: CycleState, placer: Placer, tb: np.ndarray) -> None:
        s = self.state = state
        self.placer = placer
        # (no task has DRA claims: learn need not look at each task of a job; the claims do not change)
        self._any_claims = bool(s.task_has_claims.any())
        J, T, N = len(s.job_start), s.T, s.N
        jobs = s.jobs
        jst = self.jst = np.zeros((J, 6), dtype=np.int64)
        jst[:, _scenario_k.J_START] = s.job_start
        jst[:, _scenario_k.J_COUNT] = s.job_count
        jst[:, _scenario_k.J_MIN] = s.job_min_available
        jst[:, _scenario_k.J_OK] = -1
        jst[:, _scenario_k.J_PRIO] = -np.asarray(jobs.priority, dtype=np.int64)
        created, names = jobs.created_minutes_ago, jobs.names
        order = sorted(range(J), key=lambda jj: (-float(created[jj]), names[jj]))
        rank = jst[:, _scenario_k.J_RANK]
        prev, r = None, -1
        for jj in order:
            k = (-float(created[jj]), names[jj])
            if k != prev:
                r += 1
                prev = k
            rank[jj] = r
        tst = self.tst = np.zeros((T, 3), dtype=np.int64)
        tst[:, _scenario_k.T_ORD] = np.arange(T)
        tst[:, _scenario_k.T_ROW] = -1
        self.jmark = np.full(J, -1, dtype=np.int64)
        self.tmark = np.zeros(T, dtype=np.bool_)
        self.qmark = np.full(s.Q, -1, dtype=np.int64)
        self.io = np.zeros(11, dtype=np.int64)
        self.pv = np.zeros(64, dtype=np.int64)  # the scenario: partial tasks, then victims (io says how many)
        self.clear = np.zeros((64, 2), dtype=np.int64)
        self.newg = np.zeros(1, dtype=np.int64)
        # the kernel's scratch (it allocates nothing): per node, and per scenario job / task (``_scratch``)
        self.scr = np.zeros((3, N), dtype=np.int64)
        self.sck = np.zeros(N)
        self.seen = np.zeros(N, dtype=np.bool_)
        self._scratch()
        self.devs = np.empty(max(s.G, 1), dtype=np.int64)
        gcap, dgpu, _claims, dra_free, dra_rel = s.dra_query_args(0)  # the cluster's DRA GPUs (gcap empty: none)
        self.dra = (gcap, dgpu, dra_free, dra_rel)
        self.log = s.node_log.buf
        self.H = 2 * N + 16  # a compiled-update index's heap capacity (never grown)
        self.rows: dict = {}  # ShapeIndex -> row
        self.S = 0
        self._alloc_stack(8)
        _by_depth, path, kid_ptr, kids, stat, tot, prio = kernel_static(s)
        Q = s.Q
        # (the tournament's live leaves and representatives: every queue at "none" between two calls,
        # the kernel keys and puts back only its scenario leaves' paths, scenario.build_paths)
        self._tour = (path, kid_ptr, kids, stat, tot, prio, tb, s.queue_alloc, np.zeros(Q, dtype=np.bool_),
                      np.zeros((Q, 3)), np.zeros((Q, 6)), np.full(Q, -1, dtype=np.int64))
        self._no_sel = np.zeros(0, dtype=np.bool_)
        self._no_frac = np.zeros(0, dtype=np.float64)
        self._call = EntryCall()  # (call: the dispatcher once, then the compiled version's entry point)
        self._args()

    @classmethod
    def of(cls, state: CycleState, placer: Placer) -> ScenarioArrays | None:
        """The state's arrays (made on first use), or None when the leaf order is not a total order
        of keys (``LeafTournament`` then compares queue profiles in Python)."""
        ka = state.__dict__.get("_victims_scenario_arrays")
        if ka is None:
            tb = queue_tiebreaks(state, False)
            ka = state.__dict__["_victims_scenario_arrays"] = False if tb is None else cls(state, placer, tb)
        return ka or None

    def _alloc_stack(self, cap: int) -> None:
        N, H, S = self.state.N, self.H, self.S
        new = dict(sint=np.zeros((cap, 6), dtype=np.int64), sfl=np.zeros((cap, 4)),
                   sched=np.zeros((cap, N), dtype=np.bool_), sel=np.zeros((cap, N), dtype=np.bool_),
                   ndev=np.zeros((cap, N), dtype=np.int64), cap=np.zeros((cap, N)),
                   idle_ok=np.zeros((cap, N), dtype=np.bool_), any_ok=np.zeros((cap, N), dtype=np.bool_),
                   key=np.zeros((cap, N)), hk=np.zeros((cap, H)), hn=np.zeros((cap, H), dtype=np.int64),
                   hs=np.zeros((cap, 1), dtype=np.int64), pos=np.zeros(cap, dtype=np.int64))
        for name, arr in new.items():
            if S:
                arr[:S] = getattr(self, name)[:S]
            setattr(self, name, arr)
        for idx, r in self.rows.items():
            self._rehome(idx, r)

    def _rehome(self, idx: ShapeIndex, r: int) -> None:
        idx.idle_ok, idx.any_ok, idx.key = self.idle_ok[r], self.any_ok[r], self.key[r]
        idx.hk, idx.hn, idx.hs = self.hk[r], self.hn[r], self.hs[r]
        idx._kargs = None

    def _scratch(self) -> None:
        """The kernel's per-scenario scratch rows, wide enough for any scenario ``pv`` and ``clear``
        hold (two more than both: the scenario's jobs and their offsets)."""
        w = max(self.pv.shape[0], self.clear.shape[0]) + 2
        self.wi = np.zeros((_scenario_k.WI_ROWS, w), dtype=np.int64)
        self.wf = np.zeros((_scenario_k.WF_ROWS, w))
        # the compiled victim search's rows per victim of a scenario (:func:`kernels.search.run_search`:
        # node, Running before, served; the allocation before), as wide
        self.vs = np.zeros((3, w), dtype=np.int64)
        self.va = np.zeros((w, 3))
        self.full = None

    def _args(self) -> None:
        st = self.state
        self.full = None
        self.args = (self.scr, self.sck, self.seen, self.jst, self.tst, st.task_order_req, st.task_is_shared,
                     st._input_node, st._input_tdev, st._input_tndev, self.jmark, self.tmark, self.qmark, self.sint, self.sfl, self.sched, self.sel,
                     self._no_sel, self._no_frac, self.ndev, self.cap, self.idle_ok, self.any_ok, self.key, self.hk,
                     self.hn, self.hs, self.pos, self.log, *self._tour, st.dev_shared, self.newg,
                     st.job_preemptible_arr, st.task_quota_req)

    #: ``False``: every call goes through the dispatcher (the tests compare both ways)
    use_entry_point = True

    @property
    def entry_calls(self) -> int:
        """Calls made through the compiled version's entry point (tests)."""
        return self._call.calls

    def call(self) -> int:
        """:func:`kernels.scenario.run_scenario` on this state's arrays and the scenario in ``io`` /
        ``pv``. Every call passes the very same argument tuple (rebuilt only when an array is
        replaced: a stack, log, flag, scenario or journal array grown), so after one call through the
        dispatcher the next ones call the compiled version directly
        (:func:`kernels.victim_run.entry_point`, with its guard: exactly one compiled version, the
        one that call ran; its check mode asserts the types on every call). That skips the
        dispatcher's typing of the kernel's 70-odd arguments (~3 us of ~8 per call at 2,000 nodes)
        and the building of the call. Looked up again after a rebuild and whenever the module's
        ``run_scenario`` is another object (a test's wrapper)."""
        return self._call(_scenario_k.run_scenario, self.arguments(), self.use_entry_point)

    def arguments(self) -> tuple:
        """:func:`kernels.scenario.run_scenario`'s argument tuple, the same object until an array in it
        is replaced (then a new one; the compiled victim search passes it on, ``PrefixSearch``)."""
        st = self.state
        full = self.full
        if (full is None or full[-1] is not st._jf or full[-2] is not st._ji or full[2] is not self.clear
                or full[3] is not self.wi):
            lim, des = st.queue_limit_arrays()
            full = self.full = (self.io, self.pv, self.clear, self.wi, self.wf, *self.args, lim, des,
                                st.task_request, self.devs, *self.dra, *st._jarrays, st._ji, st._jf)
            self._call.forget()
        return full

    def grow_pv(self, need: int) -> None:
        """Room for a scenario of ``need`` partial tasks and victims."""
        self.pv = np.zeros(max(need, 2 * self.pv.shape[0]), dtype=np.int64)
        self._scratch()

    def row(self, idx: ShapeIndex) -> int:
        """idx's row, taking it in first (-1: not a compiled-update index)."""
        r = self.rows.get(idx)
        if r is not None:
            return r
        if idx._fast is None or idx.hk.shape[0] != self.H:
            return -1
        if self.S == self.sint.shape[0]:
            self._alloc_stack(2 * self.S)
            self._args()
        r = self.S
        self.S += 1
        if idx._shared:  # one shared GPU: fraction fgpu, or per node (GPU memory) in the cap row
            sched, sel, rc, rm, cap, ndev, top, fgpu = idx._fast
            self.sint[r] = (0, idx.col, int(bool(idx.spread)), int(sel.shape[0] > 0), 1, int(cap.shape[0] > 0))
        else:
            sched, sel, rc, rm, k, ndev, top, cap = idx._fast
            fgpu = 0.0
            self.sint[r] = (k, idx.col, int(bool(idx.spread)), int(sel.shape[0] > 0), 0, 0)
        self.sfl[r] = (rc, rm, top, fgpu)
        self.sched[r] = sched
        if sel.shape[0]:
            self.sel[r] = sel
        self.ndev[r] = ndev
        if cap.shape[0]:
            self.cap[r] = cap
        self.idle_ok[r], self.any_ok[r], self.key[r] = idx.idle_ok, idx.any_ok, idx.key
        self.hk[r], self.hn[r], self.hs[r] = idx.hk, idx.hn, idx.hs
        self.pos[r] = idx.pos
        self.rows[idx] = r
        self._rehome(idx, r)
        return r

    def learn(self, jobs) -> None:
        """Set the kernel flag (and task order, shape rows) of ``jobs`` not looked at yet."""
        s, jst, tst = self.state, self.jst, self.tst
        pl = self.placer
        for jj in set(jobs):
            if jst[jj, _scenario_k.J_OK] >= 0:
                continue
            t0, cnt = int(s.job_start[jj]), int(s.job_count[jj])
            ts = range(t0, t0 + cnt)
            ok = pl._plain[jj] and not (self._any_claims and any(s._claims_list[t] for t in ts))
            if ok:
                for t in ts:
                    r = self.row(pl._shape_index(t))
                    if r < 0:
                        ok = False
                        break
                    tst[t, _scenario_k.T_ROW] = r
            if ok and cnt > 1:
                for p, t in enumerate(task_order(s, list(ts))):
                    tst[t0 + p, _scenario_k.T_ORD] = t
                    tst[t, _scenario_k.T_POS] = p
            jst[jj, _scenario_k.J_OK] = int(ok)

    def room(self, need: int) -> None:
        """Room for ``need`` more entries (flags, the kernel's scratch) and twice as many log entries."""
        if need > self.clear.shape[0]:
            self.clear = np.zeros((2 * need, 2), dtype=np.int64)
        if self.wi.shape[1] < max(self.pv.shape[0], self.clear.shape[0]) + 2:
            self._scratch()
        self.state.node_log.reserve(2 * need)
        self.sync_log()

    def sync_log(self) -> int:
        """The change log's length, with ``log`` its current buffer (replaced when it grew)."""
        nl = self.state.node_log
        if self.log is not nl.buf:
            self.log = nl.buf
            self._args()
        return nl.n
