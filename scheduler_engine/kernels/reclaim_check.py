"""The reclaim action's proportion validator for one simulated scenario in one compiled call:
:func:`scheduler_engine.plugins.proportion.victim_vectors` (what each victim leaf gives up, per victim
job: its elastic tasks one by one, then its core summed; re-placed victims left out) followed by
:func:`scheduler_engine.plugins.proportion.validate_reclaim` (the per-chunk strategy checks up each
victim's path, then the reclaimer's path against every touched sibling, and the non-preemptible quota).

Why compiled: every scenario that places the beneficiary is validated (~3,000 per 2,000-node cycle,
~18,000 at 10,000 nodes), and the Python pair spent ~60-80 us per scenario on dicts and 3-element lists
(grouping the victims by job and leaf, the remaining allocations, the involved resources) for a few
hundred float operations.

Exactness: the same float64 operations in the same order as the Python reference (a core's sum adds
its rows one after the other, as ``np.sum(rows, axis=0)`` does on (k, 3) rows; ``remaining`` takes each
vector off queue by queue, leaf first); the victim jobs and leaves in first-seen order (the Python
dicts' insertion order); the queues of ``remaining`` in the order the reference's dict inserts them
(``rorder``), which decides which sibling a saturation refusal names (the pruning's input).

All arrays are lent by the caller (:class:`scheduler_engine.actions.reclaim.ReclaimCheck`); the per-queue
and per-job marks (``jloc``, ``qloc``, ``rmark``, ``invset``) are -1 / False between calls (the kernel puts
back what it set), so a call costs O(victims + queues touched), not O(queues).
"""
from __future__ import annotations

import numpy as np

from . import leaf_kernel
from .journal import _BIND, _PIPE, _RUN

#: ``io`` fields: victims, reclaimer leaf, reclaimer preemptible (inputs); jobs, leaves and queues of
#: ``remaining`` seen by the call (its own, for putting the marks back)
IO_NV, IO_LEAF, IO_PRE, IO_NJ, IO_NL, IO_NR = range(6)
IO_SIZE = 6
#: ``fl`` fields: the beneficiary's request (3), the saturation multiplier
FL_MULT = 3
#: ``out`` fields: the verdict, the queue whose check failed, the queue the victims were taken from (the
#: pruning's ``blocked``), the resource (non-preemptible quota)
OUT_CODE, OUT_QUEUE, OUT_TAKEN, OUT_RES = range(4)
#: verdicts
OK, STRATEGY, SATURATION, NONPREEMPTIBLE = range(4)
#: rows of ``wi`` (scratch, one column per victim): the victim jobs (first seen), their victim counts, the
#: offsets of their victims in ``W_JTASK``, a fill pointer, the victims (positions in ``vt``) grouped by
#: job, the leaf of each vector, the victim leaves (first seen), their vector counts and offsets, the
#: vectors grouped by leaf
W_JOB, W_JCNT, W_JOFF, W_FILL, W_JTASK, W_VLEAF, W_LEAF, W_LCNT, W_LOFF, W_LVEC = range(10)
W_ROWS = 10

UNLIMITED = -1.0
TOLERANCE = 1e-9


@leaf_kernel
def le1(x: float, y: float) -> bool:
    """``proportion._le1``: ``x <= y`` with -1 as +infinity and the tolerance."""
    if y == UNLIMITED:
        return True
    if x == UNLIMITED:
        return False
    return x <= y or abs(x - y) <= TOLERANCE


@leaf_kernel
def ratio(allocated: float, fair_share: float) -> float:
    """``proportion.saturation_ratio``."""
    if fair_share == 0:
        return np.inf if allocated > 0 else 0.0
    if fair_share == UNLIMITED:
        return 0.0
    return allocated / fair_share


