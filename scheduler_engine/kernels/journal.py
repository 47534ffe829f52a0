"""The numeric half of :class:`~scheduler_engine.state.CycleState`'s undo journal, as arrays.

Every mutation of a task, its node or its queue path is preceded by a journal entry (``record``);
``undo`` replays entries backwards, restoring each copied value, so a rollback leaves the state
bitwise as it was (no arithmetic is undone: values are copied back). The object half (device /
gpuGroup / device-take lists, a node's gpuGroup map, DRA claims) stays a Python list beside it,
restored by the state in the same backward order; both halves restore by assignment, so splitting
them does not change the result.

Entry ``i`` (preallocated rows, grown by the state):

* ``ji[i]`` int64: ``t, j, state, node, n, num_active(j), ndev(t), ntake(t)`` - the task, its job,
  its state (a Releasing input task that is momentarily Pending while it is pipelined elsewhere is
  recorded as Releasing) and node before the change, the node ``n`` whose rows were copied (-1:
  none), the job's count of active tasks, the task's device count and device-take count; then the
  task's device row ``tdev[t]`` (G).
* ``jf[i]`` float64: ``task_alloc[t]`` (3), ``task_rel_take[t]`` (3), node ``n``'s idle and
  releasing rows (6), its device rows ``dev_free[n]``, ``dev_rel[n]`` (G each), the task's
  device-take row ``ttake[t]`` (G), then the (2, 3) allocation rows of every queue on the job's
  path (``path_mat`` row of the job's leaf, -1 padded).

The task-device mirror: ``tdev`` (T, G) int64 holds task t's devices on its node in the order
they were chosen (``tndev[t]`` of them, the rest -1), ``ttake`` (T, G) float64 what a pipelined
task took from each device's releasing share (``tntake[t]`` entries, 0 or ``tndev[t]``; the rest
0.0). It is the state's only copy of both (``CycleState.task_devices`` / ``task_dev_take`` read
it), so kernels move devices as well as sums.

Room is left for the object-typed columns of subgroups and DRA: they are journaled by the state in
its Python list (DRA device rows included), which these kernels never touch.

``evict`` is :meth:`CycleState.evict` for a task without DRA claims that was not moved (Running ->
Releasing, or a placement of this cycle -> Pending): record, then the node, device, task and
queue sums in the order the Python code adds them (same float operations, elementwise).
``place`` / ``unevict`` likewise for ``CycleState.place`` of a whole-GPU / CPU-only task and for
``simulation.unevict`` (Releasing -> Running again); ``place_dev`` is ``place`` with a share per
device (a task sharing one GPU: its fraction on the node; its gpuGroup is the caller's).
"""
from __future__ import annotations

import numpy as np

from ..snapshot import TaskState
from . import leaf_kernel

_PEND = int(TaskState.PENDING)
_RUN = int(TaskState.RUNNING)
_REL = int(TaskState.RELEASING)
_BIND = int(TaskState.BINDING)
_PIPE = int(TaskState.PIPELINED)
FIXED = 12  # alloc (3) + rel_take (3) + node rows (6)
IFIXED = 8  # t, j, state, node, n, num_active, ndev, ntake
EPS = 1e-9


def width(G: int, depth: int) -> int:
    """Float columns of one entry for G devices per node and queue paths of ``depth`` levels."""
    return FIXED + 3 * G + 6 * depth


def iwidth(G: int) -> int:
    """Integer columns of one entry for G devices per node."""
    return IFIXED + G


