"""Victim accumulation for one prefix of the beneficiary's tasks (KAI ``pod_scenario_builder``,
``sub_scenario_emitter`` and the by-node scenarios).

The recorded victims (those that solved the previous prefix) are tried alone first. Then victims
accumulate in victim order (:class:`~.victim_order.VictimQueue`); an elastic victim gives up one
surplus task per step and goes back into the queue with the rest. After each addition the
scenarios emitted are, in order: for each node of the newest victim, the recorded victims plus the
accumulated victims of every job present on that node (node-local: no unrelated eviction
elsewhere), then all accumulated victims (the fallback for placements that need several nodes).
Identical victim sets are simulated once; sets that cannot fit by GPU count
(:mod:`.idle_gpus`) are skipped, and a prefix for which even evicting every candidate could not
fit fails at once.

The loop runs compiled (:mod:`~scheduler_engine.kernels.victim_run`) for as long as Python has
nothing to decide: plain victims (one active task, no subgroups) are popped and accumulated there,
and a victim whose scenarios all fail the GPU-count filter is settled there too; Python takes over
for a scenario to simulate, an elastic or multi-task victim, and the explanations.

Pruning (reclaim and preempt; see :mod:`.job_solver`): after a failed scenario, victims the
simulation served before the beneficiary, and victims under a queue the validator refused to take
from, leave the accumulated set, and later candidates of those leaves / queues are passed over.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import numpy as np

from .. import subgroups
from ..plugins.elastic import tasks_to_evict
from ..snapshot import GPU, TaskState
from ..state import EPS, CycleState
from ..kernels import victim_run
from ..ordering import kernel_static
from .idle_gpus import demand, fit_base, may_fit, pack
from .victim_order import VictimQueue

if TYPE_CHECKING:  # the solver drives the search; annotations only
    from .job_solver import VictimSolver

_ACTIVE_LUT = np.zeros(max(int(x) for x in TaskState) + 1, dtype=bool)
_ACTIVE_LUT[[int(TaskState.RUNNING), int(TaskState.BINDING), int(TaskState.PIPELINED)]] = True

#: pop and accumulate plain victims with the compiled loop (:mod:`~scheduler_engine.kernels.victim_run`);
#: ``False``: every victim through the Python loop below (the reference the kernel is tested against)
USE_KERNEL = True


class PrefixSearch:
    """One prefix's search: accumulate victims, emit scenarios, let the solver simulate them.

    The incremental GPU-count filter of the all-accumulated scenario:

    * ``fast`` (a single whole task without a node selector): "some node has free + releasing +
      victims >= need", kept as the set of such nodes (``good``/``n_good``) instead of an O(nodes)
      pass per victim; adding victims' GPUs never lowers a node's sum (rounding is monotone).
    * ``multi`` (several tasks with GPUs): the nodes that could hold the smallest GPU task
      (``mgood``), packed on directly while they are few.
    """

    def __init__(self, solver: VictimSolver, j: int, partial: list[int], recorded: list[int]) -> None:
        self.solver = solver
        self.state: CycleState = solver.state
        self.j = j
        self.partial = partial
        self.recorded = recorded
        self.recorded_set = set(recorded)
        self.own = int(self.state.job_queue_arr[j])
        self.potential: list[int] = []  # accumulated potential victim tasks, in order
        self.pos: dict[int, int] = {}  # potential victim task -> its index in ``potential``
        self.dropped: set[int] = set()  # pruned potential victims (solver.prune)
        self.blocked: set[int] = set()  # queues whose subtree gives no more victims (solver.prune)
        self.retook: set[int] = set()  # leaves whose victims were served before the beneficiary (solver.prune)
        self.all_gpu: np.ndarray | None = None  # per node: recorded + accumulated (not dropped) victims' GPUs
        self.fast = self.multi = False
        self.thr = self.mthr = 0.0
        self.base_l: list[float] = []
        self.good_l: np.ndarray = np.zeros(0, dtype=np.bool_)
        self.n_good = 0
        self.mgood: set[int] = set()
        self.skip_leaf: np.ndarray | None = None  # per queue: retook or under a blocked queue (kernel input)
        # the compiled loop's arrays (:meth:`_kernel_arrays`); ``drop_seq``: per accumulated victim
        # when it was dropped (-1: kept), shared with them
        self.kst: dict | None = None
        self.tried_sets: set[frozenset] = set()
        self.drop_seq: np.ndarray | None = None

    # ---------------------------------------------------------------- incremental filter
    def track(self, n: int) -> None:
        """Node n's accumulated victims changed: update the incremental GPU-count filter."""
        v = self.base_l[n] + float(self.all_gpu[n])
        if self.fast:
            ok = v >= self.thr
            if ok != self.good_l[n]:
                self.good_l[n] = ok
                self.n_good += 1 if ok else -1
        elif v >= self.mthr:
            self.mgood.add(n)
        else:
            self.mgood.discard(n)

    def drop(self, ts: Iterable[int]) -> None:
        """Take potential victims ``ts`` out of the accumulated set."""
        s = self.state
        pos, dropped, all_gpu, task_gpu = self.pos, self.dropped, self.all_gpu, s.task_alloc[:, GPU]
        seq = self.drop_seq
        for t in ts:
            if t in pos and t not in dropped:
                if seq is not None:
                    seq[pos[t]] = len(dropped)
                dropped.add(t)
                n = int(s.task_node[t])
                if n >= 0:
                    all_gpu[n] -= task_gpu[t]
                    if self.fast or self.multi:
                        self.track(n)

    def prune(self) -> None:
        """After a failed scenario (module docstring, "Pruning")."""
        s = self.state
        kept = [t for t in self.solver._served_first if t not in self.recorded_set]
        self.drop(kept)
        # their leaves are served before the beneficiary's: the rest of their candidates
        # would take their own resources back just the same
        own = self.own
        self.retook.update(q for q in (int(s.job_queue_arr[int(s.task_job[t])]) for t in kept) if q != own)
        self.skip_leaf = None  # recomputed at the next compiled run
        b = self.solver._blocked_fail
        if b >= 0:
            self.blocked.add(b)
            self.drop([t for t in self.potential
                       if b in s.queue_path_list[int(s.job_queue_arr[int(s.task_job[t])])]])

    # ---------------------------------------------------------------- the search
    def run(self):
        """The first scenario that fits and validates, as ``(scenario, checkpoint)``, or ``None``
        (``solver.last_reason`` then says why when the search ended early)."""
        solver, s = self.solver, self.state
        j, partial, recorded, recorded_set = self.j, self.partial, self.recorded, self.recorded_set
        if recorded:
            res = solver._try(j, partial, list(recorded))
            if res is not None:
                return res
        cands = solver.candidates()
        cands = np.asarray(list(cands) if not isinstance(cands, np.ndarray) else cands, dtype=np.int64)
        base = fit_base(s)
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
        dem = demand(s, partial) if len(partial) > 1 else None  # the kernel's input, once per prefix
        if not may_fit(s, partial, base, every, dem):
            solver.last_reason = ("even evicting every eligible victim would not free enough GPUs on the nodes "
                                  f"({len(cands)} eligible jobs)")
            return None
        single = len(partial) == 1 and not s.task_selector_key[partial[0]]
        need1 = float(s.task_order_req[partial[0], GPU]) if single else 0.0
        cap_all = base + rec_gpu
        best_all = float(cap_all.max()) if cap_all.size else 0.0
        fast = self.fast = single and need1 > EPS and s.N > 0
        if fast:
            thr = self.thr = need1 - 1e-9
            rec_best = best_all
            base_l = self.base_l = base.tolist()
            self.good_l = cap_all >= thr
            self.n_good = int(np.count_nonzero(self.good_l))
        gneed = s.task_order_req[partial, GPU]
        multi = self.multi = not fast and len(partial) > 1 and bool(np.any(gneed > EPS)) and s.N > 0
        if multi:
            self.mthr = float(gneed[gneed > EPS].min()) - 1e-9
            self.base_l = base.tolist()
            mgood = self.mgood = set(np.flatnonzero(cap_all >= self.mthr).tolist())
        # per-node sums updated once per victim: Python floats (the same IEEE additions as numpy's
        # scalars, without their per-element overhead)
        cap = cap_all.copy()
        task_gpu = s.task_alloc[:, GPU]
        vq = VictimQueue(s, cands)
        potential, pos, dropped = self.potential, self.pos, self.dropped
        retook, blocked = self.retook, self.blocked
        all_gpu = self.all_gpu = rec_gpu.copy()
        jobs_on_node: dict[int, set[int]] = {}
        job_potential: dict[int, list[int]] = {}
        self.jobs_on_node, self.job_potential = jobs_on_node, job_potential
        tried: set[frozenset] = {frozenset(recorded)} if recorded else set()
        self.tried_sets = tried  # (tests read it; sets the kernel logged are added when looked up)
        track = self.track

        use_kernel = USE_KERNEL
        kst = None  # the compiled loop's arrays (built at its first use)
        while vq:
            if solver.tried >= solver.max_scenarios:
                solver.last_reason = f"gave up after {solver.tried} scenarios"
                return None
            got = None
            if use_kernel:
                if kst is None:
                    if not vq.run_ready():
                        use_kernel = False
                    else:
                        kst = self._kernel_arrays(vq, cands, task_gpu, base, rec_gpu, need1,
                                                  rec_best < thr if fast else False, dem)
                if kst is not None:
                    code, got = self._kernel_step(vq, kst, cap, best_all)
                    best_all = float(kst["fst"][0])
                    if code == victim_run.BUDGET:
                        solver.last_reason = (f"search budget exhausted after {solver.tried} scenarios (victims "
                                              f"examined plus victims simulated > scenarioSearchBudget "
                                              f"{solver.search_budget})")
                        return None
                    if code == victim_run.END or code == victim_run.JOBS:
                        break
            if got is not None:
                vj, hosts = got
            else:
                solver.steps += 1
                if 0 <= solver.search_budget < solver.steps:
                    solver.last_reason = (f"search budget exhausted after {solver.tried} scenarios (victims examined "
                                          f"plus victims simulated > scenarioSearchBudget {solver.search_budget})")
                    return None
                popped = vq.pop()
                if popped is None:
                    break
                vj, vtasks = popped
                if retook or blocked:
                    vleaf = int(s.job_queue_arr[vj])
                    if vleaf in retook or not blocked.isdisjoint(s.queue_path_list[vleaf]):
                        continue
                if s._sg_list[vj]:  # subgroups: surplus tasks of leaves, then surplus members, then all
                    evict, more = subgroups.tasks_to_evict(s, vj, vtasks)
                else:
                    evict, more = tasks_to_evict(s, vtasks, int(s.job_min_available[vj]))
                if not evict:
                    continue
                if any(t in recorded_set for t in evict):
                    rest = [t for t in vtasks if t not in recorded_set]
                    if rest:
                        vq.push(vj, rest)
                    continue
                if vj not in job_potential and 0 <= solver.max_victim_jobs <= len(job_potential):
                    break  # the victim-job budget is spent
                if more:
                    ev = set(evict)
                    vq.push(vj, [t for t in vtasks if t not in ev])
                if kst is not None:
                    self._mirror(vj, evict, jobs_on_node)
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
                        c = cap[n] = cap[n] + g
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
                    if not may_fit(s, partial, base, gpu, dem):
                        continue
                res = solver._try(j, partial, list(recorded) + local)
                if res is not None:
                    return res
                if solver.prune:
                    self.prune()
                    live = len(potential) - len(dropped)
            if same_as_all or live <= 0:
                continue
            if fast:
                if self.n_good == 0:
                    continue
            elif multi and len(mgood) <= 64:  # few candidate nodes: pack on them only
                idx = np.fromiter(sorted(mgood), dtype=np.int64, count=len(mgood))
                if not pack(s, partial, idx, base[idx] + all_gpu[idx], dem):
                    continue
            elif not may_fit(s, partial, base, all_gpu, dem):  # (many: one vectorised pass finds them)
                continue
            extra = [t for t in potential if t not in dropped] if dropped else list(potential)
            key = frozenset(extra) | frozenset(recorded)
            if kst is not None and kst["ist"][10]:
                self._tried_logged(len(key), tried)
            if key in tried:
                continue
            tried.add(key)
            res = solver._try(j, partial, list(recorded) + extra)
            if res is not None:
                return res
            if solver.prune:
                self.prune()
        return None

    # ---------------------------------------------------------------- the compiled loop
    def _kernel_arrays(self, vq: VictimQueue, cands: np.ndarray, task_gpu: np.ndarray, base: np.ndarray,
                       rec_gpu: np.ndarray, need1: float, local_filter: bool, dem: tuple | None) -> dict:
        """The inputs of :func:`~scheduler_engine.kernels.victim_run.run_victims` that live for the
        whole prefix search (the victim order's arrays are shared with ``vq`` and updated in place;
        the accumulated victims are mirrored from here on by :meth:`_mirror` and :meth:`drop`)."""
        s, solver = self.state, self.solver
        calloc, ctask = vq.heads()
        is_rec = np.zeros(s.T, dtype=np.bool_)
        if self.recorded:
            is_rec[self.recorded] = True
        good = self.good_l if self.fast else np.zeros(s.N, dtype=np.bool_)
        cap_t = int(s.job_count[cands].sum()) + len(self.potential) + 1  # every task accumulated at most once
        ist = np.array([vq._knext, 0, solver.search_budget, 0, solver.max_victim_jobs, 0, 0, 0, 0, 0, 0, 0,
                        len(self.recorded_set), 0], dtype=np.int64)
        k = {"calloc": calloc, "ctask": ctask, "is_rec": is_rec, "task_gpu": task_gpu, "good": good,
             "base": np.ascontiguousarray(base, dtype=np.float64), "rec_gpu": rec_gpu, "thr": float(self.thr),
             "need_lo": float(need1) - 1e-9, "local_filter": bool(local_filter),
             "pot": np.empty(cap_t, dtype=np.int64), "pot_job": np.empty(cap_t, dtype=np.int64),
             "pot_node": np.empty(cap_t, dtype=np.int64),
             "pot_next": np.empty(cap_t, dtype=np.int64), "drop_seq": np.full(cap_t, -1, dtype=np.int64),
             "job_first": np.full(s.J, -1, dtype=np.int64), "job_last": np.full(s.J, -1, dtype=np.int64),
             "node_head": np.full(s.N, -1, dtype=np.int64), "ent_job": np.empty(cap_t, dtype=np.int64),
             "ent_next": np.empty(cap_t, dtype=np.int64), "tsum": np.zeros(s.N), "tstamp": np.full(s.N, -1, dtype=np.int64),
             "loc": np.empty(cap_t, dtype=np.int64), "log": np.empty((max(int(cands.size), 1), 4), dtype=np.int64),
             "emptied": np.empty(s.Q, dtype=np.int64), "ist": ist, "fst": np.zeros(1),
             "mthr": float(self.mthr), "idxbuf": np.empty(s.N, dtype=np.int64), "capbuf": np.empty(s.N)}
        if dem is None:  # (only read for several GPU tasks)
            dem = (np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros((0, s.N), dtype=np.bool_))
        k["need"], k["sel"], k["masks"] = dem
        self.kst = k
        self.drop_seq = k["drop_seq"]
        # victims accumulated before the kernel's first use (none today: it starts with the search)
        assert not self.potential  # built at the search's first step
        return k

    def _mirror(self, vj: int, evict: list[int], jobs_on_node: dict[int, set[int]]) -> None:
        """Victims the Python loop accumulates, into the kernel's arrays (before ``jobs_on_node`` has them)."""
        k, s = self.kst, self.state
        pot, pot_job, pot_node, pot_next, ist = k["pot"], k["pot_job"], k["pot_node"], k["pot_next"], k["ist"]
        job_first, job_last = k["job_first"], k["job_last"]
        u = int(ist[5])
        added: set[int] = set()  # nodes given an entry for vj by this call
        for t in evict:
            pot[u] = t
            pot_job[u] = vj
            pot_next[u] = -1
            last = int(job_last[vj])
            if last >= 0:
                pot_next[last] = u
            else:
                job_first[vj] = u
            job_last[vj] = u
            n = int(s.task_node[t])
            pot_node[u] = n
            if n >= 0 and n not in added and vj not in jobs_on_node.get(n, ()):
                added.add(n)
                e = int(ist[9])
                k["ent_job"][e] = vj
                k["ent_next"][e] = k["node_head"][n]
                k["node_head"][n] = e
                ist[9] = e + 1
            u += 1
        ist[5] = u

    def _tried_logged(self, size: int | None, tried: set) -> None:
        """Add to ``tried`` the node-local sets of this size (``None``: all) the kernel decided
        without Python (it logs node, accumulated count and dropped count: the set is rebuilt as
        it was then)."""
        k = self.kst
        if k is None:
            return
        log, n_log = k["log"], int(k["ist"][10])
        rows = np.flatnonzero(log[:n_log, 3] == size if size is not None else log[:n_log, 3] >= 0)
        if rows.size == 0:
            return
        pot, pot_job, pot_node, seq = k["pot"], k["pot_job"], k["pot_node"], k["drop_seq"]
        rec = frozenset(self.recorded)
        for r in rows.tolist():
            n, p, d = (int(x) for x in log[r, :3])
            ts, js = pot[:p].tolist(), pot_job[:p].tolist()
            on_n = {x for x, m in zip(js, pot_node[:p].tolist()) if m == n}
            sq = seq[:p].tolist()
            local = [t for t, x, q in zip(ts, js, sq) if x in on_n and not 0 <= q < d]
            tried.add(frozenset(local) | rec)
            log[r, 3] = -1

    def _skip_leaf(self, vq: VictimQueue) -> np.ndarray:
        """Per queue: its victims are passed over (a leaf that retook, or under a blocked queue)."""
        if self.skip_leaf is None:
            s = self.state
            skip = np.zeros(s.Q, dtype=np.bool_)
            if self.retook:
                skip[list(self.retook)] = True
            if self.blocked:
                path = kernel_static(s)[1]
                skip |= np.isin(path, list(self.blocked)).any(axis=1)
            self.skip_leaf = skip
        return self.skip_leaf

    def _kernel_step(self, vq: VictimQueue, kst: dict, cap: np.ndarray, best_all: float):
        """Run the compiled loop from the current state; bring Python's view (accumulated victims,
        per-node job lists, steps, live leaves) up to date. Returns ``(code, (job, hosts) or None)``:
        the victim to emit scenarios for after :data:`~scheduler_engine.kernels.victim_run.EMIT`."""
        s, solver, k = self.state, self.solver, kst
        path, kid_ptr, kids, stat, tot, prio, tb, leaf_live, req, key, vrep = vq._k
        ist, fst = k["ist"], k["fst"]
        ist[0] = vq._knext
        ist[1] = solver.steps
        ist[3] = len(self.job_potential)
        ist[6] = self.n_good
        ist[7] = 0
        ist[8] = len(self.dropped)
        fst[0] = best_all
        steps0 = solver.steps
        code = victim_run.run_victims(
            path, kid_ptr, kids, stat, tot, prio, tb, s.queue_alloc, leaf_live, req, key, vrep, vq.cj, vq.hi, vq.ptr,
            vq.popped, vq.has_popped, vq.heap_live, k["calloc"], k["ctask"], self._skip_leaf(vq), k["is_rec"],
            s.task_node, k["task_gpu"], self.all_gpu, cap, k["base"], k["good"], k["rec_gpu"], self.fast, k["thr"],
            len(self.partial) == 1 and not s.task_selector_key[self.partial[0]], k["need_lo"], k["local_filter"],
            self.multi, k["mthr"], k["need"], k["sel"], k["masks"], k["idxbuf"], k["capbuf"],
            k["pot"], k["pot_job"], k["pot_node"], k["pot_next"], k["drop_seq"], k["job_first"], k["job_last"], k["node_head"],
            k["ent_job"], k["ent_next"], k["tsum"], k["tstamp"], k["loc"], k["log"], k["emptied"], ist, fst)
        solver.steps = int(ist[1])
        self.n_good = int(ist[6])
        vq.after_run(k["emptied"], int(ist[7]), int(ist[0]), solver.steps != steps0)
        p0, p1 = int(ist[13]), int(ist[5])
        got = None
        if p1 > p0:
            potential, jobs_on_node = self.potential, self.jobs_on_node
            ts = k["pot"][p0:p1].tolist()
            js = k["pot_job"][p0:p1].tolist()
            ns = k["pot_node"][p0:p1].tolist()
            self.pos.update(zip(ts, range(len(potential), len(potential) + len(ts))))
            potential.extend(ts)
            self.job_potential.update(zip(js, ([t] for t in ts)))
            for vj, n in zip(js, ns):
                if n >= 0:
                    hit = jobs_on_node.get(n)
                    if hit is None:
                        jobs_on_node[n] = {vj}
                    else:
                        hit.add(vj)
            if self.multi:  # the candidate-node set of the multi-task filter follows all_gpu
                track = self.track
                for n in set(ns):
                    if n >= 0:
                        track(n)
            if code == victim_run.EMIT:
                n = ns[-1]
                got = (js[-1], [n] if n >= 0 else [])
        return code, got