@leaf_kernel
def _verdict(io, fl, out, outv, vt, va, task_state, task_job, job_min, job_queue, pmat, plen, parent, qab,
             allocatable, deserved, fair, jloc, qloc, rmark, rorder, rem, inv, invset, wi, wv) -> int:
    nv = io[IO_NV]
    leaf = io[IO_LEAF]
    r0, r1, r2 = fl[0], fl[1], fl[2]
    mult = fl[FL_MULT]
    # the victims grouped by job, jobs in first-seen order, each job's victims in victim order
    nj = 0
    for i in range(nv):
        j = task_job[vt[i]]
        k = jloc[j]
        if k < 0:
            k = nj
            jloc[j] = k
            wi[W_JOB, k] = j
            wi[W_JCNT, k] = 0
            nj += 1
            io[IO_NJ] = nj
        wi[W_JCNT, k] += 1
    off = 0
    for k in range(nj):
        wi[W_JOFF, k] = off
        wi[W_FILL, k] = off
        off += wi[W_JCNT, k]
    for i in range(nv):
        k = jloc[task_job[vt[i]]]
        wi[W_JTASK, wi[W_FILL, k]] = i
        wi[W_FILL, k] += 1
    # per job: its elastic victims one by one, then its core summed (victims re-placed left out)
    nvec = 0
    nl = 0
    for k in range(nj):
        j = wi[W_JOB, k]
        cnt = wi[W_JCNT, k]
        o = wi[W_JOFF, k]
        m = job_min[j]
        # (Python's ts[:m] / ts[m:], negative m included)
        split = cnt if m >= cnt else (m if m >= 0 else max(cnt + m, 0))
        first = nvec
        for p in range(split, cnt):
            i = wi[W_JTASK, o + p]
            st = task_state[vt[i]]
            if st == _RUN or st == _PIPE or st == _BIND:
                continue
            wv[nvec, 0] = va[i, 0]
            wv[nvec, 1] = va[i, 1]
            wv[nvec, 2] = va[i, 2]
            nvec += 1
        have = False
        for p in range(split):
            i = wi[W_JTASK, o + p]
            st = task_state[vt[i]]
            if st == _RUN or st == _PIPE or st == _BIND:
                continue
            if not have:
                wv[nvec, 0] = va[i, 0]
                wv[nvec, 1] = va[i, 1]
                wv[nvec, 2] = va[i, 2]
                have = True
            else:
                wv[nvec, 0] = wv[nvec, 0] + va[i, 0]
                wv[nvec, 1] = wv[nvec, 1] + va[i, 1]
                wv[nvec, 2] = wv[nvec, 2] + va[i, 2]
        if have:
            nvec += 1
        if nvec == first:
            continue
        q = job_queue[j]
        for x in range(first, nvec):
            wi[W_VLEAF, x] = q
        lq = qloc[q]
        if lq < 0:
            lq = nl
            qloc[q] = lq
            wi[W_LEAF, lq] = q
            wi[W_LCNT, lq] = 0
            nl += 1
            io[IO_NL] = nl
        wi[W_LCNT, lq] += nvec - first
    off = 0
    for lq in range(nl):
        wi[W_LOFF, lq] = off
        wi[W_FILL, lq] = off
        off += wi[W_LCNT, lq]
    for x in range(nvec):
        lq = qloc[wi[W_VLEAF, x]]
        wi[W_LVEC, wi[W_FILL, lq]] = x
        wi[W_FILL, lq] += 1

    # 1. per victim leaf, per vector: the strategy check on B*, then the vector off the leaf's path
    la = plen[leaf]
    nr = 0
    for lq in range(nl):
        vl = wi[W_LEAF, lq]
        lb = plen[vl]
        a_star = pmat[leaf, 0]
        b_star = pmat[vl, 0]
        for d in range(min(la, lb)):
            a_star = pmat[leaf, d]
            b_star = pmat[vl, d]
            if a_star != b_star:
                break
        x0 = wi[W_LOFF, lq]
        x1 = x0 + wi[W_LCNT, lq]
        i0 = False
        i1 = False
        i2 = False
        for y in range(x0, x1):
            x = wi[W_LVEC, y]
            if wv[x, 0] > 0:
                i0 = True
            if wv[x, 1] > 0:
                i1 = True
            if wv[x, 2] > 0:
                i2 = True
        if invset[vl]:
            inv[vl, 0] = inv[vl, 0] or i0
            inv[vl, 1] = inv[vl, 1] or i1
            inv[vl, 2] = inv[vl, 2] or i2
        else:
            inv[vl, 0] = i0
            inv[vl, 1] = i1
            inv[vl, 2] = i2
            invset[vl] = True
        if rmark[b_star] < 0:
            rmark[b_star] = nr
            rorder[nr] = b_star
            nr += 1
            io[IO_NR] = nr
            rem[b_star, 0] = qab[b_star, 0, 0]
            rem[b_star, 1] = qab[b_star, 0, 1]
            rem[b_star, 2] = qab[b_star, 0, 2]
        fits = (le1(qab[a_star, 0, 0] + r0, deserved[a_star, 0]) and le1(qab[a_star, 0, 1] + r1, deserved[a_star, 1])
                and le1(qab[a_star, 0, 2] + r2, deserved[a_star, 2]))
        for y in range(x0, x1):
            x = wi[W_LVEC, y]
            # MaintainFairShare, else GuaranteeDeservedQuota
            under_alloc = (le1(rem[b_star, 0], allocatable[b_star, 0]) and le1(rem[b_star, 1], allocatable[b_star, 1])
                           and le1(rem[b_star, 2], allocatable[b_star, 2]))
            ok = not under_alloc
            if not ok and fits:
                ok = not (le1(rem[b_star, 0], deserved[b_star, 0]) and le1(rem[b_star, 1], deserved[b_star, 1])
                          and le1(rem[b_star, 2], deserved[b_star, 2]))
            if not ok:
                out[OUT_CODE] = STRATEGY
                out[OUT_QUEUE] = b_star
                out[OUT_TAKEN] = b_star
                out[OUT_RES] = -1
                outv[0] = wv[x, 0]
                outv[1] = wv[x, 1]
                outv[2] = wv[x, 2]
                return STRATEGY
            for d in range(lb - 1, -1, -1):  # (leaf to root)
                q = pmat[vl, d]
                if rmark[q] < 0:
                    rmark[q] = nr
                    rorder[nr] = q
                    nr += 1
                    io[IO_NR] = nr
                    rem[q, 0] = qab[q, 0, 0]
                    rem[q, 1] = qab[q, 0, 1]
                    rem[q, 2] = qab[q, 0, 2]
                rem[q, 0] = rem[q, 0] - wv[x, 0]
                rem[q, 1] = rem[q, 1] - wv[x, 1]
                rem[q, 2] = rem[q, 2] - wv[x, 2]
                if q != vl:
                    if invset[q]:
                        inv[q, 0] = inv[q, 0] or inv[vl, 0]
                        inv[q, 1] = inv[q, 1] or inv[vl, 1]
                        inv[q, 2] = inv[q, 2] or inv[vl, 2]
                    else:
                        inv[q, 0] = inv[vl, 0]
                        inv[q, 1] = inv[vl, 1]
                        inv[q, 2] = inv[vl, 2]
                        invset[q] = True

    # 2. the reclaimer's path against every touched sibling; a non-preemptible reclaimer's quota
    q0 = r0 > 0
    q1 = r1 > 0
    q2 = r2 > 0
    for d in range(la - 1, -1, -1):
        x = pmat[leaf, d]
        if rmark[x] >= 0:
            xa0, xa1, xa2 = rem[x, 0] + r0, rem[x, 1] + r1, rem[x, 2] + r2
        else:
            xa0, xa1, xa2 = qab[x, 0, 0] + r0, qab[x, 0, 1] + r1, qab[x, 0, 2] + r2
        px = parent[x]
        for k in range(nr):
            s = rorder[k]
            if s == x or parent[s] != px:
                continue
            for r in range(3):
                if invset[s]:
                    involved = inv[s, r] or (q0 if r == 0 else (q1 if r == 1 else q2))
                else:
                    involved = q0 if r == 0 else (q1 if r == 1 else q2)
                if not involved:
                    continue
                fx = fair[x, r]
                fs = fair[s, r]
                if fx == UNLIMITED and fs == UNLIMITED:
                    continue
                rx = ratio(xa0 if r == 0 else (xa1 if r == 1 else xa2), fx)
                rs = ratio(rem[s, r], fs)
                if rx > 1 and fs > 0 and rx * mult >= rs:
                    out[OUT_CODE] = SATURATION
                    out[OUT_QUEUE] = x
                    out[OUT_TAKEN] = s
                    out[OUT_RES] = -1
                    return SATURATION
        if io[IO_PRE] == 0:
            for r in range(3):
                if not le1(qab[x, 1, r] + fl[r], deserved[x, r]):
                    out[OUT_CODE] = NONPREEMPTIBLE
                    out[OUT_QUEUE] = x
                    out[OUT_TAKEN] = -1
                    out[OUT_RES] = r
                    return NONPREEMPTIBLE
    out[OUT_CODE] = OK
    out[OUT_QUEUE] = -1
    out[OUT_TAKEN] = -1
    out[OUT_RES] = -1
    return OK


