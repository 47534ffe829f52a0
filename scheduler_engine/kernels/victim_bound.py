"""The prefix search's bound for reclaim's candidates named by their leaves, without their job array.

The bound (:class:`scheduler_engine.solvers.accumulation.PrefixSearch`): per node, the GPUs of every
active, placed task of the candidate jobs, added in task order (:func:`.victim_run.candidate_gpu`).
Reclaim's candidates are the member jobs (preemptible, with an active task) of a set of victim
leaves (:class:`scheduler_engine.solvers.victim_order.RunCandidates`); at 10,000 nodes ~12,600 of
~90,000 jobs, so :func:`.victim_run.candidate_gpu` takes its pass over every task with a per-job mark
made from the job array, which had to be gathered from the leaves' runs first. Here the mark is
read from the leaf mask and the membership row directly: the same pass, the same terms in the same
order, so the sums are the same floats.

The bound is kept across the job loop's commits too (:meth:`scheduler_engine.solvers.victim_order.
LeafRuns.bound`): per leaf mask, patched on the nodes a commit changed, and a search with recorded
victims takes it but on their nodes. Both recompute single nodes, which needs each node's tasks in task
order: per-node lists (:func:`move_tasks` keeps them, :func:`member_gpu` sums a node from them).
"""
from __future__ import annotations

import numpy as np

from . import leaf_kernel
from .gpu_fit import EPS, pack_best_fit


@leaf_kernel
def member_gpu(every: bool, rows: np.ndarray, head: np.ndarray, nxt: np.ndarray, keep: np.ndarray,
               member: np.ndarray, job_queue: np.ndarray, task_job: np.ndarray, task_state: np.ndarray,
               active: np.ndarray, task_node: np.ndarray, task_gpu: np.ndarray, out: np.ndarray) -> None:
    """Add to ``out`` (per node) the GPUs of every active, placed task whose job is a member
    (``member``) of a kept leaf (``keep[job_queue[job]]``), in task order: what
    :func:`.victim_run.candidate_gpu` adds for the job array of those members.

    ``every``: one pass over every task. Otherwise the nodes ``rows`` only, each from its task list
    (``head[n]``, then ``nxt[t]``: every task with ``task_node[t] == n``, ascending, as
    :class:`~scheduler_engine.solvers.victim_order.LeafRuns` keeps it): a node's sum only ever adds
    that node's tasks, so its terms and their order are the full pass's, and so is the float."""
    if every:
        for t in range(task_state.shape[0]):
            if active[task_state[t]]:
                j = task_job[t]
                if member[j] and keep[job_queue[j]]:
                    n = task_node[t]
                    if n >= 0:
                        out[n] = out[n] + task_gpu[t]
        return
    for i in range(rows.shape[0]):
        n = rows[i]
        t = head[n]
        while t >= 0:
            if active[task_state[t]]:
                j = task_job[t]
                if member[j] and keep[job_queue[j]]:
                    out[n] = out[n] + task_gpu[t]
            t = nxt[t]


@leaf_kernel
def move_tasks(tasks: np.ndarray, task_node: np.ndarray, where: np.ndarray, head: np.ndarray, nxt: np.ndarray,
               changed: np.ndarray) -> int:
    """Bring the per-node task lists (``head`` / ``nxt``, each ascending; ``where[t]`` the list task t is
    in, -1: none) up to date for ``tasks`` (distinct): a task whose node moved leaves its old list and
    is linked into its new one at its place in task order. Every task's old and new node (also of a
    task whose node did not move: its state or allocation may have) go to ``changed``; returns how many
    were written (at most two per task)."""
    m = 0
    for i in range(tasks.shape[0]):
        t = tasks[i]
        old = where[t]
        new = task_node[t]
        if old >= 0:
            changed[m] = old
            m += 1
        if new >= 0 and new != old:
            changed[m] = new
            m += 1
        if new == old:
            continue
        if old >= 0:  # unlink from the old node's list
            p = -1
            x = head[old]
            while x != t:
                p = x
                x = nxt[x]
            if p < 0:
                head[old] = nxt[t]
            else:
                nxt[p] = nxt[t]
            nxt[t] = -1
        if new >= 0:  # link in ascending order
            p = -1
            x = head[new]
            while x >= 0 and x < t:
                p = x
                x = nxt[x]
            nxt[t] = x
            if p < 0:
                head[new] = t
            else:
                nxt[p] = t
        where[t] = new
    return m


