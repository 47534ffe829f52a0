"""The victim search's compiled driver: the victim loop (:func:`.victim_run.run_victims`) and the
scenarios it emits, simulated (:func:`.scenario.run_scenario`), rolled back and pruned in one call
for as long as no scenario needs Python.

Why: at 2,000 nodes about 29,000 of a cycle's ~34,000 simulated scenarios do not place the
beneficiary. Each one went back to Python between the loop and the simulation (the victims'
gathers, the journal's object half, the rollback, ``Placer.fix_after_rollback``, the pruning: ~30 us
of Python around ~15 us of compiled work). :func:`run_search` keeps such a scenario in compiled code
and does what those Python steps do to the state, in their order:

* ``VictimSolver._try``'s counters (``tried``; the steps, summed victims, in ``ist[IS_STEPS]``) and
  the scenario: the beneficiary's ``part``, the recorded victims ``rec``, then the set the loop
  emitted, written into the scenario kernel's ``pv`` as ``Simulation._run_compiled`` writes it;
* after the call what ``_run_compiled`` does with its results (change log length, ``_protect_len``,
  ``resources_freed``), kept in ``ds`` until Python reads them back;
* the victims served before the beneficiary (active after the scenario, in victim order: the
  pruning's input), then ``CycleState.rollback`` to the scenario's start: the ``_protect_len`` rule
  (a rollback below it bumps ``resources_freed``), the numeric undo (:func:`.journal.undo`), and
  ``Placer.fix_after_rollback`` for the victims that were Running; where Python's rollback logs the
  undone entries' nodes, the scenario's entries are dropped from the change log instead and the shape
  rows it queried caught up on its nodes (:func:`.scenario.forget_log`: the log's readers answer the
  same, and the log does not grow by ~40 entries per kept scenario);
* ``PrefixSearch.prune`` (:func:`.victim_run.drop_served`, no blocked queue: nothing was validated),
  the leaves it marks collected in ``qbuf`` for Python's ``retook`` set;
* the loop's limit flag (``IS_STOP``) as Python's loop sets it before its next call: the scenario limit
  reached, or the budget found spent at Python's last look (``ist[IS_STOP]`` on entry).

The journal's object half of a scenario kept here is never written, and need not be: Python's steps
would write it after the call and restore it in the rollback, leaving every object as it was. Each
entry's gpuGroup list is restored to the very list it held; a node's gpuGroup map (entries of tasks
sharing a GPU) to a copy of the map it had, whose devices set the node's ``dev_shared`` row - the row
it had, since ``dev_shared[n, d]`` marks exactly the devices of node n's map (``CycleState`` sets both
together, the scenario kernel marks a device when Python names its new group); so the only mark to
take back here is that of a device whose gpuGroup the scenario made (``GROUPS_NEW``), as the scenario
kernel does after a gang's rollback. No entry holds DRA devices (tasks with claims are not plain).

It returns to Python (the code says where) for a scenario that places the beneficiary (the validator
is Python's), simulated, its results left in ``io`` (:data:`SIMULATED`: Python finishes it as
``VictimSolver._try`` does after ``Simulation.run``), for a scenario the scenario kernel refuses
before changing anything (a job not looked at yet, not plain, no room: :data:`.victim_run.SIM`,
Python's ``_try`` simulates it), for every code of the loop other than ``SIM`` (its own returns), and
after ``ds[D_K]`` scenarios kept here (:data:`YIELD`; ``-1``: no limit), so that Python still reads a
wall-clock budget between scenarios. ``tests/scheduler_engine/test_kernels_search.py`` compares the
state, the searches and whole cycles with and without it.
"""
from __future__ import annotations

from . import leaf_kernel
from .journal import _BIND, _PEND, _PIPE, _REL, _RUN, undo
from .scenario import (GROUPS_NEW, IO_END, IO_FREED, IO_I0, IO_J, IO_LOG, IO_LOG_END, IO_NP, IO_NV, IO_PROTECT,
                       IO_PROTECT_END, forget_log, run_scenario)
from .victim_run import IS_SETLEN, IS_STEPS, IS_STOP, PI_LOC, PI_POT, QI_SKIP, SIM, drop_served, run_victims

#: :func:`run_search` return codes besides :mod:`.victim_run`'s (``PY`` .. ``ROOM``, 1-7)
SIMULATED = 8  # a scenario simulated here that Python finishes (placed, or an object half): results in ``io``
YIELD = 9  # ``ds[D_K]`` scenarios were kept here: Python looks at its limits, then calls again