@leaf_kernel
def reclaim_verdict(io, fl, out, outv, vt, va, task_state, task_job, job_min, job_queue, pmat, plen, parent, qab,
                    allocatable, deserved, fair, jloc, qloc, rmark, rorder, rem, inv, invset, wi, wv) -> int:
    """The verdict (``OK`` or the check that refused, with its queues in ``out`` and, for a strategy
    refusal, the vector in ``outv``) of the scenario whose ``io[IO_NV]`` victims are ``vt`` (in the
    order they were added) with what they held before in ``va``, ``task_state`` as the simulation left
    it; the reclaimer's leaf and request in ``io`` / ``fl``; the attempt's start allocations ``qab`` ((Q, 2, 3):
    allocated, and to non-preemptible jobs) and the cycle's ``allocatable`` / ``deserved`` / ``fair`` (Q, 3) rows; the tree as top-down
    paths ``pmat`` / ``plen`` and ``parent``. The rest is scratch (module docstring)."""
    io[IO_NJ] = 0
    io[IO_NL] = 0
    io[IO_NR] = 0
    code = _verdict(io, fl, out, outv, vt, va, task_state, task_job, job_min, job_queue, pmat, plen, parent, qab,
                    allocatable, deserved, fair, jloc, qloc, rmark, rorder, rem, inv, invset, wi, wv)
    for k in range(io[IO_NJ]):
        jloc[wi[W_JOB, k]] = -1
    for k in range(io[IO_NL]):
        q = wi[W_LEAF, k]
        qloc[q] = -1
        invset[q] = False
    for k in range(io[IO_NR]):
        q = rorder[k]
        rmark[q] = -1
        invset[q] = False
    return code
