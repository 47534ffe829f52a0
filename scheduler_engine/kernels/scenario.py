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
* :func:`run_scenario`: ``Simulation.run`` of a whole scenario whose jobs are all plain, in one call
  (evictions, each victim job's tasks to re-place, the per-leaf job order, the leaf tournament of
  :mod:`.victim_keys`, every placement through :func:`place_one_whole` - or, for a task sharing one
  GPU (a fraction, or GPU memory), :func:`node_index.query_shared`, :func:`devices.choose_shared`
  and :func:`journal.place_dev` - and the Python scan's order when the index's first node refuses,
  gang rollback through :func:`journal.undo`); the caller (``Simulation._run_compiled``) writes the
  journal's object half (gpuGroup lists and maps, new gpuGroups named) and the change log afterwards.
"""
from __future__ import annotations

import numpy as np

from . import leaf_kernel
from .devices import choose_shared, choose_whole
from .journal import (_BIND, _PEND, _PIPE, _REL, _RUN, add_to_path, evict, give_back_pipelined, place, place_dev,
                      record, undo, unevict)
from .node_index import dra_gpu_free, placement_key, query_shared_dra, query_whole_dra
from .victim_keys import best_child, queue_key, rekey_path

#: :func:`place_one_whole` return codes besides a node (placed there)
NO_NODE = -1  # no node fits: the placement fails
SCAN = -3  # the index's first node refused the task: Python's full scan in placement order decides
QUEUE = -4  # the job's queue path is over its limit / quota (only when asked to check it)

EPS = 1e-9


@leaf_kernel
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


@leaf_kernel
def old_node_key(n, ndev, top, cap, col, spread, node_both, dev_free, dev_rel, gcap, dgpu, dra_free, dra_rel):
    """``nodeplacement.node_key_one(s, t, n, False, col, spread)`` for a task without a shared GPU:
    the placement key of node n as one that does not fit on free resources (``top``, ``cap`` as the
    shape index has them; on a cluster with DRA GPUs, ``gcap`` (not empty) the nodes' GPU capacity
    and the free or releasing devices of the gpu classes ``dgpu`` count as GPUs, as
    :func:`node_index.query_whole_dra` has it)."""
    nd = ndev[n]
    dra = gcap.shape[0] > 0
    if col == 0:  # GPU: whole devices free or releasing
        c = 0
        for d in range(nd):
            if dev_free[n, d] + dev_rel[n, d] >= 1 - EPS:
                c += 1
        free = float(c)
        overall = float(nd)
        if dra:
            free += float(dra_gpu_free(n, dgpu, dra_free, dra_rel))
            overall = gcap[n]
    else:
        free = node_both[n, 0, col] + node_both[n, 1, col]
        overall = cap[n]
    tier = 0.0
    if col == 1 and ((gcap[n] == 0) if dra else (nd == 0)):
        tier += 10.0
    return placement_key(free, overall, top, spread, tier)


@leaf_kernel
def old_node_key_shared(n, ndev, top, spread, f, dev_free, dev_rel, dev_shared, gcap, dgpu, dra_free, dra_rel):
    """``nodeplacement.node_key_one(s, t, n, False, GPU, spread)`` for a task sharing one GPU with
    fraction ``f`` on node n: whole devices free or releasing as the amount (DRA GPUs as in
    :func:`old_node_key`), and under binpack the GPU-sharing tier when a device in shared use (not
    wholly released) has room for ``f``."""
    nd = ndev[n]
    c = 0
    for d in range(nd):
        if dev_free[n, d] + dev_rel[n, d] >= 1 - EPS:
            c += 1
    tier = 0.0
    if nd > 0 and not spread:
        for d in range(nd):
            a = dev_free[n, d]
            b = dev_rel[n, d]
            if dev_shared[n, d] and a + b < 1 - EPS and a + b >= f - EPS:
                tier += 10000.0
                break
    free = float(c)
    overall = float(nd)
    if gcap.shape[0] > 0:
        free += float(dra_gpu_free(n, dgpu, dra_free, dra_rel))
        overall = gcap[n]
    return placement_key(free, overall, top, spread, tier)


@leaf_kernel
def place_one_whole(t, released, old, qcheck, delta, hk, hn, i, preemptible,
                    sched, sel, rc, rm, k, ndev, top, cap, col, spread, idle_ok, any_ok, key, hs,
                    quota_req, lim, des, task_request, devs, gcap, dgpu, dra_free, dra_rel,
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
    :func:`node_index.query_whole_dra` takes them; ``gcap`` / ``dgpu`` / ``dra_free`` / ``dra_rel`` the
    cluster's DRA GPUs, ``gcap`` empty when it has none; t has no claims). ``released``: t is a
    victim evicted from Running in this scenario, ``old`` its node. On the index's best node n: a
    released victim back on its own node is un-evicted (Running again, :func:`journal.unevict`);
    otherwise its whole devices are chosen pipelined (:func:`devices.choose_whole`: fully free first,
    then releasing) and it is placed (:func:`journal.place`; a released victim is made Pending
    first, as ``simulation.place_released`` does). Journal entry ``i`` is written when it is placed.

    A released victim whose own node no longer fits it (the beneficiary took what it released)
    still has that node as a candidate, ordered by :func:`old_node_key` (``Placer._place_one``).

    Returns the node it was placed on, :data:`QUEUE`, :data:`NO_NODE` or :data:`SCAN` (the first
    node in order refused it; nothing changed but the index: the caller scans every node)."""
    # (the index catches up with ``delta`` first in any case: its caller has consumed the delta)
    n = query_whole_dra(delta, 0, delta.shape[0], sched, sel, rc, rm, k, ndev, top, cap, col, spread, node_both,
                        dev_free, dev_rel, idle_ok, any_ok, key, hk, hn, hs, gcap, dgpu, delta[:0], dra_free, dra_rel)
    j = task_job[t]
    if qcheck and over_capacity(path_mat, job_queue[j], quota_req[t, 0], quota_req[t, 1], quota_req[t, 2],
                                not preemptible, lim, des, qab) >= 0:
        return QUEUE
    if released and old >= 0 and not any_ok[old] and sched[old]:
        # its own node is a candidate outside the fit mask (fits nowhere but there, maybe): in
        # placement order by its key as a node that does not fit on free resources
        ko = old_node_key(old, ndev, top, cap, col, spread, node_both, dev_free, dev_rel, gcap, dgpu, dra_free,
                          dra_rel)
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


