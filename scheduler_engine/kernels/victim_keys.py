"""Rules 1-6 of the queue order per queue, and which child of a queue comes first: for the victim
order (:class:`scheduler_engine.solvers.victim_order.VictimQueue`) and for the re-placement order of a
simulated scenario (:class:`scheduler_engine.solvers.simulation.LeafTournament`), both in their
total-order mode.

A queue's key is the rules-1..6 tuple of :func:`scheduler_engine.ordering._queue_key` (negated for
victims) as six float64 columns; with the static rules-7..8 integer ``tb`` (unique among
siblings) the lexicographically smallest live child is the one the sequential scan would pick.
Dominant shares are rounded like Python's ``round(x, 12)`` (:func:`round12`, exact), so the keys,
and the order, are the same as the Python tuples'.

Arrays (Q queues; the virtual parent of the top level is Q): ``kid_ptr`` (Q + 2) / ``kids``:
children of each queue in CSR form; ``path`` (Q, D): each queue's path to the top, padded with
-1; ``by_depth``: queues deepest first; ``stat`` (Q, 9): fair share, deserved, allocatable;
``tot`` (3); ``prio`` / ``tb`` (Q); ``alloc`` (Q, 3) current allocations; ``req`` (Q, 3): per
live leaf what it gives up (victims popped + its next one); ``leaf_live`` (Q); outputs ``key``
(Q, 6) and ``vrep`` (Q): the leaf each queue is represented by (-1: no live leaf below it).
"""
from __future__ import annotations

import math

import numpy as np

from . import leaf_kernel

EPS = 1e-9
UNLIMITED = -1.0
_SCALE = 1e12
# 10**12 / 2**41 = 5**12 / 2**29 (exact): above 4096 the spacing of doubles is 2**-40, and a decimal
# rounding offset beyond half of it (in units of 1e-12) moves the result to the neighbouring double
_HALF_SPACING_4096 = 244140625.0 / 536870912.0
_SPLIT = 134217729.0  # 2**27 + 1 (Veltkamp split)


@leaf_kernel
def _two_prod_err(a: float, b: float, p: float) -> float:
    """The exact error of the product p = fl(a * b): a * b == p + err (Dekker)."""
    c = _SPLIT * a
    ah = c - (c - a)
    al = a - ah
    c = _SPLIT * b
    bh = c - (c - b)
    bl = b - bh
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl


@leaf_kernel
def round12(x: float) -> float:
    """Python's ``round(x, 12)`` exactly: the double nearest to x rounded (half to even) to 12
    decimals. Exact product x * 1e12 = y + err, then the integer nearest to it, divided by 1e12
    (one correctly rounded division); above 4096 the result is x or a neighbour of it."""
    if x != x or x == np.inf or x == -np.inf or x == 0.0:
        return x
    ax = abs(x)
    if ax >= 8192.0:  # doubles are >= 2**-39 apart: a move of <= 0.5e-12 keeps the nearest one
        return x
    y = ax * _SCALE
    err = _two_prod_err(ax, _SCALE, y)
    if y < 4503599627370496.0:  # 2**52: y has a fraction part
        fl = math.floor(y)
        frac = y - fl
        if frac > 0.5:
            r = fl + 1.0
        elif frac < 0.5:
            r = fl
        elif err > 0.0:
            r = fl + 1.0
        elif err < 0.0:
            r = fl
        elif fl % 2.0 == 0.0:
            r = fl
        else:
            r = fl + 1.0
        out = r / _SCALE
    else:  # 4503.6 <= ax < 8192: y is an integer, the offset to the nearest integer is -err
        if err > 0.5 or (err == 0.5 and y % 2.0 == 1.0):
            d = 1.0 - err
        elif err < -0.5 or (err == -0.5 and y % 2.0 == 1.0):
            d = -1.0 - err
        else:
            d = -err
        if abs(d) < _HALF_SPACING_4096:
            out = ax
        elif abs(d) > _HALF_SPACING_4096:
            out = np.nextafter(ax, np.inf) if d > 0 else np.nextafter(ax, -np.inf)
        else:  # a tie between two doubles: the one with the even significand
            m, _e = math.frexp(ax)
            even = (m * 9007199254740992.0) % 2.0 == 0.0
            out = ax if even else (np.nextafter(ax, np.inf) if d > 0 else np.nextafter(ax, -np.inf))
    return out if x > 0 else -out