@leaf_kernel
def leaf_task_nodes(leaves: np.ndarray, cj: np.ndarray, lo: np.ndarray, n: np.ndarray, job_start: np.ndarray,
                    job_count: np.ndarray, task_node: np.ndarray, stamped: bool, node_epoch: np.ndarray, since: int,
                    limit: int, mark: np.ndarray, out: np.ndarray) -> int:
    """The distinct nodes of every placed task of the member jobs of ``leaves`` (each leaf's run ``cj[lo[q]:lo[q] +
    n[q]]``, :class:`~scheduler_engine.solvers.victim_order.LeafRuns`) and, with ``stamped``, of every node whose
    ``node_epoch`` is above ``since`` into ``out`` (N,), in no particular order; returns how many, or stops at
    once when more than ``limit`` (returns a count above it). ``mark`` (N,) is all False on entry and on return.

    Those are the only nodes whose bound sum a leaf mask with or without those leaves can change, each summed
    again on its own (:func:`member_gpu` rows mode: one node's terms in task order, whatever the order of the
    nodes, but each node once). The member jobs' tasks repeat nodes many times: their distinct nodes by the
    mark row instead of ``np.unique`` of every task's node (a sort of thousands of entries per new mask)."""
    m = 0
    for i in range(leaves.shape[0]):
        q = leaves[i]
        for x in range(lo[q], lo[q] + n[q]):
            j = cj[x]
            for t in range(job_start[j], job_start[j] + job_count[j]):
                v = task_node[t]
                if v >= 0 and not mark[v]:
                    mark[v] = True
                    out[m] = v
                    m += 1
            if m > limit:
                break
        if m > limit:
            break
    if stamped and m <= limit:
        for v in range(node_epoch.shape[0]):
            if node_epoch[v] > since and not mark[v]:
                mark[v] = True
                out[m] = v
                m += 1
    for i in range(m):
        mark[out[i]] = False
    return m


@leaf_kernel
def capacity_fits(base: np.ndarray, gpu: np.ndarray, mask: np.ndarray, use_mask: bool, thr: float) -> bool:
    """:func:`scheduler_engine.solvers.idle_gpus.may_fit` for one GPU task: ``float(cap.max()) >= thr`` of
    ``cap = base + gpu`` (0.0 off the node selector's ``mask`` when ``use_mask``), one pass and no (N,)
    temporaries. As numpy's ``max``, a NaN anywhere is the maximum (and fails the test). N > 0."""
    best = -np.inf
    for n in range(base.shape[0]):
        c = base[n] + gpu[n]
        if use_mask and not mask[n]:
            c = 0.0
        if c != c:
            return False
        if c > best:
            best = c
    return best >= thr


@leaf_kernel
def pack_fits(base: np.ndarray, gpu: np.ndarray, need: np.ndarray, sel: np.ndarray, masks: np.ndarray,
              idxbuf: np.ndarray, capbuf: np.ndarray) -> bool:
    """:func:`scheduler_engine.solvers.idle_gpus.may_fit` for several tasks (``need``, ``sel``, ``masks``:
    :func:`~scheduler_engine.solvers.idle_gpus.demand`'s): True without a GPU request (> EPS); else
    the nodes whose ``base + gpu`` could hold the smallest request (``>= min - 1e-9``), ascending, with
    those capacities in ``idxbuf`` / ``capbuf`` (N,), and the best-fit packing
    (:func:`.gpu_fit.pack_best_fit`) on them. The same sums, nodes and order as the numpy expression."""
    lo = np.inf
    some = False
    for i in range(need.shape[0]):
        if need[i] > EPS:
            some = True
            if need[i] < lo:
                lo = need[i]
    if not some:
        return True
    mthr = lo - 1e-9
    m = 0
    for n in range(base.shape[0]):
        c = base[n] + gpu[n]
        if c >= mthr:
            idxbuf[m] = n
            capbuf[m] = c
            m += 1
    return m > 0 and pack_best_fit(need, sel, masks, idxbuf[:m], capbuf[:m])