#: :func:`run_scenario` return codes besides 1 / 0 (the beneficiary placed / not placed)
UNKNOWN_JOB = -10  # a job of the scenario has no kernel flag yet (``jst[j, J_OK] < 0``): nothing changed
NOT_PLAIN = -11  # a job or victim the kernel does not simulate (Python's path does): nothing changed
ROOM = -12  # the journal, log or flag arrays are too short for ``io[IO_NEED]`` entries: nothing changed

#: ``clear[:, 0]`` codes of :func:`run_scenario`: what the entry's task's gpuGroup list becomes: unchanged,
#: ``[]``, its input list (a moved task evicted), or the name of the gpuGroup of its device
#: (``clear[:, 1]``) on its node, which exists (JOIN) or is new (NEW: named by the caller)
GROUPS_KEEP, GROUPS_CLEAR, GROUPS_INPUT, GROUPS_JOIN, GROUPS_NEW = 0, 1, 2, 3, 4

# columns of ``jst`` (per job), ``tst`` (per task), ``sint`` / ``sfl`` (per shape row) and ``io``
J_START, J_COUNT, J_MIN, J_OK, J_PRIO, J_RANK = 0, 1, 2, 3, 4, 5
T_ORD, T_POS, T_ROW = 0, 1, 2
S_K, S_COL, S_SPREAD, S_SEL, S_SHARED, S_FRAC = 0, 1, 2, 3, 4, 5
S_RC, S_RM, S_TOP, S_FGPU = 0, 1, 2, 3
IO_I0, IO_LOG, IO_PROTECT, IO_END, IO_LOG_END, IO_PROTECT_END, IO_FREED, IO_NEED, IO_J, IO_NP, IO_NV = range(11)
# rows of :func:`run_scenario`'s scratch ``wi`` (int64, per job of the scenario or per task it places) and ``wf``
# (float64): the jobs, the tasks each places and their offsets, the pop order and its sort's rows, the leaf
# segments, the victims released from Running; each job's order request (three rows) and the sort keys
W_JL, W_TF, W_TOFF, W_ORDR, W_ORDR2, W_ORD, W_TMP, W_SLEAF, W_SPTR, W_SEND, W_REL = range(11)
WI_ROWS = 11
F_JREQ, F_KK = 0, 3
WF_ROWS = 4


@leaf_kernel
def stable_order_into(keys: np.ndarray, m: int, a: np.ndarray, b: np.ndarray) -> None:
    """The positions of ``keys[:m]`` (float64) in ascending order, equal keys in their order, into
    ``a[:m]`` (``np.argsort(keys[:m], kind="stable")``; ``b``: scratch of at least ``m``): a bottom-up
    merge sort (numba's own compiles for ~3 s). Writes into its caller's arrays so that the scenario's
    scan of every node can run in a kernel without reference counting (``leaf_kernel``)."""
    for x in range(m):
        a[x] = x
    src, dst = a, b
    flipped = False
    w = 1
    while w < m:
        for lo in range(0, m, 2 * w):
            mid = min(lo + w, m)
            hi = min(lo + 2 * w, m)
            x, y, o = lo, mid, lo
            while x < mid and y < hi:
                if keys[src[y]] < keys[src[x]]:  # the right run's entry only when strictly smaller
                    dst[o] = src[y]
                    y += 1
                else:
                    dst[o] = src[x]
                    x += 1
                o += 1
            while x < mid:
                dst[o] = src[x]
                x += 1
                o += 1
            while y < hi:
                dst[o] = src[y]
                y += 1
                o += 1
        src, dst = dst, src
        flipped = not flipped
        w *= 2
    if flipped:  # (an odd number of passes: the result is in b)
        for x in range(m):
            a[x] = b[x]


@leaf_kernel
def _job_key_less(a: int, b: int, jl: np.ndarray, jst: np.ndarray, num_active: np.ndarray,
                  job_queue: np.ndarray) -> bool:
    """Is scenario job ``a``'s pop-order key strictly below ``b``'s: (leaf, priority, elastic state,
    rank), compared as the float64 values the former four sorting passes keyed on (the beneficiary,
    ``a`` or ``b`` 0, has elastic state 0)."""
    ja = jl[a]
    jb = jl[b]
    x = float(job_queue[ja])
    y = float(job_queue[jb])
    if x != y:
        return x < y
    x = float(jst[ja, J_PRIO])
    y = float(jst[jb, J_PRIO])
    if x != y:
        return x < y
    x = 0.0
    if a != 0:
        act = num_active[ja]
        mn = jst[ja, J_MIN]
        x = 0.0 if act < mn else (1.0 if act == mn else 2.0)
    y = 0.0
    if b != 0:
        act = num_active[jb]
        mn = jst[jb, J_MIN]
        y = 0.0 if act < mn else (1.0 if act == mn else 2.0)
    if x != y:
        return x < y
    return float(jst[ja, J_RANK]) < float(jst[jb, J_RANK])