@leaf_kernel
def dominant(a0: float, a1: float, a2: float, stat: np.ndarray, q: int, tot: np.ndarray) -> float:
    """``ordering._dom`` of (a0, a1, a2) against queue q's allocatable: the largest of the three
    resource shares (same operations, same order)."""
    best = 0.0
    for r in range(3):
        a = a0 if r == 0 else (a1 if r == 1 else a2)
        cap = stat[q, 6 + r]
        if cap == UNLIMITED:
            den = tot[r]
            if den > 0:
                ratio = a / den
            elif a <= 0:
                ratio = 0.0
            else:
                ratio = np.inf
        elif cap <= 0:
            ratio = a * 1000.0
        else:
            ratio = a / cap
        if ratio > best:
            best = ratio
    return best


@leaf_kernel
def queue_key(q: int, r0: float, r1: float, r2: float, victim: bool, stat: np.ndarray, tot: np.ndarray,
              prio: np.ndarray, alloc: np.ndarray, out: np.ndarray) -> None:
    """Queue q's rules-1..6 key into ``out[q]`` (``ordering._queue_key``): with ``victim`` when it
    gives up (r0, r1, r2) (negated: smaller = its victims first), else when its job would add them."""
    a0 = alloc[q, 0]
    a1 = alloc[q, 1]
    a2 = alloc[q, 2]
    over = stat[q, 0] < a0 - EPS and stat[q, 1] < a1 - EPS and stat[q, 2] < a2 - EPS
    if victim:
        j0 = 0.0
        j1 = 0.0
        j2 = 0.0
        w0 = a0 - r0
        w1 = a1 - r1
        w2 = a2 - r2
    else:
        j0 = r0
        j1 = r1
        j2 = r2
        w0 = a0 + r0
        w1 = a1 + r1
        w2 = a2 + r2
    d0 = stat[q, 3]
    d1 = stat[q, 4]
    d2 = stat[q, 5]
    starved = ((d0 == UNLIMITED or a0 + j0 <= d0 + EPS) and (d1 == UNLIMITED or a1 + j1 <= d1 + EPS)
               and (d2 == UNLIMITED or a2 + j2 <= d2 + EPS))
    violates = ((stat[q, 6] == 0 and a0 + j0 > EPS) or (stat[q, 7] == 0 and a1 + j1 > EPS)
                or (stat[q, 8] == 0 and a2 + j2 > EPS))
    dw = round12(dominant(w0, w1, w2, stat, q, tot))
    dwo = round12(dominant(a0, a1, a2, stat, q, tot))
    if victim:
        out[q, 0] = -1.0 if over else 0.0
        out[q, 1] = 0.0 if starved else -1.0
        out[q, 2] = float(prio[q])
        out[q, 3] = -1.0 if violates else 0.0
        out[q, 4] = -dw
        out[q, 5] = -dwo
    else:
        out[q, 0] = 1.0 if over else 0.0
        out[q, 1] = 0.0 if starved else 1.0
        out[q, 2] = -float(prio[q])
        out[q, 3] = 1.0 if violates else 0.0
        out[q, 4] = dw
        out[q, 5] = dwo


@leaf_kernel
def best_child(par: int, kid_ptr: np.ndarray, kids: np.ndarray, vrep: np.ndarray, key: np.ndarray,
               tb: np.ndarray) -> int:
    """The live child (``vrep >= 0``) of ``par`` with the smallest (key, tb), or -1."""
    best = -1
    for i in range(kid_ptr[par], kid_ptr[par + 1]):
        c = kids[i]
        if vrep[c] < 0:
            continue
        if best < 0:
            best = c
            continue
        less = False
        decided = False
        for k in range(6):
            x = key[c, k]
            y = key[best, k]
            if x < y:
                less = True
                decided = True
                break
            if x > y:
                decided = True
                break
        if not decided:
            less = tb[c] < tb[best]
        if less:
            best = c
    return best


