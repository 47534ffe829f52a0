"""Per-queue share quantities and reclaim predicates of KAI's proportion plugin (spec a.6, b, c).

Everything here is a pure function over numpy arrays in KAI internal units (resource columns
``GPU, CPU, MEM`` = devices, millicores, bytes). ``-1`` means unlimited in deserved / limit (and is
accepted in fair-share arguments too, as upstream does). Nothing is mutated; nothing imports Django.

Why a separate module: fair share is computed once per cycle (``fairshare.py``); these predicates are
evaluated many times per cycle by the reclaim / preempt actions and queue ordering on *changing*
allocations, so they take the allocation arrays explicitly instead of reading a mutable session.

API (vectors are ``(3,)``; per-queue arrays are ``(Q, 3)``; leading axes broadcast where noted)
-----------------------------------------------------------------------------------------------
Comparisons and derived quantities
    ``compare_quantities(a, b)`` -> int array (-1/0/1), -1 compares as +inf, |a-b| <= 1e-9 is equal.
    ``less_equal(a, b)`` -> bool over the last axis: every resource ``a <= b`` (compare_quantities).
    ``requestable(request, limit)``; ``allocatable(deserved, fair_share, limit)``.
    ``dominant_share(allocated, allocatable_share, total)`` -> max_r A/alloc (noFairShareDrfMultiplier).
    ``fair_share_less_than_allocated(fair_share, allocated)``  (queue order rule 1: F < A in all three)
    ``within_deserved(allocated, job, deserved)``               (rule 2 / GDQ: A + job <= D in all)
    ``zero_share_violation(allocatable_share, allocated, job)`` (rule 4)
    ``weaker_allocatable(alloc_l, alloc_r)``                    (rule 7)
Tree
    ``path_to_root(parent, q)``; ``leveled_pair(parent, reclaimer_leaf, victim_leaf)`` -> (A*, B*).
Strategy predicates (spec c; upstream ``strategies.go``)
    ``fits_maintain_fair_share(remaining, allocatable_b)``
    ``reclaimer_fits_deserved(allocated_a, req, deserved_a)``
    ``reclaimee_exceeds_deserved(remaining, deserved_b)``
    ``fits_reclaim_strategy(req=, allocated_a=, deserved_a=, remaining_b=, deserved_b=, allocatable_b=)``
Reclaim gates (operate on a :class:`QueueShares` snapshot of the queue state)
    ``can_reclaim_resources(shares, leaf, req, preemptible)``           (CanReclaimResources)
    ``victim_filter(shares, reclaimer_leaf, victim_leaf, req)``         (proportion ReclaimVictimFilter)
    ``victim_filter_many(shares, reclaimer_leaf, victim_leaves, req, paths=)`` (the same, vectorised;
        ``paths`` = ``queue_paths_matrix(parent)``)
    ``saturation_ratio(allocated, fair_share)``; ``saturation_ratios`` (vectorised, for reports);
    ``saturation_lower(...)`` (sibling saturation check)
    ``validate_reclaim(shares, reclaimer_leaf=, req=, reclaimer_preemptible=, victims=, multiplier=)``
        -> :class:`Verdict` (truthy iff the scenario is acceptable; ``reason`` says why not).
    ``effective_multiplier(value)``: the saturation multiplier rule (malformed or < 1 -> 1.0).
The reclaim action's view of a :class:`~scheduler_engine.state.CycleState` (the only state-bound part)
    ``shares_now(state, copy=False)`` -> :class:`QueueShares`; ``gate_failure(...)``, ``verdict_text(...)``:
    refusals in words with the numbers compared; ``victim_vectors(state, scenario)``: what each victim
    leaf gives up in a scenario, as ``validate_reclaim`` takes it.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..kernels import victim_run
from ..state import RES_NAMES, CycleState, fmt_amount

if TYPE_CHECKING:  # annotations only: plugins do not depend on the solvers
    from ..solvers.simulation import Scenario

UNLIMITED = -1.0
NRES = 3
RESOURCES = ("gpu", "cpu", "memory")
# upstream resource_info.floatComparisonTolerance: absorbs float noise from summing fractional GPUs
TOLERANCE = 1e-9
# upstream noFairShareDrfMultiplier: a resource with allocatable 0 weighs 1000x its allocation
NO_FAIR_SHARE_DRF_MULTIPLIER = 1000.0


# --------------------------------------------------------------------------------------------------
# comparisons and derived quantities


def compare_quantities(a, b, tol: float = TOLERANCE) -> np.ndarray:
    """Elementwise three-way compare where -1 means +infinity (upstream ``compareQuantities``).

    Returns an int array: 1 if a > b, -1 if a < b, 0 if equal (within ``tol``, or both -1).
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    a_inf = a == UNLIMITED
    b_inf = b == UNLIMITED
    a_le_b = (a <= b) | (np.abs(a - b) <= tol)
    b_le_a = (b <= a) | (np.abs(a - b) <= tol)
    finite = np.where(~a_le_b, 1, np.where(~b_le_a, -1, 0))
    return np.where(a_inf, np.where(b_inf, 0, 1), np.where(b_inf, -1, finite)).astype(np.int64)


