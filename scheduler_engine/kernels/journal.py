"""The numeric half of :class:`~scheduler_engine.state.CycleState`'s undo journal, as arrays.

Every mutation of a task, its node or its queue path is preceded by a journal entry (``record``);
``undo`` replays entries backwards, restoring each copied value, so a rollback leaves the state
bitwise as it was (no arithmetic is undone: values are copied back). The object half (device /
gpuGroup / device-take lists, a node's gpuGroup map, DRA claims) stays a Python list beside it,
restored by the state in the same backward order; both halves restore by assignment, so splitting
them does not change the result.

Entry ``i`` (preallocated rows, grown by the state):

* ``ji[i]`` int64: ``t, j, state, node, n, num_active(j)`` - the task, its job, its state (a
  Releasing input task that is momentarily Pending while it is pipelined elsewhere is recorded as
  Releasing) and node before the change, the node ``n`` whose rows were copied (-1: none) and the
  job's count of active tasks.
* ``jf[i]`` float64: ``task_alloc[t]`` (3), ``task_rel_take[t]`` (3), node ``n``'s idle and
  releasing rows (6), its device rows ``dev_free[n]``, ``dev_rel[n]`` (G each), then the (2, 3)
  allocation rows of every queue on the job's path (``path_mat`` row of the job's leaf, -1 padded).

Room is left for the object-typed columns of subgroups and DRA: they are journaled by the state in
its Python list (DRA device rows included), which these kernels never touch.

``evict`` is :meth:`CycleState.evict`'s numeric part for a task without DRA claims that was not
moved (Running -> Releasing, or a placement of this cycle -> Pending): record, then the node,
task and queue sums in the order the numpy code adds them (same float operations, elementwise).
Device rows are left to the caller (they follow the task's Python device list).
"""
from __future__ import annotations

import numpy as np

from ..snapshot import GPU, TaskState
from . import kernel

_PEND = int(TaskState.PENDING)
_RUN = int(TaskState.RUNNING)
_REL = int(TaskState.RELEASING)
_BIND = int(TaskState.BINDING)
_PIPE = int(TaskState.PIPELINED)
FIXED = 12  # alloc (3) + rel_take (3) + node rows (6)


def width(G: int, depth: int) -> int:
    """Float columns of one entry for G devices per node and queue paths of ``depth`` levels."""
    return FIXED + 2 * G + 6 * depth


@kernel
def record(i, t, n, input_state, task_state, task_node, task_job, job_queue, path_mat, num_active,
           job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, ji, jf):
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
    ji[i, 0] = t
    ji[i, 1] = j
    ji[i, 2] = st
    ji[i, 3] = nd
    ji[i, 4] = n
    ji[i, 5] = num_active[j]
    for r in range(3):
        jf[i, r] = task_alloc[t, r]
        jf[i, 3 + r] = task_rel_take[t, r]
    G = dev_free.shape[1]
    if n >= 0:
        for x in range(2):
            for r in range(3):
                jf[i, 6 + 3 * x + r] = node_both[n, x, r]
        for d in range(G):
            jf[i, FIXED + d] = dev_free[n, d]
            jf[i, FIXED + G + d] = dev_rel[n, d]
    base = FIXED + 2 * G
    for k in range(depth):
        a = path_mat[q, k]
        if a < 0:
            break
        for x in range(2):
            for r in range(3):
                jf[i, base + 6 * k + 3 * x + r] = qab[a, x, r]


@kernel
def undo(lo, hi, task_state, task_node, task_job, job_queue, path_mat, num_active, job_version, queue_version,
         node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, ji, jf):
    """Undo entries ``hi - 1`` down to ``lo`` (numeric part): copy every recorded value back."""
    G = dev_free.shape[1]
    depth = path_mat.shape[1]
    base = FIXED + 2 * G
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


@kernel
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