@leaf_kernel
def record(i, t, n, input_state, task_state, task_node, task_job, job_queue, path_mat, num_active, job_version,
           queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev, ttake, tntake,
           ji, jf):
    """Write entry ``i`` for a change of task t (node n's rows copied when ``n >= 0``) and bump the
    job's and its queue path's change counters."""
    j = task_job[t]
    q = job_queue[j]
    job_version[j] += 1
    depth = path_mat.shape[1]
    for k in range(depth):
        a = path_mat[q, k]
        if a < 0:
            break
        queue_version[a] += 1
    st = np.int64(task_state[t])
    nd = task_node[t]
    if st == _PEND and nd >= 0 and input_state[t] == _RUN:
        st = _REL
    G = dev_free.shape[1]
    ji[i, 0] = t
    ji[i, 1] = j
    ji[i, 2] = st
    ji[i, 3] = nd
    ji[i, 4] = n
    ji[i, 5] = num_active[j]
    ji[i, 6] = tndev[t]
    ji[i, 7] = tntake[t]
    for d in range(G):
        ji[i, IFIXED + d] = tdev[t, d]
    for r in range(3):
        jf[i, r] = task_alloc[t, r]
        jf[i, 3 + r] = task_rel_take[t, r]
    if n >= 0:
        for x in range(2):
            for r in range(3):
                jf[i, 6 + 3 * x + r] = node_both[n, x, r]
        for d in range(G):
            jf[i, FIXED + d] = dev_free[n, d]
            jf[i, FIXED + G + d] = dev_rel[n, d]
    for d in range(G):
        jf[i, FIXED + 2 * G + d] = ttake[t, d]
    base = FIXED + 3 * G
    for k in range(depth):
        a = path_mat[q, k]
        if a < 0:
            break
        for x in range(2):
            for r in range(3):
                jf[i, base + 6 * k + 3 * x + r] = qab[a, x, r]


@leaf_kernel
def undo(lo, hi, task_state, task_node, task_job, job_queue, path_mat, num_active, job_version, queue_version,
         node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev, ttake, tntake, ji, jf):
    """Undo entries ``hi - 1`` down to ``lo`` (numeric part): copy every recorded value back."""
    G = dev_free.shape[1]
    depth = path_mat.shape[1]
    base = FIXED + 3 * G
    for i in range(hi - 1, lo - 1, -1):
        t = ji[i, 0]
        j = ji[i, 1]
        n = ji[i, 4]
        for r in range(3):
            task_rel_take[t, r] = jf[i, 3 + r]
        task_state[t] = ji[i, 2]
        task_node[t] = ji[i, 3]
        for r in range(3):
            task_alloc[t, r] = jf[i, r]
        tndev[t] = ji[i, 6]
        tntake[t] = ji[i, 7]
        for d in range(G):
            tdev[t, d] = ji[i, IFIXED + d]
            ttake[t, d] = jf[i, FIXED + 2 * G + d]
        if n >= 0:
            for x in range(2):
                for r in range(3):
                    node_both[n, x, r] = jf[i, 6 + 3 * x + r]
            for d in range(G):
                dev_free[n, d] = jf[i, FIXED + d]
                dev_rel[n, d] = jf[i, FIXED + G + d]
        q = job_queue[j]
        for k in range(depth):
            a = path_mat[q, k]
            if a < 0:
                break
            for x in range(2):
                for r in range(3):
                    qab[a, x, r] = jf[i, base + 6 * k + 3 * x + r]
            queue_version[a] += 1
        num_active[j] = ji[i, 5]
        job_version[j] += 1


@leaf_kernel
def undo_log(lo, hi, p, task_state, task_node, task_job, job_queue, path_mat, num_active, job_version,
             queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev, ttake, tntake,
             ji, jf, log):
    """A rollback's numeric half: :func:`undo` of entries ``hi - 1`` down to ``lo``, then each undone
    entry's node (``ji[i, 4]`` when ``>= 0``) in that backward order appended to the change log ``log``
    from ``p`` (room made by the caller); returns the log's new length. Python's rollback calls it
    through :func:`undo_logged`, the compiled victim search (:func:`.search.run_search`) directly."""
    undo(lo, hi, task_state, task_node, task_job, job_queue, path_mat, num_active, job_version, queue_version,
         node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev, ttake, tntake, ji, jf)
    for i in range(hi - 1, lo - 1, -1):
        n = ji[i, 4]
        if n >= 0:
            log[p] = n
            p += 1
    return p