@leaf_kernel
def build(victim: bool, by_depth: np.ndarray, kid_ptr: np.ndarray, kids: np.ndarray, stat: np.ndarray,
          tot: np.ndarray, prio: np.ndarray, tb: np.ndarray, alloc: np.ndarray, leaf_live: np.ndarray, req: np.ndarray,
          key: np.ndarray, vrep: np.ndarray) -> int:
    """Key every queue with a live leaf below it, deepest first (a queue is represented by its
    best live child's leaf, a live leaf by itself; ``vrep`` -1: no live leaf below). Returns the
    leaf whose victim comes next (-1: none)."""
    for i in range(by_depth.shape[0]):
        q = by_depth[i]
        b = best_child(q, kid_ptr, kids, vrep, key, tb)
        if b >= 0:
            lq = vrep[b]
        elif leaf_live[q]:
            lq = q
        else:
            vrep[q] = -1
            continue
        vrep[q] = lq
        queue_key(q, req[lq, 0], req[lq, 1], req[lq, 2], victim, stat, tot, prio, alloc, key)
    root = kid_ptr.shape[0] - 2
    b = best_child(root, kid_ptr, kids, vrep, key, tb)
    return vrep[b] if b >= 0 else -1


@leaf_kernel
def build_fresh(victim: bool, by_depth: np.ndarray, kid_ptr: np.ndarray, kids: np.ndarray, stat: np.ndarray,
                tot: np.ndarray, prio: np.ndarray, tb: np.ndarray, alloc: np.ndarray, live: np.ndarray, cj: np.ndarray,
                ptr: np.ndarray, walloc: np.ndarray, leaf_live: np.ndarray, req: np.ndarray, key: np.ndarray,
                vrep: np.ndarray) -> int:
    """:func:`build` of a victim queue nothing was popped from yet: the leaves ``live`` are live (the
    others not: ``leaf_live`` all False on entry) and each gives up its next candidate's whole
    allocation, ``walloc[cj[ptr[q]]]`` (copied into ``req[q]``)."""
    for i in range(live.shape[0]):
        q = live[i]
        leaf_live[q] = True
        j = cj[ptr[q]]
        for r in range(3):
            req[q, r] = walloc[j, r]
    return build(victim, by_depth, kid_ptr, kids, stat, tot, prio, tb, alloc, leaf_live, req, key, vrep)


@leaf_kernel
def rekey_path(victim: bool, leaf: int, path: np.ndarray, kid_ptr: np.ndarray, kids: np.ndarray, stat: np.ndarray,
               tot: np.ndarray, prio: np.ndarray, tb: np.ndarray, alloc: np.ndarray, leaf_live: np.ndarray,
               req: np.ndarray, key: np.ndarray, vrep: np.ndarray, share_only: bool) -> int:
    """After victims were taken from / given back to ``leaf`` (``req[leaf]``, ``leaf_live[leaf]``
    updated): re-key the queues on its path, bottom-up. Returns the leaf whose victim comes next.

    ``share_only`` (victim order, the compiled victim loop's pops): write only the column that
    changes. A victim key depends on what the represented leaf gives up in rule 5's first share
    only (column 4: the dominant share of the allocation minus it); the other columns (over fair
    share, starved, priority, violates, the share without it) read the queue's allocation and its
    static values alone, and :func:`build` wrote them for every queue above a live leaf. Within one
    victim search the queues' allocations are those of the search's start (every simulated scenario
    is rolled back by assignment before the loop runs again), a leaf only dies in the loop (pops), and
    Python re-keys in full what it pushes back, so those columns already hold what a full re-key
    would write: the same keys, the same next leaf, ~0.15 us less per victim examined (~40 % of a
    re-key at 2,000 nodes; a failing reclaimer examines thousands)."""
    lq = leaf if leaf_live[leaf] else -1
    for i in range(path.shape[1]):
        q = path[leaf, i]
        if q < 0:
            break
        if i:
            b = best_child(q, kid_ptr, kids, vrep, key, tb)
            lq = vrep[b] if b >= 0 else -1
        vrep[q] = lq
        if lq < 0:
            continue
        if share_only:
            key[q, 4] = -round12(dominant(alloc[q, 0] - req[lq, 0], alloc[q, 1] - req[lq, 1], alloc[q, 2] - req[lq, 2],
                                          stat, q, tot))
        else:
            queue_key(q, req[lq, 0], req[lq, 1], req[lq, 2], victim, stat, tot, prio, alloc, key)
    root = kid_ptr.shape[0] - 2
    b = best_child(root, kid_ptr, kids, vrep, key, tb)
    return vrep[b] if b >= 0 else -1