#: ``ds`` fields (int64): in - the most scenarios kept per call (-1: no limit), prune, the scenario
#: limit, the beneficiary, its leaf, its tasks in ``pv``, the journal's length; in/out - scenarios tried,
#: the change log's length, ``_protect_len``; out - ``resources_freed`` to add, leaves in ``qbuf``,
#: scenarios kept, the last one's victims (their count) and its result (with SIMULATED; with a refused
#: scenario, SIM, the scenario kernel's code); gpuGroups made and taken back by kept scenarios (summed over
#: calls: tests); in - simulate the set the last call handed back first (its jobs learnt since)
(D_K, D_PRUNE, D_MAX, D_J, D_OWN, D_NP, D_I0, D_TRIED, D_LOG, D_PROTECT, D_FREED, D_NQ, D_KEPT, D_NV,
 D_R, D_GROUPS, D_REDO) = range(17)
D_FIELDS = 17
#: rows of ``vs`` (int64, one column per victim of the scenario): its node and whether it was Running
#: before the scenario (``Placer.released``), the served victims (the pruning's input)
VS_NODE, VS_RUN, VS_SERVED = range(3)


@leaf_kernel
def run_search(ds, rec, part, vs, va, qbuf,
               path, kid_ptr, kids, stat, tot, prio, tb, alloc, leaf_live, req, key, vrep, qi, popped, cj, walloc,
               glen, gstart, gt, ti, task_node, task_gpu, nf, ni, pi, vji, need, sel, masks, tt, pool, ist, fst,
               io, pv, clear, wi, wf, scr, sck, seen, jst, tst, order_req, shared, input_node, input_tdev,
               input_tndev, jmark, tmark, qmark, sint, sfl, sched, ssel, no_sel, no_frac, ndev, cap, idle_ok, any_ok,
               skey, hk, hn, hs, pos, log, spath, skid_ptr, skids, sstat, stot, sprio, stb, qalloc,
               sleaf_live, sreq, qkey, svrep, dev_shared, newg, preempt, quota_req, lim, des, task_request, devs,
               gcap, dgpu, dra_free, dra_rel, input_state, task_state, task_node_j, task_job, job_queue, path_mat,
               num_active, job_version, queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab,
               tdev, tndev, ttake, tntake, ji, jf):
    """The victim loop with its failing scenarios (module docstring). Arguments: the driver's own
    (``ds``, the recorded victims ``rec``, the beneficiary's tasks ``part``, per victim of the scenario
    ``vs`` and its allocation before the scenario ``va`` (W, 3), the pruned leaves ``qbuf``), then
    :func:`.victim_run.run_victims`' and :func:`.scenario.run_scenario`'s, each in its own order."""
    np_ = ds[D_NP]
    nr = rec.shape[0]
    kmax = ds[D_K]
    prune = ds[D_PRUNE] != 0
    max_sc = ds[D_MAX]
    own = ds[D_OWN]
    i0 = ds[D_I0]
    tried = ds[D_TRIED]
    logn = ds[D_LOG]
    protect = ds[D_PROTECT]
    stop0 = ist[IS_STOP] != 0
    freed = 0
    nq = 0
    kept = 0
    pot, loc = pi[PI_POT], pi[PI_LOC]
    skip = qi[QI_SKIP]
    served = vs[VS_SERVED]
    redo = ds[D_REDO] != 0
    ds[D_REDO] = 0
    ds[D_R] = 0
    while True:
        if redo:  # (the set in loc, emitted by the last call)
            code = SIM
            redo = False
        else:
            code = run_victims(path, kid_ptr, kids, stat, tot, prio, tb, alloc, leaf_live, req, key, vrep, qi, popped,
                               cj, walloc, glen, gstart, gt, ti, task_node, task_gpu, nf, ni, pi, vji, need, sel,
                               masks, tt, pool, ist, fst)
        if code != SIM:
            break
        cnt = ist[IS_SETLEN]
        nv = nr + cnt
        if np_ + nv > pv.shape[0] or nv > vs.shape[1]:
            break  # (SIM: Python's _try makes room and simulates it)
        # ---- VictimSolver._try / Simulation._run_compiled before the call: the scenario, the victims as they were
        for x in range(np_):
            pv[x] = part[x]
        for x in range(nr):
            pv[np_ + x] = rec[x]
        for x in range(cnt):
            pv[np_ + nr + x] = pot[loc[x]]
        for x in range(nv):
            t = pv[np_ + x]
            vs[VS_NODE, x] = task_node[t]
            vs[VS_RUN, x] = 1 if task_state[t] == _RUN else 0
            for r in range(3):
                va[x, r] = task_alloc[t, r]
        io[IO_I0] = i0
        io[IO_LOG] = logn
        io[IO_PROTECT] = protect
        io[IO_J] = ds[D_J]
        io[IO_NP] = np_
        io[IO_NV] = nv
        res = run_scenario(io, pv, clear, wi, wf, scr, sck, seen, jst, tst, order_req, shared, input_node, input_tdev,
                           input_tndev, jmark, tmark, qmark, sint, sfl, sched, ssel, no_sel, no_frac, ndev, cap,
                           idle_ok, any_ok, skey, hk, hn, hs, pos, log, spath, skid_ptr, skids, sstat, stot,
                           sprio, stb, qalloc, sleaf_live, sreq, qkey, svrep, dev_shared, newg, preempt, quota_req,
                           lim, des, task_request, devs, gcap, dgpu, dra_free, dra_rel, input_state, task_state,
                           task_node_j, task_job, job_queue, path_mat, num_active, job_version, queue_version,
                           node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev, ttake, tntake,
                           ji, jf)
        if res < 0:
            ds[D_R] = res
            break  # refused before changing anything (SIM: Python's _try learns, makes room or simulates it)
        tried += 1
        ist[IS_STEPS] += nv
        ds[D_NV] = nv
        i1 = io[IO_END]
        if res == 1 or io[IO_LOG_END] + (i1 - i0) > log.shape[0]:  # (the log: not met, run_scenario's room)
            ds[D_R] = res
            code = SIMULATED
            break
        # ---- the failed scenario: _run_compiled's results, the served victims, CycleState.rollback,
        # Placer.fix_after_rollback, PrefixSearch.prune
        lo = logn
        logn = io[IO_LOG_END]
        protect = io[IO_PROTECT_END]
        freed += nv + io[IO_FREED]
        ns = 0
        for x in range(nv):
            t = pv[np_ + x]
            s = task_state[t]
            if s == _RUN or s == _BIND or s == _PIPE:
                served[ns] = t
                ns += 1
        if i1 > i0:
            if i0 < protect:
                freed += 1
                protect = i0
            undo(i0, i1, task_state, task_node_j, task_job, job_queue, path_mat, num_active, job_version,
                 queue_version, node_both, dev_free, dev_rel, task_alloc, task_rel_take, qab, tdev, tndev, ttake,
                 tntake, ji, jf)
            for e in range(i0, i1):  # a device's new gpuGroup is gone again (the object half's restore)
                if clear[e - i0, 0] == GROUPS_NEW:
                    dev_shared[ji[e, 4], clear[e - i0, 1]] = False
                    ds[D_GROUPS] += 1
        # (every node row as it was at log length lo: the scenario's log entries dropped, the shape rows it
        # queried caught up on its nodes; the undo's nodes are the same nodes, not logged)
        logn = forget_log(lo, logn, log, seen, scr, pos, sint, sfl, sched, ssel, no_sel, no_frac, ndev, cap, idle_ok,
                          any_ok, skey, hk, hn, hs, node_both, dev_free, dev_rel, dev_shared, gcap, dgpu, dra_free,
                          dra_rel)
        for x in range(nv):
            t = pv[np_ + x]
            if vs[VS_RUN, x] != 0 and task_state[t] == _PEND and task_node_j[t] >= 0:
                task_state[t] = _REL
        if prune and ns > 0:
            nq += drop_served(served[:ns], ti, pi, task_node, task_gpu, task_job, job_queue, own, nf, ni, ist, fst,
                              skip, qbuf[nq:], -1, path)
        kept += 1
        ist[IS_STOP] = 1 if (stop0 or tried >= max_sc) else 0
        if 0 <= kmax <= kept:
            code = YIELD
            break
    ds[D_TRIED] = tried
    ds[D_LOG] = logn
    ds[D_PROTECT] = protect
    ds[D_FREED] = freed
    ds[D_NQ] = nq
    ds[D_KEPT] = kept
    return code