def less_equal(a, b) -> np.ndarray | bool:
    """True where ``a <= b`` in every resource (last axis), -1 = +inf (upstream ``LessEqual``)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim == 1 and b.ndim == 1 and a.shape == b.shape:
        # hot path (reclaim predicates on single (3,) vectors): the same rule as compare_quantities
        # in plain Python, which is several times cheaper than the numpy temporaries for 3 values
        for x, y in zip(a.tolist(), b.tolist()):
            if y == UNLIMITED:
                continue
            if x == UNLIMITED:
                return False
            if not (x <= y or abs(x - y) <= TOLERANCE):
                return False
        return True
    res = np.all(compare_quantities(a, b) <= 0, axis=-1)
    return bool(res) if np.ndim(res) == 0 else res


def requestable(request, limit) -> np.ndarray:
    """Request capped by the limit (``GetRequestableShare``); limit -1 = no cap."""
    request = np.asarray(request, dtype=np.float64)
    limit = np.asarray(limit, dtype=np.float64)
    return np.where(limit == UNLIMITED, request, np.minimum(limit, request))


def allocatable(deserved, fair_share, limit) -> np.ndarray:
    """Allocatable share (``GetAllocatableShare``).

    ``L`` if ``D == -1`` (fair share ignored: an unlimited-quota queue is bounded only by its limit);
    otherwise ``max(D, F)``, capped by ``L`` unless ``L == -1``.
    """
    deserved = np.asarray(deserved, dtype=np.float64)
    fair_share = np.asarray(fair_share, dtype=np.float64)
    limit = np.asarray(limit, dtype=np.float64)
    base = np.maximum(deserved, fair_share)
    capped = np.where(limit == UNLIMITED, base, np.minimum(limit, base))
    return np.where(deserved == UNLIMITED, limit, capped)


def dominant_share(allocated, allocatable_share, total) -> np.ndarray | float:
    """DRF dominant share ``max_r A_r / alloc_r`` (``GetDominantResourceShare``).

    ``alloc_r = total_r`` when allocatable is -1; a resource with allocatable 0 contributes
    ``A_r * 1000`` instead of a division by zero (zero-share queues sort last). Never below 0.
    Works on (3,) or (Q, 3) inputs; ``total`` is (3,).
    """
    allocated = np.asarray(allocated, dtype=np.float64)
    alloc = np.asarray(allocatable_share, dtype=np.float64)
    total = np.broadcast_to(np.asarray(total, dtype=np.float64), alloc.shape)
    alloc = np.where(alloc == UNLIMITED, total, alloc)
    safe = np.where(alloc == 0, 1.0, alloc)
    value = np.where(alloc == 0, allocated * NO_FAIR_SHARE_DRF_MULTIPLIER, allocated / safe)
    res = np.maximum(0.0, np.max(value, axis=-1))
    return float(res) if np.ndim(res) == 0 else res


def fair_share_less_than_allocated(fair_share, allocated) -> np.ndarray | bool:
    """Queue order rule 1: "over fair share" iff ``F < A`` strictly in *all three* resources."""
    res = np.all(np.asarray(fair_share, float) < np.asarray(allocated, float), axis=-1)
    return bool(res) if np.ndim(res) == 0 else res


def within_deserved(allocated, job, deserved) -> np.ndarray | bool:
    """``A + job <= D`` in every resource (-1 = unlimited). Queue order rule 2 and GDQ's reclaimer side."""
    return less_equal(np.asarray(allocated, float) + np.asarray(job, float), deserved)


def zero_share_violation(allocatable_share, allocated, job) -> np.ndarray | bool:
    """Queue order rule 4: some resource has allocatable 0 while ``A + job > 0``."""
    total = np.asarray(allocated, float) + np.asarray(job, float)
    res = np.any((np.asarray(allocatable_share, float) == 0) & (total > 0), axis=-1)
    return bool(res) if np.ndim(res) == 0 else res


