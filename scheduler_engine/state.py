"""Mutable per-cycle scheduling state, shared by every action (allocate, consolidation, reclaim, ...).

A :class:`CycleState` is built once per cycle from a :class:`~scheduler_engine.snapshot.Snapshot`
(which is never mutated) and then changed only through the primitives below, so that every action
sees the same accounting and every change can be undone (gang all-or-nothing, victim simulations).

Public API (stable; other actions code against it)
--------------------------------------------------

Construction: ``CycleState(snapshot)``.

Read-only references: ``snap, config, nodes, queues, jobs, tasks``; sizes ``N, Q, J, T``; ``G`` =
max devices per node; ``total`` (3,) capacity of ready, schedulable nodes minus ``reservedByOthers``;
``min_gpu_memory`` / ``max_gpu_memory`` (MiB per device over GPU nodes, 0 when unknown);
``queue_path[q]`` int array ``[q, parent, ..., top]``; ``queue_is_leaf`` (Q,) bool;
``job_task_range(j)`` -> range of task indices.

Per-task (mutable): ``task_state`` (T,) int8 :class:`TaskState`; ``task_node`` (T,) int (-1 none);
``task_gpu_groups`` list[list[str]]; ``task_devices[t]`` -> list[int] (device indices on the node, in the
order they were chosen) and ``task_dev_take[t]`` -> list[float] (a pipelined task: what it took from
each device's releasing share), both read from and assigned to as lists but kept in (T, G) arrays
(:class:`TaskRows`: the task-device mirror, so that compiled kernels move devices too);
``task_order_req`` (T, 3): request with GPU memory converted with the *smallest* device memory
(used for queue requests and ordering); ``task_quota_req`` (T, 3): GPU memory converted with the
*largest* (used by queue admission, spec a.7); ``task_alloc`` (T, 3): what the task holds now on its
node (GPU memory converted with that node's device memory).

Per-queue (mutable, aggregated to every ancestor): ``queue_request`` (Q, 3) (fixed at session open),
``queue_alloc`` (Q, 3) and ``queue_alloc_np`` (non-preemptible jobs only); ``fair_share`` (Q, 3),
computed once at construction and never changed.

Per-node (mutable): ``node_idle`` (N, 3) free now (capacity minus everything on the node, releasing
tasks included), ``node_releasing`` (N, 3) held by Releasing tasks and not yet promised to a
Pipelined task; ``node_schedulable`` (N,) bool (ready and not unschedulable). Per device:
``dev_free`` (N, G) free fraction of each device, ``dev_rel`` (N, G) releasing fraction not yet
promised; ``dev_group`` list (per node) of dict device -> gpuGroup name; ``dev_shared`` (N, G)
bool: the device carries a gpuGroup (is, or was this cycle, used by shared-GPU tasks).

Dynamic resource allocation (KAI ``plugins/dynamicresources``): ``D`` device classes, ``M`` = most
devices of one class on one node; ``dra_free`` / ``dra_rel`` (N, D, M) free / releasing-not-promised
share of each device (whole devices: 0 or 1), ``dra_valid`` (N, D, M); ``task_claims`` (T, D) devices
claimed; ``task_dra`` per task ``{class: [device indices]}`` held on its node (``None``: none). A class
that counts as gpu adds its devices to the node's GPU capacity and its claims to the task's GPU
request (``task_request`` / ``task_order_req`` / ``task_quota_req``), so quota, fair share and queue
order see them as GPUs; placement checks them device by device (``claims_fit``, ``choose_claims``),
all-or-nothing per task; ``task_whole`` counts classic whole GPUs only.

``node_idle_gpus()`` / ``node_releasing_gpus()`` (N,) float: free GPU amount (whole free devices
plus free fractions of shared ones) / GPU amount that victims are releasing and that nothing has
been pipelined onto yet (KAI ``GetSumOfIdleGPUs`` / ``GetSumOfReleasingGPUs``, for the victim
search). ``node_idle_devices()`` / ``node_releasing_devices()``: the output's ``idleGpus`` /
``releasingGpus``, whole devices as KAI counts them (contract "Statuses").

Events: ``events`` list of dicts ``{"job", "reason", "message"[, "task"][, "victimOf"]}``;
``add_event(job, reason, message, task=None, victim_of=None)``.

Primitives:

* ``task_request_on_node(t, n)`` -> (3,) request of task t if placed on node n.
* ``fit_masks(t, nodes=None)`` -> ``(idle_ok, any_ok)`` (N,) bool: the task fits node n on free
  resources only / on free plus releasing resources (resources incl. whole GPUs, fractions and GPU
  memory on one device, nodeSelector, schedulable). ``nodes`` optional (N,) bool pre-mask.
* ``fit_one(t, n)`` -> ``(fits_free, fits_free_or_releasing)`` for one node (plain Python).
* ``choose_devices(t, n, pipelined)`` -> list of device indices or ``None``.
* ``place(t, n, pipelined=False, devices=None)``: Pending -> Binding (free resources) or Pipelined
  (resources being released); picks devices/gpuGroups; adds to the queue allocation.
* ``mark_pipelined(t)``: Binding -> Pipelined in place (KAI pipelines a whole job once one of
  its tasks is pipelined). ``mark_binding(t)``: the reverse, for a task that took nothing
  releasing; ``takes_releasing(t)``: whether a placed task holds releasing resources.
* ``evict(t, for_job=None, reason="Evicted", message=None)``: Running/Binding/Pipelined task is
  given up. Running -> Releasing (its resources become releasing); Binding/Pipelined (placed in
  this cycle) -> Pending again (resources returned), except a moved task (Running in the input,
  Pipelined now), which becomes Releasing on its original node. Queue allocation is reduced.
* ``checkpoint()`` -> token; ``rollback(token)`` undoes every change (tasks, nodes, devices, queues,
  events) made after the checkpoint. Cheap: an undo journal, no array copies.
  ``mark_failure_point()``: a failure cache entry was just made; rolling back below this point
  bumps ``resources_freed`` (the cached failure may no longer hold).
* ``queue_over_capacity(q, req, nonpreemptible)`` -> ``None`` or a message: spec a.7 limit check on
  the leaf and every ancestor (per resource requested > 0) and, for non-preemptible jobs, the
  deserved-quota check on ``queue_alloc_np``; the message is a ``result.Reason`` of category
  ``limit`` or ``quota``.
* Job helpers: ``job_active_tasks(j)`` (Running/Binding/Pipelined), ``job_pending_tasks(j)``,
  ``job_num_active(j)``, ``job_is_preemptible(j)``, ``job_queue(j)``.
* ``job_signature(j, tasks)``: hashable key of a job's scheduling shape (used for failure caches);
  ``resources_freed`` counter bumped whenever resources become free or releasing (cache invalidation).
* Change tracking for incremental caches: ``node_log`` (append-only int64 log of nodes whose resources
  changed, rollbacks included: :class:`NodeLog`), ``job_version`` (J,) and ``queue_version`` (Q,) counters bumped
  whenever a job's tasks / a queue's allocation change. ``fit_rows(t, rows)`` = ``fit_masks`` on a
  subset of nodes. Code outside this module that mutates tasks/nodes/queues directly must call
  ``_record(t, n)`` first (journal + trackers), as ``solvers/simulation.py`` does.

Units and invariants: internal units (gpu devices, cpu millicores, memory bytes). After every
primitive ``node_idle >= 0`` and ``node_releasing >= 0`` on every node that was not over-committed
in the input, and per device ``dev_free + dev_rel <= 1``. ``queue_limit``, ``queue_deserved`` and
``fair_share`` are fixed for the cycle (caches rely on it).
"""
from __future__ import annotations

import functools
import math
from typing import Iterable, Sequence

import numpy as np

from .budget import TimeBudget
from .fairshare import compute_fair_share
from .result import PENDING_LIMIT, PENDING_QUOTA, Reason
from .snapshot import CPU, GPU, MEM, NRES, UNLIMITED, Snapshot, TaskState
from .kernels import devices as _devices_k
from .kernels import journal as _journal_k
from .kernels import scenario as _scenario_k
from .kernels.victim_run import EntryCall

EPS = 1e-9
_PEND = int(TaskState.PENDING)
_RUN = int(TaskState.RUNNING)
_REL = int(TaskState.RELEASING)
_STUCK = int(TaskState.STUCK_RELEASING)
_BIND = int(TaskState.BINDING)
_PIPE = int(TaskState.PIPELINED)
ACTIVE_STATES = (_RUN, _BIND, _PIPE)
_EMPTY: tuple = ()  # shared immutable "no devices" entry
RES_NAMES = ("gpu", "cpu", "memory")
_NO_DEVS = np.zeros(0, dtype=np.int64)


class TaskRows:
    """Per-task lists kept in a (T, G) array: row t holds ``count[t]`` entries, the rest ``pad``.

    ``rows[t]`` gives a new list, ``rows[t] = values`` writes the row (values beyond G do not
    exist: a task holds at most one entry per device of its node). The arrays are the state's
    only copy (journaled and restored by :mod:`scheduler_engine.kernels.journal`, written by its
    kernels), so the Python and compiled paths see one truth.
    """

    __slots__ = ("a", "count", "pad")

    def __init__(self, a: np.ndarray, count: np.ndarray, pad) -> None:
        self.a, self.count, self.pad = a, count, pad

    def __getitem__(self, t: int) -> list:
        return self.a[t, :self.count[t]].tolist()

    def __setitem__(self, t: int, values) -> None:
        k = len(values)
        row = self.a[t]
        old = int(self.count[t])
        if k:
            row[:k] = values
        if old > k:
            row[k:old] = self.pad
        self.count[t] = k

    def __len__(self) -> int:
        return self.count.shape[0]

    def __iter__(self):
        a, c = self.a, self.count.tolist()
        for t in range(len(c)):
            yield a[t, :c[t]].tolist()

    def __eq__(self, other) -> bool:
        return list(self) == list(other)

    def __repr__(self) -> str:
        return repr(list(self))


