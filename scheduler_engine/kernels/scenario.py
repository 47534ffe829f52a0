"""Kernels of a victim scenario's simulation (:mod:`scheduler_engine.solvers.simulation`) that are
not journal primitives:

* :func:`over_capacity`: the queue capacity check (spec a.7) over the state's arrays, so that a
  compiled placement can ask it; the Python method ``CycleState.queue_over_capacity`` answers with
  the same comparisons.
* :func:`place_one_whole`: one simulated placement of a task that takes whole GPUs or none (not
  shared, no DRA claims) on the first node of its shape index: the index's query
  (:func:`node_index.query_whole`), the device choice (:func:`devices.choose_whole`) and the
  journaled placement, un-eviction or re-placement of a released victim (:mod:`.journal`), in one
  call. ``Placer._place_one`` hands the rare cases back to its Python path (see the return codes).
"""
from __future__ import annotations

import numpy as np

from . import kernel
from .devices import choose_whole
from .journal import _PEND, place, unevict
from .node_index import placement_key, query_whole

#: :func:`place_one_whole` return codes besides a node (placed there)
NO_NODE = -1  # no node fits: the placement fails
SCAN = -3  # the index's first node refused the task: Python's full scan in placement order decides
QUEUE = -4  # the job's queue path is over its limit / quota (only when asked to check it)

EPS = 1e-9


@kernel
def over_capacity(path_mat: np.ndarray, q: int, r0: float, r1: float, r2: float, nonpreemptible: bool,
                  lim: np.ndarray, des: np.ndarray, qab: np.ndarray) -> int:
    """-1 if the request ``(r0, r1, r2)`` may be added to leaf q, else ``(a * 3 + r) * 2 + kind``:
    queue ``a`` on the path (leaf first) is over its limit (``kind`` 0) or, for a non-preemptible
    job, over its deserved quota (``kind`` 1) in resource ``r``. Only requested resources
    (``> EPS``) are checked; ``lim`` / ``des`` are (Q, 3) with ``inf`` for unlimited;
    ``qab[a, 0]`` is the queue's allocation, ``qab[a, 1]`` its non-preemptible allocation."""
    rq = (r0, r1, r2)
    if not (r0 > EPS or r1 > EPS or r2 > EPS):
        return -1
    for k in range(path_mat.shape[1]):
        a = path_mat[q, k]
        if a < 0:
            break
        for r in range(3):
            if rq[r] > EPS and qab[a, 0, r] + rq[r] > lim[a, r] + EPS:
                return (a * 3 + r) * 2
        if nonpreemptible:
            for r in range(3):
                if rq[r] > EPS and qab[a, 1, r] + rq[r] > des[a, r] + EPS:
                    return (a * 3 + r) * 2 + 1
    return -1


@kernel
def old_node_key(n, ndev, top, cap, col, spread, node_both, dev_free, dev_rel):
    """``nodeplacement.node_key_one(s, t, n, False, col, spread)`` for a task without a shared GPU
    on a cluster without DRA GPUs: the placement key of node n as one that does not fit on free
    resources (``top``, ``cap`` as the shape index has them)."""
    nd = ndev[n]
    if col == 0:  # GPU: whole devices free or releasing
        c = 0
        for d in range(nd):
            if dev_free[n, d] + dev_rel[n, d] >= 1 - EPS:
                c += 1
        free = float(c)
        overall = float(nd)
    else:
        free = node_both[n, 0, col] + node_both[n, 1, col]
        overall = cap[n]
    tier = 0.0
    if col == 1 and nd == 0:
        tier += 10.0
    return placement_key(free, overall, top, spread, tier)


@kernel
def place_one_whole(t, released, old, qcheck, delta, hk, hn, i, preemptible,
                    sched, sel, rc, rm, k, ndev, top, cap, col, spread, idle_ok, any_ok, key, hs,
                    quota_req, lim, des, task_request, devs,
                    input_state, task_state, task_node, task_job, job_queue, path_mat, num_active, job_version,
                    queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev, ttake,
                    tntake, ji, jf):
    """Place task t (pipelined) on the first node of its shape index, or say why not.

    Arguments in groups (the Python caller keeps the fixed ones in tuples): per call, the shape
    index's constants and arrays (its heap arrays ``hk`` / ``hn`` may be replaced when it grows:
    passed per call), the state's fixed arrays, the journal's arrays (``CycleState._jarrays``),
    the journal's entry arrays.

    ``qcheck``: t is a whole job; first check its queue path's capacity for its quota request
    (``quota_req[t]``, :func:`over_capacity` with ``lim`` / ``des``), as ``Placer.place_job`` does.

    ``delta``: the nodes changed since the index's last query (the index's constants and arrays as
    :func:`node_index.query_whole` takes them). ``released``: t is a victim evicted from Running in
    this scenario, ``old`` its node. On the index's best node n: a released victim back on its own
    node is un-evicted (Running again, :func:`journal.unevict`); otherwise its whole devices are
    chosen pipelined (:func:`devices.choose_whole`: fully free first, then releasing) and it is
    placed (:func:`journal.place`; a released victim is made Pending first, as
    ``simulation.place_released`` does). Journal entry ``i`` is written when it is placed.

    A released victim whose own node no longer fits it (the beneficiary took what it released)
    still has that node as a candidate, ordered by :func:`old_node_key` (``Placer._place_one``).

    Returns the node it was placed on, :data:`QUEUE`, :data:`NO_NODE` or :data:`SCAN` (the first
    node in order refused it; nothing changed but the index: the caller scans every node)."""
    # (the index catches up with ``delta`` first in any case: its caller has consumed the delta)
    n = query_whole(delta, 0, delta.shape[0], sched, sel, rc, rm, k, ndev, top, cap, col, spread, node_both,
                    dev_free, dev_rel, idle_ok, any_ok, key, hk, hn, hs)
    j = task_job[t]
    if qcheck and over_capacity(path_mat, job_queue[j], quota_req[t, 0], quota_req[t, 1], quota_req[t, 2],
                                not preemptible, lim, des, qab) >= 0:
        return QUEUE
    if released and old >= 0 and not any_ok[old] and sched[old]:
        # its own node is a candidate outside the fit mask (fits nowhere but there, maybe): in
        # placement order by its key as a node that does not fit on free resources
        ko = old_node_key(old, ndev, top, cap, col, spread, node_both, dev_free, dev_rel)
        if n < 0 or ko < key[n] or (ko == key[n] and old < n):
            if unevict(i, t, preemptible, False, input_state, task_state, task_node, task_job, job_queue, path_mat,
                       num_active, job_version, queue_version, node_both, dev_free, dev_rel, task_alloc,
                       task_rel_take, qab, tdev, tndev, ttake, tntake, ji, jf):
                return old
            if n < 0:
                return NO_NODE  # the old node was the only candidate
    if n < 0:
        return NO_NODE
    if released and n == old:
        if unevict(i, t, preemptible, False, input_state, task_state, task_node, task_job, job_queue, path_mat,
                   num_active, job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take,
                   qab, tdev, tndev, ttake, tntake, ji, jf):
            return n
        return SCAN
    nd = ndev[n]
    got = 0
    if k > 0:
        if nd == 0:
            return SCAN
        got = choose_whole(dev_free, dev_rel, n, nd, k, True, devs)
        if got < 0:
            return SCAN
    if released:
        task_state[t] = _PEND
    place(i, t, n, True, preemptible, input_state, task_state, task_node, task_job, job_queue, path_mat, num_active,
          job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev,
          ttake, tntake, ji, jf, task_request, devs, got)
    return n
