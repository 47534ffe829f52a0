"""Pop and accumulate victims in victim order until Python has to act (the accumulation loop of
:class:`scheduler_engine.solvers.accumulation.PrefixSearch` over
:class:`scheduler_engine.solvers.victim_order.VictimQueue` in its total-order mode).

One call runs the loop for as long as every step is a plain array update: the next leaf's head is
a whole candidate job from the leaf's sorted run (no pushed-back elastic remainder in that leaf)
with exactly one active task and no subgroups; the victim is either passed over (its leaf retook
or is under a queue the validator refused: ``skip_leaf``; its task was recorded by the previous
prefix) or accumulated (per-node GPU sums, the single-task GPU-count filter, the best node). While
no node could hold the beneficiary's single task yet, the loop goes on; after that, for a single
GPU task (``fast``) or several tasks with GPUs (``multi``: the best-fit packing of
:func:`.gpu_fit.pack_best_fit` on the nodes that could hold the smallest task), the loop also
decides the victim's scenarios when none of them can be simulated: the node-local set of its node
(every accumulated, not dropped victim of the jobs on that node) fails the GPU-count filter and
the all-accumulated set is the same or fails it too. Such a node-local set is one Python would have added to its tried sets: it
is logged (node, accumulated count, dropped count, set size) and Python rebuilds it when a set of
that size is looked up (:meth:`~scheduler_engine.solvers.accumulation.PrefixSearch._tried_logged`).
It returns:

* :data:`EMIT`: a victim was accumulated and the scenarios it opens must be considered by Python
  (which keeps the tried sets and simulates);
* :data:`PY`: the next head is not plain (elastic remainder, several active tasks, subgroups, no
  active task): Python pops that victim itself (nothing of it was consumed, not even a step);
* :data:`END`: no live leaf is left;
* :data:`BUDGET`: the search budget (steps) is exhausted (the step was counted);
* :data:`JOBS`: the victim-job budget is spent (the victim was popped, not accumulated).

Arrays of the victim order (besides :mod:`.victim_keys`' tree arrays): ``cj`` the candidate jobs,
all leaves' sorted runs concatenated; ``hi`` (Q) the end of each leaf's run; ``ptr`` (Q) the next
position in it; ``popped`` (Q, 3) / ``has_popped`` (Q) what each leaf gave up so far; ``heap_live``
(Q) a leaf holds pushed-back remainders; per candidate position ``calloc`` (C, 3) its whole
allocation and ``ctask`` its single active task (-1: not plain).

Accumulation: ``is_rec`` (T) recorded tasks; ``task_node`` / ``task_gpu`` (T); per node
``all_gpu`` (recorded + accumulated, not dropped), ``cap`` (base + recorded + accumulated),
``base``, ``good`` (passes the single-task filter), ``rec_gpu``; the accumulated victims in order
``pot`` / ``pot_job`` / ``pot_node`` with ``pot_next`` (the job's next one) and ``drop_seq`` (when it was dropped,
-1: kept); per job ``job_first`` / ``job_last``; the jobs on each node as linked entries
``node_head`` (N) / ``ent_job`` / ``ent_next``; scratch ``tsum`` / ``tstamp`` (N) and ``loc``;
``log`` (rows node, accumulated, dropped, size); for ``multi`` the beneficiary's requests as
:func:`scheduler_engine.solvers.idle_gpus.demand` gives them (``need``, ``sel``, ``masks``), its
smallest GPU request less 1e-9 (``mthr``) and scratch ``idxbuf`` / ``capbuf`` (N); ``emptied`` (leaves that ran out); ``ist`` =
[next leaf, steps, search budget, victim jobs, victim-job budget, accumulated, good nodes, emptied,
dropped, node entries, logged, stamp, recorded, accumulated before the call], ``fst`` = [best
node capacity].

Room for what stays in Python: subgroup jobs and jobs with several active tasks (their task order,
elastic push-backs) and DRA devices are ``ctask = -1`` heads, decided by the Python path (which
keeps the same accumulated-victim arrays); the arrays are per candidate position and per
accumulated task, so a per-task layout of the heads (a CSR of tasks instead of ``ctask``) fits
without changing the victim-order part.
"""
from __future__ import annotations

