"""Pop and accumulate victims in victim order until Python has to act (the accumulation loop of
:class:`scheduler_engine.solvers.accumulation.PrefixSearch` over
:class:`scheduler_engine.solvers.victim_order.VictimQueue` in its total-order mode).

One call runs the loop for as long as every step is a plain array update: the next leaf's head is
a whole candidate job from the leaf's sorted run (no pushed-back elastic remainder in that leaf)
with exactly one active task and no subgroups; the victim is either passed over (its leaf retook
or is under a queue the validator refused: ``skip_leaf``; its task was recorded by the previous
prefix) or accumulated (per-node GPU sums, the single-task GPU-count filter, the best node) and,
while no node could hold the beneficiary's single task yet, the loop goes on. It returns:

* :data:`EMIT`: a victim was accumulated and the scenarios it opens must be considered (Python
  emits the node-local and all-accumulated scenarios, keeps the tried sets and simulates);
* :data:`PY`: the next head is not plain (elastic remainder, several active tasks, subgroups, no
  active task): Python pops that victim itself (nothing of it was consumed, not even a step);
* :data:`END`: no live leaf is left;
* :data:`BUDGET`: the search budget (steps) is exhausted (the step was counted);
* :data:`JOBS`: the victim-job budget is spent (the victim was popped, not accumulated).

Arrays of the victim order (besides :mod:`.victim_keys`' tree arrays): ``cj`` the candidate jobs,
all leaves' sorted runs concatenated; ``hi`` (Q) the end of each leaf's run; ``ptr`` (Q) the next
position in it; ``popped`` (Q, 3) / ``has_popped`` (Q) what each leaf gave up so far; ``heap_live``
(Q) a leaf holds pushed-back remainders; per candidate position ``calloc`` (C, 3) its whole
allocation and ``ctask`` its single active task (-1: not plain). Accumulation: ``is_rec`` (T)
recorded tasks, ``task_node`` / ``task_gpu`` (T), ``all_gpu`` / ``cap`` / ``base`` / ``good`` (N),
output buffers ``pot`` / ``pot_job`` (accumulated tasks and their jobs) and ``emptied`` (leaves
that ran out); ``ist`` = [next leaf, steps, search budget, victim jobs, victim-job budget,
accumulated by this call, good nodes, emptied count], ``fst`` = [best node capacity].

Room for what stays in Python: subgroup jobs and jobs with several active tasks (their task order,
elastic push-backs) and DRA devices are ``ctask = -1`` heads, decided by the Python path; the
arrays are per candidate position, so a per-task layout (``ctask`` as a CSR of tasks) can replace
the single task without changing the victim-order part.
"""
from __future__ import annotations

import numpy as np

from . import kernel
from .victim_keys import rekey_path

EMIT = 0
PY = 1
END = 2
BUDGET = 3
JOBS = 4


@kernel
def run_victims(path: np.ndarray, kid_ptr: np.ndarray, kids: np.ndarray, stat: np.ndarray, tot: np.ndarray,
                prio: np.ndarray, tb: np.ndarray, alloc: np.ndarray, leaf_live: np.ndarray, req: np.ndarray,
                key: np.ndarray, vrep: np.ndarray, cj: np.ndarray, hi: np.ndarray, ptr: np.ndarray,
                popped: np.ndarray, has_popped: np.ndarray, heap_live: np.ndarray, calloc: np.ndarray,
                ctask: np.ndarray, skip_leaf: np.ndarray, is_rec: np.ndarray, task_node: np.ndarray,
                task_gpu: np.ndarray, all_gpu: np.ndarray, cap: np.ndarray, base: np.ndarray, good: np.ndarray,
                fast: bool, thr: float, single: bool, need_lo: float, pot: np.ndarray, pot_job: np.ndarray,
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
        knext = rekey_path(True, leaf, path, kid_ptr, kids, stat, tot, prio, tb, alloc, leaf_live, req, key, vrep)
        # accumulate it
        if skip_leaf[leaf] or is_rec[t]:
            continue
        if 0 <= max_jobs <= n_jobs:
            code = JOBS
            break
        pot[n_pot] = t
        pot_job[n_pot] = vj
        n_pot += 1
        n_jobs += 1
        n = task_node[t]
        if n >= 0:
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
        code = EMIT
        break
    ist[0] = knext
    ist[1] = steps
    ist[3] = n_jobs
    ist[5] = n_pot
    ist[6] = n_good
    ist[7] = n_empt
    fst[0] = best_all
    return code
