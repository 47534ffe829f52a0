"""A plain-Python reference implementation of the allocate action (a test oracle, also used by
``python -m scheduler_engine bench --compare-reference`` from a source checkout).

It re-derives allocate's decisions from the rules in ``shared/docs/fairshare-spec.md`` (b queue
order, f job order, g gangs / elastic, a.6 allocatable / dominant share, a.7 capacity checks) and
KAI's node order, with lists, dicts and loops only: no numpy in the decision logic, no shared code
with ``actions/allocate.py``, ``ordering.py`` or ``state.py``.  Every task scans every node; the
hierarchical queue is re-evaluated from the roots at every pop.  It is slow on purpose and simple
enough to be checked by reading; ``tests/scheduler_engine/test_reference.py`` asserts that the
numpy engine makes the same decisions on random scenarios, and ``bench --compare-reference``
prints the speed ratio.

The fair share is an *input* of allocate: it is taken from ``scheduler_engine.fairshare`` (tested
on its own against the fair-share golden files), fed with requests computed here.

Semantics mirrored (and documented so a reader can check them):

* jobs: pending jobs of leaf queues; per leaf a heap by (higher priority, elastic state below / at /
  above minAvailable, older, name), the key taken when the job is (re)inserted;
* queues: the best child at every level by rules 1-8 of spec b, a queue represented by the best job
  of its best leaf; the job's request = its next tasks (order request: GPU memory over the smallest
  device memory);
* attempt: the missing ``minAvailable - active`` tasks of a gang (all or nothing), else one elastic
  task; refused if the leaf or an ancestor would go over its limit (or, non-preemptible, over its
  deserved quota) for a requested resource (GPU memory over the largest device memory); a gang
  repeats that check per task; a GPU-memory task checks it per node with the node's own fraction;
* node order per task, lexicographic: a shared-GPU task first on nodes where a device already in
  shared use fits it (binpack only: KAI runs gpusharingorder with the GPU binpack strategy); then nodes where it fits on free resources; a CPU-only task then prefers
  nodes without GPUs; then binpack (fewest non-allocated GPU devices, free + releasing, or least
  non-allocated CPU for CPU-only tasks) or spread (largest non-allocated share); then node index;
* a task that fits only with releasing resources is Pipelined, and then the whole job is;
* a job shape (queue, preemptibility, topology, sorted task shapes) that failed is not retried:
  within one allocate pass resources only shrink, so it would fail again;
* a job that placed tasks and still has pending ones is pushed back (pipelined or not; once a job
  has a pipelined task, its later tasks are pipelined too).

Not covered (``NotImplementedError``): topology constraints.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from scheduler_engine.snapshot import Snapshot, TaskState

__all__ = ["allocate", "ReferenceResult", "decisions_of_state", "diff_decisions"]

EPS = 1e-9
UNL = -1.0
PEND, RUN, REL, STUCK, BIND, PIPE = (int(TaskState.PENDING), int(TaskState.RUNNING), int(TaskState.RELEASING),
                                     int(TaskState.STUCK_RELEASING), int(TaskState.BINDING), int(TaskState.PIPELINED))
_LABEL = {int(s): s.label for s in TaskState}


@dataclass
class ReferenceResult:
    decisions: dict[str, tuple[str, str, tuple[str, ...]]]  # task -> (status, node, gpuGroups)
    fair_share: list[list[float]]
    queue_alloc: list[list[float]]


def decisions_of_state(state) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """The placements of a numpy :class:`~scheduler_engine.state.CycleState` in the reference's form."""
    out = {}
    names, nodes = state.tasks.names, state.nodes.names
    for t, s in enumerate(state.task_state.tolist()):
        if s in (BIND, PIPE):
            out[names[t]] = (_LABEL[s], nodes[int(state.task_node[t])], tuple(state.task_gpu_groups[t]))
    return out


def diff_decisions(a: dict, b: dict) -> list[str]:
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            out.append(f"{k}: engine {a.get(k)} reference {b.get(k)}")
    return out


def _le_inf(x: float, cap: float) -> bool:
    return cap == UNL or x <= cap + EPS