def weaker_allocatable(alloc_l, alloc_r) -> bool:
    """Queue order rule 7: ``alloc_l <= alloc_r`` in every resource and ``<`` in at least one."""
    le = compare_quantities(alloc_l, alloc_r)
    return bool(np.all(le <= 0) and np.any(le < 0))


# --------------------------------------------------------------------------------------------------
# tree


def path_to_root(parent: np.ndarray, q: int) -> list[int]:
    """``[q, parent(q), ..., top-level]``; raises ``ValueError`` on a cycle (bounded walk)."""
    parent = np.asarray(parent)
    out = [int(q)]
    for _ in range(parent.size + 1):
        p = int(parent[out[-1]])
        if p < 0:
            return out
        out.append(p)
    raise ValueError(f"parent: the queue tree has a cycle through queue index {q}")


def leveled_pair(parent: np.ndarray, reclaimer_leaf: int, victim_leaf: int) -> tuple[int, int]:
    """The queues compared for a reclaimer/victim pair (upstream ``getLeveledQueues``).

    Walk both root paths top-down; return the pair at the first depth where they differ, i.e. the two
    children of the lowest common ancestor (two different top-level queues if they share none). If one
    path is a prefix of the other (only possible when a "leaf" is an ancestor of the other), the
    deepest common-depth pair is returned, as upstream does.
    """
    return _leveled(path_to_root(parent, reclaimer_leaf)[::-1], path_to_root(parent, victim_leaf)[::-1])


# --------------------------------------------------------------------------------------------------
# strategy predicates (pure, on vectors)


def fits_maintain_fair_share(remaining, allocatable_b) -> bool:
    """MaintainFairShare: the victim side is still above its allocatable share in >= 1 resource."""
    return not less_equal(remaining, allocatable_b)


def reclaimer_fits_deserved(allocated_a, req, deserved_a) -> bool:
    """The reclaimer side stays within deserved in every resource after adding ``req``."""
    return bool(within_deserved(allocated_a, req, deserved_a))


def reclaimee_exceeds_deserved(remaining, deserved_b) -> bool:
    """The victim side is above deserved in at least one resource."""
    return not less_equal(remaining, deserved_b)


def fits_reclaim_strategy(*, req, allocated_a, deserved_a, remaining_b, deserved_b, allocatable_b) -> bool:
    """MaintainFairShare OR GuaranteeDeservedQuota, for one victim chunk (checked before subtracting it)."""
    if fits_maintain_fair_share(remaining_b, allocatable_b):
        return True
    return reclaimer_fits_deserved(allocated_a, req, deserved_a) and reclaimee_exceeds_deserved(remaining_b, deserved_b)


# --------------------------------------------------------------------------------------------------
# queue-state snapshot and reclaim gates


@dataclass(frozen=True)
class QueueShares:
    """Queue state the reclaim predicates read: all (Q, 3) except ``parent`` (Q,) and ``total`` (3,).

    ``allocated`` / ``allocated_np`` are per queue *including descendants* (as upstream accumulates
    every task into its leaf and all ancestors). Callers build one per reclaim attempt (cheap: views).
    """

    parent: np.ndarray
    deserved: np.ndarray
    limit: np.ndarray
    fair_share: np.ndarray
    allocated: np.ndarray
    allocated_np: np.ndarray
    total: np.ndarray

    def allocatable(self, q: int) -> np.ndarray:
        return allocatable(self.deserved[q], self.fair_share[q], self.limit[q])


def can_reclaim_resources(shares: QueueShares, leaf: int, req, preemptible: bool) -> bool:
    """Gate before looking for victims (``CanReclaimResources``): only the reclaimer's leaf is checked.

    ``A + req <= F`` in every resource; a non-preemptible reclaimer also needs ``Anp + req <= D``.
    """
    # in Python floats (the same IEEE sums and comparisons as the (3,) rows, :func:`_le3`, without
    # numpy's temporaries: one call per reclaiming job the gate has not seen)
    rq = np.asarray(req, dtype=np.float64).tolist()
    a = np.asarray(shares.allocated[leaf], dtype=np.float64).tolist()
    if len(rq) != NRES or len(a) != NRES:  # (not rows of three resources: the general rule)
        req = np.asarray(req, dtype=np.float64)
        if not less_equal(shares.allocated[leaf] + req, shares.fair_share[leaf]):
            return False
        return preemptible or bool(less_equal(shares.allocated_np[leaf] + req, shares.deserved[leaf]))
    if not _le3([x + y for x, y in zip(a, rq)], np.asarray(shares.fair_share[leaf], dtype=np.float64).tolist()):
        return False
    if preemptible:
        return True
    anp = np.asarray(shares.allocated_np[leaf], dtype=np.float64).tolist()
    return _le3([x + y for x, y in zip(anp, rq)], np.asarray(shares.deserved[leaf], dtype=np.float64).tolist())