@leaf_kernel
def _rekey_dead(leaf_live: np.ndarray, req: np.ndarray, key: np.ndarray, vrep: np.ndarray) -> None:
    """Zero what :func:`build` leaves zero in fresh arrays: the request of every leaf that is not live and
    the key of every queue without a live leaf below (rows a re-key left as they were; never read)."""
    for q in range(vrep.shape[0]):
        if not leaf_live[q]:
            for r in range(3):
                req[q, r] = 0.0
        if vrep[q] < 0:
            for k in range(6):
                key[q, k] = 0.0


@leaf_kernel
def refresh_all(path: np.ndarray, kid_ptr: np.ndarray, kids: np.ndarray, stat: np.ndarray, tot: np.ndarray,
                prio: np.ndarray, tb: np.ndarray, alloc: np.ndarray, seen: np.ndarray, below: np.ndarray,
                leaves: np.ndarray, n: np.ndarray, lo: np.ndarray, cj: np.ndarray, walloc: np.ndarray,
                leaf_live: np.ndarray, req: np.ndarray, key: np.ndarray, vrep: np.ndarray, dirty: np.ndarray) -> None:
    """Bring victim keys built for every leaf with candidates (``n[q] > 0``, each giving up its first one,
    ``walloc[cj[lo[q]]]``: what :func:`build_fresh` gives for them) up to date after the allocations
    (``alloc`` against ``seen``, the ones they were keyed with: updated) or the runs of the leaves
    ``leaves`` (the only ones whose runs or first candidates may have changed) changed: the path of
    every such leaf whose liveness or request changed, and of a leaf below (``below``) every queue whose
    allocation changed, re-keyed in full (:func:`rekey_path`). A queue off those paths has the same live
    leaves, requests and allocations below it, so the same key; one on them is re-keyed after its
    children's last re-key (a path is re-keyed bottom-up, and a child's last re-key passes through its
    parent afterwards), so every queue ends with :func:`build`'s key and representative."""
    m = 0
    for q in range(alloc.shape[0]):
        if alloc[q, 0] != seen[q, 0] or alloc[q, 1] != seen[q, 1] or alloc[q, 2] != seen[q, 2]:
            for r in range(3):
                seen[q, r] = alloc[q, r]
            dirty[m] = below[q]
            m += 1
    for i in range(leaves.shape[0]):
        q = leaves[i]
        live = n[q] > 0
        r0 = 0.0
        r1 = 0.0
        r2 = 0.0
        if live:
            j = cj[lo[q]]
            r0 = walloc[j, 0]
            r1 = walloc[j, 1]
            r2 = walloc[j, 2]
        if live != leaf_live[q] or r0 != req[q, 0] or r1 != req[q, 1] or r2 != req[q, 2]:
            leaf_live[q] = live
            req[q, 0] = r0
            req[q, 1] = r1
            req[q, 2] = r2
            dirty[m] = q
            m += 1
    for i in range(m):
        rekey_path(True, dirty[i], path, kid_ptr, kids, stat, tot, prio, tb, alloc, leaf_live, req, key, vrep, False)
    _rekey_dead(leaf_live, req, key, vrep)


@leaf_kernel
def without_leaves(gone: np.ndarray, path: np.ndarray, kid_ptr: np.ndarray, kids: np.ndarray, stat: np.ndarray,
                   tot: np.ndarray, prio: np.ndarray, tb: np.ndarray, alloc: np.ndarray, leaf_live: np.ndarray,
                   req: np.ndarray, key: np.ndarray, vrep: np.ndarray) -> int:
    """From :func:`build`'s keys over a set of live leaves, those over the set without the leaves ``gone``
    (each no longer live, its path re-keyed in full: the same induction as :func:`refresh_all`), with
    the rows :func:`build` would leave zero zeroed. Returns the leaf whose victim comes next."""
    for i in range(gone.shape[0]):
        q = gone[i]
        leaf_live[q] = False
        rekey_path(True, q, path, kid_ptr, kids, stat, tot, prio, tb, alloc, leaf_live, req, key, vrep, False)
    _rekey_dead(leaf_live, req, key, vrep)
    root = kid_ptr.shape[0] - 2
    b = best_child(root, kid_ptr, kids, vrep, key, tb)
    return vrep[b] if b >= 0 else -1