def _dom(alloc, allocatable, total) -> float:
    best = 0.0
    for r in range(3):
        a, al = alloc[r], allocatable[r]
        if al == UNL:
            ratio = a / total[r] if total[r] > 0 else (0.0 if a <= 0 else math.inf)
        elif al <= 0:
            ratio = a * 1000.0
        else:
            ratio = a / al
        best = max(best, ratio)
    return best


def _weaker(a, b) -> bool:
    def le(x, y):
        return y == UNL or (x != UNL and x <= y)

    def lt(x, y):
        return (y == UNL and x != UNL) or (x != UNL and y != UNL and x < y)

    return all(le(x, y) for x, y in zip(a, b)) and any(lt(x, y) for x, y in zip(a, b))


class _Ref:
    def __init__(self, snap: Snapshot) -> None:
        if any(snap.jobs.topology_required) or any(snap.jobs.topology_preferred):
            raise NotImplementedError("reference allocate: topology constraints are not covered")
        self.snap = snap
        nd, qs, js, ts = snap.nodes, snap.queues, snap.jobs, snap.tasks
        self.N, self.Q, self.J, self.T = len(nd), len(qs), len(js), len(ts)
        self.placement = dict(snap.config.placement or {})
        # nodes
        self.sched, self.devices, self.cap, self.gm = [], [], [], []
        for n in range(self.N):
            cap = [max(float(nd.capacity[n][r]) - float(nd.reserved[n][r]), 0.0) for r in range(3)]
            dev = max(int(nd.gpus[n]) - max(math.ceil(float(nd.reserved[n][0]) - EPS), 0), 0)
            cap[0] = float(dev)
            self.cap.append(cap)
            self.devices.append(dev)
            self.sched.append(bool(nd.ready[n]) and not bool(nd.unschedulable[n]))
            self.gm.append(float(nd.gpu_memory[n]))
        self.total = [sum(self.cap[n][r] for n in range(self.N) if self.sched[n]) for r in range(3)]
        gms = [self.gm[n] for n in range(self.N) if int(nd.gpus[n]) > 0 and self.gm[n] > 0]
        self.min_gm = min(gms) if gms else 0.0
        self.max_gm = max(gms) if gms else 0.0
        self.idle = [list(c) for c in self.cap]
        self.rel = [[0.0, 0.0, 0.0] for _ in range(self.N)]
        self.dfree = [[1.0] * self.devices[n] for n in range(self.N)]
        self.drel = [[0.0] * self.devices[n] for n in range(self.N)]
        self.dgroup: list[dict[int, str]] = [dict() for _ in range(self.N)]
        self.cpu_top = max((self.cap[n][1] for n in range(self.N)), default=1.0)
        self.labels = [dict(x or {}) for x in nd.labels]
        # queues
        self.parent = [int(p) for p in qs.parent]
        self.path = []
        for q in range(self.Q):
            p = [q]
            while self.parent[p[-1]] >= 0:
                p.append(self.parent[p[-1]])
            self.path.append(p)
        self.children = [[] for _ in range(self.Q)]
        self.top = []
        for q in range(self.Q):
            (self.children[self.parent[q]] if self.parent[q] >= 0 else self.top).append(q)
        self.is_leaf = [not self.children[q] for q in range(self.Q)]
        self.deserved = [[float(x) for x in row] for row in qs.deserved]
        self.limit = [[float(x) for x in row] for row in qs.limit]
        self.qprio = [int(x) for x in qs.priority]
        order = sorted(range(self.Q), key=lambda i: (-float(qs.created_minutes_ago[i]), qs.names[i]))
        self.rank = [0] * self.Q
        for i, q in enumerate(order):
            self.rank[q] = i
        self.alloc = [[0.0, 0.0, 0.0] for _ in range(self.Q)]
        self.alloc_np = [[0.0, 0.0, 0.0] for _ in range(self.Q)]
        # jobs and tasks
        self.job_queue = [int(x) for x in js.queue]
        self.job_prio = [int(x) for x in js.priority]
        self.job_pre = [bool(x) for x in js.preemptible]
        self.job_min = [int(x) for x in js.min_available]
        self.job_created = [float(x) for x in js.created_minutes_ago]
        self.job_tasks = [list(range(int(js.task_start[j]), int(js.task_start[j]) + int(js.task_count[j])))
                          for j in range(self.J)]
        self.task_job = [int(x) for x in ts.job]
        self.req = [[float(x) for x in row] for row in ts.request]
        self.tgm = [float(x) for x in ts.gpu_memory]
        self.tprio = [float(x) for x in ts.priority]
        self.state = [int(x) for x in ts.state]
        self.node = [int(x) for x in ts.node]
        self.groups = [list(g or []) for g in ts.gpu_groups]
        self.devs: list[list[int]] = [[] for _ in range(self.T)]
        self.talloc = [[0.0, 0.0, 0.0] for _ in range(self.T)]
        self.rel_take = [[0.0, 0.0, 0.0] for _ in range(self.T)]
        self.dev_take: list[list[float]] = [[] for _ in range(self.T)]
        self.selector = [dict(x or {}) for x in ts.node_selector]
        self.is_mem = [g > 0 for g in self.tgm]
        self.is_frac = [not self.is_mem[t] and EPS < self.req[t][0] < 1 - EPS for t in range(self.T)]
        self.is_shared = [self.is_mem[t] or self.is_frac[t] for t in range(self.T)]
        self.whole = [0 if self.is_shared[t] else int(round(self.req[t][0])) for t in range(self.T)]
        self.order_req, self.quota_req = [], []
        for t in range(self.T):
            o, qr = list(self.req[t]), list(self.req[t])
            if self.is_mem[t]:
                o[0] = self.tgm[t] / self.min_gm if self.min_gm else 0.0
                qr[0] = self.tgm[t] / self.max_gm if self.max_gm else 0.0
            self.order_req.append(o)
            self.quota_req.append(qr)
        self.active = [0] * self.J
        self._place_inputs()
        self.fair = self._fair_share()
        self.allocatable = []
        for q in range(self.Q):
            row = []
            for r in range(3):
                d, f, lim = self.deserved[q][r], self.fair[q][r], self.limit[q][r]
                if d == UNL:
                    row.append(lim)
                else:
                    v = max(d, f)
                    row.append(lim if (lim != UNL and lim < v) else v)
            self.allocatable.append(row)
        self.journal: list | None = None

    # ---------------------------------------------------------------- inputs
    def _fraction(self, t: int, n: int) -> float:
        if self.is_mem[t]:
            return self.tgm[t] / self.gm[n] if self.gm[n] > 0 else math.inf
        return self.req[t][0]

    def _new_group(self, n: int, d: int) -> str:
        used = set(self.dgroup[n].values())
        name, i = str(d), 1
        while name in used:
            name, i = f"{d}-{i}", i + 1
        return name

    def _place_inputs(self) -> None:
        on = [t for t in range(self.T) if self.state[t] in (RUN, REL, STUCK) and self.node[t] >= 0]
        for t in [t for t in on if self.is_shared[t]] + [t for t in on if not self.is_shared[t]]:
            n = self.node[t]
            nd = self.devices[n]
            if self.is_shared[t]:
                names = self.groups[t]
                name = names[0] if names else None
                by_name = {v: k for k, v in self.dgroup[n].items()}
                if name is not None and name in by_name:
                    d = by_name[name]
                else:
                    d = None
                    if (name is not None and name.isdigit() and int(name) < nd and int(name) not in self.dgroup[n]
                            and self.dfree[n][int(name)] >= 1 - EPS):
                        d = int(name)
                    if d is None:
                        cand = [i for i in range(nd) if i not in self.dgroup[n] and self.dfree[n][i] >= 1 - EPS]
                        if not cand:
                            need = self._fraction(t, n)
                            cand = [i for i in range(nd) if self.dfree[n][i] >= need - EPS] or [0]
                        d = cand[0]
                    if name is None:
                        name = self._new_group(n, d)
                    self.dgroup[n][d] = name
                if not self.groups[t]:
                    self.groups[t] = [self.dgroup[n][d]]
                devs = [d] if nd > 0 else []
            else:
                devs = [i for i in range(nd) if self.dfree[n][i] >= 1 - EPS][:self.whole[t]] if self.whole[t] else []
            self._charge(t, n, devs, pipelined=False, releasing=self.state[t] == REL)
            if self.state[t] == RUN:
                j = self.task_job[t]
                for a in self.path[self.job_queue[j]]:
                    for r in range(3):
                        self.alloc[a][r] += self.talloc[t][r]
                        if not self.job_pre[j]:
                            self.alloc_np[a][r] += self.talloc[t][r]
            if self.state[t] == RUN:
                self.active[self.task_job[t]] += 1

    def _fair_share(self) -> list[list[float]]:
        import numpy as np  # the fair-share module's interface only; the division itself is tested on its own

        from scheduler_engine.fairshare import compute_fair_share

        leaf = [[0.0, 0.0, 0.0] for _ in range(self.Q)]
        for t in range(self.T):
            q = self.job_queue[self.task_job[t]]
            src = self.talloc[t] if self.state[t] == RUN else (self.order_req[t] if self.state[t] == PEND else None)
            if src is not None:
                for r in range(3):
                    leaf[q][r] += src[r]
        request = [[0.0, 0.0, 0.0] for _ in range(self.Q)]
        for q in range(self.Q):
            for a in self.path[q]:
                for r in range(3):
                    request[a][r] += leaf[q][r]
        qs = self.snap.queues
        fs = compute_fair_share(
            parent=np.asarray(self.parent), deserved=np.asarray(self.deserved, dtype=float).reshape(self.Q, 3),
            limit=np.asarray(self.limit, dtype=float).reshape(self.Q, 3), weight=np.asarray(qs.weight, float),
            priority=np.asarray(qs.priority), request=np.asarray(request, dtype=float).reshape(self.Q, 3),
            usage=np.asarray(self.snap.usage, float).reshape(self.Q, 3), order_rank=np.asarray(self.rank),
            total=np.asarray(self.total, dtype=float), k_value=float(self.snap.config.k_value or 0.0))
        return [[float(x) for x in row] for row in np.asarray(fs).reshape(self.Q, 3)]

    # ---------------------------------------------------------------- mutations (journaled)
    def _save_task(self, t: int, n: int) -> None:
        """Journal task t and the node ``n`` it is being placed on (or sits on)."""
        if self.journal is None:
            return
        j = self.task_job[t]
        self.journal.append(("task", t, self.state[t], self.node[t], list(self.devs[t]), list(self.groups[t]),
                             list(self.talloc[t]), list(self.rel_take[t]), list(self.dev_take[t]), self.active[j]))
        self._save_node(n)
        for a in self.path[self.job_queue[j]]:
            self.journal.append(("queue", a, list(self.alloc[a]), list(self.alloc_np[a])))

    def _save_node(self, n: int) -> None:
        if self.journal is None or n < 0:
            return
        self.journal.append(("node", n, list(self.idle[n]), list(self.rel[n]), list(self.dfree[n]), list(self.drel[n]),
                             dict(self.dgroup[n])))

    def _rollback(self, mark: int) -> None:
        while len(self.journal) > mark:
            rec = self.journal.pop()
            if rec[0] == "task":
                _, t, st, n, devs, groups, ta, rt, dt, act = rec
                self.state[t], self.node[t], self.devs[t], self.groups[t] = st, n, devs, groups
                self.talloc[t], self.rel_take[t], self.dev_take[t] = ta, rt, dt
                self.active[self.task_job[t]] = act
            elif rec[0] == "node":
                _, n, idle, rel, df, dr, g = rec
                self.idle[n], self.rel[n], self.dfree[n], self.drel[n], self.dgroup[n] = idle, rel, df, dr, g
            else:
                _, a, al, anp = rec
                self.alloc[a], self.alloc_np[a] = al, anp

    def _charge(self, t: int, n: int, devs: list[int], pipelined: bool, releasing: bool = False) -> None:
        req = list(self.req[t])
        if self.is_mem[t]:
            req[0] = self._fraction(t, n)
        if self.whole[t] > 0 and not self.is_shared[t] and devs:
            req[0] = float(len(devs))
        self.talloc[t] = req
        if pipelined:
            take = [min(max(self.rel[n][r], 0.0), req[r]) for r in range(3)]
            for r in range(3):
                self.rel[n][r] -= take[r]
                self.idle[n][r] -= req[r] - take[r]
            self.rel_take[t] = take
        else:
            for r in range(3):
                self.idle[n][r] -= req[r]
                if releasing:
                    self.rel[n][r] += req[r]
        per = self._fraction(t, n) if self.is_shared[t] else 1.0
        self.dev_take[t] = []
        for d in devs:
            if pipelined:
                take = min(max(self.drel[n][d], 0.0), per)
                self.drel[n][d] -= take
                self.dfree[n][d] -= per - take
                self.dev_take[t].append(take)
            else:
                self.dfree[n][d] -= per
                if releasing:
                    self.drel[n][d] += per
        self.devs[t] = list(devs)

    def _place(self, t: int, n: int, pipelined: bool, devs: list[int]) -> None:
        self._save_task(t, n)
        self._charge(t, n, devs, pipelined)
        if self.is_shared[t]:
            groups = []
            for d in devs:
                if d not in self.dgroup[n]:
                    self.dgroup[n][d] = self._new_group(n, d)
                groups.append(self.dgroup[n][d])
            self.groups[t] = groups
        else:
            self.groups[t] = []
        self.state[t] = PIPE if pipelined else BIND
        self.node[t] = n
        j = self.task_job[t]
        for a in self.path[self.job_queue[j]]:
            for r in range(3):
                self.alloc[a][r] += self.talloc[t][r]
                if not self.job_pre[j]:
                    self.alloc_np[a][r] += self.talloc[t][r]
        self.active[j] += 1

    # ---------------------------------------------------------------- queue order (spec b)
    def _profile(self, q: int, req: list[float]) -> tuple:
        a = self.alloc[q]
        f, d, al = self.fair[q], self.deserved[q], self.allocatable[q]
        over = all(f[r] < a[r] - EPS for r in range(3))
        starved = all(_le_inf(a[r] + req[r], d[r]) for r in range(3))
        violates = any(al[r] == 0 and a[r] + req[r] > EPS for r in range(3))
        dom_with = _dom([a[r] + req[r] for r in range(3)], al, self.total)
        dom_without = _dom(a, al, self.total)
        return (over, not starved, -self.qprio[q], violates, round(dom_with, 12), round(dom_without, 12))

    def _queue_less(self, l: int, r: int, lk: tuple, rk: tuple) -> bool:
        if lk != rk:
            return lk < rk
        if _weaker(self.allocatable[l], self.allocatable[r]):
            return True
        if _weaker(self.allocatable[r], self.allocatable[l]):
            return False
        return self.rank[l] < self.rank[r]

    def _next_tasks(self, j: int) -> list[int]:
        ts = self.job_tasks[j]
        if len(ts) == 1:
            return [ts[0]] if self.state[ts[0]] == PEND else []
        pend = sorted((t for t in ts if self.state[t] == PEND),
                      key=lambda t: (1, 0.0, t) if math.isnan(self.tprio[t]) else (0, -self.tprio[t], t))
        if not pend:
            return []
        missing = self.job_min[j] - self.active[j]
        if missing > 0:
            return pend[:missing] if len(pend) >= missing else []
        return pend[:1]

    def _job_key(self, j: int) -> tuple:
        act, m = self.active[j], self.job_min[j]
        es = 0 if act < m else (1 if act == m else 2)
        return (-self.job_prio[j], es, -self.job_created[j], self.snap.jobs.names[j])

    def _rep(self, q: int, heaps) -> tuple[int, int, tuple] | None:
        """(leaf, job, profile key) representing queue q, or None when it has no job."""
        if self.is_leaf[q]:
            h = heaps.get(q)
            if not h:
                return None
            j = h[0][1]
            req = [0.0, 0.0, 0.0]
            for t in self._next_tasks(j):
                for r in range(3):
                    req[r] += self.order_req[t][r]
            return q, j, self._profile(q, req)
        best = None
        for c in self.children[q]:
            rc = self._rep(c, heaps)
            if rc is None:
                continue
            if best is None or self._queue_less(c, best[0], rc[2], best[1][2]):
                best = (c, rc)
        if best is None:
            return None
        leaf, j, _ = best[1]
        req = [0.0, 0.0, 0.0]
        for t in self._next_tasks(j):
            for r in range(3):
                req[r] += self.order_req[t][r]
        return leaf, j, self._profile(q, req)

    def _pop(self, heaps) -> int | None:
        best = None
        for q in self.top:
            rq = self._rep(q, heaps)
            if rq is None:
                continue
            if best is None or self._queue_less(q, best[0], rq[2], best[1][2]):
                best = (q, rq)
        if best is None:
            return None
        leaf = best[1][0]
        return heapq.heappop(heaps[leaf])[1]

    # ---------------------------------------------------------------- placement
    def _over_capacity(self, q: int, req: list[float], nonpre: bool) -> bool:
        asked = [req[r] > EPS for r in range(3)]
        for a in self.path[q]:
            for r in range(3):
                if not asked[r]:
                    continue
                lim = self.limit[a][r]
                if lim != UNL and self.alloc[a][r] + req[r] > lim + EPS:
                    return True
                d = self.deserved[a][r]
                if nonpre and d != UNL and self.alloc_np[a][r] + req[r] > d + EPS:
                    return True
        return False

    def _fits(self, t: int, n: int) -> tuple[bool, bool]:
        if not self.sched[n]:
            return False, False
        for k, v in self.selector[t].items():
            if self.labels[n].get(k) != v:
                return False, False
        req, idle, rel = self.req[t], self.idle[n], self.rel[n]
        fi = idle[1] >= req[1] - EPS and idle[2] >= req[2] - EPS
        fa = idle[1] + rel[1] >= req[1] - EPS and idle[2] + rel[2] >= req[2] - EPS
        nd = self.devices[n]
        free, drel = self.dfree[n], self.drel[n]
        if self.is_shared[t]:
            if nd == 0:
                return False, False
            f = self._fraction(t, n)
            if f > 1 + EPS:
                return False, False
            fi = fi and any(free[d] >= f - EPS for d in range(nd))
            fa = fa and any(free[d] + drel[d] >= f - EPS for d in range(nd))
        elif self.whole[t] > 0:
            k = self.whole[t]
            fi = fi and sum(1 for d in range(nd) if free[d] >= 1 - EPS) >= k
            fa = fa and sum(1 for d in range(nd) if free[d] + drel[d] >= 1 - EPS) >= k
        return fi, fa or fi

    def _node_key(self, t: int, n: int, idle_ok: bool) -> tuple:
        cpu_only = self.req[t][0] <= EPS and self.tgm[t] <= 0
        spread = self.placement.get("cpu" if cpu_only else "gpu", "binpack") == "spread"
        nd = self.devices[n]
        if cpu_only:
            free = self.idle[n][1] + self.rel[n][1]
            overall = self.cap[n][1]
        else:
            free = float(sum(1 for d in range(nd) if self.dfree[n][d] + self.drel[n][d] >= 1 - EPS))
            overall = float(nd)
        if spread:
            base = -free / overall if overall > 0 else 0.0
        else:
            base = free if overall > 0 else math.inf
        tier = 1000 if idle_ok else 0
        if self.is_shared[t] and nd and not spread:  # gpusharingorder: GPU binpack strategy only
            f = self._fraction(t, n)
            if any(d in self.dgroup[n] and self.dfree[n][d] + self.drel[n][d] < 1 - EPS
                   and self.dfree[n][d] + self.drel[n][d] >= f - EPS
                   for d in range(nd)):
                tier += 10000
        elif cpu_only and nd == 0:
            tier += 10
        return (-tier, base, n)

    def _choose_devices(self, t: int, n: int, pipelined: bool) -> list[int] | None:
        nd = self.devices[n]
        free, rel = self.dfree[n], self.drel[n]
        if nd == 0:
            return [] if (not self.is_shared[t] and self.whole[t] == 0) else None
        if self.is_shared[t]:
            f = self._fraction(t, n)
            if not math.isfinite(f) or f > 1 + EPS:
                return None
            ok = [d for d in range(nd) if (free[d] + rel[d] if pipelined else free[d]) >= f - EPS]
            if not ok:
                return None
            spread = self.placement.get("gpu", "binpack") == "spread"
            ok.sort(key=(lambda d: (1.0 - free[d], d)) if spread else (lambda d: (-(1.0 - free[d]), d)))
            return [ok[0]]
        k = self.whole[t]
        if k == 0:
            return []
        if pipelined:
            ok = sorted((d for d in range(nd) if free[d] + rel[d] >= 1 - EPS), key=lambda d: (free[d] < 1 - EPS, d))
        else:
            ok = [d for d in range(nd) if free[d] >= 1 - EPS]
        return ok[:k] if len(ok) >= k else None

    def _place_task(self, j: int, t: int, gang: bool) -> bool:
        q = self.job_queue[j]
        nonpre = not self.job_pre[j]
        if not self.is_mem[t] and gang and self._over_capacity(q, self.req[t], nonpre):
            return False
        cands = []
        for n in range(self.N):
            fi, fa = self._fits(t, n)
            if fa:
                cands.append((self._node_key(t, n, fi), n, fi))
        cands.sort()
        for _, n, fi in cands:
            if self.is_mem[t]:
                on_node = list(self.req[t])
                on_node[0] = self._fraction(t, n)
                if self._over_capacity(q, on_node, nonpre):
                    continue
            if self.is_shared[t]:
                devs = self._choose_devices(t, n, pipelined=True)
                if devs is None:
                    continue
                fits_free = fi and self.dfree[n][devs[0]] >= self._fraction(t, n) - EPS
                self._place(t, n, not fits_free, devs)
                return True
            devs = self._choose_devices(t, n, pipelined=not fi)
            if devs is None:
                continue
            self._place(t, n, not fi, devs)
            return True
        return False

    def _signature(self, j: int, tasks: list[int]) -> tuple:
        shapes = sorted((self.req[t][0], self.req[t][1], self.req[t][2], self.tgm[t],
                         tuple(sorted(self.selector[t].items()))) for t in tasks)
        return (self.job_queue[j], self.job_pre[j], tuple(shapes))

    def _try_job(self, j: int, tasks: list[int]) -> tuple[bool, bool]:
        q = self.job_queue[j]
        total = [sum(self.quota_req[t][r] for t in tasks) for r in range(3)]
        if self._over_capacity(q, total, not self.job_pre[j]):
            return False, False
        if len(tasks) > 1:
            tasks = sorted(tasks, key=lambda t: (1, 0.0, t) if math.isnan(self.tprio[t]) else (0, -self.tprio[t], t))
        mark = len(self.journal)
        gang = len(tasks) > 1
        for t in tasks:
            if not self._place_task(j, t, gang):
                self._rollback(mark)
                return False, False
        pipelined = any(self.state[t] == PIPE for t in self.job_tasks[j])
        if pipelined:
            for t in self.job_tasks[j]:
                if self.state[t] == BIND:
                    self._save_task(t, self.node[t])
                    self.state[t] = PIPE
                    self.rel_take[t] = [0.0, 0.0, 0.0]
                    self.dev_take[t] = [0.0] * len(self.devs[t])
        return True, pipelined

    def run(self) -> None:
        self.journal = []
        heaps: dict[int, list] = {}
        for j in range(self.J):
            if self.is_leaf[self.job_queue[j]] and any(self.state[t] == PEND for t in self.job_tasks[j]):
                heapq.heappush(heaps.setdefault(self.job_queue[j], []), (self._job_key(j), j))
        failed: set[tuple] = set()
        while True:
            j = self._pop(heaps)
            if j is None:
                break
            tasks = self._next_tasks(j)
            if not tasks:
                continue
            sig = self._signature(j, tasks)
            if sig in failed:
                continue
            ok, _pipelined = self._try_job(j, tasks)
            if not ok:
                failed.add(sig)
                continue
            if any(self.state[t] == PEND for t in self.job_tasks[j]):
                heapq.heappush(heaps.setdefault(self.job_queue[j], []), (self._job_key(j), j))
            self.journal = []  # committed: nothing before this point is ever rolled back

    def result(self) -> ReferenceResult:
        names, nodes = self.snap.tasks.names, self.snap.nodes.names
        dec = {names[t]: (_LABEL[s], nodes[self.node[t]], tuple(self.groups[t]))
               for t, s in enumerate(self.state) if s in (BIND, PIPE)}
        return ReferenceResult(decisions=dec, fair_share=self.fair, queue_alloc=self.alloc)


def allocate(snapshot: Snapshot) -> ReferenceResult:
    """Run the reference allocate on ``snapshot`` (not mutated) and return its placements."""
    ref = _Ref(snapshot)
    ref.run()
    return ref.result()