@leaf_kernel
def job_order_into(a: np.ndarray, m: int, b: np.ndarray, jl: np.ndarray, jst: np.ndarray, num_active: np.ndarray,
                   job_queue: np.ndarray) -> None:
    """Stably sort the scenario jobs ``a[:m]`` (indices into ``jl``) by their pop-order key
    (:func:`_job_key_less`; ``b``: scratch of at least ``m``): a bottom-up merge sort that takes the
    right run's entry only when its key is strictly smaller.

    Why: the pop order was four stable sorts in turn (rank, elastic state, priority, leaf; each its
    own merge sort over keys gathered per pass), about 2 us of a simulated scenario at 10,000 nodes,
    where the compiled search simulates ~210,000 scenarios per cycle. Stable sorts by the least
    significant key first are one stable sort by the keys compared most significant first, so the
    same permutation comes out of one pass."""
    src, dst = a, b
    flipped = False
    w = 1
    while w < m:
        for lo in range(0, m, 2 * w):
            mid = min(lo + w, m)
            hi = min(lo + 2 * w, m)
            x, y, o = lo, mid, lo
            while x < mid and y < hi:
                if _job_key_less(src[y], src[x], jl, jst, num_active, job_queue):
                    dst[o] = src[y]
                    y += 1
                else:
                    dst[o] = src[x]
                    x += 1
                o += 1
            while x < mid:
                dst[o] = src[x]
                x += 1
                o += 1
            while y < hi:
                dst[o] = src[y]
                y += 1
                o += 1
        src, dst = dst, src
        flipped = not flipped
        w *= 2
    if flipped:  # (an odd number of passes: the result is in b)
        for x in range(m):
            a[x] = b[x]


@leaf_kernel
def build_paths(leaves: np.ndarray, nl: int, path: np.ndarray, kid_ptr: np.ndarray, kids: np.ndarray,
                stat: np.ndarray, tot: np.ndarray, prio: np.ndarray, tb: np.ndarray, alloc: np.ndarray,
                leaf_live: np.ndarray, req: np.ndarray, key: np.ndarray, vrep: np.ndarray) -> int:
    """:func:`.victim_keys.build` (placement keys, not victim ones) when the live leaves are among
    ``leaves[:nl]`` and every queue has ``vrep`` -1 on entry: only the queues on the live leaves'
    paths are keyed, deepest first (a queue's absolute depth is its distance to the end of a path
    row), each once. Returns the leaf whose job comes next (-1: none).

    Why: the scenario kernel's leaf tournament reset four (Q, ...) rows and keyed every queue of the
    tree (best child of each) for a scenario whose jobs sit in ~9 leaves: at 1,000 queues ~220,000
    tournaments per 10,000-node cycle. The same keys come out: a queue off those paths has no live
    leaf below it, so ``build`` leaves it at ``vrep`` -1, which it already holds (its key is never
    read: :func:`.victim_keys.best_child` skips a child at -1), and a queue on them depends on its
    children only, keyed before it. The caller puts the paths back to -1 afterwards."""
    D = path.shape[1]
    for d in range(D - 1, -1, -1):
        for g in range(nl):
            leaf = leaves[g]
            if not leaf_live[leaf]:
                continue
            ln = 0
            while ln < D and path[leaf, ln] >= 0:
                ln += 1
            k = ln - 1 - d
            if k < 0:
                continue
            q = path[leaf, k]
            if vrep[q] >= 0:
                continue  # (an ancestor shared with a leaf before this one: keyed already)
            b = best_child(q, kid_ptr, kids, vrep, key, tb)
            if b >= 0:
                lq = vrep[b]
            elif leaf_live[q]:
                lq = q
            else:
                continue
            vrep[q] = lq
            queue_key(q, req[lq, 0], req[lq, 1], req[lq, 2], False, stat, tot, prio, alloc, key)
    root = kid_ptr.shape[0] - 2
    b = best_child(root, kid_ptr, kids, vrep, key, tb)
    return vrep[b] if b >= 0 else -1


@leaf_kernel
def _try_shared(t, n, released, old, f, spread, mem, newg, i, pre, nds, lim, des, task_request, devs, input_state,
                task_state, task_node, task_job, job_queue, path_mat, num_active, job_version, queue_version, node_both,
                dev_free, dev_rel, dev_shared, task_alloc, task_rel_take, qab, tdev, tndev, ttake, tntake, ji, jf):
    """``Placer._try_node`` of task t sharing one GPU (fraction ``f`` on node n; ``mem``: a GPU-memory
    task, whose request on n is checked against its queue path first): the device
    (:func:`devices.choose_shared`, pipelined); a released victim back on its own device is
    un-evicted (:func:`journal.unevict`), otherwise t is placed pipelined (:func:`journal.place_dev`;
    a released victim made Pending first) and the device carries a gpuGroup from now on
    (``newg[0]``: 1 when it is a new one, which the caller names). Returns False, nothing changed,
    when it does not go there."""
    j = task_job[t]
    if mem and over_capacity(path_mat, job_queue[j], f, task_request[t, 1], task_request[t, 2], not pre, lim, des,
                             qab) >= 0:
        return False
    d = choose_shared(dev_free, dev_rel, n, nds[n], f, True, spread)
    if d < 0:
        return False
    if released and n == old and tndev[t] == 1 and tdev[t, 0] == d:
        return unevict(i, t, pre, True, input_state, task_state, task_node, task_job, job_queue, path_mat,
                       num_active, job_version, queue_version, node_both, dev_free, dev_rel, task_alloc,
                       task_rel_take, qab, tdev, tndev, ttake, tntake, ji, jf)
    if released:
        task_state[t] = _PEND
    devs[0] = d
    newg[0] = 0 if dev_shared[n, d] else 1
    place_dev(i, t, n, True, pre, input_state, task_state, task_node, task_job, job_queue, path_mat, num_active,
              job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev,
              ttake, tntake, ji, jf, task_request, devs, 1, f, True)
    dev_shared[n, d] = True
    return True


#: a shape row's change-log delta longer than this is de-duplicated before its query
DEDUP_MIN = 16


@leaf_kernel
def distinct_nodes(log: np.ndarray, lo: int, hi: int, seen: np.ndarray, out: np.ndarray) -> int:
    """The distinct nodes of ``log[lo:hi]`` in first-occurrence order into ``out`` ((N,) int64), and
    how many (``seen``: (N,) bool, all False on entry and on return).

    A shape row's query re-evaluates every node of its delta (the log since its last query); at
    10,000 nodes a row is queried a few times per search while each failed scenario logs its nodes
    twice (applied, rolled back), so the deltas ran to hundreds of entries for a few dozen nodes
    and often past N / 8, where the query re-evaluates every node. Evaluating a node once per query
    gives the same flags and key (each evaluation reads the current state), and the index's best
    node does not depend on the order of its heap pushes (``node_index``: the smallest live
    ``(key, node)``), so the query answers the same."""
    m = 0
    for i in range(lo, hi):
        n = log[i]
        if not seen[n]:
            seen[n] = True
            out[m] = n
            m += 1
    for i in range(m):
        seen[out[i]] = False
    return m