@kernel
def evict(i, t, n, preemptible, input_state, task_state, task_node, task_job, job_queue, path_mat, num_active,
          job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, ji, jf):
    """Record entry ``i``, then give up active task t on its node n (numeric part of
    ``CycleState.evict`` for a task without claims that was not moved): Running -> Releasing (its
    allocation becomes releasing), Binding -> Pending (returned to free), Pipelined -> Pending (what
    it took from releasing goes back to releasing, the rest to free); its allocation leaves its
    queue path (both rows for a non-preemptible job); the job has one active task less."""
    record(i, t, n, input_state, task_state, task_node, task_job, job_queue, path_mat, num_active,
           job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, ji, jf)
    s = task_state[t]
    a0 = task_alloc[t, 0]
    a1 = task_alloc[t, 1]
    a2 = task_alloc[t, 2]
    if s == _RUN:
        node_both[n, 1, 0] += a0
        node_both[n, 1, 1] += a1
        node_both[n, 1, 2] += a2
        task_state[t] = _REL
    else:
        if s == _BIND:
            node_both[n, 0, 0] += a0
            node_both[n, 0, 1] += a1
            node_both[n, 0, 2] += a2
        else:
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
        task_state[t] = _PEND
        task_node[t] = -1
        task_alloc[t, 0] = 0.0
        task_alloc[t, 1] = 0.0
        task_alloc[t, 2] = 0.0
    j = task_job[t]
    add_to_path(qab, path_mat, job_queue[j], preemptible, -a0, -a1, -a2)
    num_active[j] -= 1


@kernel
def np_max(a, b):
    """``np.maximum`` of two floats: NaN propagates from either side, and a tie (``0.0`` vs ``-0.0``)
    gives the second argument, as numpy's loop does (Python's ``max`` keeps the first)."""
    if a != a:
        return a
    if a > b:
        return a
    return b


@kernel
def np_min(a, b):
    """``np.minimum`` of two floats (NaN propagates, ties give the second argument)."""
    if a != a:
        return a
    if a < b:
        return a
    return b


@kernel
def place(i, t, n, pipelined, preemptible, input_state, task_state, task_node, task_job, job_queue, path_mat,
          num_active, job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab,
          ji, jf, task_request):
    """Record entry ``i``, then place pending task t (no DRA claims, not shared: its request is the
    same on every node) on node n: numeric part of ``CycleState.place`` / ``_charge``. Binding
    takes its request from free; pipelined takes ``min(max(releasing, 0), request)`` from
    releasing (numpy's min / max) and the rest from free; the request joins the job's queue path
    (both rows for a non-preemptible job); one more active task. Devices are the caller's."""
    record(i, t, n, input_state, task_state, task_node, task_job, job_queue, path_mat, num_active,
           job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, ji, jf)
    for r in range(3):
        q_r = task_request[t, r]
        task_alloc[t, r] = q_r
        if pipelined:
            take = np_min(np_max(node_both[n, 1, r], 0.0), q_r)
            node_both[n, 1, r] -= take
            node_both[n, 0, r] -= q_r - take
            task_rel_take[t, r] = take
        else:
            node_both[n, 0, r] -= q_r
    task_state[t] = _PIPE if pipelined else _BIND
    task_node[t] = n
    j = task_job[t]
    add_to_path(qab, path_mat, job_queue[j], preemptible, task_alloc[t, 0], task_alloc[t, 1], task_alloc[t, 2])
    num_active[j] += 1


@kernel
def evict_many(i0, ts, ns, dev_flat, dev_ptr, take_flat, shared, preempt, input_state, task_state, task_node,
               task_job, job_queue, path_mat, num_active, job_version, queue_version, node_both, dev_free, dev_rel,
               task_alloc, task_rel_take, qab, ji, jf):
    """:func:`evict` of tasks ``ts`` (on nodes ``ns``) one after the other, entries ``i0, i0 + 1, ...``,
    devices included: task k's devices are ``dev_flat[dev_ptr[k]:dev_ptr[k + 1]]`` and, for a
    pipelined task, what each took from releasing is ``take_flat`` at the same positions. Running:
    its share of each device becomes releasing; Binding: returns to free; Pipelined: the taken part
    to releasing, the rest to free (a shared task's share is its GPU allocation, else 1)."""
    for k in range(ts.shape[0]):
        t = ts[k]
        n = ns[k]
        s = task_state[t]
        per = task_alloc[t, GPU] if shared[t] else 1.0
        evict(i0 + k, t, n, preempt[task_job[t]], input_state, task_state, task_node, task_job, job_queue, path_mat,
              num_active, job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab,
              ji, jf)
        for p in range(dev_ptr[k], dev_ptr[k + 1]):
            d = dev_flat[p]
            if s == _RUN:
                dev_rel[n, d] += per
            elif s == _BIND:
                dev_free[n, d] += per
            else:
                dt = take_flat[p]
                dev_rel[n, d] += dt
                dev_free[n, d] += per - dt