class NodeLog:
    """``CycleState.node_log``: the append-only log of nodes whose resources changed, as int64.

    Why an array and not a list: at 10,000 nodes one cycle logged ~9.4 million entries when every
    simulated scenario logged its nodes twice, applied and rolled back (the compiled search now drops a
    failed scenario's). As a Python list that was ~9.4 million int objects (hundreds of MB), every
    compiled reader needed an int64 copy of it (``ScenarioArrays`` kept a mirror and copied each new
    entry up, allocate another), and each scenario's nodes went from the kernel's array to the list
    through ``tolist``. Here the compiled code writes into the log's own buffer (:meth:`reserve`, then
    :meth:`set_len`), readers slice it without a copy, and the Python paths append as before.

    ``buf[:len(self)]`` is the log; a slice ``log[a:b]`` is a view of it (entries below the length a
    reader saw are never rewritten, so its view stays valid, also after the buffer grew: the old buffer
    keeps its entries). The buffer is replaced when it grows: holders of ``buf`` check ``buf is log.buf``
    before writing into it. One exception to "append-only", invisible to readers: inside one call of the
    compiled victim search (``kernels.search.run_search``) a failed scenario's entries are cut off again
    after its undo (``kernels.scenario.forget_log``), never below the length Python passed in, so no
    holder of an earlier position sees an entry change; the rows an index queried in that scenario are
    caught up there (why the log ends a 10k cycle at ~0.3 M entries, not ~17 M).
    """

    __slots__ = ("buf", "n")

    def __init__(self, capacity: int = 1024) -> None:
        self.buf = np.empty(max(int(capacity), 16), dtype=np.int64)
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def reserve(self, extra: int) -> np.ndarray:
        """A buffer with room for ``extra`` more entries beyond the current length (grown fourfold:
        amortised O(1) per entry); returns it (a new array when it grew).

        Why fourfold, not doubling (chosen when the log reached ~17 million entries, 134 MB, at 10,000
        nodes; ~0.3 million since the compiled search drops failed scenarios' entries): each growth
        copies the log into fresh memory that the kernel then faults in page by page
        (large buffers are mapped and unmapped whole). Doubling copied ~1x the final log and touched
        ~2x its pages over a cycle (2.4 % of reclaim's samples at 10k); fourfold copies ~1/3 and
        touches ~4/3. The resident size is the same (the new buffer's tail is untouched until
        written): the old buffer and the copy, as with doubling."""
        need = self.n + int(extra)
        if need > self.buf.shape[0]:
            grown = np.empty(max(need, 4 * self.buf.shape[0]), dtype=np.int64)
            grown[:self.n] = self.buf[:self.n]
            self.buf = grown
        return self.buf

    def set_len(self, n: int) -> None:
        """The log ends at ``n``: a compiled writer appended ``buf[len(self):n]`` (after
        :meth:`reserve`)."""
        if not self.n <= n <= self.buf.shape[0]:
            raise ValueError(f"node log length {n} outside [{self.n}, {self.buf.shape[0]}]")
        self.n = n

    def append(self, node: int) -> None:
        n = self.n
        if n == self.buf.shape[0]:
            self.reserve(1)
        self.buf[n] = node
        self.n = n + 1

    def extend(self, nodes) -> None:
        a = np.asarray(nodes, dtype=np.int64)
        k = a.shape[0]
        if k:
            buf = self.reserve(k)
            buf[self.n:self.n + k] = a
            self.n += k

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.buf[:self.n][i]
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError("node log index out of range")
        return int(self.buf[i])

    def __iter__(self):
        return iter(self.buf[:self.n].tolist())

    def __array__(self, dtype=None, copy=None):
        # a view unless a copy is asked for or the dtype differs (entries are never rewritten, so
        # the view stays valid; numpy's protocol: ``copy=False`` must not copy)
        a = self.buf[:self.n]
        if dtype is not None and np.dtype(dtype) != a.dtype:
            if copy is False:
                raise ValueError("node log: a different dtype needs a copy")
            return a.astype(dtype)
        return a.copy() if copy else a

    def tolist(self) -> list[int]:
        return self.buf[:self.n].tolist()

    def __eq__(self, other) -> bool:
        if isinstance(other, NodeLog):
            return self.n == other.n and bool(np.array_equal(self.buf[:self.n], other.buf[:other.n]))
        return self.tolist() == list(other)

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        return f"NodeLog({self.tolist()!r})"


@functools.lru_cache(maxsize=8192)
def fmt_amount(r: int, x: float) -> str:
    """Human number in scenario units for messages: gpu devices, cpu cores, memory bytes.

    Memoised (the explanations format the same few amounts tens of thousands of times per cycle, a
    numpy float at ~3-4 us each): equal arguments give equal texts whatever their numeric type (a
    numpy or Python float or int of the same value formats the same; 0.0 and -0.0 both give "0"),
    and a NaN or infinity raises as before (an exception is not cached)."""
    if r == CPU:
        x = x / 1000.0
    if abs(x - round(x)) < 1e-9:
        return str(int(round(x)))
    return f"{x:.3g}"