def victim_filter(shares: QueueShares, reclaimer_leaf: int, victim_leaf: int, req) -> bool:
    """Proportion victim filter (upstream ``FilterVictim``): may jobs of ``victim_leaf`` be candidates?

    On the leveled pair (A*, B*): if the reclaimer does not fit A*'s deserved, keep iff B* is over its
    allocatable share in some resource. Otherwise, over the resources the reclaimer requests (> 0) and
    whose D_B* is not -1: keep iff some has A_B* > D_B*, or none has A_B* < D_B* ("exactly at deserved"
    is kept, for consolidation).
    """
    req = np.asarray(req, dtype=np.float64)
    a_star, b_star = leveled_pair(shares.parent, reclaimer_leaf, victim_leaf)
    if not reclaimer_fits_deserved(shares.allocated[a_star], req, shares.deserved[a_star]):
        return fits_maintain_fair_share(shares.allocated[b_star], shares.allocatable(b_star))
    d = shares.deserved[b_star]
    a = shares.allocated[b_star]
    considered = (req > 0) & (d != UNLIMITED)
    if np.any(considered & (a > d)):
        return True
    return not bool(np.any(considered & (a < d)))


def queue_paths_matrix(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every queue's root path top-down as rows of a (Q, depth) matrix padded with -1, and the lengths.

    Built once per queue tree so that :func:`victim_filter_many` finds leveled pairs with array ops.
    """
    parent = np.asarray(parent)
    paths = [path_to_root(parent, q)[::-1] for q in range(parent.size)]
    depth = max((len(p) for p in paths), default=1)
    mat = np.full((parent.size, depth), -1, dtype=np.int64)
    for q, p in enumerate(paths):
        mat[q, :len(p)] = p
    return mat, np.fromiter((len(p) for p in paths), dtype=np.int64, count=len(paths))


def victim_filter_many(shares: QueueShares, reclaimer_leaf: int, victim_leaves, req,
                       paths: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """:func:`victim_filter` for many victim leaves at once: (n,) bool, the same verdict for each.

    The filter's inputs are per queue pair, not per victim job, so the reclaim action evaluates it once
    per victim queue and attempt with array operations (``paths`` from :func:`queue_paths_matrix`).
    """
    req = np.asarray(req, dtype=np.float64)
    vl = np.asarray(victim_leaves, dtype=np.int64).reshape(-1)
    if vl.size == 0:
        return np.zeros(0, dtype=bool)
    mat, lens = paths if paths is not None else queue_paths_matrix(shares.parent)
    # one compiled pass over the victim leaves (the same rules, compare_quantities' tolerance)
    return victim_run.victim_filter_rows(int(reclaimer_leaf), vl, req, mat, lens,
                                         np.asarray(shares.allocated, dtype=np.float64),
                                         np.asarray(shares.deserved, dtype=np.float64),
                                         np.asarray(shares.fair_share, dtype=np.float64),
                                         np.asarray(shares.limit, dtype=np.float64), TOLERANCE)


def saturation_ratio(allocated: float, fair_share: float) -> float:
    """``allocated / fair_share`` with upstream's edge cases: F = 0 -> +inf if A > 0 else 0; F = -1 -> 0."""
    if fair_share == 0:
        return math.inf if allocated > 0 else 0.0
    if fair_share == UNLIMITED:
        return 0.0
    return allocated / fair_share


def saturation_ratios(allocated, fair_share) -> np.ndarray:
    """Vectorised :func:`saturation_ratio` over arrays (e.g. (Q, 3)), for reports and queue listings."""
    a = np.asarray(allocated, dtype=np.float64)
    f = np.broadcast_to(np.asarray(fair_share, dtype=np.float64), a.shape)
    safe = np.where((f == 0) | (f == UNLIMITED), 1.0, f)
    ratio = a / safe
    ratio = np.where(f == UNLIMITED, 0.0, ratio)
    return np.where(f == 0, np.where(a > 0, np.inf, 0.0), ratio)


def saturation_lower(involved, x_alloc, x_fair, s_remaining, s_fair, multiplier: float) -> bool:
    """Sibling saturation check (``isFairShareSaturationLowerPerResource``) over involved resources.

    Refuse (False) if for some involved r: ``ratio_X > 1`` and ``F_S > 0`` and ``ratio_X * m >= ratio_S``.
    A resource where both fair shares are -1 is skipped.
    """
    for r in range(NRES):
        if not involved[r]:
            continue
        fx, fs = float(x_fair[r]), float(s_fair[r])
        if fx == UNLIMITED and fs == UNLIMITED:
            continue
        rx = saturation_ratio(float(x_alloc[r]), fx)
        rs = saturation_ratio(float(s_remaining[r]), fs)
        if rx > 1 and fs > 0 and rx * multiplier >= rs:
            return False
    return True


def effective_multiplier(value) -> float:
    """Saturation multiplier as upstream ``proportion.New`` reads it: malformed, NaN or < 1 -> 1.0."""
    try:
        m = float(value)
    except (TypeError, ValueError):
        return 1.0
    if math.isnan(m) or m < 1:
        return 1.0
    return m


@dataclass(frozen=True)
class Verdict:
    """Result of :func:`validate_reclaim`; truthy iff acceptable. ``reason`` is for logs and events."""

    ok: bool
    reason: str = "ok"
    queue: int = -1  # the queue whose check failed (-1 when ok)
    resource: int = -1  # the resource column that failed, where one does
    # the queue whose victims' release made the check fail (B* for a strategy refusal, the sibling S
    # for a saturation refusal): more victims from under it can only lower its remaining share
    taken_from: int = -1

    def __bool__(self) -> bool:
        return self.ok


class StaticRows:
    """The queue tree and the static rows of a :class:`QueueShares` (deserved, fair share, limit,
    their allocatable share) as Python lists, each made on its first read and kept: what
    :func:`validate_reclaim` reads of them for every validated scenario (~3,000 per 2,000-node
    cycle, each converting the same few rows afresh). Valid while those arrays do not change (a
    cycle's: the fair share is computed when the state opens)."""

    __slots__ = ("shares", "parent", "_paths", "_des", "_fair", "_alloc")

    def __init__(self, shares: QueueShares) -> None:
        self.shares = shares
        self.parent = np.asarray(shares.parent).tolist()
        self._paths: dict[int, list[int]] = {}
        self._des: dict[int, list[float]] = {}
        self._fair: dict[int, list[float]] = {}
        self._alloc: dict[int, list[float]] = {}

    def path(self, q: int) -> list[int]:
        """:func:`path_to_root` of ``q`` (read only)."""
        p = self._paths.get(q)
        if p is None:
            p = self._paths[q] = path_to_root(self.shares.parent, q)
        return p

    def deserved(self, q: int) -> list[float]:
        r = self._des.get(q)
        if r is None:
            r = self._des[q] = np.asarray(self.shares.deserved[q], dtype=np.float64).tolist()
        return r

    def fair(self, q: int) -> list[float]:
        r = self._fair.get(q)
        if r is None:
            r = self._fair[q] = np.asarray(self.shares.fair_share[q], dtype=np.float64).tolist()
        return r

    def allocatable(self, q: int) -> list[float]:
        """:func:`_allocatable_row` of ``q``."""
        r = self._alloc.get(q)
        if r is None:
            sh = self.shares
            r = self._alloc[q] = _allocatable_row(self.deserved(q), self.fair(q),
                                                  np.asarray(sh.limit[q], dtype=np.float64).tolist())
        return r


class ShareRows:
    """One :class:`QueueShares`' allocation rows as Python lists, made on first read and kept, beside
    its :class:`StaticRows` (shared by every copy of the same cycle's shares): for a reclaim attempt's
    start copy (``OnJobSolutionStart``), which nothing writes while the attempt's scenarios are
    validated against it."""

    __slots__ = ("shares", "static", "_rows")

    def __init__(self, shares: QueueShares, static: StaticRows | None = None) -> None:
        self.shares = shares
        self.static = static if static is not None else StaticRows(shares)
        self._rows: dict[int, list[float]] = {}

    def allocated(self, q: int) -> list[float]:
        """``shares.allocated[q]`` as a list (read only)."""
        r = self._rows.get(q)
        if r is None:
            r = self._rows[q] = np.asarray(self.shares.allocated[q], dtype=np.float64).tolist()
        return r


def validate_reclaim(
    shares: QueueShares,
    *,
    reclaimer_leaf: int,
    req,
    reclaimer_preemptible: bool,
    victims: Mapping[int, Sequence] | Iterable[tuple[int, Sequence]],
    multiplier: float = 1.0,
    rows: ShareRows | None = None,
) -> Verdict:
    """Proportion scenario validator (upstream ``Reclaimable``), spec c "Proportion validator".

    ``victims`` maps each victim leaf queue to its list of resource vectors, in the order they are to be
    checked: per victim job, the core (first ``minAvailable`` tasks summed) then each elastic task on its
    own. Leave out tasks that the scenario re-placed (allowConsolidatingReclaim). The mapping's order is
    the order in which victim leaves are processed (upstream iterates a Go map; pass victim order).

    1. For each victim leaf b and vector v: with rem = remaining allocation of B* (leveled pair), require
       *before subtracting v*: MaintainFairShare(rem) or GuaranteeDeservedQuota(A*, req, rem); then
       subtract v from b and every ancestor.
    2. For each X on the reclaimer's path: ``X_alloc = remaining(X) + req``; for each sibling S of X that
       a victim touched, over (reclaimer's requested resources U resources held by S's victims): refuse
       if ``ratio_X > 1 and F_S > 0 and ratio_X * m >= ratio_S``. A non-preemptible reclaimer also needs
       ``Anp_X + req <= D_X`` on every X of the path.
    """
    # Python floats throughout (the same IEEE sums and comparisons as float64 arrays, without numpy's
    # per-call cost on 3-element vectors: this runs once per simulated scenario that fits); the rows
    # read come from ``rows`` (kept per reclaim attempt and cycle by the caller) or are made here
    if rows is None or rows.shares is not shares:
        rows = ShareRows(shares)
    static = rows.static
    rq = np.asarray(req, dtype=np.float64).tolist()
    parent = static.parent
    items = list(victims.items()) if isinstance(victims, Mapping) else list(victims)
    row_alloc = rows.allocated
    path = static.path
    remaining: dict[int, list[float]] = {}
    involved: dict[int, list[bool]] = {}

    rpath = path(int(reclaimer_leaf))
    top_down_a = rpath[::-1]

    # 1. per-chunk strategy checks, then subtraction up the victim's path
    for victim_leaf, vectors in items:
        victim_leaf = int(victim_leaf)
        vecs = [v.tolist() if type(v) is np.ndarray and v.dtype == np.float64 else
                np.asarray(v, dtype=np.float64).tolist() for v in vectors]
        vpath = path(victim_leaf)
        a_star, b_star = _leveled(top_down_a, vpath[::-1])
        leaf_involved = [False, False, False]
        for v in vecs:
            for r in range(NRES):
                if v[r] > 0:
                    leaf_involved[r] = True
        inv0 = involved.get(victim_leaf)
        involved[victim_leaf] = leaf_involved if inv0 is None else [x or y for x, y in zip(inv0, leaf_involved)]
        if b_star not in remaining:
            remaining[b_star] = row_alloc(b_star)
        alloc_b = static.allocatable(b_star)
        alloc_a = row_alloc(a_star)
        reclaimer_fits = _le3([x + y for x, y in zip(alloc_a, rq)], static.deserved(a_star))
        deserved_b = static.deserved(b_star)
        for v in vecs:
            rem_b = remaining[b_star]
            # MaintainFairShare, else GuaranteeDeservedQuota (fits_reclaim_strategy)
            ok = not _le3(rem_b, alloc_b) or (reclaimer_fits and not _le3(rem_b, deserved_b))
            if not ok:
                return Verdict(False, f"strategy: queue {b_star} may not give up {v}", queue=b_star,
                               taken_from=b_star)
            leaf_inv = involved[victim_leaf]
            for q in vpath:
                cur = remaining.get(q)
                if cur is None:
                    cur = row_alloc(q)
                remaining[q] = [x - y for x, y in zip(cur, v)]
                if q != victim_leaf:
                    inv = involved.get(q)
                    involved[q] = list(leaf_inv) if inv is None else [x or y for x, y in zip(inv, leaf_inv)]

    # 2. the reclaimer's side must stay less saturated than every touched sibling
    req_involved = [x > 0 for x in rq]
    for x in rpath:
        base_x = remaining[x] if x in remaining else row_alloc(x)
        x_alloc = [u + w for u, w in zip(base_x, rq)]
        px = parent[x]
        fair_x = None
        for s_ in remaining:
            if s_ == x or parent[s_] != px:
                continue
            inv = involved.get(s_)
            inv = req_involved if inv is None else [u or w for u, w in zip(inv, req_involved)]
            if fair_x is None:
                fair_x = static.fair(x)
            if not saturation_lower(inv, x_alloc, fair_x, remaining[s_], static.fair(s_), multiplier):
                return Verdict(False, f"saturation: queue {x} would be more saturated than sibling {s_}", queue=x,
                               taken_from=s_)
        if not reclaimer_preemptible:
            anp = np.asarray(shares.allocated_np[x], dtype=np.float64).tolist()
            d = static.deserved(x)
            for r in range(NRES):
                if not _le1(anp[r] + rq[r], d[r]):
                    return Verdict(
                        False, f"non-preemptible over quota: queue {x} for {RESOURCES[r]}", queue=x, resource=r
                    )
    return Verdict(True)


def _allocatable_row(d: list[float], f: list[float], lim: list[float]) -> list[float]:
    """:func:`allocatable` of one queue's row, in Python floats (NaN propagates as in np.maximum /
    np.minimum)."""
    out = []
    for dr, fr, lr in zip(d, f, lim):
        if dr == UNLIMITED:
            out.append(lr)
            continue
        base = math.nan if (dr != dr or fr != fr) else (dr if dr >= fr else fr)
        if lr == UNLIMITED:
            out.append(base)
        else:
            out.append(math.nan if (lr != lr or base != base) else (lr if lr <= base else base))
    return out


def _le1(x: float, y: float) -> bool:
    """``x <= y`` as :func:`compare_quantities` says it (-1 is +infinity, within the tolerance is equal)."""
    if y == UNLIMITED:
        return True
    if x == UNLIMITED:
        return False
    return x <= y or abs(x - y) <= TOLERANCE


def _le3(a: list[float], b: list[float]) -> bool:
    """:func:`less_equal` of two 3-vectors given as Python floats."""
    return _le1(a[0], b[0]) and _le1(a[1], b[1]) and _le1(a[2], b[2])


def _leveled(a: list[int], b: list[int]) -> tuple[int, int]:
    """:func:`leveled_pair` from the two top-down root paths."""
    pair = (a[0], b[0])
    for x, y in zip(a, b):
        pair = (x, y)
        if x != y:
            break
    return pair


# ================================================================================ the reclaim action's view
# The queue state a reclaim attempt reads from the cycle state, and its refusals in words.

def shares_now(state: CycleState, copy: bool = False) -> QueueShares:
    """The reclaim predicates' view of the state's queues; ``copy``: with the allocations as they are
    now (a reclaim attempt's start, ``OnJobSolutionStart``), which later changes do not move.

    The two allocation rows are strided views of one (Q, 2, 3) array: the copy takes that array in
    one contiguous copy and views its rows (~3 us at 1,000 queues, against ~16 us for the two strided
    copies, once per reclaim attempt); the same values either way."""
    a, anp = state.queue_alloc, state.queue_alloc_np
    if copy:
        both = getattr(state, "_queue_alloc_both", None)
        if both is not None and a.base is both and anp.base is both:
            both = both.copy()
            a, anp = both[:, 0], both[:, 1]
        else:
            a, anp = a.copy(), anp.copy()
    return QueueShares(parent=np.asarray(state.queues.parent), deserved=state.queue_deserved,
                       limit=state.queue_limit, fair_share=state.fair_share, allocated=a, allocated_np=anp,
                       total=state.total)


def gate_failure(state: CycleState, leaf: int, req: np.ndarray, preemptible: bool) -> str:
    """Why ``CanReclaimResources`` refused, with numbers."""
    a = state.queue_alloc[leaf]
    f = state.fair_share[leaf]
    name = state.queues.names[leaf]
    for r in range(NRES):
        if f[r] != UNLIMITED and a[r] + req[r] > f[r] + 1e-9:
            return (f"queue {name} is at its fair share for {RES_NAMES[r]}: {fmt_amount(r, a[r])} allocated + "
                    f"{fmt_amount(r, req[r])} requested > {fmt_amount(r, f[r])} fair share")
    if not preemptible:
        anp = state.queue_alloc_np[leaf]
        d = state.queue_deserved[leaf]
        for r in range(NRES):
            if d[r] != UNLIMITED and anp[r] + req[r] > d[r] + 1e-9:
                return (f"queue {name} quota for non-preemptible jobs exceeded for {RES_NAMES[r]}: "
                        f"{fmt_amount(r, anp[r])} allocated + {fmt_amount(r, req[r])} requested > "
                        f"{fmt_amount(r, d[r])} deserved")
    return f"queue {name} may not reclaim"


def victim_vectors(state: CycleState, sc: Scenario) -> list[tuple[int, list[np.ndarray]]]:
    """Per victim leaf, per victim job: elastic tasks one by one, then the core summed (re-placed left out)."""
    # (the state's list mirrors of the task -> job and job -> leaf arrays: no numpy scalar per victim)
    tj = state._task_job_list
    by_job: dict[int, list[int]] = {}
    for t in sc.victims:
        by_job.setdefault(tj[t], []).append(t)
    replaced = set(sc.moved) | set(sc.kept)
    by_leaf: dict[int, list[np.ndarray]] = {}
    order: list[int] = []
    for vj, ts in by_job.items():
        m = int(state.job_min_available[vj])
        if m >= len(ts):
            core, elastic = ts, []
        else:
            core, elastic = ts[:m], ts[m:]
        vecs = []
        for t in elastic:
            if t not in replaced:
                vecs.append(sc.orig_alloc[t])
        core_kept = [sc.orig_alloc[t] for t in core if t not in replaced]
        if core_kept:
            # (a single row is its own sum: add.reduce starts from the first element)
            vecs.append(core_kept[0] if len(core_kept) == 1 else np.sum(core_kept, axis=0))
        if not vecs:
            continue
        q = state.job_queue(vj)
        if q not in by_leaf:
            by_leaf[q] = []
            order.append(q)
        by_leaf[q].extend(vecs)
    return [(q, by_leaf[q]) for q in order]


def verdict_text(state: CycleState, verdict, start: QueueShares, leaf: int, req: np.ndarray) -> str:
    """The proportion validator's refusal in words, with the numbers it compared."""
    q = verdict.queue
    name = state.queues.names[q] if q is not None and q >= 0 else "?"
    text = verdict.reason
    asked = [r for r in range(NRES) if req[r] > 0] or [0]

    def trio(x: int, r: int) -> str:
        f = start.fair_share[x, r]
        d = start.deserved[x, r]
        return (f"{fmt_amount(r, start.allocated[x, r])} allocated, deserved "
                f"{'unlimited' if d == UNLIMITED else fmt_amount(r, d)}, fair share "
                f"{'unlimited' if f == UNLIMITED else fmt_amount(r, f)}")

    if text.startswith("strategy"):
        r = asked[0]
        d_a = start.deserved[leaf, r]
        a_a = start.allocated[leaf, r]
        fits = d_a == UNLIMITED or a_a + req[r] <= d_a + 1e-9
        if fits:
            return (f"queue {name} is not above its deserved quota or fair share for {RES_NAMES[r]} "
                    f"({trio(q, r)}), so it keeps what it holds")
        return (f"queue {name} is not above its fair share for {RES_NAMES[r]} ({trio(q, r)}) and reclaimer queue "
                f"{state.queues.names[leaf]} would exceed its deserved quota: {fmt_amount(r, a_a)} allocated + "
                f"{fmt_amount(r, req[r])} requested > {fmt_amount(r, d_a)} deserved")
    if text.startswith("saturation"):
        m = re.search(r"sibling (\d+)", text)
        sib = int(m.group(1)) if m else -1
        r = asked[0]
        x_alloc = start.allocated[q, r] + req[r]
        fx = start.fair_share[q, r]
        ratio = (x_alloc / fx) if fx > 0 else float("inf")
        other = f" than sibling {state.queues.names[sib]} (before the reclaim: {trio(sib, r)})" if sib >= 0 else ""
        return (f"queue {name} would end more saturated{other}: {fmt_amount(r, x_alloc)} allocated with the job / "
                f"{fmt_amount(r, fx)} fair share = {ratio:.3g} for {RES_NAMES[r]}")
    if text.startswith("non-preemptible"):
        r = verdict.resource if verdict.resource >= 0 else asked[0]
        d = start.deserved[q, r]
        return (f"queue {name} would hold non-preemptible jobs above its deserved quota for {RES_NAMES[r]}: "
                f"{fmt_amount(r, start.allocated_np[q, r])} + {fmt_amount(r, req[r])} requested > "
                f"{fmt_amount(r, d)} deserved")
    return text
