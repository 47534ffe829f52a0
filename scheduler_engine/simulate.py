"""``simulate``: many scheduling cycles over one cluster, with arrivals, job durations and usage decay.

Usage::

    python -m scheduler_engine simulate SCENARIO --output history.csv [--plot history.png] [--cycles N]

The scenario's ``simulation`` block (scenario-format.md "Simulation") drives the run.  Every cycle
is a real engine cycle (:func:`scheduler_engine.cycle.run_cycle_with_state`, the same code the
Celery scheduling task runs) on a snapshot built from the simulator's job table; between cycles the
snapshot is rewritten exactly as for ``rounds`` (:func:`scheduler_engine.cycle.rewrite_snapshot`:
Binding -> Running, Pipelined -> Pending without a node).  An evicted task's pod is deleted, as in
KAI's simulator and e2e tests: the task ends Failed and a job with no task left leaves the run
(``--recreate-evicted`` / ``SimulationParams.evicted = "recreate"``: it becomes Pending again,
exactly the Rounds rewrite).

Time and usage: cycle ``c`` happens at ``now + c * cycleSeconds``.  After each cycle the simulator
records ONE usage sample per queue (what the queue's Running tasks hold after the rewrite, i.e.
what it holds until the next cycle) and one cluster-capacity sample, as KAI's time-based-fairshare
simulator does; the usage fed into cycle ``c`` is
:func:`scheduler_engine.usage.history_usage` over samples ``0..c-1`` with ``windowSize`` /
``halfLifePeriod`` counted in cycles.  A job with a ``duration`` finishes once it has been running
(its gang satisfied) for that long; a recreated job starts again from zero.

Output CSV: one row per cycle and queue (every queue of the tree, parents included)::

    cycle,queue,allocated_gpu,fair_share_gpu,usage_gpu,pending_jobs,running_jobs[,allocated_cpu,
    fair_share_cpu,usage_cpu][,allocated_memory,fair_share_memory,usage_memory]

``allocated`` is what the queue's Running tasks hold after the cycle (the usage sample),
``fair_share`` the share the cycle computed when it opened, ``usage`` the normalised usage the
cycle was given; gpu in devices, cpu in cores, memory in bytes.  cpu / memory columns are written
when some job or arrival requests that resource.  ``pending_jobs`` counts the queue's submitted,
unfinished jobs with no Running task, ``running_jobs`` those with at least one (subtree totals
for a parent queue).

Public API: :func:`simulate_snapshot` (snapshot -> :class:`SimulationResult`),
:func:`simulation_params`, :func:`write_csv`, :func:`write_plots`, :func:`main`.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Sequence, TextIO

import numpy as np

from .actions import get_action
from .cli import parse_command_line
from .cycle import rewrite_snapshot
from .loader import ScenarioError, load_scenario
from .snapshot import CPU, GPU, MEM, NRES, RESOURCES, Jobs, Snapshot, TaskState, Tasks
from .state import CycleState
from .units import parse_cpu, parse_duration, parse_gpu, parse_memory
from .usage import history_usage

__all__ = ["SimulationParams", "SimulationResult", "simulation_params", "simulate_snapshot", "write_csv",
           "write_plots", "main", "switch_points", "apply_queue_edits", "apply_edits", "preview_edits"]

_PEND = int(TaskState.PENDING)
_RUN = int(TaskState.RUNNING)
_SUCC = int(TaskState.SUCCEEDED)
_FAIL = int(TaskState.FAILED)

DEFAULT_CYCLES = 100
DEFAULT_CYCLE_SECONDS = 60.0
DEFAULT_WINDOW = 256
DEFAULT_EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)


@dataclass
class Arrival:
    """One expanded ``arrivals`` entry (internal units)."""

    queue: int
    count: int
    at_cycle: int
    request: np.ndarray  # (3,)
    gpu_memory: float
    replicas: int
    duration: float  # seconds, nan = runs until evicted
    priority: int
    preemptible: bool
    min_available: int


@dataclass
class SimulationParams:
    cycles: int = DEFAULT_CYCLES
    cycle_seconds: float = DEFAULT_CYCLE_SECONDS
    window_size: int = DEFAULT_WINDOW
    window_type: str = "sliding"
    half_life: float = 0.0  # cycles; 0 = no decay
    arrivals: list[Arrival] = field(default_factory=list)
    # what happens to an evicted (reclaimed / preempted) task: "delete" = its pod is gone (the task
    # ends as Failed, as in KAI's simulator and e2e tests, where evicted pods are not recreated);
    # "recreate" = it becomes Pending again, the scenario format's "Rounds" rewrite
    evicted: str = "delete"


def simulation_params(snapshot: Snapshot) -> SimulationParams:
    """The ``simulation`` block of the scenario the snapshot was loaded from (validated by the loader)."""
    raw = (snapshot.source or {}).get("simulation") or {}
    p = SimulationParams()
    if raw.get("cycles") is not None:
        p.cycles = int(raw["cycles"])
    if raw.get("cycleSeconds") is not None:
        p.cycle_seconds = parse_duration(raw["cycleSeconds"])
    if raw.get("windowSize") is not None:
        p.window_size = int(raw["windowSize"])
    if raw.get("windowType") is not None:
        p.window_type = str(raw["windowType"])
    if raw.get("halfLifePeriod") is not None:
        p.half_life = float(raw["halfLifePeriod"])
    qindex = snapshot.queues.index
    for a in raw.get("arrivals") or []:
        gpu = parse_gpu(a.get("gpu") or 0)
        req = np.array([gpu, parse_cpu(a.get("cpu") or 0), parse_memory(a.get("memory") or 0)], dtype=float)
        replicas = int(a.get("replicas") or 1)
        prio = int(a["priority"]) if a.get("priority") is not None else 50
        pre = bool(a["preemptible"]) if a.get("preemptible") is not None else prio < 100
        dur = a.get("duration")
        p.arrivals.append(Arrival(
            queue=qindex[a["queue"]], count=int(a.get("count") or 1), at_cycle=int(a.get("atCycle") or 0),
            request=req, gpu_memory=float(a.get("gpuMemory") or 0.0), replicas=replicas,
            duration=math.nan if dur is None else parse_duration(dur), priority=prio, preemptible=pre,
            min_available=int(a["minAvailable"]) if a.get("minAvailable") is not None else replicas,
        ))
    return p


@dataclass
class SimulationResult:
    """Per-cycle series, indexed ``[cycle, queue, resource]`` (scenario units: devices, cores, bytes)."""

    queue_names: list[str]
    allocated: np.ndarray  # (C, Q, 3) held by Running tasks after the cycle
    fair_share: np.ndarray  # (C, Q, 3)
    usage: np.ndarray  # (C, Q, 3) usage given to the cycle
    pending_jobs: np.ndarray  # (C, Q) int
    running_jobs: np.ndarray  # (C, Q) int
    resources: tuple[str, ...]  # resources written to the CSV
    is_leaf: np.ndarray  # (Q,) bool
    evictions: np.ndarray  # (C,) tasks evicted in each cycle
    binds: np.ndarray  # (C,) tasks bound (Binding) in each cycle
    finished_jobs: int = 0  # ran for their duration
    evicted_jobs: int = 0  # left because every task was evicted (evicted="delete")
    name: str = ""

    @property
    def cycles(self) -> int:
        return int(self.allocated.shape[0])

    def holder(self, resource: str = "gpu") -> np.ndarray:
        """(C,) index of the leaf queue holding the most of ``resource`` after each cycle, -1 if none."""
        r = RESOURCES.index(resource)
        a = np.where(self.is_leaf[None, :], self.allocated[:, :, r], -1.0)
        best = np.argmax(a, axis=1)
        return np.where(a.max(axis=1) > 0, best, -1)


def switch_points(holder: np.ndarray) -> list[tuple[int, int]]:
    """``(cycle, queue)`` each time a different queue becomes the holder (gaps with no holder skipped)."""
    out: list[tuple[int, int]] = []
    last = -1
    for c, h in enumerate(holder.tolist()):
        if h >= 0 and h != last:
            out.append((c, h))
            last = h
    return out


class _Table:
    """The simulator's job table: the scenario's jobs plus every arrival, submitted or not."""

    def __init__(self, snap: Snapshot, params: SimulationParams) -> None:
        jobs, tasks = snap.jobs, snap.tasks
        self.base_jobs = jobs
        J0, T0 = len(jobs), len(tasks)
        names, tnames = list(jobs.names), list(tasks.names)
        used = set(names)
        used_t = set(tnames)
        queue = [jobs.queue]
        prio = [jobs.priority]
        pre = [jobs.preemptible]
        mina = [jobs.min_available]
        arrive = [np.zeros(J0, dtype=np.int64)]
        duration = [np.full(J0, np.nan)]
        t_job = [tasks.job]
        t_req = [tasks.request.reshape(-1, NRES)]
        t_gm = [tasks.gpu_memory]
        t_count = [jobs.task_count]
        nj, nt = J0, T0
        qnames = snap.queues.names
        for ai, a in enumerate(params.arrivals):
            width = len(str(a.count - 1))
            for k in range(a.count):
                name = f"{qnames[a.queue]}-a{ai}-{k:0{width}d}"
                while name in used:
                    name += "x"
                used.add(name)
                names.append(name)
                for r in range(a.replicas):
                    tn = f"{name}-{r}"
                    while tn in used_t:
                        tn += "x"
                    used_t.add(tn)
                    tnames.append(tn)
            c, R = a.count, a.replicas
            queue.append(np.full(c, a.queue, dtype=np.int64))
            prio.append(np.full(c, a.priority, dtype=np.int64))
            pre.append(np.full(c, a.preemptible, dtype=bool))
            mina.append(np.full(c, a.min_available, dtype=np.int64))
            arrive.append(np.full(c, a.at_cycle, dtype=np.int64))
            duration.append(np.full(c, a.duration))
            t_job.append(np.repeat(np.arange(nj, nj + c, dtype=np.int64), R))
            t_req.append(np.tile(a.request, (c * R, 1)))
            t_gm.append(np.full(c * R, a.gpu_memory))
            t_count.append(np.full(c, R, dtype=np.int64))
            nj += c
            nt += c * R
        self.J, self.T = nj, nt
        self.names, self.tnames = names, tnames
        self.queue = np.concatenate(queue)
        self.priority = np.concatenate(prio)
        self.preemptible = np.concatenate(pre)
        self.min_available = np.concatenate(mina)
        self.arrive = np.concatenate(arrive)
        self.duration = np.concatenate(duration)
        self.task_job = np.concatenate(t_job).astype(np.int64)
        self.request = np.concatenate(t_req).reshape(-1, NRES).astype(float)
        self.gpu_memory = np.concatenate(t_gm).astype(float)
        self.task_count = np.concatenate(t_count).astype(np.int64)
        self.task_start = np.concatenate([[0], np.cumsum(self.task_count)[:-1]]).astype(np.int64)
        # mutable
        self.state = np.concatenate([tasks.state, np.full(nt - T0, _PEND, dtype=np.int8)]).astype(np.int8)
        self.node = np.concatenate([tasks.node, np.full(nt - T0, -1, dtype=np.int64)]).astype(np.int64)
        self.groups: list[list[str]] = [list(g) for g in tasks.gpu_groups] + [[] for _ in range(nt - T0)]
        self.prio_task = np.concatenate([tasks.priority, np.full(nt - T0, np.nan)])
        self.selector = list(tasks.node_selector) + [{} for _ in range(nt - T0)]
        self.finished = np.zeros(nj, dtype=bool)  # left the simulation (completed or evicted)
        self.completed = np.zeros(nj, dtype=bool)  # ran for their duration
        self.evicted_jobs = np.zeros(nj, dtype=bool)  # every task evicted (pods deleted)
        self.progress = np.zeros(nj)  # seconds run with the gang satisfied since the last start
        # times in seconds relative to the simulation start (cycle 0)
        self.created_at = np.concatenate([-jobs.created_minutes_ago * 60.0,
                                          np.zeros(nj - J0)]) if J0 else np.zeros(nj)
        self.started_at = np.concatenate([-jobs.started_minutes_ago * 60.0, np.full(nj - J0, np.nan)])
        self.stale_since = np.concatenate([-jobs.stale_for, np.full(nj - J0, np.nan)])
        self.topo_req = list(jobs.topology_required) + [None] * (nj - J0)
        self.topo_pref = list(jobs.topology_preferred) + [None] * (nj - J0)
        self.grace = np.concatenate([jobs.staleness_grace_period, np.full(nj - J0, np.nan)])
        self.pdelay = np.concatenate([jobs.preemption_delay, np.full(nj - J0, np.nan)])

    def running_per_job(self) -> np.ndarray:
        run = np.zeros(self.J, dtype=np.int64)
        np.add.at(run, self.task_job[self.state == _RUN], 1)
        return run


def _snapshot_for_cycle(base: Snapshot, tb: _Table, active: np.ndarray, now_s: float, usage: np.ndarray,
                        epoch: datetime) -> tuple[Snapshot, np.ndarray]:
    """The engine snapshot of cycle time ``now_s``: the active jobs of the table, in table order."""
    jidx = np.flatnonzero(active)
    tmask = active[tb.task_job]
    tidx = np.flatnonzero(tmask)
    counts = tb.task_count[jidx]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64) if jidx.size else np.zeros(0, np.int64)
    remap = np.full(tb.J, -1, dtype=np.int64)
    remap[jidx] = np.arange(jidx.size)
    jl = jidx.tolist()
    tl = tidx.tolist()
    created = (now_s - tb.created_at[jidx]) / 60.0
    started = (now_s - tb.started_at[jidx]) / 60.0  # nan stays nan
    stale = now_s - tb.stale_since[jidx]
    jobs = Jobs(
        names=[tb.names[j] for j in jl], queue=tb.queue[jidx], priority=tb.priority[jidx],
        preemptible=tb.preemptible[jidx], min_available=tb.min_available[jidx], created_minutes_ago=created,
        started_minutes_ago=started, stale_for=stale, staleness_grace_period=tb.grace[jidx],
        preemption_delay=tb.pdelay[jidx], topology_required=[tb.topo_req[j] for j in jl],
        topology_preferred=[tb.topo_pref[j] for j in jl], task_start=starts, task_count=counts,
    )
    tasks = Tasks(
        names=[tb.tnames[t] for t in tl], job=remap[tb.task_job[tidx]], request=tb.request[tidx],
        gpu_memory=tb.gpu_memory[tidx], state=tb.state[tidx].copy(), priority=tb.prio_task[tidx],
        node=tb.node[tidx].copy(), gpu_groups=[list(tb.groups[t]) for t in tl],
        node_selector=[tb.selector[t] for t in tl],
    )
    cfg = dataclasses.replace(base.config, now=epoch + timedelta(seconds=now_s), rounds=1, rounds_given=False,
                              stable_rounds=0)
    snap = dataclasses.replace(base, config=cfg, jobs=jobs, tasks=tasks, usage=usage, expect=None)
    return snap, tidx


def _to_units(x: np.ndarray) -> np.ndarray:
    out = np.array(x, dtype=float, copy=True)
    out[..., CPU] = out[..., CPU] / 1000.0
    return out


def simulate_snapshot(snapshot: Snapshot, params: SimulationParams | None = None, *,
                      cycles: int | None = None) -> SimulationResult:
    """Run the simulation described by ``params`` (default: the snapshot's ``simulation`` block)."""
    p = params or simulation_params(snapshot)
    n_cycles = p.cycles if cycles is None else int(cycles)
    if n_cycles < 1:
        raise ValueError("cycles: must be >= 1")
    tb = _Table(snapshot, p)
    Q = len(snapshot.queues)
    parent = np.asarray(snapshot.queues.parent)
    paths = [np.asarray(snapshot.queues.path_to_root(q), dtype=np.int64) for q in range(Q)]
    epoch = snapshot.config.now or DEFAULT_EPOCH
    alloc_hist = np.zeros((n_cycles, Q, NRES))
    cap_hist = np.zeros((n_cycles, NRES))
    fair = np.zeros((n_cycles, Q, NRES))
    use = np.zeros((n_cycles, Q, NRES))
    pend = np.zeros((n_cycles, Q), dtype=np.int64)
    runj = np.zeros((n_cycles, Q), dtype=np.int64)
    evictions = np.zeros(n_cycles, dtype=np.int64)
    binds = np.zeros(n_cycles, dtype=np.int64)
    # the ancestor matrix turns leaf sums into subtree sums
    anc = np.zeros((Q, Q))
    for q in range(Q):
        anc[paths[q], q] = 1.0
    _ = parent
    dt = float(p.cycle_seconds)
    for c in range(n_cycles):
        now_s = c * dt
        # jobs that ran through the last interval progress; finished ones leave (Succeeded)
        run = tb.running_per_job()
        if c > 0:
            going = (run >= tb.min_available) & ~tb.finished
            tb.progress[going] += dt
            done = going & np.isfinite(tb.duration) & (tb.progress >= tb.duration - 1e-9)
            if done.any():
                tb.finished |= done
                tb.completed |= done
                dm = done[tb.task_job]
                tb.state[dm] = _SUCC
                tb.node[dm] = -1
                for t in np.flatnonzero(dm):
                    tb.groups[t] = []
        active = (tb.arrive <= c) & ~tb.finished
        # gangs below minAvailable are stale from the first cycle that sees them so
        partial = (run > 0) & (run < tb.min_available) & active
        tb.stale_since[~partial] = np.nan
        fresh = partial & np.isnan(tb.stale_since)
        tb.stale_since[fresh] = now_s
        if c == 0:
            usage = np.asarray(snapshot.usage, dtype=float).reshape(Q, NRES)
        else:
            usage = history_usage(alloc_hist[:c], cap_hist[:c], window_size=p.window_size,
                                  window_type=p.window_type, half_life=p.half_life)
        snap, tidx = _snapshot_for_cycle(snapshot, tb, active, now_s, usage, epoch)
        state = run_actions(snap)
        end = np.asarray(state.task_state)
        evicted = (end == int(TaskState.RELEASING)) & (snap.tasks.state == _RUN)
        evictions[c] = int(np.count_nonzero(evicted))
        binds[c] = int(np.count_nonzero(end == int(TaskState.BINDING)))
        new = rewrite_snapshot(snap, state)
        before_run = tb.state[tidx] == _RUN
        new_state = np.asarray(new.tasks.state).copy()
        if p.evicted == "delete":
            new_state[evicted] = _FAIL
        tb.state[tidx] = new_state
        tb.node[tidx] = new.tasks.node
        for k, t in enumerate(tidx.tolist()):
            tb.groups[t] = list(new.tasks.gpu_groups[k])
        # start times: a job with no Running task before and one now started this cycle;
        # a job left with none is not running (an eviction restarts it from zero)
        run_after = tb.running_per_job()
        had = np.zeros(tb.J, dtype=bool)
        had[tb.task_job[tidx[before_run]]] = True
        started = (run_after > 0) & ~had
        tb.started_at[started] = now_s
        tb.progress[started] = 0.0
        stopped = (run_after == 0) & active
        tb.started_at[stopped] = np.nan
        tb.progress[stopped] = 0.0
        # samples: what Running tasks hold until the next cycle
        # a job whose every task ended (Succeeded / Failed) leaves the simulation
        ended = np.zeros(tb.J, dtype=np.int64)
        np.add.at(ended, tb.task_job[(tb.state == _SUCC) | (tb.state == _FAIL)], 1)
        gone = active & (ended == tb.task_count)
        tb.finished |= gone
        tb.evicted_jobs |= gone & ~tb.completed
        active &= ~gone
        rmask = tb.state == _RUN
        leaf_alloc = np.zeros((Q, NRES))
        np.add.at(leaf_alloc, tb.queue[tb.task_job[rmask]], state_alloc(tb, rmask, snapshot))
        alloc_hist[c] = anc @ leaf_alloc
        cap_hist[c] = state.total
        fair[c] = state.fair_share
        use[c] = usage
        running_jobs = (run_after > 0) & active
        pending_jobs = active & ~running_jobs
        leaf_r = np.bincount(tb.queue[running_jobs], minlength=Q)
        leaf_p = np.bincount(tb.queue[pending_jobs], minlength=Q)
        runj[c] = (anc @ leaf_r).astype(np.int64)
        pend[c] = (anc @ leaf_p).astype(np.int64)
    wanted = ["gpu"]
    req_all = tb.request
    if (req_all[:, CPU] > 0).any():
        wanted.append("cpu")
    if (req_all[:, MEM] > 0).any():
        wanted.append("memory")
    return SimulationResult(
        queue_names=list(snapshot.queues.names), allocated=_to_units(alloc_hist), fair_share=_to_units(fair),
        usage=use, pending_jobs=pend, running_jobs=runj, resources=tuple(wanted),
        is_leaf=np.asarray(snapshot.queues.is_leaf), evictions=evictions, binds=binds,
        finished_jobs=int(tb.completed.sum()), evicted_jobs=int(tb.evicted_jobs.sum()), name=snapshot.name,
    )


def run_actions(snap: Snapshot):
    """One engine cycle: the cycle driver's loop (CycleState, then ``config.actions`` in order through
    the action registry) without building the JSON result, which the simulator does not need."""
    state = CycleState(snap)
    for name in snap.config.actions:
        get_action(name)(state)
    return state


def state_alloc(tb: _Table, rmask: np.ndarray, snapshot: Snapshot) -> np.ndarray:
    """What Running tasks hold: their request, GPU memory requests as a fraction of their node's device."""
    req = tb.request[rmask].copy()
    gm = tb.gpu_memory[rmask]
    if (gm > 0).any():
        node_mem = np.asarray(snapshot.nodes.gpu_memory, dtype=float)[tb.node[rmask]]
        frac = np.where(node_mem > 0, gm / np.where(node_mem > 0, node_mem, 1.0), 0.0)
        req[:, GPU] = np.where(gm > 0, frac, req[:, GPU])
    return req


def _fmt(x: float) -> str:
    x = float(x)
    if x.is_integer() and abs(x) < 2**53:
        return str(int(x))
    return f"{x:.6g}"


def csv_header(resources: Sequence[str]) -> list[str]:
    head = ["cycle", "queue", "allocated_gpu", "fair_share_gpu", "usage_gpu", "pending_jobs", "running_jobs"]
    for r in resources:
        if r != "gpu":
            head += [f"allocated_{r}", f"fair_share_{r}", f"usage_{r}"]
    return head


def write_csv(result: SimulationResult, out: TextIO) -> None:
    """The history as CSV (module docstring)."""
    w = csv.writer(out, lineterminator="\n")
    w.writerow(csv_header(result.resources))
    extra = [RESOURCES.index(r) for r in result.resources if r != "gpu"]
    A, F, U = result.allocated, result.fair_share, result.usage
    for c in range(result.cycles):
        for q, name in enumerate(result.queue_names):
            row = [str(c), name, _fmt(A[c, q, GPU]), _fmt(F[c, q, GPU]), f"{U[c, q, GPU]:.6g}",
                   str(int(result.pending_jobs[c, q])), str(int(result.running_jobs[c, q]))]
            for r in extra:
                row += [_fmt(A[c, q, r]), _fmt(F[c, q, r]), f"{U[c, q, r]:.6g}"]
            w.writerow(row)


def plot_paths(path: Path, resources: Sequence[str]) -> dict[str, Path]:
    """One figure per resource: ``path`` for gpu, ``<stem>-<resource><suffix>`` for the others."""
    out = {}
    for r in resources:
        out[r] = path if r == "gpu" else path.with_name(f"{path.stem}-{r}{path.suffix or '.png'}")
    return out


def write_plots(result: SimulationResult, path: str | Path, *, title: str | None = None) -> list[Path]:
    """Allocation (solid) and fair share (dashed) per leaf queue over time, usage below; one file per resource."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    leaves = [q for q in range(len(result.queue_names)) if result.is_leaf[q]]
    x = np.arange(result.cycles)
    unit = {"gpu": "GPUs", "cpu": "cores", "memory": "bytes"}
    for res, fpath in plot_paths(Path(path), result.resources).items():
        r = RESOURCES.index(res)
        fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True,
                                       gridspec_kw={"height_ratios": [3, 1.3]})
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for i, q in enumerate(leaves):
            col = colors[i % len(colors)]
            name = result.queue_names[q]
            ax1.step(x, result.allocated[:, q, r], where="post", color=col, lw=1.8, label=f"{name} allocated")
            ax1.step(x, result.fair_share[:, q, r], where="post", color=col, lw=1.1, ls="--",
                     label=f"{name} fair share")
            ax2.plot(x, result.usage[:, q, r], color=col, lw=1.3, label=name)
        ax1.set_ylabel(f"{res} ({unit[res]})")
        ax1.set_title(title or result.name or "simulation")
        ax1.grid(alpha=0.3)
        ax1.legend(loc="upper right", fontsize=8, ncol=2)
        ax2.set_ylabel(f"usage ({res})")
        ax2.set_xlabel("cycle")
        ax2.set_ylim(-0.02, 1.02)
        ax2.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(fpath, dpi=110)
        plt.close(fig)
        written.append(fpath)
    return written


def summary(result: SimulationResult) -> str:
    """A few human lines: the GPU holder's turns (who held the cluster when) and totals."""
    lines = [f"{result.name}: {result.cycles} cycles, {int(result.binds.sum())} binds, "
             f"{int(result.evictions.sum())} evictions, {result.finished_jobs} jobs finished, "
             f"{result.evicted_jobs} jobs evicted"]
    holder = result.holder("gpu")
    turns = switch_points(holder)
    if turns:
        desc = ", ".join(f"{result.queue_names[q]}@{c}" for c, q in turns[:12])
        more = f" (+{len(turns) - 12} more)" if len(turns) > 12 else ""
        lines.append(f"gpu holder changes ({len(turns)}): {desc}{more}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ what-if

_EDIT_KEYS = ("queue", "priority", "resources")
_EDIT_RES_KEYS = ("quota", "overQuotaWeight", "limit")
_ADD_NODES_KEYS = ("count", "node", "namePrefix")
#: Most nodes one what-if may add (each is a full row of every per-node array of the cycle).
MAX_ADDED_NODES = 10_000
EVICTION_REASONS = ("Reclaimed", "Preempted", "Consolidated", "StaleGang")


def _add_nodes(out: dict, spec: Any, p: str, problems: list[tuple[str, str]]) -> None:
    """``{"count": N, "node": {<scenario node without name>}, "namePrefix": "preview"}``: N copies
    of the node named ``<prefix>-1..N``, placed among the cluster's nodes in name order (the order
    the live snapshot lists nodes in, so placement ties break as they would with real nodes)."""
    if not isinstance(spec, dict):
        problems.append((p, "must be a mapping"))
        return
    for k in spec:
        if k not in _ADD_NODES_KEYS:
            problems.append((f"{p}.{k}", f"unknown key (expected one of {', '.join(_ADD_NODES_KEYS)})"))
    count = spec.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_ADDED_NODES:
        problems.append((f"{p}.count", f"must be a whole number from 1 to {MAX_ADDED_NODES}"))
        return
    node = spec.get("node")
    if not isinstance(node, dict):
        problems.append((f"{p}.node", "must be a mapping (a scenario node without its name)"))
        return
    if "name" in node:
        problems.append((f"{p}.node.name", "not allowed: the added nodes are named <namePrefix>-1..N"))
        return
    prefix = spec.get("namePrefix", "added")
    if not isinstance(prefix, str) or not prefix:
        problems.append((f"{p}.namePrefix", "must be a non-empty string"))
        return
    nodes = out.setdefault("nodes", [])
    taken = {n.get("name") for n in nodes if isinstance(n, dict)}
    names = [f"{prefix}-{i}" for i in range(1, count + 1)]
    clash = [n for n in names if n in taken]
    if clash:
        problems.append((f"{p}.namePrefix", f"node {clash[0]} already exists; choose another prefix"))
        return
    nodes.extend({"name": n, **node} for n in names)
    nodes.sort(key=lambda n: str(n.get("name")) if isinstance(n, dict) else "")


def apply_edits(data: dict, edits: Sequence[dict]) -> dict:
    """A copy of scenario ``data`` with what-if edits applied.

    A queue edit: ``{"queue": name, "priority": int?, "resources": {res: {"quota"?, "overQuotaWeight"?,
    "limit"?}}}``; a scale-up: ``{"addNodes": {"count": N, "node": {...}, "namePrefix": str?}}``
    (see :func:`_add_nodes`); scenario units. Structural problems raise :class:`ScenarioError` with
    the edit's path; values are validated by the loader when the edited scenario is loaded.
    """
    import copy

    out = copy.deepcopy(data)
    by_name = {q.get("name"): q for q in out.get("queues") or []}
    problems: list[tuple[str, str]] = []
    for i, e in enumerate(edits):
        p = f"edits[{i}]"
        if not isinstance(e, dict):
            problems.append((p, "must be a mapping"))
            continue
        if "addNodes" in e:
            for k in e:
                if k != "addNodes":
                    problems.append((f"{p}.{k}", "not allowed next to addNodes (one edit, one kind)"))
            _add_nodes(out, e["addNodes"], f"{p}.addNodes", problems)
            continue
        for k in e:
            if k not in _EDIT_KEYS:
                problems.append((f"{p}.{k}", f"unknown key (expected one of {', '.join(_EDIT_KEYS)})"))
        q = by_name.get(e.get("queue"))
        if q is None:
            problems.append((f"{p}.queue", f"unknown queue {e.get('queue')!r}"))
            continue
        if "priority" in e:
            q["priority"] = e["priority"]
        res = e.get("resources") or {}
        if not isinstance(res, dict):
            problems.append((f"{p}.resources", "must be a mapping"))
            continue
        for r, vals in res.items():
            if r not in RESOURCES:
                problems.append((f"{p}.resources.{r}", "unknown resource (gpu, cpu, memory)"))
                continue
            if not isinstance(vals, dict):
                problems.append((f"{p}.resources.{r}", "must be a mapping"))
                continue
            target = q.setdefault("resources", {}).setdefault(r, {})
            for k, v in vals.items():
                if k not in _EDIT_RES_KEYS:
                    problems.append((f"{p}.resources.{r}.{k}", "unknown key (quota, overQuotaWeight, limit)"))
                    continue
                target[k] = v
    if problems:
        raise ScenarioError(problems, "edits")
    return out


#: The former name (queue edits only); same function.
apply_queue_edits = apply_edits


def _evictions(result) -> list[dict[str, Any]]:
    out = []
    for e in result.events:
        if e.get("reason") in EVICTION_REASONS and e.get("task"):
            out.append({"job": e.get("job"), "task": e.get("task"), "reason": e.get("reason"),
                        "victimOf": e.get("victimOf"), "message": e.get("message", "")})
    return out


_PLACED = ("Binding", "Pipelined")


def _waiting_jobs(data: dict, before, after) -> dict[str, dict[str, Any]]:
    """Jobs with a Pending task in the input: what each cycle does with them."""
    queue_of = {j.get("name"): j.get("queue") for j in data.get("jobs") or [] if isinstance(j, dict)}
    cat_before, cat_after = before.pending_categories(), after.pending_categories()
    out = {}
    for name, job in before.jobs.items():
        if not any(t["status"] == "Pending" or t["status"] in _PLACED for t in job["tasks"]):
            continue  # nothing was waiting (Pending in the input ends Pending, Binding or Pipelined)
        a = after.jobs.get(name, job)
        placed_b = [t for t in job["tasks"] if t["status"] in _PLACED]
        placed_a = [t for t in a["tasks"] if t["status"] in _PLACED]
        nodes = sorted({t["node"] for t in placed_a if t.get("node")})
        out[name] = {"queue": queue_of.get(name), "before": job["status"], "after": a["status"],
                     "placedBefore": len(placed_b), "placedAfter": len(placed_a), "nodes": nodes,
                     "waitingBefore": cat_before.get(name), "waitingAfter": cat_after.get(name)}
    return out


def preview_edits(data: dict, edits: Sequence[dict]) -> dict[str, Any]:
    """What-if: one engine cycle on ``data`` as is and one with ``edits`` applied (:func:`apply_edits`:
    queue edits, added nodes).

    Returns ``{"queues": {name: {"fairShareBefore", "fairShareAfter", "allocated", "allocatedAfter"}},
    "evictions": [...], "evictionsWithoutEdit": [...], "newEvictions": [...], "placements": {...},
    "jobs": {...}, "starts": [...], "nodesAdded": [...]}``: the evictions are the running workloads
    the next cycle would reclaim / preempt / consolidate with the edit (each ``{"job", "task",
    "reason", "victimOf", "message"}``); ``newEvictions`` those not evicted without the edit;
    ``placements`` the tasks the edited cycle would start (``{task: {"status", "node"}}``); ``jobs``
    every job with a Pending task: ``{"queue", "before", "after" (statuses), "placedBefore",
    "placedAfter" (tasks placed), "nodes" (after), "waitingBefore", "waitingAfter" (pending
    categories)}``; ``starts`` the jobs that get more tasks placed with the edit than without, in
    the cycle's order. Raises :class:`ScenarioError` for a bad edit or scenario.
    """
    from .cycle import run_cycle
    from .loader import load_dict

    edited = apply_edits(data, edits)
    before_snap = load_dict(data, source="what-if (current)")
    after_snap = load_dict(edited, source="what-if (edited)")
    before, after = run_cycle(before_snap), run_cycle(after_snap)
    queues = {}
    for name, q in after.queues.items():
        queues[name] = {"fairShareBefore": before.queues[name]["fairShare"], "fairShareAfter": q["fairShare"],
                        "allocated": before.queues[name]["allocated"], "allocatedAfter": q["allocated"]}
    ev_after, ev_before = _evictions(after), _evictions(before)
    seen = {(e["task"], e["reason"]) for e in ev_before}
    placements = {t: {"status": v["status"], "node": v["node"]} for t, v in after.tasks.items()
                  if v["status"] in _PLACED}
    jobs = _waiting_jobs(data, before, after)
    old_nodes = {n.get("name") for n in data.get("nodes") or [] if isinstance(n, dict)}
    return {"queues": queues, "evictions": ev_after, "evictionsWithoutEdit": ev_before,
            "newEvictions": [e for e in ev_after if (e["task"], e["reason"]) not in seen], "placements": placements,
            "jobs": jobs, "starts": [j for j, v in jobs.items() if v["placedAfter"] > v["placedBefore"]],
            "nodesAdded": [n["name"] for n in edited.get("nodes") or [] if n.get("name") not in old_nodes]}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scheduler_engine simulate",
                                description="Run a scenario's `simulation` block and write a per-cycle history.")
    p.add_argument("scenario", metavar="SCENARIO")
    p.add_argument("--output", "-o", required=True, metavar="CSV", help="history CSV ('-' = stdout)")
    p.add_argument("--plot", metavar="PNG", help="plot file (gpu; other resources get <stem>-<res>.png)")
    p.add_argument("--cycles", type=int, help="override simulation.cycles")
    p.add_argument("--recreate-evicted", action="store_true",
                   help="an evicted task becomes Pending again (the Rounds rewrite) instead of being deleted")
    p.add_argument("--quiet", "-q", action="store_true", help="no summary on stderr")
    return p


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    args, out, err = parse_command_line(build_parser(), argv, out, err)
    if isinstance(args, int):
        return args
    if args.cycles is not None and args.cycles < 1:
        print("error: --cycles: must be >= 1", file=err)
        return 2
    try:
        snap = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"error: {args.scenario}: invalid scenario:", file=err)
        for line in str(exc).splitlines():
            print(f"  {line}", file=err)
        return 2
    if not (snap.source or {}).get("simulation"):
        print(f"error: {args.scenario}: simulation: the scenario has no simulation block", file=err)
        return 2
    try:
        params = simulation_params(snap)
        if args.recreate_evicted:
            params.evicted = "recreate"
        result = simulate_snapshot(snap, params, cycles=args.cycles)
    except Exception as exc:  # an engine bug: name the file
        print(f"error: {args.scenario}: engine error: {type(exc).__name__}: {exc}", file=err)
        return 1
    try:
        if args.output == "-":
            write_csv(result, out)
        else:
            with open(args.output, "w", encoding="utf-8", newline="") as fh:
                write_csv(result, fh)
        plots = write_plots(result, args.plot) if args.plot else []
    except OSError as exc:
        print(f"error: cannot write output: {exc}", file=err)
        return 2
    if not args.quiet:
        print(summary(result), file=err)
        if args.output != "-":
            print(f"wrote {args.output}" + "".join(f", {p}" for p in plots), file=err)
    return 0