class CycleState:
    """Mutable scheduling state of one cycle; see the module docstring for the API."""

    #: ``evict`` / ``place`` of tasks without DRA claims (and, for ``place``, not shared) in one
    #: compiled call each (:mod:`scheduler_engine.kernels.journal`); ``False``: the general Python
    #: code for every task (same state bitwise; the tests compare the two)
    fast_paths = True
    #: ``evict_many`` evicts this many victims or more in one compiled call (fewer: one by one, where
    #: the batch's set-up, lists to arrays and one wide call, costs more than it saves)
    evict_batch_min = 3

    def __init__(self, snapshot: Snapshot) -> None:
        self.snap = snapshot
        self.config = snapshot.config
        self.budget = TimeBudget(None)  # the cycle driver sets the real one (scheduler_engine.budget)
        self.nodes = nodes = snapshot.nodes
        self.queues = queues = snapshot.queues
        self.jobs = jobs = snapshot.jobs
        self.tasks = tasks = snapshot.tasks
        self.N, self.Q, self.J, self.T = len(nodes), len(queues), len(jobs), len(tasks)
        N, Q, T = self.N, self.Q, self.T

        # ---------------- nodes & capacity
        self.node_schedulable = np.asarray(nodes.ready, bool) & ~np.asarray(nodes.unschedulable, bool)
        cap = np.asarray(nodes.capacity, float).reshape(N, NRES) - np.asarray(nodes.reserved, float).reshape(N, NRES)
        cap = np.maximum(cap, 0.0)
        gpus = np.asarray(nodes.gpus, dtype=np.int64).reshape(N)
        reserved_gpu = np.ceil(np.asarray(nodes.reserved, float).reshape(N, NRES)[:, GPU] - EPS).astype(np.int64)
        self.node_devices = np.maximum(gpus - np.maximum(reserved_gpu, 0), 0)  # usable devices per node
        cap[:, GPU] = self.node_devices
        # ---------------- DRA devices (classes x nodes); a gpu class adds to the node's GPU capacity
        dcs = snapshot.device_classes
        self.D = D = len(dcs)
        self.dc_gpu = np.asarray(dcs.counts_as_gpu, bool).reshape(D)
        node_dev = np.asarray(nodes.devices, dtype=np.int64).reshape(N, D)
        self.node_dra = node_dev
        self.M = M = int(node_dev.max()) if (D and N) else 0
        self.dra_valid = np.arange(M)[None, None, :] < node_dev[:, :, None]  # (N, D, M)
        self.dra_free = self.dra_valid.astype(float)
        self.dra_rel = np.zeros((N, D, M))
        if D and self.dc_gpu.any():
            cap[:, GPU] = cap[:, GPU] + node_dev[:, self.dc_gpu].sum(axis=1)
        self.node_capacity = cap
        self.total = (cap * self.node_schedulable[:, None]).sum(axis=0)
        self.node_gpu_memory = np.asarray(nodes.gpu_memory, float).reshape(N)
        gm = self.node_gpu_memory[(gpus > 0) & (self.node_gpu_memory > 0)]
        self.min_gpu_memory = float(gm.min()) if gm.size else 0.0
        self.max_gpu_memory = float(gm.max()) if gm.size else 0.0
        self.G = int(self.node_devices.max()) if N else 0
        G = self.G
        self.dev_valid = np.arange(G)[None, :] < self.node_devices[:, None]  # (N, G)
        self.dev_free = self.dev_valid.astype(float)
        self.dev_rel = np.zeros((N, G))
        self.dev_group: list[dict[int, str]] = [dict() for _ in range(N)]
        self.dev_shared = np.zeros((N, G), dtype=bool)  # device carries a gpuGroup (shared use)
        # idle and releasing are views of one (N, 2, 3) array: one journal copy per node
        self._node_both = np.zeros((N, 2, NRES))
        self.node_idle = self._node_both[:, 0]
        self.node_releasing = self._node_both[:, 1]
        self.node_idle[:] = cap
        self._selector_cache: dict[tuple, np.ndarray] = {}

        # ---------------- queues
        self.queue_path = [np.asarray(queues.path_to_root(q), dtype=np.int64) for q in range(Q)]
        self.queue_path_list = [[int(a) for a in p] for p in self.queue_path]
        self._lim_rows = None
        self.queue_is_leaf = queues.is_leaf
        self.queue_deserved = np.asarray(queues.deserved, float).reshape(Q, NRES)
        self.queue_limit = np.asarray(queues.limit, float).reshape(Q, NRES)

        # ---------------- tasks
        self.task_state = np.asarray(tasks.state, dtype=np.int8).copy()
        self.task_node = np.asarray(tasks.node, dtype=np.int64).copy()
        # outer lists are copied, inner ones shared with the snapshot: this module only ever
        # replaces an entry, never mutates one in place (the snapshot stays untouched)
        self.task_gpu_groups: list[list[str]] = list(tasks.gpu_groups)
        # the task-device mirror (kernels.journal): devices in choice order, -1 padded; takes 0.0 padded
        self._tdev = np.full((T, self.G), -1, dtype=np.int64)
        self._tndev = np.zeros(T, dtype=np.int64)
        self._ttake = np.zeros((T, self.G))
        self._tntake = np.zeros(T, dtype=np.int64)
        self.task_devices = TaskRows(self._tdev, self._tndev, -1)
        self.task_job = np.asarray(tasks.job, dtype=np.int64)
        req = np.asarray(tasks.request, float).reshape(T, NRES)
        g = req[:, GPU]  # classic GPUs (devices / fractions); claims of gpu classes are added below
        self.task_claims = np.asarray(tasks.claims, dtype=np.int64).reshape(T, D)
        self.task_has_claims = self.task_claims.any(axis=1) if D else np.zeros(T, dtype=bool)
        self._claims_list: list[bool] = self.task_has_claims.tolist()
        if D and self.dc_gpu.any():
            dra_g = self.task_claims[:, self.dc_gpu].sum(axis=1)
            if dra_g.any():
                req = req.copy()  # the snapshot is never mutated
                req[:, GPU] = g + dra_g
        self.task_request = req
        self.task_gpu_memory = np.asarray(tasks.gpu_memory, float).reshape(T)
        self.task_is_mem = self.task_gpu_memory > 0
        self.task_is_frac = (~self.task_is_mem) & (g > EPS) & (g < 1.0 - EPS)
        self.task_is_shared = self.task_is_mem | self.task_is_frac
        self.task_whole = np.where(self.task_is_shared, 0, np.rint(g)).astype(np.int64)
        self.task_order_req = req.copy()
        self.task_quota_req = req.copy()
        if self.task_is_mem.any():
            mem = self.task_gpu_memory[self.task_is_mem]
            self.task_order_req[self.task_is_mem, GPU] = mem / self.min_gpu_memory if self.min_gpu_memory else 0.0
            self.task_quota_req[self.task_is_mem, GPU] = mem / self.max_gpu_memory if self.max_gpu_memory else 0.0
        self.task_alloc = np.zeros((T, NRES))
        self.task_rel_take = np.zeros((T, NRES))  # pipelined tasks: part taken from releasing
        self.task_dev_take = TaskRows(self._ttake, self._tntake, 0.0)
        self.task_dra: list[dict[int, list[int]] | None] = [None] * T
        self.task_dra_take: list[dict[int, list[float]] | None] = [None] * T
        self.task_selector_key = [tuple(sorted(s.items())) if s else () for s in tasks.node_selector]
        self.job_queue_arr = np.asarray(jobs.queue, dtype=np.int64)
        self.job_preemptible_arr = np.asarray(jobs.preemptible, bool)
        self.job_start = np.asarray(jobs.task_start, dtype=np.int64)
        self.job_count = np.asarray(jobs.task_count, dtype=np.int64)
        self.job_min_available = np.asarray(jobs.min_available, dtype=np.int64)
        # subgroups (scheduler_engine.subgroups): jobs that have a tree; their gang rules go there
        self.job_has_sg = np.asarray(jobs.sg_count, dtype=np.int64) > 0
        self.any_sg = bool(self.job_has_sg.any())
        self._sg_list: list[bool] = self.job_has_sg.tolist() if self.any_sg else [False] * self.J

        # ---------------- place input tasks on nodes
        # both allocations are views of one (Q, 2, 3) array: one journal copy per queue path
        self._queue_alloc_both = np.zeros((Q, 2, NRES))
        self.queue_alloc = self._queue_alloc_both[:, 0]
        self.queue_alloc_np = self._queue_alloc_both[:, 1]
        self.queue_request = np.zeros((Q, NRES))
        self._journal: list[tuple] | None = None  # no journaling while building
        self._path_matrix: np.ndarray | None = None
        self._init_placements()
        if self.D:
            self._init_claims()

        # queue requests: allocated (Running) + pending (requested, smallest GPU memory)
        st = self.task_state
        leaf_req = np.zeros((Q, NRES))
        run = st == _RUN
        pend = st == _PEND
        tq = self.job_queue_arr[self.task_job] if T else np.zeros(0, dtype=np.int64)
        np.add.at(leaf_req, tq[run], self.task_alloc[run])
        np.add.at(leaf_req, tq[pend], self.task_order_req[pend])
        self.queue_request = self._aggregate_up(leaf_req)
        self.job_num_active_arr = np.zeros(self.J, dtype=np.int64)
        act = np.isin(st, ACTIVE_STATES)
        np.add.at(self.job_num_active_arr, self.task_job[act], 1)

        # ---------------- fair share (fixed for the cycle)
        self.fair_share = self._compute_fair_share()

        self.events: list[dict] = []
        self.resources_freed = 0
        # change tracking for incremental caches: nodes whose resources changed (append-only),
        # and per-job / per-queue counters bumped on every change of their tasks / allocation
        self.node_log = NodeLog()
        self.job_version = np.zeros(self.J, dtype=np.int64)
        self.queue_version = np.zeros(self.Q, dtype=np.int64)
        self._protect_len = 0
        self._path_cache_lim: dict[int, np.ndarray] = {}
        self._task_sig: list[tuple | None] = [None] * self.T
        self._path_cache_des: dict[int, np.ndarray] = {}
        # where each input task sits (a moved task's pod keeps running there until released)
        self._input_state = np.asarray(tasks.state, dtype=np.int8)
        self._input_node = np.asarray(tasks.node, dtype=np.int64)
        self._input_tdev = self._tdev.copy()
        self._input_tndev = self._tndev.copy()
        self._input_groups = list(self.task_gpu_groups)
        self._input_dra = list(self.task_dra)
        # plain-Python views for the journal's hot path (jobs never change queue within a cycle)
        self._task_job_list: list[int] = self.task_job.tolist()
        # per leaf: (path list, flat indices of its path's rows in ``_queue_alloc_both``); the
        # journal copies / restores the path's allocations through the flat view (a fancy-indexed
        # row copy and assignment on the (Q, 2, 3) array cost several times more)
        self._qab_flat = self._queue_alloc_both.reshape(-1)
        six = np.arange(2 * NRES, dtype=np.int64)
        self._path_info = [(pl, (np.asarray(pl, dtype=np.int64)[:, None] * (2 * NRES) + six).ravel())
                           for pl in self.queue_path_list]
        self._job_path_info = [self._path_info[q] for q in self.job_queue_arr.tolist()]
        self._init_journal()

    def _init_journal(self) -> None:
        """The undo journal (:mod:`scheduler_engine.kernels.journal`): numeric entries in
        preallocated arrays (``_ji`` / ``_jf``, grown by doubling), written and replayed by compiled
        kernels; object entries (device / group lists, gpuGroup maps, DRA) in the list
        ``_journal``, one per entry (its length is the journal's length)."""
        depth = max((len(p) for p in self.queue_path_list), default=1) or 1
        pm = np.full((max(self.Q, 1), depth), -1, dtype=np.int64)
        for q, p in enumerate(self.queue_path_list):
            pm[q, :len(p)] = p
        self._jpath = pm
        cap = 256
        self._ji = np.zeros((cap, _journal_k.iwidth(self.G)), dtype=np.int64)
        self._jf = np.zeros((cap, _journal_k.width(self.G, depth)))
        self._shared_list: list[bool] = self.task_is_shared.tolist()
        self._preempt_list: list[bool] = self.job_preemptible_arr.tolist()
        # the arrays the kernels mutate in place (never rebound after construction)
        self._jarrays = (self._input_state, self.task_state, self.task_node, self.task_job, self.job_queue_arr,
                         self._jpath, self.job_num_active_arr, self.job_version, self.queue_version, self._node_both,
                         self.dev_free, self.dev_rel, self.task_alloc, self.task_rel_take, self._queue_alloc_both,
                         self._tdev, self._tndev, self._ttake, self._tntake)
        self._journal = []

    def _journal_room(self) -> int:
        """Index of the next journal entry, growing the entry arrays when full."""
        i = len(self._journal)
        if i >= self._ji.shape[0]:
            self._journal_room_for(i + 1)
        return i

    def _journal_room_for(self, need: int) -> None:
        """Grow the entry arrays (doubling) until ``need`` entries fit."""
        i = len(self._journal)
        if need > self._ji.shape[0]:
            cap = 2 * self._ji.shape[0]
            while cap < need:
                cap *= 2
            ji = np.zeros((cap, self._ji.shape[1]), dtype=np.int64)
            ji[:i] = self._ji[:i]
            jf = np.zeros((cap, self._jf.shape[1]))
            jf[:i] = self._jf[:i]
            self._ji, self._jf = ji, jf

    # ------------------------------------------------------------------ construction helpers
    def _aggregate_up(self, leaf: np.ndarray) -> np.ndarray:
        out = np.zeros_like(leaf)
        for q in range(self.Q):
            if leaf[q].any():
                out[self.queue_path[q]] += leaf[q]
        return out

    def _compute_fair_share(self) -> np.ndarray:
        q = self.queues
        k = self.config.k_value
        return np.asarray(
            compute_fair_share(
                parent=np.asarray(q.parent), deserved=self.queue_deserved, limit=self.queue_limit,
                weight=np.asarray(q.weight, float), priority=np.asarray(q.priority),
                request=self.queue_request, usage=np.asarray(self.snap.usage, float).reshape(self.Q, NRES),
                order_rank=q.order_rank(), total=self.total, k_value=float(k or 0.0),
            ),
            dtype=float,
        )

    def _init_placements(self) -> None:
        """Charge Running / Releasing / StuckInReleasing input tasks to their nodes and devices.

        Shared-GPU tasks go first, one by one (their gpuGroups pin devices and name groups); then
        every other task at once: each node's fully free devices (after the shared tasks) are handed
        out in device order to its whole-GPU tasks in task order, by cumulative device counts, which
        is what charging them one at a time does (an over-committed input simply gets fewer
        devices). Resources are subtracted with ``ufunc.at`` in the same order as a per-task loop,
        so the sums are bitwise the same.
        """
        st = self.task_state
        on_node = np.isin(st, (_RUN, _REL, _STUCK)) & (self.task_node >= 0)
        sh = np.flatnonzero(on_node & self.task_is_shared)
        if sh.size:
            self._init_shared(sh)
        wt = np.flatnonzero(on_node & ~self.task_is_shared)
        if wt.size == 0:
            return
        wn = self.task_node[wt]
        wreq = self.task_request[wt]  # whole / CPU-only tasks: the request is the same on every node
        rel = st[wt] == _REL
        self.task_alloc[wt] = wreq
        np.subtract.at(self.node_idle, wn, wreq)
        if rel.any():
            np.add.at(self.node_releasing, wn[rel], wreq[rel])
        # devices: node n's fully free devices in order, consumed by its tasks in task order
        k = self.task_whole[wt]
        g = k > 0
        if g.any() and self.G:
            gi = np.flatnonzero(g)
            gn, gk = wn[gi], k[gi]
            order = np.argsort(gn, kind="stable")  # by node, task order within a node
            sn, sk = gn[order], gk[order]
            cum = np.cumsum(sk)
            first = np.r_[True, sn[1:] != sn[:-1]]
            base = np.maximum.accumulate(np.where(first, cum - sk, 0))  # cum before each node's group
            lo = cum - sk - base
            hi = lo + sk
            free = (self.dev_free >= 1 - EPS) & self.dev_valid
            nfree = free.sum(axis=1)
            fn, fd = np.nonzero(free)  # row-major: by node, then device
            fstart = np.r_[0, np.cumsum(nfree)[:-1]]
            avail = nfree[sn]
            lo_c, hi_c = np.minimum(lo, avail), np.minimum(hi, avail)
            a = fstart[sn] + lo_c
            b = fstart[sn] + hi_c
            # devices taken: flat free-list positions [a, b) of each task
            cnt = b - a
            if cnt.sum():
                pos = np.repeat(a - np.r_[0, np.cumsum(cnt)[:-1]], cnt) + np.arange(int(cnt.sum()))
                tn_, td_ = fn[pos], fd[pos]
                self.dev_free[tn_, td_] -= 1.0
                srel = rel[gi[order]]
                rrel = np.repeat(srel, cnt)
                if rrel.any():
                    self.dev_rel[tn_[rrel], td_[rrel]] += 1.0
                # the mirror: task i's devices are its free-list positions [a, b) in order
                owner = wt[gi[order]]
                col = np.arange(int(cnt.sum())) - np.repeat(np.r_[0, np.cumsum(cnt)[:-1]], cnt)
                self._tdev[np.repeat(owner, cnt), col] = td_
                self._tndev[owner] = cnt
        # (tasks without devices keep the empty row; task_dev_take stays empty: not pipelined)
        self._charge_queues(wt, wreq)

    def _init_claims(self) -> None:
        """Hand the claimed devices of input tasks on nodes (Running / Releasing / StuckInReleasing)
        to them: first the devices the input pins (``devices``), then, in task order, the first free
        devices of each claimed class (an over-committed input simply gets fewer). A Releasing task's
        devices are releasing. Node and queue sums were charged with the task's request already."""
        st = self.task_state
        on_node = np.isin(st, (_RUN, _REL, _STUCK)) & (self.task_node >= 0) & self.task_has_claims
        idx = np.flatnonzero(on_node).tolist()
        if not idx:
            return
        pins = self.tasks.devices
        one = 1 - EPS
        rest = []
        for t in idx:  # pinned devices first, so the unpinned tasks take the others
            p = pins[t]
            if not p:
                rest.append(t)
                continue
            n = int(self.task_node[t])
            free = self.dra_free[n]
            held = {}
            for c, devs in p.items():
                got = [d for d in devs if d < self.M and free[c, d] >= one]
                for d in got:
                    free[c, d] -= 1.0
                held[c] = got
            self.task_dra[t] = held
        for t in rest:
            n = int(self.task_node[t])
            free = self.dra_free[n]
            held = {}
            for c in np.flatnonzero(self.task_claims[t]).tolist():
                k = int(self.task_claims[t, c])
                got = [d for d in range(int(self.node_dra[n, c])) if free[c, d] >= one][:k]
                for d in got:
                    free[c, d] -= 1.0
                held[c] = got
            self.task_dra[t] = held
        for t in idx:
            if st[t] == _REL:
                n = int(self.task_node[t])
                for c, devs in self.task_dra[t].items():
                    for d in devs:
                        self.dra_rel[n, c, d] += 1.0

    def _init_shared(self, idx: np.ndarray) -> None:
        """Charge input shared-GPU tasks (indices ``idx``, in task order) one by one, in plain Python.

        Each task gets one device of its node: the device already carrying its gpuGroup name, else
        the device its name designates (a digit, if fully free), else the first fully free device
        without a group, else the first one with room for its fraction (device 0 when none: an
        over-committed input). Node and queue sums are added afterwards with ``ufunc.at`` in the
        same task order, so they are bitwise what charging them one at a time gives.
        """
        st = self.task_state
        sn = self.task_node[idx]
        srel = st[idx] == _REL
        frac = self.task_request[idx, GPU].copy()
        mem = self.task_is_mem[idx]
        if mem.any():
            m = self.node_gpu_memory[sn[mem]]
            with np.errstate(divide="ignore", invalid="ignore"):
                frac[mem] = np.where(m > 0, self.task_gpu_memory[idx[mem]] / np.where(m > 0, m, 1.0), np.inf)
        req = self.task_request[idx].copy()
        req[:, GPU] = frac
        self.task_alloc[idx] = req
        nd_list = self.node_devices.tolist()
        free_rows: dict[int, list[float]] = {}
        rel_rows: dict[int, list[float]] = {}
        by_name_of: dict[int, dict[str, int]] = {}
        shared_n: list[int] = []
        shared_d: list[int] = []
        one = 1 - EPS
        for t, n, f, rel in zip(idx.tolist(), sn.tolist(), frac.tolist(), srel.tolist()):
            nd = nd_list[n]
            if nd == 0:  # input over-commit: a shared task on a node without usable GPUs
                self.task_devices[t] = []
                continue
            free = free_rows.get(n)
            if free is None:
                free = free_rows[n] = self.dev_free[n, :nd].tolist()
                by_name_of[n] = {}
            groups = self.dev_group[n]
            by_name = by_name_of[n]
            names = self.task_gpu_groups[t]
            name = names[0] if names else None
            if name is not None and name in by_name:
                d = by_name[name]
            else:
                d = None
                if name is not None and name.isdigit() and int(name) < nd and int(name) not in groups \
                        and free[int(name)] >= one:
                    d = int(name)
                if d is None:
                    cand = [i for i in range(nd) if i not in groups and free[i] >= one]
                    if not cand:
                        cand = [i for i in range(nd) if free[i] >= f - EPS] or [0]
                    d = cand[0]
                if name is None:
                    name = self._new_group_name(n, d)
                old = groups.get(d)
                if old is not None and by_name.get(old) == d:
                    del by_name[old]
                groups[d] = name
                by_name[name] = d
                shared_n.append(n)
                shared_d.append(d)
            if not names:
                self.task_gpu_groups[t] = [groups[d]]
            free[d] -= f
            if rel:
                r = rel_rows.get(n)
                if r is None:
                    r = rel_rows[n] = self.dev_rel[n, :nd].tolist()
                r[d] += f
            self.task_devices[t] = [d]
        for n, row in free_rows.items():
            self.dev_free[n, :len(row)] = row
        for n, row in rel_rows.items():
            self.dev_rel[n, :len(row)] = row
        if shared_n:
            self.dev_shared[shared_n, shared_d] = True
        np.subtract.at(self.node_idle, sn, req)
        if srel.any():
            np.add.at(self.node_releasing, sn[srel], req[srel])
        self._charge_queues(idx, req)

    def _charge_queues(self, idx: np.ndarray, alloc: np.ndarray) -> None:
        """Add the allocation of the Running tasks among ``idx`` to their queues and ancestors."""
        run = self.task_state[idx] == _RUN
        if not run.any():
            return
        rt = idx[run]
        ra = alloc[run]
        jobs = self.task_job[rt]
        self._add_up(self.queue_alloc, self.job_queue_arr[jobs], ra)
        npre = ~self.job_preemptible_arr[jobs]
        if npre.any():
            self._add_up(self.queue_alloc_np, self.job_queue_arr[jobs[npre]], ra[npre])

    def _add_up(self, target: np.ndarray, leaf: np.ndarray, vals: np.ndarray) -> None:
        """``target[path(q)] += v`` for each ``(q, v)`` pair, in pair order (same float sums as a loop)."""
        if self._path_matrix is None:
            depth = max((len(p) for p in self.queue_path), default=0)
            m = np.full((self.Q, max(depth, 1)), self.Q, dtype=np.int64)  # row Q: a scratch row
            for q, p in enumerate(self.queue_path):
                m[q, :len(p)] = p
            self._path_matrix = m
        m = self._path_matrix
        rows = m[leaf].ravel()
        ext = np.zeros((self.Q + 1, target.shape[1]))
        ext[:self.Q] = target
        np.add.at(ext, rows, np.repeat(vals, m.shape[1], axis=0))
        target[:] = ext[:self.Q]

    def _new_group_name(self, n: int, d: int) -> str:
        used = set(self.dev_group[n].values())
        name = str(d)
        i = 1
        while name in used:
            name = f"{d}-{i}"
            i += 1
        return name

    # ------------------------------------------------------------------ basic queries
    def job_task_range(self, j: int) -> range:
        s = int(self.job_start[j])
        return range(s, s + int(self.job_count[j]))

    def job_queue(self, j: int) -> int:
        return int(self.job_queue_arr[j])

    def job_is_preemptible(self, j: int) -> bool:
        return bool(self.job_preemptible_arr[j])

    def job_active_tasks(self, j: int) -> list[int]:
        """Active allocated tasks (Running, Binding, Pipelined); Releasing ones are not active."""
        s, c = int(self.job_start[j]), int(self.job_count[j])
        st = self.task_state[s:s + c]
        return [s + i for i in np.flatnonzero((st == _RUN) | (st == _BIND) | (st == _PIPE))]

    def job_pending_tasks(self, j: int) -> list[int]:
        s, c = int(self.job_start[j]), int(self.job_count[j])
        if c == 1:
            return [s] if self.task_state[s] == _PEND else []
        return [s + i for i in np.flatnonzero(self.task_state[s:s + c] == _PEND)]

    def job_num_active(self, j: int) -> int:
        return int(self.job_num_active_arr[j])

    def untouched_jobs(self, jobs: np.ndarray) -> np.ndarray:
        """Mask over ``jobs``: every task Pending, no task priority, nothing active, and at least
        ``max(minAvailable, 1)`` tasks -- the jobs whose next tasks are simply their first
        ``minAvailable`` tasks in input order, which the vectorised paths of the job queue
        (first requests) and of allocate (gang grouping) rely on."""
        pend = self.task_state == _PEND
        npend = np.bincount(self.task_job[pend], minlength=self.J)[jobs]
        nprio = np.bincount(self.task_job[~np.isnan(np.asarray(self.tasks.priority, dtype=float))],
                            minlength=self.J)[jobs]
        cnt = self.job_count[jobs]
        m = self.job_min_available[jobs]
        out = ((npend == cnt) & (nprio == 0) & (self.job_num_active_arr[jobs] == 0)
               & (cnt >= np.where(m <= 0, 1, m)))
        if self.any_sg:  # a subgroup job's next tasks come from its tree, not its first tasks
            out &= ~self.job_has_sg[jobs]
        return out

    def node_idle_gpus(self, rows: np.ndarray | None = None) -> np.ndarray:
        """(N,) free GPUs per node; ``rows``: those nodes only (the same per-row sums)."""
        return self._node_gpus(self.dev_free, self.dra_free if self.D else None, rows)

    def node_releasing_gpus(self, rows: np.ndarray | None = None) -> np.ndarray:
        """(N,) releasing GPUs per node; ``rows``: those nodes only (the same per-row sums)."""
        return self._node_gpus(self.dev_rel, self.dra_rel if self.D else None, rows)

    def _node_gpus(self, dev: np.ndarray, dra: np.ndarray | None, rows: np.ndarray | None) -> np.ndarray:
        valid = self.dev_valid
        if rows is not None:
            dev, valid = dev[rows], valid[rows]
        out = np.maximum((dev * valid).sum(axis=1), 0.0) if self.G else np.zeros(valid.shape[0])
        if self.D and self.M and self.dc_gpu.any():  # free / releasing devices of gpu classes are GPUs too
            dvalid = self.dra_valid if rows is None else self.dra_valid[rows]
            if rows is not None:
                dra = dra[rows]
            out = out + ((dra[:, self.dc_gpu] >= 1 - EPS) & dvalid[:, self.dc_gpu]).sum(axis=(1, 2))
        return out

    def node_idle_devices(self) -> np.ndarray:
        """(N,) GPU devices with nothing on them: the output's ``idleGpus`` (contract "Statuses").

        KAI counts whole devices (``node_info.addSharedGPUTaskResourcesPerPodGroup``: a shared
        device leaves the idle vector with its first fraction and returns with its last), unlike
        :meth:`node_idle_gpus`, which adds free fractions (KAI ``GetSumOfIdleGPUs``, what the
        victim search's GPU filter and consolidation's "enough GPUs" use)."""
        one = 1 - EPS
        out = ((self.dev_free >= one) & self.dev_valid).sum(axis=1).astype(float) if self.G else np.zeros(self.N)
        if self.D and self.M and self.dc_gpu.any():
            out = out + ((self.dra_free[:, self.dc_gpu] >= one) & self.dra_valid[:, self.dc_gpu]).sum(axis=(1, 2))
        return out

    def node_releasing_devices(self) -> np.ndarray:
        """(N,) GPU devices whose every task is releasing (and not yet promised to a pipelined task):
        the output's ``releasingGpus``. A shared device counts once all its fractions are releasing
        (KAI ``addSharedGPUTaskResourcesPerPodGroup``: ``UsedSharedGPUsMemory ==
        ReleasingSharedGPUsMemory``), and stops counting once a fraction is pipelined onto it."""
        if self.G:
            rel, free = self.dev_rel, self.dev_free
            out = ((rel > EPS) & (free + rel >= 1 - EPS) & self.dev_valid).sum(axis=1).astype(float)
        else:
            out = np.zeros(self.N)
        if self.D and self.M and self.dc_gpu.any():
            out = out + ((self.dra_rel[:, self.dc_gpu] >= 1 - EPS) & self.dra_valid[:, self.dc_gpu]).sum(axis=(1, 2))
        return out

    # ------------------------------------------------------------------ DRA claims
    @property
    def has_dra_gpus(self) -> bool:
        """Some device class counts as gpu and some node offers devices (node order counts them)."""
        return bool(self.D and self.M and self.dc_gpu.any())

    def dra_gpu_whole(self, rows) -> np.ndarray:
        """Per node of ``rows``: devices of gpu classes that are free or releasing (not promised)."""
        g = self.dc_gpu
        return ((self.dra_free[rows][:, g] + self.dra_rel[rows][:, g] >= 1 - EPS)
                & self.dra_valid[rows][:, g]).sum(axis=(1, 2)).astype(float)

    def dra_gpu_whole_one(self, n: int) -> float:
        g = self.dc_gpu
        return float(((self.dra_free[n, g] + self.dra_rel[n, g] >= 1 - EPS) & self.dra_valid[n, g]).sum())

    def dra_query_args(self, t: int) -> tuple:
        """The DRA arguments of the compiled shape-index query (``kernels.node_index.query_whole_dra``)
        for task t: ``(gcap, dgpu, claims, dra_free, dra_rel)``: the nodes' GPU capacity and the gpu
        classes when the cluster has DRA GPUs (both empty otherwise), the task's claims per class
        (empty: none) and the state's DRA device rows (the kernels read devices a node does not
        have as 0 free, 0 releasing, which is what these rows hold there)."""
        fixed = self.__dict__.get("_dra_fixed")
        if fixed is None:
            if self.has_dra_gpus:
                fixed = (np.ascontiguousarray(self.node_capacity[:, GPU], dtype=np.float64),
                         np.ascontiguousarray(self.dc_gpu, dtype=np.bool_))
            else:
                fixed = (np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.bool_))
            self._dra_fixed = fixed
        claims = (np.ascontiguousarray(self.task_claims[t], dtype=np.int64) if self._claims_list[t]
                  else np.zeros(0, dtype=np.int64))
        return fixed[0], fixed[1], claims, self.dra_free, self.dra_rel

    def claims_fit(self, t: int, n: int) -> tuple[bool, bool]:
        """``(on free devices, on free + releasing devices)``: every claim of task t fits node n."""
        fi = fa = True
        one = 1 - EPS
        free, rel = self.dra_free[n], self.dra_rel[n]
        row = self.task_claims[t]
        for c in np.flatnonzero(row).tolist():
            k = int(row[c])
            m = int(self.node_dra[n, c])
            if m < k:
                return False, False
            fr = free[c, :m].tolist()
            nf = sum(1 for x in fr if x >= one)
            if nf < k:
                fi = False
                rl = rel[c, :m].tolist()
                if sum(1 for x, y in zip(fr, rl) if x + y >= one) < k:
                    return False, False
        return fi, fa

    def claims_fit_rows(self, t: int, rows) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`claims_fit` over ``rows`` (a slice or an index array), vectorised."""
        row = self.task_claims[t]
        cls = np.flatnonzero(row)
        free = self.dra_free[rows][:, cls]  # (R, C, M)
        rel = self.dra_rel[rows][:, cls]
        valid = self.dra_valid[rows][:, cls]
        need = row[cls][None, :]
        idle = (((free >= 1 - EPS) & valid).sum(axis=2) >= need).all(axis=1)
        any_ = (((free + rel >= 1 - EPS) & valid).sum(axis=2) >= need).all(axis=1)
        return idle, any_ | idle

    def choose_claims(self, t: int, n: int, pipelined: bool) -> dict[int, list[int]] | None:
        """Devices of node n for every claim of task t (all or nothing), or None: free devices in
        index order; pipelined: free ones first, then devices whose only load is releasing."""
        one = 1 - EPS
        free, rel = self.dra_free[n], self.dra_rel[n]
        row = self.task_claims[t]
        out: dict[int, list[int]] = {}
        for c in np.flatnonzero(row).tolist():
            k = int(row[c])
            m = int(self.node_dra[n, c])
            fr = free[c, :m].tolist()
            ok = [d for d in range(m) if fr[d] >= one]
            if pipelined and len(ok) < k:
                rl = rel[c, :m].tolist()
                ok += [d for d in range(m) if fr[d] < one and fr[d] + rl[d] >= one]
            if len(ok) < k:
                return None
            out[c] = ok[:k]
        return out

    def claims_text(self, t: int) -> str:
        """A task's claims in words: ``4 gpu.nvidia.com, 1 compute-domain.nvidia.com``."""
        names = self.snap.device_classes.names
        row = self.task_claims[t]
        return ", ".join(f"{int(row[c])} {names[c]}" for c in np.flatnonzero(row).tolist())

    def _shared_fraction(self, t: int, n: int) -> float:
        if self.task_is_mem[t]:
            m = self.node_gpu_memory[n]
            return float(self.task_gpu_memory[t] / m) if m > 0 else np.inf
        return float(self.task_request[t, GPU])

    def task_request_on_node(self, t: int, n: int) -> np.ndarray:
        r = self.task_request[t].copy()
        if self.task_is_mem[t]:
            r[GPU] = self._shared_fraction(t, n)
        return r

    def selector_mask(self, key: tuple) -> np.ndarray:
        """(N,) bool: nodes whose labels match every ``(label, value)`` of ``key``."""
        m = self._selector_cache.get(key)
        if m is None:
            labels = self.nodes.labels
            m = np.fromiter(
                (all((lab or {}).get(k) == v for k, v in key) for lab in labels), dtype=bool, count=self.N
            )
            self._selector_cache[key] = m
        return m

    def label_values(self, label: str) -> list[str | None]:
        return [(lab or {}).get(label) for lab in self.nodes.labels]

    # ------------------------------------------------------------------ feasibility
    def fit_masks(self, t: int, nodes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(idle_ok, any_ok)``: nodes where task t fits on free resources / on free + releasing."""
        idle_ok, any_ok = self.fit_rows(t, slice(None))
        if nodes is not None:
            idle_ok &= nodes
            any_ok &= nodes
        return idle_ok, any_ok

    def fit_one(self, t: int, n: int) -> tuple[bool, bool]:
        """:meth:`fit_masks` for one node, in plain Python (cheaper than numpy for a few nodes)."""
        if not self.node_schedulable[n]:
            return False, False
        key = self.task_selector_key[t]
        if key and not self.selector_mask(key)[n]:
            return False, False
        req = self.task_request[t]
        rc, rm = float(req[CPU]), float(req[MEM])
        ic, im = float(self.node_idle[n, CPU]), float(self.node_idle[n, MEM])
        lc, lm = float(self.node_releasing[n, CPU]), float(self.node_releasing[n, MEM])
        fi = ic >= rc - EPS and im >= rm - EPS
        fa = ic + lc >= rc - EPS and im + lm >= rm - EPS
        if not fa:
            return False, False
        nd = int(self.node_devices[n])
        if self.task_is_shared[t]:
            if nd == 0:
                return False, False
            f = self._shared_fraction(t, n)
            if f > 1 + EPS:
                return False, False
            free = self.dev_free[n, :nd].tolist()
            rel = self.dev_rel[n, :nd].tolist()
            fi = fi and any(x >= f - EPS for x in free)
            fa = fi or any(x + y >= f - EPS for x, y in zip(free, rel))
        elif self.task_whole[t] > 0:
            k = int(self.task_whole[t])
            free = self.dev_free[n, :nd].tolist()
            rel = self.dev_rel[n, :nd].tolist()
            fi = fi and sum(1 for x in free if x >= 1 - EPS) >= k
            fa = fi or sum(1 for x, y in zip(free, rel) if x + y >= 1 - EPS) >= k
        if self._claims_list[t]:
            ci, ca = self.claims_fit(t, n)
            fi = fi and ci
            fa = (fa or fi) and ca
        return fi, fa or fi

    def fit_rows(self, t: int, rows) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`fit_masks` restricted to ``rows`` (a slice or an index array of nodes)."""
        if not isinstance(rows, slice) and len(rows) <= 4:
            pairs = [self.fit_one(t, int(n)) for n in rows]
            return (np.fromiter((p[0] for p in pairs), bool, len(pairs)),
                    np.fromiter((p[1] for p in pairs), bool, len(pairs)))
        base = self.node_schedulable[rows]
        key = self.task_selector_key[t]
        if key:
            base = base & self.selector_mask(key)[rows]
        req = self.task_request[t]
        idle, rel = self.node_idle[rows], self.node_releasing[rows]
        idle_ok = base & (idle[:, CPU] >= req[CPU] - EPS) & (idle[:, MEM] >= req[MEM] - EPS)
        any_ok = base & (idle[:, CPU] + rel[:, CPU] >= req[CPU] - EPS) & (idle[:, MEM] + rel[:, MEM] >= req[MEM] - EPS)
        if self.task_is_shared[t]:
            if self.G == 0:
                z = np.zeros(idle_ok.shape[0], bool)
                return z, z.copy()
            if self.task_is_mem[t]:
                gm = self.node_gpu_memory[rows]
                with np.errstate(divide="ignore"):
                    f = np.where(gm > 0, self.task_gpu_memory[t] / np.maximum(gm, EPS), np.inf)
                f = np.where(f <= 1 + EPS, f, np.inf)
                fcol = f[:, None]
            else:
                fcol = req[GPU]
            free = self.dev_free[rows]
            valid = self.dev_valid[rows]
            idle_ok &= ((free >= fcol - EPS) & valid).any(axis=1)
            any_ok &= ((free + self.dev_rel[rows] >= fcol - EPS) & valid).any(axis=1)
        elif self.task_whole[t] > 0:
            k = self.task_whole[t]
            if self.G == 0:
                z = np.zeros(idle_ok.shape[0], bool)
                return z, z.copy()
            free = self.dev_free[rows]
            valid = self.dev_valid[rows]
            whole_idle = ((free >= 1 - EPS) & valid).sum(axis=1)
            whole_any = ((free + self.dev_rel[rows] >= 1 - EPS) & valid).sum(axis=1)
            idle_ok &= whole_idle >= k
            any_ok &= whole_any >= k
        if self._claims_list[t]:
            ci, ca = self.claims_fit_rows(t, rows)
            idle_ok &= ci
            any_ok &= ca
        return idle_ok, any_ok | idle_ok

    def fits_on_node(self, t: int, n: int) -> tuple[bool, bool]:
        """Scalar ``(fits_idle, fits_idle_or_releasing)`` for one node (no selector/schedulable check)."""
        req = self.task_request_on_node(t, n)
        idle, rel = self.node_idle[n], self.node_releasing[n]
        fi = idle[CPU] >= req[CPU] - EPS and idle[MEM] >= req[MEM] - EPS
        fa = idle[CPU] + rel[CPU] >= req[CPU] - EPS and idle[MEM] + rel[MEM] >= req[MEM] - EPS
        if self.task_is_shared[t] or self.task_whole[t] > 0:
            fi = fi and self.choose_devices(t, n, pipelined=False) is not None
            fa = fa and (fi or self.choose_devices(t, n, pipelined=True) is not None)
        if self._claims_list[t]:
            ci, ca = self.claims_fit(t, n)
            fi = fi and ci
            fa = fa and ca
        return bool(fi), bool(fa or fi)

    def choose_devices(self, t: int, n: int, pipelined: bool, spread: bool | None = None) -> list[int] | None:
        """Devices of node n for task t, or None if they do not fit (free only, or free + releasing).

        Shared requests pick one device: binpack prefers the most used device that fits (counting
        releasing usage as used, so a request is pipelined onto a device being released before a
        fresh device is opened, as KAI's GPU-sharing order does); spread prefers the emptiest.
        Whole requests take fully free devices (pipelined: devices whose only load is releasing).
        """
        nd = int(self.node_devices[n])
        if nd == 0:
            return [] if (not self.task_is_shared[t] and self.task_whole[t] == 0) else None
        if not self._shared_list[t]:
            k = int(self.task_whole[t])
            if k == 0:
                return []
            # whole devices: the kernel compiled callers use too (fully free first when pipelined)
            out = np.empty(min(k, nd), dtype=np.int64)
            if _devices_k.choose_whole(self.dev_free, self.dev_rel, int(n), nd, k, bool(pipelined), out) < 0:
                return None
            return out.tolist()
        # plain Python on the node's few devices (same sums and comparisons as numpy, elementwise)
        free = self.dev_free[n, :nd].tolist()
        if spread is None:
            spread = self.config.placement.get("gpu", "binpack") == "spread"
        f = self._shared_fraction(t, n)
        if not math.isfinite(f) or f > 1 + EPS:
            return None
        lo = f - EPS
        if pipelined:
            rel = self.dev_rel[n, :nd].tolist()
            ok = [d for d in range(nd) if free[d] + rel[d] >= lo]
        else:
            ok = [d for d in range(nd) if free[d] >= lo]
        if not ok:
            return None
        # releasing load counts as occupied (occupied = 1 - free); the first in
        # (occupied, device) order for spread, (-occupied, device) for binpack. The device
        # choice precedes the bind/pipeline decision in pipelined mode too.
        if spread:
            return [min(ok, key=lambda d: (1.0 - free[d], d))]
        return [min(ok, key=lambda d: (-(1.0 - free[d]), d))]

    # ------------------------------------------------------------------ journal
    def checkpoint(self) -> tuple[int, int]:
        return (len(self._journal), len(self.events))

    def rollback(self, cp: tuple[int, int]) -> None:
        jlen, elen = cp
        j = self._journal
        hi = len(j)
        if jlen < self._protect_len and hi > jlen:
            # undoing changes that existed when a failure was cached: resources may be freer now
            self.resources_freed += 1
            self._protect_len = jlen
        if hi > jlen:
            # numeric part in one compiled replay, with every undone entry's node appended to the change
            # log in the same backward order (the numeric entries hold the same node as the object half:
            # ``journal.record`` writes it, ``Simulation._run_compiled`` builds the object half from it),
            # then the object part in that order (every field is restored by assignment, so the split
            # gives the same state)
            self._undo_logged(jlen, hi)
            tg = self.task_gpu_groups
            G = self.G
            for t, n, groups, gmap, dra in reversed(j[jlen:hi]):
                tg[t] = groups
                if n >= 0:
                    if gmap is not None:
                        self.dev_group[n] = gmap
                        if G:
                            row = self.dev_shared[n]
                            row[:] = False
                            for d in gmap:  # (a few devices: cheaper than a fancy index)
                                if d < G:
                                    row[d] = True
                    if dra is not None:
                        self.dra_free[n], self.dra_rel[n] = dra[2]
                if dra is not None:
                    self.task_dra[t], self.task_dra_take[t] = dra[0], dra[1]
            del j[jlen:]
        del self.events[elen:]

    #: ``False``: every rollback calls :func:`kernels.journal.undo_logged` through its dispatcher (tests)
    undo_entry_point = True

    @property
    def undo_entry_calls(self) -> int:
        """Rollbacks made through the compiled version's entry point (tests)."""
        call = self.__dict__.get("_undo_call")
        return call.calls if call is not None else 0

    def _undo_logged(self, lo: int, hi: int) -> None:
        """:func:`kernels.journal.undo_logged` of entries ``lo:hi`` into the change log. Every call passes
        the same argument tuple (the range in ``_undo_io``; rebuilt when the entry arrays or the log's
        buffer were replaced), so after one call through the dispatcher the next ones call the compiled
        version's entry point (:class:`kernels.victim_run.EntryCall`, as ``ScenarioArrays.call`` does)."""
        nl = self.node_log
        buf = nl.reserve(hi - lo)
        args = self.__dict__.get("_undo_args")
        if args is None or args[-1] is not buf or args[-2] is not self._jf or args[-3] is not self._ji:
            io = np.zeros(4, dtype=np.int64)
            args = self._undo_args = (io, *self._jarrays[1:], self._ji, self._jf, buf)
            if "_undo_call" not in self.__dict__:
                self._undo_call = EntryCall()
            self._undo_call.forget()
        io = args[0]
        io[0] = lo
        io[1] = hi
        io[2] = nl.n
        self._undo_call(_journal_k.undo_logged, args, self.undo_entry_point)
        nl.set_len(int(io[3]))

    def mark_failure_point(self) -> None:
        """Called when a failure is cached: a later rollback below this point bumps ``resources_freed``."""
        self._protect_len = len(self._journal)

    def _record(self, t: int, n: int) -> None:
        """Journal task t / node n before a mutation, and bump the change trackers.

        Every mutation of a task, its node, devices or its queue's allocation must call this first
        (also outside this module): the undo journal and the incremental caches rely on it.

        The numeric part (task, node and device rows, the task's devices and device takes, the
        queue path's allocations, counters) goes to the entry arrays (:func:`kernels.journal.record`);
        the object part keeps a reference to the task's gpuGroup list (this module only ever
        replaces such an entry, never mutates one in place); the node's gpuGroup map is copied only
        for shared-GPU tasks, the only ones whose placement adds a group.
        """
        jo = self._journal
        if jo is None:
            return
        i = self._journal_room()
        a = self._jarrays
        _journal_k.record(i, t, n, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12],
                          a[13], a[14], a[15], a[16], a[17], a[18], self._ji, self._jf)
        self._record_objects(t, n)

    def _record_objects(self, t: int, n: int) -> None:
        if n >= 0:
            self.node_log.append(n)
            gmap = dict(self.dev_group[n]) if self._shared_list[t] else None
        else:
            gmap = None
        # DRA: the task's held devices and (on a node) the node's device rows, for tasks with claims
        dra = None
        if self._claims_list[t]:
            dra = (self.task_dra[t], self.task_dra_take[t],
                   (self.dra_free[n].copy(), self.dra_rel[n].copy()) if n >= 0 else None)
        self._journal.append((t, n, self.task_gpu_groups[t], gmap, dra))

    # ------------------------------------------------------------------ mutations
    def _charge_claims(self, t: int, n: int, dra: dict[int, list[int]], pipelined: bool) -> None:
        """Take the claimed devices ``dra`` on node n (pipelined: what is releasing first, recorded)."""
        free, rel = self.dra_free[n], self.dra_rel[n]
        takes: dict[int, list[float]] | None = {} if pipelined else None
        for c, devs in dra.items():
            if pipelined:
                tk = []
                for d in devs:
                    x = min(max(rel[c, d], 0.0), 1.0)
                    rel[c, d] -= x
                    free[c, d] -= 1.0 - x
                    tk.append(x)
                takes[c] = tk
            else:
                for d in devs:
                    free[c, d] -= 1.0
        self.task_dra[t] = {c: list(v) for c, v in dra.items()}
        self.task_dra_take[t] = takes

    def _charge(self, t: int, n: int, devs: list[int], pipelined: bool, releasing: bool = False) -> None:
        """Take the task's resources on node n (free first for binds; releasing first for pipelines)."""
        req = self.task_request_on_node(t, n)
        # (an over-committed input task keeps its full request even if fewer devices were free)
        self.task_alloc[t] = req
        if pipelined:
            take = np.minimum(np.maximum(self.node_releasing[n], 0.0), req)
            self.node_releasing[n] -= take
            self.node_idle[n] -= req - take
            self.task_rel_take[t] = take
        else:
            self.node_idle[n] -= req
            if releasing:
                self.node_releasing[n] += req
        dev_take = []
        if devs:
            per = self._shared_fraction(t, n) if self.task_is_shared[t] else 1.0
            drel, dfree = self.dev_rel[n], self.dev_free[n]  # row views: cheaper element access
            for d in devs:
                if pipelined:
                    take = min(max(drel[d], 0.0), per)
                    drel[d] -= take
                    dfree[d] -= per - take
                    dev_take.append(take)
                else:
                    dfree[d] -= per
                    if releasing:
                        drel[d] += per
        self.task_dev_take[t] = dev_take
        self.task_devices[t] = devs

    def place(self, t: int, n: int, pipelined: bool = False, devices: Sequence[int] | None = None,
              claims: dict[int, list[int]] | None = None) -> None:
        """Place pending task t on node n: Binding on free resources, or Pipelined on releasing ones.
        ``devices``: GPU devices (chosen when None); ``claims``: DRA devices per claimed class
        (chosen when None, for a task with claims)."""
        if self.task_state[t] != _PEND:
            raise ValueError(f"task {self.tasks.names[t]} is not pending")
        if devices is None:
            devices = self.choose_devices(t, n, pipelined)
            if devices is None:
                raise ValueError(f"task {self.tasks.names[t]} does not fit node {self.nodes.names[n]}")
        if self._claims_list[t] and claims is None:
            claims = self.choose_claims(t, n, pipelined)
            if claims is None:
                raise ValueError(f"the claims of task {self.tasks.names[t]} ({self.claims_text(t)}) do not fit "
                                 f"node {self.nodes.names[n]}")
        devs = list(devices)
        if self.fast_paths and self._journal is not None and claims is None and not self._shared_list[t] and not self._claims_list[t]:
            self._place_fast(t, n, devs, pipelined)
            return
        self._record(t, n)
        self._charge(t, n, devs, pipelined)
        if claims is not None:
            self._charge_claims(t, n, claims, pipelined)
        if self.task_is_shared[t]:
            groups = []
            for d in devs:
                name = self.dev_group[n].get(d)
                if name is None:
                    name = self._new_group_name(n, d)
                    self.dev_group[n][d] = name
                    self.dev_shared[n, d] = True
                groups.append(name)
            self.task_gpu_groups[t] = groups
        else:
            self.task_gpu_groups[t] = []
        self.task_state[t] = _PIPE if pipelined else _BIND
        self.task_node[t] = n
        j = int(self.task_job[t])
        self._queues_add(j, self.task_alloc[t], 1)
        self.job_num_active_arr[j] += 1

    def _place_fast(self, t: int, n: int, devs: list[int], pipelined: bool) -> None:
        """:meth:`place` of a whole-GPU / CPU-only task without DRA claims: journal entry, node,
        device, task and queue sums in one compiled call (:func:`kernels.journal.place`; the same
        float operations as :meth:`_charge`)."""
        i = self._journal_room()
        a = self._jarrays
        _journal_k.place(i, t, n, pipelined, self._preempt_list[self._task_job_list[t]], a[0], a[1], a[2], a[3],
                         a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17],
                         a[18], self._ji, self._jf, self.task_request,
                         np.array(devs, dtype=np.int64) if devs else _NO_DEVS, len(devs))
        self._record_objects(t, n)
        if self.task_gpu_groups[t]:
            self.task_gpu_groups[t] = []

    def _queues_add(self, j: int, alloc: np.ndarray, sign: int) -> None:
        """Add (``sign`` 1) or take back (-1) ``alloc`` on job j's queue path, non-preemptible jobs
        on both allocation rows in one op. Row by row: a path has no repeated queue, so these are
        the same sums as one fancy-indexed update, at a fraction of its cost."""
        qa = self.queue_alloc if self.job_preemptible_arr[j] else self._queue_alloc_both
        if sign > 0:
            for q in self._job_path_info[j][0]:
                qa[q] += alloc
        else:
            for q in self._job_path_info[j][0]:
                qa[q] -= alloc

    def mark_pipelined(self, t: int) -> None:
        """Binding -> Pipelined without moving resources (KAI pipelines a whole job once one of its
        tasks had to be pipelined; the task keeps what it took from free resources)."""
        if self.task_state[t] != _BIND:
            raise ValueError(f"task {self.tasks.names[t]} is not binding")
        self._record(t, int(self.task_node[t]))
        self.task_state[t] = _PIPE
        self.task_rel_take[t] = 0.0
        self.task_dev_take[t] = [0.0] * len(self.task_devices[t])
        if self._claims_list[t] and self.task_dra[t] is not None:
            self.task_dra_take[t] = {c: [0.0] * len(v) for c, v in self.task_dra[t].items()}

    def takes_releasing(self, t: int) -> bool:
        """Whether placed task t holds anything that a Releasing task is still giving back on its
        node (resources, a share of a device, a claimed device): what makes a placement wait."""
        if float(self.task_rel_take[t].max()) > EPS:
            return True
        if any(x > EPS for x in self.task_dev_take[t]):
            return True
        takes = self.task_dra_take[t]
        return bool(takes) and any(x > EPS for v in takes.values() for x in v)

    def mark_binding(self, t: int) -> None:
        """Pipelined -> Binding in place, for a task that took nothing releasing (all of it was free).

        The victim search pipelines every placement it simulates (KAI ``isPipelineOnly``); when
        the victims it finally un-places were placed earlier in this same cycle (allocate), their
        share comes back free, not releasing, and nothing is left to wait for."""
        if self.task_state[t] != _PIPE:
            raise ValueError(f"task {self.tasks.names[t]} is not pipelined")
        if self.takes_releasing(t):
            raise ValueError(f"task {self.tasks.names[t]} waits for releasing resources")
        self._record(t, int(self.task_node[t]))
        self.task_state[t] = _BIND
        self.task_rel_take[t] = 0.0
        self.task_dev_take[t] = []
        if self._claims_list[t] and self.task_dra[t] is not None:
            self.task_dra_take[t] = None

    def evict(self, t: int, for_job: int | str | None = None, reason: str = "Evicted",
              message: str | None = None) -> None:
        """Give up an active task: Running -> Releasing; Binding/Pipelined (this cycle) -> Pending.

        A task that was Running in the input and is Pipelined now was moved (evicted, then
        pipelined elsewhere, e.g. by consolidation): evicting it gives back what the new node gave
        and leaves it Releasing on its original node, where its pod still runs.
        """
        s = int(self.task_state[t])
        if s not in ACTIVE_STATES:
            raise ValueError(f"task {self.tasks.names[t]} is not active ({TaskState(s).label})")
        n = int(self.task_node[t])
        if self.fast_paths and self._journal is not None and not (
                s == _PIPE and self._input_state[t] == _RUN and self._input_node[t] >= 0):
            self._evict_fast(t, n, s)
            if self._claims_list[t]:
                self._release_claims(t, n, s)
        else:
            self._evict_general(t, n, s)
        self.resources_freed += 1
        if for_job is not None or message is not None:
            jn = self.jobs.names[self._task_job_list[t]]
            ev = {"job": jn, "reason": reason,
                  "message": message or f"task {self.tasks.names[t]} evicted"}
            ev["task"] = self.tasks.names[t]
            if for_job is not None:
                ev["victimOf"] = for_job if isinstance(for_job, str) else self.jobs.names[int(for_job)]
            self.events.append(ev)

    def evict_many(self, tasks: Sequence[int]) -> None:
        """``evict(t)`` for each of ``tasks`` in order (no events): one compiled call
        (:func:`kernels.journal.evict_many`) for each run of at least ``evict_batch_min`` tasks in a
        row that are active and were not moved (claimed DRA devices given back in Python, task by
        task), the others one by one. Same journal entries, same state, same ``node_log``."""
        ts = list(tasks)
        if len(ts) < self.evict_batch_min:
            for t in ts:
                self.evict(t)
            return
        st = self.task_state[ts].tolist()
        nodes = self.task_node[ts].tolist()
        if not (self.fast_paths and self._journal is not None and len(set(ts)) == len(ts)):
            for t in ts:
                self.evict(t)
            return
        inp, inn = self._input_state, self._input_node
        ok = [s in ACTIVE_STATES and not (s == _PIPE and inp[t] == _RUN and inn[t] >= 0) for t, s in zip(ts, st)]
        if all(ok):
            self._evict_batch(ts, nodes, st)
            return
        # (evicting a task changes no other task's state or node: ``st`` / ``nodes`` stay valid)
        k, i, m = len(ts), 0, self.evict_batch_min
        while i < k:
            e = i
            while e < k and ok[e]:
                e += 1
            if e - i >= m:
                self._evict_batch(ts[i:e], nodes[i:e], st[i:e])
            else:
                for t in ts[i:e]:
                    self.evict(t)
            if e < k:
                self.evict(ts[e])
            i = e + 1

    def _evict_batch(self, ts: list[int], nodes: list[int], st: list[int]) -> None:
        """:meth:`evict_many` of active tasks that were not moved (no repeats): the numeric half in one
        compiled call, then task by task in order the journal's object half and the claimed devices
        (:meth:`_release_claims`; the kernel leaves the DRA rows alone, so each entry records them as
        the one-by-one eviction would)."""
        k = len(ts)
        i0 = len(self._journal)
        self._journal_room_for(i0 + k)
        a = self._jarrays
        _journal_k.evict_many(i0, np.asarray(ts, dtype=np.int64), np.asarray(nodes, dtype=np.int64),
                              self.task_is_shared, self.job_preemptible_arr, a[0], a[1], a[2], a[3], a[4], a[5], a[6],
                              a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18],
                              self._ji, self._jf)
        tg, cl = self.task_gpu_groups, self._claims_list
        for t, n, s in zip(ts, nodes, st):
            self._record_objects(t, n)
            if s != _RUN and tg[t]:
                tg[t] = []
            if cl[t]:
                self._release_claims(t, n, s)
        self.resources_freed += k

    def unevict_fast(self, t: int) -> bool:
        """``simulation.unevict`` of a Releasing task without DRA claims in one compiled call
        (:func:`kernels.journal.unevict`): back to Running on its node if what it releases is not
        promised to a pipelined task; False (nothing changed) otherwise."""
        i = self._journal_room()
        a = self._jarrays
        if not _journal_k.unevict(i, t, self._preempt_list[self._task_job_list[t]], self._shared_list[t], a[0], a[1],
                                  a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14],
                                  a[15], a[16], a[17], a[18], self._ji, self._jf):
            return False
        self._record_objects(t, int(self.task_node[t]))
        return True

    def _evict_fast(self, t: int, n: int, s: int) -> None:
        """:meth:`evict` of a task that was not moved: journal entry, node, device, task and queue
        sums in one compiled call (:func:`kernels.journal.evict`; the same float operations as
        :meth:`_evict_general`), the task's gpuGroup list here; a task with DRA claims then gives
        back its devices (:meth:`_release_claims`)."""
        i = self._journal_room()
        a = self._jarrays
        _journal_k.evict(i, t, n, self._preempt_list[self._task_job_list[t]], self._shared_list[t], a[0], a[1], a[2],
                         a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16],
                         a[17], a[18], self._ji, self._jf)
        self._record_objects(t, n)
        if s != _RUN and self.task_gpu_groups[t]:
            self.task_gpu_groups[t] = []

    def _release_claims(self, t: int, n: int, s: int) -> None:
        """The DRA half of :meth:`evict` of a task with claims that was not moved, after the compiled
        numeric half (the journal entry, with the DRA rows as they were, is written): the same steps
        as :meth:`_evict_general` - Running: its devices become releasing; Binding: free again;
        Pipelined: what it took from releasing back to releasing, the rest to free - and it holds no
        devices unless it is Releasing now."""
        dra = self.task_dra[t]
        self._give_back_dra(t, n, s, dra)
        if s != _RUN and dra is not None:
            self.task_dra[t] = None

    def _give_back_dra(self, t: int, n: int, s: int, dra: dict[int, list[int]] | None) -> None:
        """What an eviction of task t from state ``s`` gives back of its DRA devices ``dra`` (class ->
        devices of node n), for both evictions (:meth:`_release_claims`, :meth:`_evict_general`):
        Running: they become releasing; Binding: free again; Pipelined: what it took from releasing
        back to releasing, the rest to free (its record of those takes is then dropped)."""
        if not dra:
            return
        if s == _RUN:
            rrel = self.dra_rel[n]
            for c, ds in dra.items():
                for d in ds:
                    rrel[c, d] += 1.0
        elif s == _BIND:
            rfree = self.dra_free[n]
            for c, ds in dra.items():
                for d in ds:
                    rfree[c, d] += 1.0
        else:
            rrel, rfree = self.dra_rel[n], self.dra_free[n]
            takes = self.task_dra_take[t] or {}
            for c, ds in dra.items():
                for d, x in zip(ds, takes.get(c, [0.0] * len(ds))):
                    rrel[c, d] += x
                    rfree[c, d] += 1.0 - x
            self.task_dra_take[t] = None

    def _evict_general(self, t: int, n: int, s: int) -> None:
        """:meth:`evict` in Python: moved tasks, and while building (and with ``fast_paths`` off: the
        reference the tests compare the compiled evictions with)."""
        self._record(t, n)
        alloc = self.task_alloc[t].copy()
        devs = self.task_devices[t]
        per = (alloc[GPU] if self.task_is_shared[t] else 1.0)
        dra = self.task_dra[t] if self._claims_list[t] else None
        self._give_back_dra(t, n, s, dra)  # (its own arrays: where it runs among the rest does not matter)
        if s == _RUN:
            self.node_releasing[n] += alloc
            if devs:
                drel = self.dev_rel[n]  # row view: cheaper element access
                for d in devs:
                    drel[d] += per
            self.task_state[t] = _REL
        else:
            # undo a placement made in this cycle: return what it took
            if s == _BIND:
                self.node_idle[n] += alloc
                dfree = self.dev_free[n]
                for d in devs:
                    dfree[d] += per
            else:  # pipelined: give back exactly what it took from releasing and from free
                take = self.task_rel_take[t]
                self.node_releasing[n] += take
                self.node_idle[n] += alloc - take
                drel, dfree = self.dev_rel[n], self.dev_free[n]
                for d, dt in zip(devs, self.task_dev_take[t]):
                    drel[d] += dt
                    dfree[d] += per - dt
                self.task_rel_take[t] = 0.0
                self.task_dev_take[t] = []
            if s == _PIPE and self._input_state[t] == _RUN and self._input_node[t] >= 0:
                # a moved task (evicted, then pipelined elsewhere): its pod still runs on its
                # original node, whose share has been releasing since the first eviction
                a = int(self._input_node[t])
                self.task_state[t] = _REL
                self.task_node[t] = a
                self.task_devices[t] = self._input_tdev[t, :self._input_tndev[t]].tolist()
                self.task_gpu_groups[t] = self._input_groups[t]
                self.task_alloc[t] = self.task_request_on_node(t, a)
                if dra is not None:
                    self.task_dra[t] = self._input_dra[t]
            else:
                self.task_state[t] = _PEND
                self.task_node[t] = -1
                self.task_devices[t] = []
                self.task_gpu_groups[t] = []
                self.task_alloc[t] = 0.0
                if dra is not None:
                    self.task_dra[t] = None
        j = int(self.task_job[t])
        self._queues_add(j, alloc, -1)
        self.job_num_active_arr[j] -= 1

    def add_event(self, job: int | str, reason: str, message: str, task: int | str | None = None,
                  victim_of: int | str | None = None) -> None:
        ev = {"job": job if isinstance(job, str) else self.jobs.names[int(job)], "reason": reason, "message": message}
        if task is not None:
            ev["task"] = task if isinstance(task, str) else self.tasks.names[int(task)]
        if victim_of is not None:
            ev["victimOf"] = victim_of if isinstance(victim_of, str) else self.jobs.names[int(victim_of)]
        self.events.append(ev)

    # ------------------------------------------------------------------ queue capacity (spec a.7)
    def queue_over_capacity(self, q: int, req: np.ndarray, nonpreemptible: bool) -> str | None:
        """``None`` if ``req`` may be added to leaf q, else why not (limit / non-preemptible quota):
        the leaf first, then each ancestor; per queue its limit, then (non-preemptible jobs) its
        deserved quota; only requested resources count. The comparisons are one compiled call
        (:func:`kernels.scenario.over_capacity`), the message is built here."""
        r0, r1, r2 = req.tolist() if isinstance(req, np.ndarray) else (float(x) for x in req)
        if not (r0 > EPS or r1 > EPS or r2 > EPS):
            return None
        lims = self._lim_rows or self.queue_limit_arrays()
        code = _scenario_k.over_capacity(self._jpath, q, r0, r1, r2, nonpreemptible, lims[0], lims[1],
                                         self._queue_alloc_both)
        if code < 0:
            return None
        a, r, kind = code // 6, (code // 2) % 3, code % 2
        rq = (r0, r1, r2)[r]
        if kind == 0:
            used, cap = float(self.queue_alloc[a, r]), float(lims[0][a, r])
            return Reason(f"queue {self.queues.names[a]} is over its limit for {RES_NAMES[r]}: "
                          f"{fmt_amount(r, used)} used + {fmt_amount(r, rq)} requested > "
                          f"{fmt_amount(r, cap)}", PENDING_LIMIT)
        used, cap = float(self.queue_alloc_np[a, r]), float(lims[1][a, r])
        return Reason(f"queue {self.queues.names[a]} quota for non-preemptible jobs exceeded "
                      f"for {RES_NAMES[r]}: {fmt_amount(r, used)} used + "
                      f"{fmt_amount(r, rq)} requested > {fmt_amount(r, cap)} deserved", PENDING_QUOTA)

    def queue_limit_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(Q, 3) limits and deserved quotas with ``inf`` for unlimited (what the capacity kernel
        compares against; built once, both are fixed for the cycle)."""
        lims = self._lim_rows
        if lims is None:
            lims = self._lim_rows = (np.where(self.queue_limit == UNLIMITED, np.inf, self.queue_limit),
                                     np.where(self.queue_deserved == UNLIMITED, np.inf, self.queue_deserved))
        return lims

    def _path_limit(self, q: int) -> np.ndarray:
        c = self._path_cache_lim.get(q)
        if c is None:
            lim = self.queue_limit[self.queue_path[q]]
            c = self._path_cache_lim[q] = np.where(lim == UNLIMITED, np.inf, lim)
        return c

    def _path_deserved(self, q: int) -> np.ndarray:
        c = self._path_cache_des.get(q)
        if c is None:
            d = self.queue_deserved[self.queue_path[q]]
            c = self._path_cache_des[q] = np.where(d == UNLIMITED, np.inf, d)
        return c

    # ------------------------------------------------------------------ signatures
    def task_signature(self, t: int) -> tuple:
        sig = self._task_sig[t]
        if sig is None:
            r = self.task_request[t]
            sig = (float(r[GPU]), float(r[CPU]), float(r[MEM]), float(self.task_gpu_memory[t]),
                   self.task_selector_key[t])
            if self._claims_list[t]:  # DRA claims are part of the shape (only tasks that have some)
                sig = sig + (tuple(self.task_claims[t].tolist()),)
            self._task_sig[t] = sig
        return sig

    def job_signature(self, j: int, tasks: Iterable[int]) -> tuple:
        """Scheduling shape: queue, preemptibility, topology, sorted task shapes (cache key).

        A job with subgroups has a shape of its own (its tree decides where its tasks may go)."""
        if self._sg_list[j]:
            return (int(self.job_queue_arr[j]), bool(self.job_preemptible_arr[j]), ("subgroups", j), None,
                    tuple(sorted(self.task_signature(t) for t in tasks)), j)
        shapes = [self.task_signature(t) for t in tasks]
        if len(shapes) > 1:
            shapes.sort()
        # a required topology sticks to the domain of the job's running tasks: not shareable
        own = j if (self.jobs.topology_required[j] and self.job_num_active_arr[j] > 0) else -1
        return (
            int(self.job_queue_arr[j]), bool(self.job_preemptible_arr[j]),
            self.jobs.topology_required[j], self.jobs.topology_preferred[j], tuple(shapes), own,
        )