@leaf_kernel
def undo_logged(io, task_state, task_node, task_job, job_queue, path_mat, num_active, job_version, queue_version,
                node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev, ttake, tntake, ji, jf,
                log):
    """:func:`undo_log` of entries ``io[0]:io[1]`` into the change log from ``io[2]``; ``io[3]``: the
    log's new length. ``CycleState.rollback`` calls it with the very same argument objects every time
    (the range in ``io``), so that it can call the compiled version's entry point instead of the
    dispatcher (typing 22 arguments, ~2-3 us per rollback), and the nodes need no numpy slicing."""
    io[3] = undo_log(io[0], io[1], io[2], task_state, task_node, task_job, job_queue, path_mat, num_active,
                     job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev,
                     tndev, ttake, tntake, ji, jf, log)


@leaf_kernel
def add_to_path(qab, path_mat, q, preemptible, a0, a1, a2):
    """Add (a0, a1, a2) to the allocation of every queue on leaf q's path: row 0 only for a
    preemptible job, rows 0 and 1 (non-preemptible allocation) otherwise. Eviction passes the
    negated amounts: ``x + (-a)`` is ``x - a`` bit for bit (IEEE subtraction is defined so)."""
    rows = 1 if preemptible else 2
    for k in range(path_mat.shape[1]):
        a = path_mat[q, k]
        if a < 0:
            break
        for x in range(rows):
            qab[a, x, 0] += a0
            qab[a, x, 1] += a1
            qab[a, x, 2] += a2


@leaf_kernel
def clear_devices(t, tdev, tndev):
    """Task t holds no devices (the row back to its -1 padding)."""
    for d in range(tndev[t]):
        tdev[t, d] = -1
    tndev[t] = 0


@leaf_kernel
def clear_takes(t, ttake, tntake):
    """Task t took nothing releasing from any device (the row back to 0.0)."""
    for d in range(tntake[t]):
        ttake[t, d] = 0.0
    tntake[t] = 0


@leaf_kernel
def give_back_pipelined(t, n, a0, a1, a2, per, nd, node_both, dev_free, dev_rel, task_rel_take, tdev, ttake,
                        tntake):
    """A pipelined task t leaves node n: what it took from releasing goes back to releasing and the
    rest of its allocation (a0, a1, a2) to free, per node and per device (``per``: its share of each
    of its ``nd`` devices); its takes are cleared. Shared by :func:`evict` and the scenario kernel's
    eviction of a moved task."""
    k0 = task_rel_take[t, 0]
    k1 = task_rel_take[t, 1]
    k2 = task_rel_take[t, 2]
    node_both[n, 1, 0] += k0
    node_both[n, 1, 1] += k1
    node_both[n, 1, 2] += k2
    node_both[n, 0, 0] += a0 - k0
    node_both[n, 0, 1] += a1 - k1
    node_both[n, 0, 2] += a2 - k2
    task_rel_take[t, 0] = 0.0
    task_rel_take[t, 1] = 0.0
    task_rel_take[t, 2] = 0.0
    for p in range(min(nd, tntake[t])):  # (zip of the two lists)
        d = tdev[t, p]
        dt = ttake[t, p]
        dev_rel[n, d] += dt
        dev_free[n, d] += per - dt
    clear_takes(t, ttake, tntake)