@leaf_kernel
def query_row(row, delta, sint, sfl, sched, sel, no_sel, no_frac, ndev, cap, idle_ok, any_ok, key, hk, hn, hs,
              node_both, dev_free, dev_rel, dev_shared, gcap, dgpu, dra_free, dra_rel):
    """Shape row ``row``'s index query with the nodes ``delta`` re-evaluated: the best node or -1
    (:func:`node_index.query_shared_dra` for a row sharing one GPU, :func:`node_index.query_whole_dra`
    otherwise, with the row's constants as :func:`_place_task` passes them)."""
    sch = sched[row]
    selr = sel[row] if sint[row, S_SEL] != 0 else no_sel
    spread = sint[row, S_SPREAD] != 0
    if sint[row, S_SHARED] != 0:
        fr = cap[row] if sint[row, S_FRAC] != 0 else no_frac
        return query_shared_dra(delta, 0, delta.shape[0], sch, selr, sfl[row, S_RC], sfl[row, S_RM], fr,
                                sfl[row, S_FGPU], ndev[row], sfl[row, S_TOP], spread, node_both, dev_free, dev_rel,
                                dev_shared, idle_ok[row], any_ok[row], key[row], hk[row], hn[row], hs[row], gcap,
                                dgpu, delta[:0], dra_free, dra_rel)
    return query_whole_dra(delta, 0, delta.shape[0], sch, selr, sfl[row, S_RC], sfl[row, S_RM], sint[row, S_K],
                           ndev[row], sfl[row, S_TOP], cap[row], sint[row, S_COL], spread, node_both, dev_free,
                           dev_rel, idle_ok[row], any_ok[row], key[row], hk[row], hn[row], hs[row], gcap, dgpu,
                           delta[:0], dra_free, dra_rel)


@leaf_kernel
def forget_log(lo, hi, log, seen, scr, pos, sint, sfl, sched, sel, no_sel, no_frac, ndev, cap, idle_ok, any_ok, key,
               hk, hn, hs, node_both, dev_free, dev_rel, dev_shared, gcap, dgpu, dra_free, dra_rel):
    """After a scenario whose every change was undone (the node, device and gpuGroup rows bitwise as
    they were when the change log had ``lo`` entries): the log's entries ``lo:hi`` (its nodes, applied
    and undone) are dropped, and the shape rows that were queried since (``pos[row] > lo``) are
    caught up on those nodes now (:func:`query_row` over their distinct nodes, ``seen`` / ``scr[0]``
    scratch as :func:`distinct_nodes` takes them) and set back to ``lo``. Returns the log's new length
    ``lo``.

    Why: at 10,000 nodes ~210,000 failed scenarios per cycle, each kept in the compiled search
    (:func:`.search.run_search`), logged ~40 nodes (applied, rolled back); the log reached ~17 million
    entries and every later query of every shape row (and ``accumulation._fit_base``, Python's
    indices) re-read them, though for a row not queried inside the scenario each is a node that
    reads as it did before it. Exact: a row's flags and key of a node are a function of the node's
    rows (node, device rows and marks, the row's own constants); a row last queried at or before
    ``lo`` holds them for the state at ``lo`` except on the nodes logged before ``lo`` since its query,
    which stay in the log; a row queried inside the scenario is re-evaluated here on every node the
    scenario changed (a superset of what it saw changed), so it too holds them for the state at ``lo``;
    and which node an index answers does not depend on its heap's layout or on nodes re-evaluated with
    no change (:mod:`.node_index`). Every position outside the kernel's rows (Python's indices, the fit
    base) was taken before the search began, at or below ``lo``, so no reader has seen the dropped
    entries, and the log's entries below ``lo`` are never rewritten."""
    if hi <= lo:
        return lo
    m = 0
    for r in range(pos.shape[0]):
        if pos[r] > lo:
            if m == 0:
                dn = scr[0]
                m = distinct_nodes(log, lo, hi, seen, dn)
            query_row(r, scr[0][:m], sint, sfl, sched, sel, no_sel, no_frac, ndev, cap, idle_ok, any_ok, key, hk,
                      hn, hs, node_both, dev_free, dev_rel, dev_shared, gcap, dgpu, dra_free, dra_rel)
            pos[r] = lo
    return lo