import numpy as np

from . import kernel
from .gpu_fit import pack_best_fit
from .victim_keys import rekey_path

EMIT = 0
PY = 1
END = 2
BUDGET = 3
JOBS = 4


@kernel
def _node_local(n: int, pot: np.ndarray, pot_next: np.ndarray, drop_seq: np.ndarray, job_first: np.ndarray,
                node_head: np.ndarray, ent_job: np.ndarray, ent_next: np.ndarray, loc: np.ndarray) -> int:
    """The positions of the node-local set of node n (accumulated, not dropped victims of every job
    with a victim on n) into ``loc``, ascending; returns how many."""
    cnt = 0
    e = node_head[n]
    while e >= 0:
        u = job_first[ent_job[e]]
        while u >= 0:
            if drop_seq[u] < 0:
                # insertion into the ascending run (sets are a few victims)
                k = cnt
                while k > 0 and loc[k - 1] > u:
                    loc[k] = loc[k - 1]
                    k -= 1
                loc[k] = u
                cnt += 1
            u = pot_next[u]
        e = ent_next[e]
    return cnt


@kernel
def run_victims(path: np.ndarray, kid_ptr: np.ndarray, kids: np.ndarray, stat: np.ndarray, tot: np.ndarray,
                prio: np.ndarray, tb: np.ndarray, alloc: np.ndarray, leaf_live: np.ndarray, req: np.ndarray,
                key: np.ndarray, vrep: np.ndarray, cj: np.ndarray, hi: np.ndarray, ptr: np.ndarray,
                popped: np.ndarray, has_popped: np.ndarray, heap_live: np.ndarray, calloc: np.ndarray,
                ctask: np.ndarray, skip_leaf: np.ndarray, is_rec: np.ndarray, task_node: np.ndarray,
                task_gpu: np.ndarray, all_gpu: np.ndarray, cap: np.ndarray, base: np.ndarray, good: np.ndarray,
                rec_gpu: np.ndarray, fast: bool, thr: float, single: bool, need_lo: float, local_filter: bool,
                multi: bool, mthr: float, need: np.ndarray, sel: np.ndarray, masks: np.ndarray, idxbuf: np.ndarray,
                capbuf: np.ndarray,
                pot: np.ndarray, pot_job: np.ndarray, pot_node: np.ndarray, pot_next: np.ndarray,
                drop_seq: np.ndarray, job_first: np.ndarray, job_last: np.ndarray, node_head: np.ndarray, ent_job: np.ndarray,
                ent_next: np.ndarray, tsum: np.ndarray, tstamp: np.ndarray, loc: np.ndarray, log: np.ndarray,
                emptied: np.ndarray, ist: np.ndarray, fst: np.ndarray) -> int:
    """The accumulation loop (module docstring); returns the code of the point where it stopped."""
    knext = ist[0]
    steps = ist[1]
    budget = ist[2]
    n_jobs = ist[3]
    max_jobs = ist[4]
    n_pot = ist[5]
    n_good = ist[6]
    n_empt = ist[7]
    n_drop = ist[8]
    n_ent = ist[9]
    n_log = ist[10]
    # the victim order's flag as a computed bool: a literal True would make numba compile a second
    # specialisation of rekey_path (and queue_key) beside the one Python callers use (cold cache)
    victim_mode = ist.shape[0] > 0
    stamp = ist[11]
    n_rec = ist[12]
    ist[13] = n_pot
    best_all = fst[0]
    code = END
    while True:
        leaf = knext
        if leaf < 0:
            code = END
            break
        i = ptr[leaf]
        if heap_live[leaf] or i >= hi[leaf] or ctask[i] < 0:
            code = PY
            break
        steps += 1
        if 0 <= budget < steps:
            code = BUDGET
            break
        # pop the leaf's head: what the leaf gave up grows by its whole allocation
        t = ctask[i]
        vj = cj[i]
        ptr[leaf] = i + 1
        if has_popped[leaf]:
            for r in range(3):
                popped[leaf, r] = popped[leaf, r] + calloc[i, r]
        else:
            for r in range(3):
                popped[leaf, r] = calloc[i, r]
            has_popped[leaf] = True
        if i + 1 < hi[leaf]:
            for r in range(3):
                req[leaf, r] = popped[leaf, r] + calloc[i + 1, r]
        else:
            leaf_live[leaf] = False
            emptied[n_empt] = leaf
            n_empt += 1
        knext = rekey_path(victim_mode, leaf, path, kid_ptr, kids, stat, tot, prio, tb, alloc, leaf_live, req, key, vrep)
        # accumulate it (a job popped whole from its leaf's run is new to the accumulated set)
        if skip_leaf[leaf] or is_rec[t]:
            continue
        if 0 <= max_jobs <= n_jobs:
            code = JOBS
            break
        u = n_pot
        pot[u] = t
        pot_job[u] = vj
        pot_next[u] = -1
        drop_seq[u] = -1
        job_first[vj] = u
        job_last[vj] = u
        n_pot += 1
        n_jobs += 1
        n = task_node[t]
        pot_node[u] = n
        if n >= 0:
            ent_job[n_ent] = vj
            ent_next[n_ent] = node_head[n]
            node_head[n] = n_ent
            n_ent += 1
            g = task_gpu[t]
            all_gpu[n] = all_gpu[n] + g
            if fast:
                ok = base[n] + all_gpu[n] >= thr
                if ok != good[n]:
                    good[n] = ok
                    n_good += 1 if ok else -1
            c = cap[n] + g
            cap[n] = c
            if c > best_all:
                best_all = c
        if single and best_all < need_lo:
            continue
        if not (fast or multi) or n < 0:
            code = EMIT
            break
        # the scenarios of this victim: its node's node-local set, then all accumulated victims
        cnt = _node_local(n, pot, pot_next, drop_seq, job_first, node_head, ent_job, ent_next, loc)
        live = n_pot - n_drop
        if cnt > 0:
            if fast and not local_filter:
                code = EMIT  # the recorded victims alone already pass: every set passes the filter
                break
            # per node: recorded victims plus the set's victims there, in accumulation order
            stamp += 1
            for k in range(cnt):
                tk = pot[loc[k]]
                tn = task_node[tk]
                if tn >= 0:
                    if tstamp[tn] != stamp:
                        tstamp[tn] = stamp
                        tsum[tn] = rec_gpu[tn]
                    tsum[tn] = tsum[tn] + task_gpu[tk]
            passes = False
            if fast:
                for k in range(cnt):
                    tn = task_node[pot[loc[k]]]
                    if tn >= 0 and base[tn] + tsum[tn] >= thr:
                        passes = True
                        break
            else:  # idle_gpus.may_fit: pack on the nodes that could hold the smallest GPU task
                m = 0
                for v in range(base.shape[0]):
                    c = base[v] + (tsum[v] if tstamp[v] == stamp else rec_gpu[v])
                    if c >= mthr:
                        idxbuf[m] = v
                        capbuf[m] = c
                        m += 1
                passes = m > 0 and pack_best_fit(need, sel, masks, idxbuf[:m], capbuf[:m])
            if passes:
                code = EMIT
                break
        if cnt != live and live > 0:
            if fast:
                if n_good > 0:
                    code = EMIT  # the all-accumulated set passes its filter
                    break
            else:
                m = 0
                for v in range(base.shape[0]):
                    c = base[v] + all_gpu[v]
                    if c >= mthr:
                        idxbuf[m] = v
                        capbuf[m] = c
                        m += 1
                if m > 0 and pack_best_fit(need, sel, masks, idxbuf[:m], capbuf[:m]):
                    code = EMIT
                    break
        if cnt > 0:
            log[n_log, 0] = n
            log[n_log, 1] = n_pot
            log[n_log, 2] = n_drop
            log[n_log, 3] = cnt + n_rec
            n_log += 1
    ist[0] = knext
    ist[1] = steps
    ist[3] = n_jobs
    ist[5] = n_pot
    ist[6] = n_good
    ist[7] = n_empt
    ist[9] = n_ent
    ist[10] = n_log
    ist[11] = stamp
    fst[0] = best_all
    return code