@leaf_kernel
def evict(i, t, n, preemptible, shared, input_state, task_state, task_node, task_job, job_queue, path_mat,
          num_active, job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab,
          tdev, tndev, ttake, tntake, ji, jf):
    """Record entry ``i``, then give up active task t on its node n (``CycleState.evict`` for a
    task without claims that was not moved): Running -> Releasing (its allocation becomes
    releasing, its share of each device too), Binding -> Pending (returned to free), Pipelined ->
    Pending (what it took from releasing goes back to releasing, the rest to free); its allocation
    leaves its queue path (both rows for a non-preemptible job); the job has one active task less.
    A shared task's share of its device is its GPU allocation, a whole task's 1."""
    record(i, t, n, input_state, task_state, task_node, task_job, job_queue, path_mat, num_active, job_version,
           queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev, ttake, tntake,
           ji, jf)
    s = task_state[t]
    a0 = task_alloc[t, 0]
    a1 = task_alloc[t, 1]
    a2 = task_alloc[t, 2]
    per = a0 if shared else 1.0
    nd = tndev[t]
    if s == _RUN:
        node_both[n, 1, 0] += a0
        node_both[n, 1, 1] += a1
        node_both[n, 1, 2] += a2
        for p in range(nd):
            dev_rel[n, tdev[t, p]] += per
        task_state[t] = _REL
    else:
        if s == _BIND:
            node_both[n, 0, 0] += a0
            node_both[n, 0, 1] += a1
            node_both[n, 0, 2] += a2
            for p in range(nd):
                dev_free[n, tdev[t, p]] += per
        else:
            give_back_pipelined(t, n, a0, a1, a2, per, nd, node_both, dev_free, dev_rel, task_rel_take, tdev,
                                ttake, tntake)
        clear_devices(t, tdev, tndev)
        task_state[t] = _PEND
        task_node[t] = -1
        task_alloc[t, 0] = 0.0
        task_alloc[t, 1] = 0.0
        task_alloc[t, 2] = 0.0
    j = task_job[t]
    add_to_path(qab, path_mat, job_queue[j], preemptible, -a0, -a1, -a2)
    num_active[j] -= 1


@leaf_kernel
def np_max(a, b):
    """``np.maximum`` of two floats: NaN propagates from either side, and a tie (``0.0`` vs ``-0.0``)
    gives the second argument, as numpy's loop does (Python's ``max`` keeps the first)."""
    if a != a:
        return a
    if a > b:
        return a
    return b


@leaf_kernel
def np_min(a, b):
    """``np.minimum`` of two floats (NaN propagates, ties give the second argument)."""
    if a != a:
        return a
    if a < b:
        return a
    return b


@leaf_kernel
def py_max(a, b):
    """Python's ``max(a, b)`` of two floats: the first unless the second is greater (a tie, NaN on
    either side: the first)."""
    if b > a:
        return b
    return a


@leaf_kernel
def py_min(a, b):
    """Python's ``min(a, b)`` of two floats: the first unless the second is smaller."""
    if b < a:
        return b
    return a


@leaf_kernel
def place(i, t, n, pipelined, preemptible, input_state, task_state, task_node, task_job, job_queue, path_mat,
          num_active, job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab,
          tdev, tndev, ttake, tntake, ji, jf, task_request, devs, ndevs):
    """Record entry ``i``, then place pending task t (no DRA claims, not shared: its request is the
    same on every node) on node n with whole devices ``devs[:ndevs]``: ``CycleState.place`` /
    ``_charge`` (:func:`place_dev` with a share of 1.0 per device)."""
    place_dev(i, t, n, pipelined, preemptible, input_state, task_state, task_node, task_job, job_queue, path_mat,
              num_active, job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab,
              tdev, tndev, ttake, tntake, ji, jf, task_request, devs, ndevs, 1.0, False)