@leaf_kernel
def _place_task(t, qcheck, row, i, log, lo, seen, scr, sck, sint, sfl, sched, sel, no_sel, no_frac, ndev, cap,
                idle_ok, any_ok, key, hk, hn, hs, pos, newg, preempt, quota_req, lim, des, task_request, devs, gcap,
                dgpu, dra_free, dra_rel, input_state, task_state, task_node, task_job, job_queue, path_mat, num_active,
                job_version, queue_version, node_both, dev_free, dev_rel, dev_shared, task_alloc, task_rel_take, qab,
                tdev, tndev, ttake, tntake, ji, jf):
    """``Placer._place_one`` of task t (shape row ``row``; ``qcheck`` as ``place_job`` passes it) with
    the log entries ``log[pos[row]:lo]`` as the index's delta (its distinct nodes when it is long:
    :func:`distinct_nodes` with the scratch ``seen``, into ``scr[0]``). ``scr`` ((3, N) int64) and
    ``sck`` ((N,) float64) are the caller's scratch, so that this kernel allocates nothing (it runs
    without reference counting: ``leaf_kernel``). A task of whole GPUs or none:
    :func:`place_one_whole`; a task sharing one GPU (``sint[row, S_SHARED]``): the index's query
    (:func:`node_index.query_shared`), the victim's own node as a candidate outside the fit mask
    (:func:`old_node_key_shared`) and :func:`_try_shared` on the first candidate(s), as the Python
    code tries them. When that first node refuses the task (``SCAN``), Python's scan of every
    candidate node in placement order (``Placer.node_order`` + ``_try_node``: the index, just caught
    up, holds each node's fit flag and key; the victim's own node outside the fit mask is keyed as
    one that does not fit on free resources). Returns the node, :data:`NO_NODE` or :data:`QUEUE`;
    journal entry ``i`` is written when it is placed."""
    released = task_state[t] == _REL
    old = task_node[t] if released else -1
    p0 = pos[row]
    if lo - p0 <= DEDUP_MIN:
        delta = log[p0:lo]
    else:
        dn = scr[0]
        delta = dn[:distinct_nodes(log, p0, lo, seen, dn)]
    pos[row] = lo
    k = sint[row, S_K]
    col = sint[row, S_COL]
    spread = sint[row, S_SPREAD] != 0
    shared = sint[row, S_SHARED] != 0
    mem = sint[row, S_FRAC] != 0
    selr = sel[row] if sint[row, S_SEL] != 0 else no_sel
    fr = cap[row] if mem else no_frac
    fg = sfl[row, S_FGPU]
    pre = preempt[task_job[t]]
    aok = any_ok[row]
    kr = key[row]
    nds = ndev[row]
    sch = sched[row]
    if shared:
        n = query_shared_dra(delta, 0, delta.shape[0], sch, selr, sfl[row, S_RC], sfl[row, S_RM], fr, fg, nds,
                             sfl[row, S_TOP], spread, node_both, dev_free, dev_rel, dev_shared, idle_ok[row], aok,
                             kr, hk[row], hn[row], hs[row], gcap, dgpu, delta[:0], dra_free, dra_rel)
        if qcheck and over_capacity(path_mat, job_queue[task_job[t]], quota_req[t, 0], quota_req[t, 1],
                                    quota_req[t, 2], not pre, lim, des, qab) >= 0:
            return QUEUE
        r = SCAN
        first = n
        if released and old >= 0 and not aok[old] and sch[old]:
            fo = fg
            if mem:
                fo = fr[old]
            ko = old_node_key_shared(old, nds, sfl[row, S_TOP], spread, fo, dev_free, dev_rel, dev_shared, gcap, dgpu,
                                     dra_free, dra_rel)
            if n < 0 or ko < kr[n] or (ko == kr[n] and old < n):
                if _try_shared(t, old, released, old, fo, spread, mem, newg, i, pre, nds, lim,
                               des, task_request, devs, input_state, task_state, task_node, task_job, job_queue,
                               path_mat, num_active, job_version, queue_version, node_both, dev_free, dev_rel,
                               dev_shared, task_alloc, task_rel_take, qab, tdev, tndev, ttake, tntake, ji, jf):
                    return old
                if n < 0:
                    return NO_NODE  # the old node was the only candidate
        if first < 0:
            return NO_NODE
        fo = fg
        if mem:
            fo = fr[first]
        if _try_shared(t, first, released, old, fo, spread, mem, newg, i, pre, nds, lim, des,
                       task_request, devs, input_state, task_state, task_node, task_job, job_queue, path_mat,
                       num_active, job_version, queue_version, node_both, dev_free, dev_rel, dev_shared, task_alloc,
                       task_rel_take, qab, tdev, tndev, ttake, tntake, ji, jf):
            return first
    else:
        r = place_one_whole(t, released, old, qcheck, delta, hk[row], hn[row], i, pre, sch, selr,
                            sfl[row, S_RC], sfl[row, S_RM], k, nds, sfl[row, S_TOP], cap[row], col, spread,
                            idle_ok[row], aok, kr, hs[row], quota_req, lim, des, task_request, devs, gcap, dgpu,
                            dra_free, dra_rel, input_state, task_state, task_node, task_job, job_queue, path_mat,
                            num_active, job_version, queue_version, node_both, dev_free, dev_rel, task_alloc,
                            task_rel_take, qab, tdev, tndev, ttake, tntake, ji, jf)
        if r != SCAN:
            return r
    # the scan: candidates in (key, node) order (a stable sort of ascending nodes by key)
    N = aok.shape[0]
    cand = scr[0]
    ck = sck
    m = 0
    for n in range(N):
        if n == old:
            if sch[n]:
                cand[m] = n
                if aok[n]:
                    ck[m] = kr[n]
                elif shared:
                    fo = fg
                    if mem:
                        fo = fr[n]
                    ck[m] = old_node_key_shared(n, nds, sfl[row, S_TOP], spread, fo, dev_free, dev_rel, dev_shared,
                                                gcap, dgpu, dra_free, dra_rel)
                else:
                    ck[m] = old_node_key(n, nds, sfl[row, S_TOP], cap[row], col, spread, node_both, dev_free,
                                         dev_rel, gcap, dgpu, dra_free, dra_rel)
                m += 1
        elif aok[n]:
            cand[m] = n
            ck[m] = kr[n]
            m += 1
    order = scr[1]
    stable_order_into(ck, m, order, scr[2])
    for p in range(m):
        n = cand[order[p]]
        if shared:
            fo = fg
            if mem:
                fo = fr[n]
            if _try_shared(t, n, released, old, fo, spread, mem, newg, i, pre, nds, lim, des,
                           task_request, devs, input_state, task_state, task_node, task_job, job_queue, path_mat,
                           num_active, job_version, queue_version, node_both, dev_free, dev_rel, dev_shared,
                           task_alloc, task_rel_take, qab, tdev, tndev, ttake, tntake, ji, jf):
                return n
            continue
        if released and n == old:
            if unevict(i, t, pre, False, input_state, task_state, task_node, task_job, job_queue, path_mat,
                       num_active, job_version, queue_version, node_both, dev_free, dev_rel, task_alloc,
                       task_rel_take, qab, tdev, tndev, ttake, tntake, ji, jf):
                return n
            continue
        got = 0
        if k > 0:
            if nds[n] == 0:
                continue
            got = choose_whole(dev_free, dev_rel, n, nds[n], k, True, devs)
            if got < 0:
                continue
        if released:
            task_state[t] = _PEND
        place(i, t, n, True, pre, input_state, task_state, task_node, task_job, job_queue, path_mat, num_active,
              job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev,
              ttake, tntake, ji, jf, task_request, devs, got)
        return n
    return NO_NODE


@leaf_kernel
def evict_moved(i, t, n, preemptible, shared, gin, input_node, input_tdev, input_tndev, task_request, input_state,
                task_state, task_node, task_job, job_queue, path_mat, num_active, job_version, queue_version,
                node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev, ttake, tntake, ji, jf):
    """``CycleState.evict`` of a moved task (Running in the input, evicted and pipelined on node n in
    this cycle; no DRA claims): record entry ``i``, give back on n what it took (from releasing and
    from free, per device too, as :func:`journal.evict` does for a pipelined task), then it is
    Releasing again on its input node with its input devices and its request there as allocation
    (``_evict_general``: ``gin`` its GPU request there, which differs from ``task_request`` for a
    GPU-memory task; its gpuGroup list the caller restores); its allocation leaves its queue path,
    one active task less."""
    record(i, t, n, input_state, task_state, task_node, task_job, job_queue, path_mat, num_active, job_version,
           queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev, ttake, tntake,
           ji, jf)
    a0 = task_alloc[t, 0]
    a1 = task_alloc[t, 1]
    a2 = task_alloc[t, 2]
    per = a0 if shared else 1.0
    nd = tndev[t]
    give_back_pipelined(t, n, a0, a1, a2, per, nd, node_both, dev_free, dev_rel, task_rel_take, tdev, ttake,
                        tntake)
    # back on its input node: devices (the TaskRows write: first k, the rest of the old ones -1)
    k = input_tndev[t]
    for p in range(k):
        tdev[t, p] = input_tdev[t, p]
    for p in range(k, nd):
        tdev[t, p] = -1
    tndev[t] = k
    task_state[t] = _REL
    task_node[t] = input_node[t]
    task_alloc[t, 0] = gin
    for r in range(1, 3):
        task_alloc[t, r] = task_request[t, r]
    j = task_job[t]
    add_to_path(qab, path_mat, job_queue[j], preemptible, -a0, -a1, -a2)
    num_active[j] -= 1