@leaf_kernel
def place_dev(i, t, n, pipelined, preemptible, input_state, task_state, task_node, task_job, job_queue, path_mat,
              num_active, job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab,
              tdev, tndev, ttake, tntake, ji, jf, task_request, devs, ndevs, per, shared):
    """Record entry ``i``, then place pending task t (no DRA claims) on node n with devices
    ``devs[:ndevs]``, taking ``per`` of each (1.0 for whole devices; for a task sharing one GPU
    (``shared``) its fraction on this node, which is also its GPU request there:
    ``task_request_on_node``): ``CycleState.place`` / ``_charge``.
    Binding takes its request and its devices' shares from free; pipelined takes
    ``min(max(releasing, 0), request)`` from releasing (numpy's min / max) and the rest from free,
    and per device ``min(max(releasing, 0.0), per)`` (Python's), recorded per device; the request
    joins the job's queue path (both rows for a non-preemptible job); one more active task. (A
    shared task's gpuGroup, an object, is the caller's: ``CycleState.place`` names it.)"""
    record(i, t, n, input_state, task_state, task_node, task_job, job_queue, path_mat, num_active, job_version,
           queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev, ttake, tntake,
           ji, jf)
    for r in range(3):
        q_r = per if (shared and r == 0) else task_request[t, r]
        task_alloc[t, r] = q_r
        if pipelined:
            take = np_min(np_max(node_both[n, 1, r], 0.0), q_r)
            node_both[n, 1, r] -= take
            node_both[n, 0, r] -= q_r - take
            task_rel_take[t, r] = take
        else:
            node_both[n, 0, r] -= q_r
    clear_takes(t, ttake, tntake)
    clear_devices(t, tdev, tndev)
    for p in range(ndevs):
        d = devs[p]
        tdev[t, p] = d
        if pipelined:
            take = py_min(py_max(dev_rel[n, d], 0.0), per)
            dev_rel[n, d] -= take
            dev_free[n, d] -= per - take
            ttake[t, p] = take
        else:
            dev_free[n, d] -= per
    tndev[t] = ndevs
    if pipelined:
        tntake[t] = ndevs
    task_state[t] = _PIPE if pipelined else _BIND
    task_node[t] = n
    j = task_job[t]
    add_to_path(qab, path_mat, job_queue[j], preemptible, task_alloc[t, 0], task_alloc[t, 1], task_alloc[t, 2])
    num_active[j] += 1


@leaf_kernel
def unevict(i, t, preemptible, shared, input_state, task_state, task_node, task_job, job_queue, path_mat,
            num_active, job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab,
            tdev, tndev, ttake, tntake, ji, jf):
    """Releasing task t (without claims) back to Running on its node, if what it releases is not
    promised to a pipelined task (node releasing >= its allocation, each device's releasing share
    >= its share, within EPS): record entry ``i``, take it out of releasing, add it back to its
    queue path, one more active task. Returns False (nothing recorded) when it cannot."""
    if task_state[t] != _REL:
        return False
    n = task_node[t]
    a0 = task_alloc[t, 0]
    a1 = task_alloc[t, 1]
    a2 = task_alloc[t, 2]
    if node_both[n, 1, 0] < a0 - EPS or node_both[n, 1, 1] < a1 - EPS or node_both[n, 1, 2] < a2 - EPS:
        return False
    per = a0 if shared else 1.0
    nd = tndev[t]
    for p in range(nd):
        if dev_rel[n, tdev[t, p]] < per - EPS:
            return False
    record(i, t, n, input_state, task_state, task_node, task_job, job_queue, path_mat, num_active, job_version,
           queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev, ttake, tntake,
           ji, jf)
    node_both[n, 1, 0] -= a0
    node_both[n, 1, 1] -= a1
    node_both[n, 1, 2] -= a2
    for p in range(nd):
        dev_rel[n, tdev[t, p]] -= per
    task_state[t] = _RUN
    j = task_job[t]
    add_to_path(qab, path_mat, job_queue[j], preemptible, a0, a1, a2)
    num_active[j] += 1
    return True


@leaf_kernel
def evict_many(i0, ts, ns, shared, preempt, input_state, task_state, task_node, task_job, job_queue, path_mat,
               num_active, job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab,
               tdev, tndev, ttake, tntake, ji, jf):
    """:func:`evict` of tasks ``ts`` (on nodes ``ns``) one after the other, entries ``i0, i0 + 1, ...``."""
    for k in range(ts.shape[0]):
        t = ts[k]
        evict(i0 + k, t, ns[k], preempt[task_job[t]], shared[t], input_state, task_state, task_node, task_job,
              job_queue, path_mat, num_active, job_version, queue_version, node_both, dev_free, dev_rel, task_alloc,
              task_rel_take, qab, tdev, tndev, ttake, tntake, ji, jf)