@leaf_kernel
def run_scenario(io, pv, clear, wi, wf, scr, sck, seen, jst, tst, order_req, shared, input_node, input_tdev,
                 input_tndev, jmark, tmark, qmark,
                 sint, sfl, sched, sel, no_sel, no_frac, ndev, cap, idle_ok, any_ok, key, hk, hn, hs, pos, log,
                 path, kid_ptr, kids, stat, tot, prio, tb, qalloc, leaf_live, req, qkey, vrep,
                 dev_shared, newg, preempt, quota_req, lim, des, task_request, devs, gcap, dgpu, dra_free, dra_rel,
                 input_state, task_state, task_node, task_job, job_queue, path_mat, num_active, job_version,
                 queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev, ttake,
                 tntake, ji, jf):
    """``Simulation.run`` of one scenario in one call: evict ``victims``, then place job j's
    ``partial`` tasks and re-place the victims' jobs in queue/job order (``_allocate_in_order``),
    for scenarios whose jobs are all plain (``jst[:, J_OK] == 1``: no subgroups, no topology, every
    task on a shape row of its own compiled index - whole GPUs or none, or one shared GPU
    (``sint[row, S_SHARED]``: a fraction ``sfl[row, S_FGPU]``, or GPU memory with its fraction per
    node in the ``cap`` row) - no DRA claims; on a cluster with DRA GPUs ``gcap`` / ``dgpu`` /
    ``dra_free`` / ``dra_rel`` give the node order their devices, :func:`place_one_whole`) and whose
    victims are active (a moved one goes back
    to Releasing on its input node: :func:`evict_moved`). Returns
    1 / 0 (the beneficiary placed or not; like the Python code it does not roll back a failed
    scenario: the caller does) or, before changing anything,
    :data:`UNKNOWN_JOB`, :data:`NOT_PLAIN`, :data:`ROOM`.

    Python's steps, in its order: ``evict_many`` (one entry per victim), each victim job's tasks
    to re-allocate (``_victim_tasks_to_allocate``: pending or evicted tasks in task order
    ``tst[:, T_ORD]``, the gang's missing count or one), per leaf the jobs sorted by
    ``job_order_key`` (``jst`` priority, elastic state, static rank by age and name; among equal
    keys the later one first, as ``list.sort(reverse=True)`` + ``pop()``), the leaf tournament
    (:func:`build_paths` / :mod:`.victim_keys` ``rekey_path`` over ``req`` of each leaf's head, from the first
    time more than one leaf holds jobs; the caller only calls when the tie-breaks ``tb`` exist),
    and ``Placer.place_job`` per job: one task with its
    queue check in :func:`place_one_whole`, a gang's summed queue check (:func:`over_capacity`)
    then each task in task order, rolled back (:func:`journal.undo`, then the released victims
    Pending on a node made Releasing again, ``Placer.fix_after_rollback``) when one does not fit.

    ``io``: in: first journal entry, log length, the state's ``_protect_len``, the beneficiary j
    and how many of ``pv``'s first entries are its ``partial`` tasks, then how many ``victims``
    follow them; out: end of the entries, log length, ``_protect_len``, rollbacks below it
    (``resources_freed`` bumps) and, with :data:`ROOM`, the entries needed. (The scenario comes in
    arrays its caller keeps, so every call passes the very same arguments: the caller then calls
    the compiled version directly, ``Simulation._run_compiled``.) Nodes are appended to ``log`` as the Python code appends them
    to ``state.node_log`` (each entry's node, each undone entry's node in backward order).
    ``clear[i - i0]``: what entry i's task's gpuGroup list becomes (``GROUPS_*``: the Python code's
    ``[]`` after a placement or an undone placement, its input list when a moved task is evicted,
    the group of its device ``clear[i - i0, 1]`` after a shared placement). ``dev_shared`` is kept
    as ``CycleState.place`` keeps it (a device of a shared placement carries a gpuGroup; a group
    made by a placement a gang rollback undoes is gone again); the caller names new groups
    (``CycleState._new_group_name``) in entry order. ``newg``: one int64 of scratch.

    Scratch, the caller's, so that this kernel allocates nothing and runs without reference counting
    (``leaf_kernel``: at ~75 array arguments, an atomic increment and decrement of each per call, and no
    runtime object made for each when Python calls it): ``wi`` ((:data:`WI_ROWS`, W) int64, rows ``W_*``)
    and ``wf`` ((:data:`WF_ROWS`, W) float64, rows ``F_*``) with W at least two more than both ``pv``'s and
    ``clear``'s lengths (checked: :data:`ROOM` otherwise); ``scr`` / ``sck`` / ``seen`` per node, as
    :func:`_place_task` takes them (``seen`` all False, and left so)."""
    j = io[IO_J]
    partial = pv[:io[IO_NP]]
    victims = pv[io[IO_NP]:io[IO_NP] + io[IO_NV]]
    nv = victims.shape[0]
    i0 = io[IO_I0]
    lo = io[IO_LOG]
    if partial.shape[0] + nv + 2 > wi.shape[1]:  # (the caller sizes wi by pv and clear: not met)
        io[IO_NEED] = partial.shape[0] + nv
        return ROOM
    # ---- checks (nothing changed before they pass); marks are reset on every exit
    jl = wi[W_JL]
    jl[0] = j
    jmark[j] = 0
    m = 1
    code = 1
    if jst[j, J_OK] != 1:
        code = UNKNOWN_JOB if jst[j, J_OK] < 0 else NOT_PLAIN
    bound = nv + partial.shape[0]
    for x in range(nv):
        t = victims[x]
        if tmark[t]:
            code = NOT_PLAIN  # the same task twice
            nv = x
            break
        tmark[t] = True
        s = task_state[t]
        if not (s == _RUN or s == _BIND or s == _PIPE):
            if code == 1:
                code = NOT_PLAIN
        jj = task_job[t]
        if jmark[jj] < 0:
            jmark[jj] = m
            jl[m] = jj
            m += 1
            bound += jst[jj, J_COUNT]
            ok = jst[jj, J_OK]
            if ok != 1 and code != UNKNOWN_JOB:
                code = UNKNOWN_JOB if ok < 0 else (NOT_PLAIN if code == 1 else code)
    if code == 1 and (i0 + bound > ji.shape[0] or lo + 2 * bound > log.shape[0] or bound > clear.shape[0]
                      or bound + 2 > wi.shape[1]):
        io[IO_NEED] = bound
        code = ROOM
    if code != 1:
        for x in range(nv):
            tmark[victims[x]] = False
        for x in range(m):
            jmark[jl[x]] = -1
        return code
    # ---- evict the victims (CycleState.evict_many)
    rel = wi[W_REL]  # (1: the victim was Running)
    i = i0
    for x in range(nv):
        t = victims[x]
        s = task_state[t]
        n = task_node[t]
        rel[x] = 1 if s == _RUN else 0
        if s == _PIPE and input_state[t] == _RUN and input_node[t] >= 0:  # moved: back to Releasing
            gin = task_request[t, 0]
            row = tst[t, T_ROW]
            if sint[row, S_FRAC] != 0:  # GPU memory: its fraction of a device on its input node
                gin = cap[row, input_node[t]]
            evict_moved(i, t, n, preempt[task_job[t]], shared[t], gin, input_node, input_tdev, input_tndev,
                        task_request, input_state, task_state, task_node, task_job, job_queue, path_mat, num_active,
                        job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab,
                        tdev, tndev, ttake, tntake, ji, jf)
            clear[i - i0, 0] = GROUPS_INPUT
        else:
            evict(i, t, n, preempt[task_job[t]], shared[t], input_state, task_state, task_node, task_job, job_queue,
                  path_mat, num_active, job_version, queue_version, node_both, dev_free, dev_rel, task_alloc,
                  task_rel_take, qab, tdev, tndev, ttake, tntake, ji, jf)
            clear[i - i0, 0] = GROUPS_CLEAR if s != _RUN else GROUPS_KEEP  # (a placement of this cycle undone)
        i += 1
        log[lo] = n
        lo += 1
    # ---- what each job places (the beneficiary: partial, as given), its order request
    tf = wi[W_TF]
    toff = wi[W_TOFF]
    toff[0] = 0
    np_ = partial.shape[0]
    for x in range(np_):
        tf[x] = partial[x]
    toff[1] = np_
    for li in range(1, m):
        vj = jl[li]
        t0 = jst[vj, J_START]
        base = toff[li]
        c = 0
        for p in range(jst[vj, J_COUNT]):
            t = tst[t0 + p, T_ORD]
            st = task_state[t]
            if st == _PEND or (st == _REL and tmark[t]):
                tf[base + c] = t
                c += 1
        if c > 0:
            missing = jst[vj, J_MIN] - num_active[vj]
            if missing > 0:
                c = missing if c >= missing else 0
            else:
                c = 1
        toff[li + 1] = base + c
    for li in range(m):  # (row F_JREQ + r: the job's request in resource r)
        a = toff[li]
        b = toff[li + 1]
        for r in range(3):
            v = 0.0
            if b > a:
                v = order_req[tf[a], r]
                for p in range(a + 1, b):
                    v += order_req[tf[p], r]
            wf[F_JREQ + r, li] = v
    # ---- per leaf, jobs in pop order: (leaf, priority, elastic state, rank, later first), one stable sort
    ordr = wi[W_ORDR]
    for x in range(m):
        ordr[x] = m - 1 - x
    job_order_into(ordr, m, wi[W_TMP], jl, jst, num_active, job_queue)
    # leaf segments of ordr: qmark[leaf] -> segment; seg_ptr / seg_end
    nseg = 0
    seg_leaf = wi[W_SLEAF]
    seg_ptr = wi[W_SPTR]
    seg_end = wi[W_SEND]
    for x in range(m):
        q = job_queue[jl[ordr[x]]]
        if x == 0 or q != seg_leaf[nseg - 1]:
            seg_leaf[nseg] = q
            seg_ptr[nseg] = x
            qmark[q] = nseg
            nseg += 1
        seg_end[nseg - 1] = x + 1
    live = nseg
    tour = False
    nxt_leaf = -1
    dirty = -1
    protect = io[IO_PROTECT]
    freed = 0
    placed_b = False
    result = 1
    while live > 0:
        if live == 1:
            g = 0
            while seg_ptr[g] >= seg_end[g]:
                g += 1
            leaf = seg_leaf[g]
        else:
            if not tour:
                tour = True
                for g in range(nseg):
                    if seg_ptr[g] < seg_end[g]:
                        q = seg_leaf[g]
                        leaf_live[q] = True
                        for r in range(3):
                            req[q, r] = wf[F_JREQ + r, ordr[seg_ptr[g]]]
                nxt_leaf = build_paths(seg_leaf, nseg, path, kid_ptr, kids, stat, tot, prio, tb, qalloc, leaf_live,
                                       req, qkey, vrep)
            elif dirty >= 0:
                nxt_leaf = rekey_path(False, dirty, path, kid_ptr, kids, stat, tot, prio, tb, qalloc, leaf_live,
                                      req, qkey, vrep, False)
                dirty = -1
            leaf = nxt_leaf
        g = qmark[leaf]
        li = ordr[seg_ptr[g]]
        seg_ptr[g] += 1
        emptied = seg_ptr[g] >= seg_end[g]
        if emptied:
            live -= 1
        if tour:
            if emptied:
                leaf_live[leaf] = False
            else:
                for r in range(3):
                    req[leaf, r] = wf[F_JREQ + r, ordr[seg_ptr[g]]]
            dirty = leaf
        a = toff[li]
        b = toff[li + 1]
        if b == a:
            if li == 0:
                placed_b = True  # (place_job of no tasks)
            continue
        jj = jl[li]
        # ---- Placer.place_job(jj, tf[a:b]): one task with its queue check inside the placement; a
        # gang's summed queue check, task order, each task (one call site: compile time), rollback
        ok = True
        single = b - a == 1
        if not single:
            q0 = quota_req[tf[a], 0]
            q1 = quota_req[tf[a], 1]
            q2 = quota_req[tf[a], 2]
            for p in range(a + 1, b):
                q0 += quota_req[tf[p], 0]
                q1 += quota_req[tf[p], 1]
                q2 += quota_req[tf[p], 2]
            if over_capacity(path_mat, job_queue[jj], q0, q1, q2, not preempt[jj], lim, des, qab) >= 0:
                ok = False
                b = a  # nothing to place
            elif li == 0:  # the beneficiary's tasks as given: into task order (insertion sort)
                for p in range(a + 1, b):
                    t = tf[p]
                    y = p
                    while y > a and tst[tf[y - 1], T_POS] > tst[t, T_POS]:
                        tf[y] = tf[y - 1]
                        y -= 1
                    tf[y] = t
        cp = i
        for p in range(a, b):
            t = tf[p]
            n = _place_task(t, single, tst[t, T_ROW], i, log, lo, seen, scr, sck, sint, sfl, sched, sel, no_sel,
                            no_frac, ndev, cap, idle_ok, any_ok, key, hk, hn, hs, pos, newg, preempt, quota_req, lim,
                            des, task_request, devs, gcap, dgpu, dra_free, dra_rel, input_state, task_state, task_node,
                            task_job, job_queue, path_mat, num_active, job_version, queue_version, node_both,
                            dev_free, dev_rel, dev_shared, task_alloc, task_rel_take, qab, tdev, tndev, ttake, tntake,
                            ji, jf)
            if n < 0:
                ok = False
                break
            if task_state[t] == _RUN:
                clear[i - i0, 0] = GROUPS_KEEP
            elif shared[t]:  # CycleState.place names the device's gpuGroup (a new one: undone below)
                clear[i - i0, 0] = GROUPS_NEW if newg[0] else GROUPS_JOIN
                clear[i - i0, 1] = tdev[t, 0]
            else:
                clear[i - i0, 0] = GROUPS_CLEAR
            i += 1
            log[lo] = n
            lo += 1
        if not ok and not single and b > a:  # Placer.rollback(cp): undo, log the nodes, fix released victims
            if i > cp:
                if cp < protect:
                    freed += 1
                    protect = cp
                undo(cp, i, task_state, task_node, task_job, job_queue, path_mat, num_active, job_version,
                     queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev,
                     ttake, tntake, ji, jf)
                for e in range(cp, i):  # a gpuGroup made by an undone placement is gone again
                    if clear[e - i0, 0] == GROUPS_NEW:
                        dev_shared[ji[e, 4], clear[e - i0, 1]] = False
                for e in range(i - 1, cp - 1, -1):
                    n = ji[e, 4]
                    if n >= 0:
                        log[lo] = n
                        lo += 1
                i = cp
            for x in range(nv):
                t = victims[x]
                if rel[x] != 0 and task_state[t] == _PEND and task_node[t] >= 0:
                    task_state[t] = _REL
        if li == 0:
            if not ok:
                result = 0
                break
            placed_b = True
    if result == 1 and not placed_b:
        result = 0
    for x in range(nv):
        tmark[victims[x]] = False
    for x in range(m):
        jmark[jl[x]] = -1
    for g in range(nseg):
        q = seg_leaf[g]
        qmark[q] = -1
        if tour:  # (the tournament's rows back to "no live leaf": only its leaves' paths were written)
            leaf_live[q] = False
            for k in range(path.shape[1]):
                a = path[q, k]
                if a < 0:
                    break
                vrep[a] = -1
    io[IO_END] = i
    io[IO_LOG_END] = lo
    io[IO_PROTECT_END] = protect
    io[IO_FREED] = freed
    return result
