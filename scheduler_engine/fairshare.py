"""Hierarchical fair-share division (KAI proportion plugin semantics, spec section a).

Public API
----------
``compute_fair_share(*, parent, deserved, limit, weight, priority, request, usage, order_rank, total, k_value)``
    -> ``(Q, 3)`` fair share per queue, in KAI internal units (gpu devices, cpu millicores, memory bytes).
``aggregate_up(parent, values)`` -> ``(Q, 3)``: each queue's own values plus all of its descendants'.
``divide_level(...)``: one level division of one resource (a.3-a.5), exposed for tests and tools.
``tree_levels(parent)``: the sibling groups of the tree in top-down order (raises on a cycle).

Why it is written this way
--------------------------
* Resources are divided independently (one scalar pass per resource and sibling group), exactly as the
  upstream ``SetResourcesShare`` loops over resources; children divide their parent's *fair share*.
* The over-quota phase keeps upstream's arithmetic order (``C * (P / S)``, floor in whole internal
  units, remainders recorded per priority band, leftovers carried to lower bands, then the leftover pass
  ordered by remainder desc and creation asc) because the golden vectors depend on the exact rounding.
  Float noise in the amount still to divide (a few ulps after subtracting many shares) is snapped to 0
  so that it cannot start a spurious extra round or a leftover pass; the snap threshold (1e-12 relative
  to the level total) is far below any real fraction (GPU fractions are >= 0.01, cpu/memory are whole).
* A queue's recorded remainder is overwritten only when a later round leaves it a new fraction; a round
  that gives it a whole share keeps the older remainder (as upstream's map update does), which can decide
  the leftover pass (test ``test_stale_remainder_kept_when_a_later_round_is_whole``).
* Plain Python loops over the queues of one band are fine: a level has few queues, and this runs once per
  cycle (1000-5000 queues divide in tens of milliseconds). The tree walk itself is grouped by parent.

Guarantees (property-tested in tests/scheduler_engine/test_fairshare.py), per sibling group with
``req = requestable`` and ``d = D`` (or the level total when ``D = -1``):

* ``F >= min(d, req)`` always (deserved is never taken back, and not capped by capacity);
* ``F < req + 1`` strictly, so also ``F < R + 1`` and ``F < L + 1``: only the leftover pass exceeds the
  request or limit, giving ``min(1, leftover)`` once to a queue whose remaining request is still > 0;
* weight-0 and request-less queues get exactly ``min(d, req)`` (so 0 without a request);
* ``sum F <= total`` unless the deserved phase alone over-subscribes (then ``F = min(d, req)``);
* k = 0 ignores usage exactly; whole-unit inputs (millicores, bytes) give whole-unit shares.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

UNLIMITED = -1.0
NRES = 3

# Relative size below which a remaining amount is float noise rather than a real resource fraction.
_NOISE_REL = 1e-12


# --------------------------------------------------------------------------------------------------
# tree helpers


def _check_parent(parent: np.ndarray) -> np.ndarray:
    parent = np.asarray(parent)
    if parent.ndim != 1:
        raise ValueError(f"parent: expected a 1-d array of parent indices, got shape {parent.shape}")
    if parent.size and not np.issubdtype(parent.dtype, np.integer):
        if not np.all(np.isfinite(parent)) or not np.all(parent == np.round(parent)):
            raise ValueError("parent: indices must be integers")
    parent = parent.astype(np.int64, copy=False)
    q = parent.size
    bad = (parent < -1) | (parent >= q)
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"parent[{i}]: index {int(parent[i])} out of range for {q} queues")
    if np.any(parent == np.arange(q)):
        i = int(np.flatnonzero(parent == np.arange(q))[0])
        raise ValueError(f"parent[{i}]: a queue cannot be its own parent")
    return parent


def depths(parent: np.ndarray) -> np.ndarray:
    """Depth of every queue (0 = top level). Raises ``ValueError`` on a cycle in the tree.

    Vectorised pointer jumping would hide which queue is on the cycle, so this walks up level by level:
    at most Q iterations, each O(Q) in numpy.
    """
    parent = _check_parent(parent)
    q = parent.size
    depth = np.full(q, -1, dtype=np.int64)
    depth[parent == -1] = 0
    for level in range(1, q + 1):
        unknown = depth < 0
        if not np.any(unknown):
            break
        ready = unknown & (parent >= 0)
        ready[ready] = depth[parent[ready]] == level - 1
        if not np.any(ready):
            break
        depth[ready] = level
    if np.any(depth < 0):
        i = int(np.flatnonzero(depth < 0)[0])
        raise ValueError(f"parent[{i}]: the queue tree has a cycle through queue index {i}")
    return depth


def tree_levels(parent: np.ndarray, order_rank: np.ndarray | None = None) -> list[tuple[int, np.ndarray]]:
    """Sibling groups top-down: ``[(parent_index or -1, child indices sorted by order_rank), ...]``.

    Every group appears after the group containing its parent, so dividing groups in list order lets
    each child group use its parent's already computed fair share.
    """
    parent = _check_parent(parent)
    depth = depths(parent)
    q = parent.size
    rank = np.arange(q) if order_rank is None else np.asarray(order_rank)
    groups: list[tuple[int, np.ndarray]] = []
    # sort queues by (depth, parent, rank): contiguous runs are sibling groups in top-down order
    order = np.lexsort((rank, parent, depth))
    if q == 0:
        return groups
    par_sorted = parent[order]
    dep_sorted = depth[order]
    breaks = np.flatnonzero((np.diff(par_sorted) != 0) | (np.diff(dep_sorted) != 0)) + 1
    for chunk in np.split(order, breaks):
        groups.append((int(parent[chunk[0]]), chunk))
    return groups


def aggregate_up(parent: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Sum each queue's own ``values`` with those of all its descendants (``(Q,)`` or ``(Q, k)``).

    Used to turn per-leaf requests / allocations into the per-queue totals the division needs
    (upstream adds every task to its leaf queue *and every ancestor*). Processes deepest level first,
    so each level is one ``np.add.at``.
    """
    parent = _check_parent(parent)
    values = np.asarray(values, dtype=np.float64)
    if values.shape[:1] != parent.shape:
        raise ValueError(f"values: expected {parent.size} rows (one per queue), got shape {values.shape}")
    out = values.copy()
    depth = depths(parent)
    if parent.size == 0:
        return out
    for level in range(int(depth.max()), 0, -1):
        idx = np.flatnonzero(depth == level)
        np.add.at(out, parent[idx], out[idx])
    return out


# --------------------------------------------------------------------------------------------------
# one level, one resource


def divide_level(
    *,
    total: float,
    deserved: np.ndarray,
    limit: np.ndarray,
    weight: np.ndarray,
    priority: np.ndarray,
    request: np.ndarray,
    usage: np.ndarray,
    order_rank: np.ndarray,
    k_value: float,
) -> np.ndarray:
    """Divide ``total`` of one resource among one sibling group (spec a.3-a.5). Returns F, shape (n,).

    Arrays are (n,) for the n siblings; ``-1`` in deserved / limit means unlimited; ``order_rank`` is the
    creation tie-break (smaller = older). ``k_value`` must already be >= 0.
    """
    n = len(deserved)
    fs = np.zeros(n, dtype=np.float64)
    if n == 0:
        return fs
    total = float(total)
    eps = _NOISE_REL * max(1.0, abs(total))

    # a.3 deserved phase: F = min(d, requestable); -1 deserved means "the whole total of this level"
    d = np.where(deserved == UNLIMITED, total, deserved)
    req = np.where(limit == UNLIMITED, request, np.minimum(limit, request))
    fs += np.minimum(d, req)
    remaining = total
    for i in np.argsort(order_rank, kind="stable"):
        remaining -= fs[i]
    if not remaining > eps:
        return fs

    # a.4 over-quota phase, by priority band (descending)
    band_prios = sorted({int(p) for p in priority}, reverse=True)
    remainders: list[dict[int, float]] = []
    amount = remaining
    for prio in band_prios:
        band = [int(i) for i in np.flatnonzero(priority == prio)]
        band.sort(key=lambda i: order_rank[i])
        band_rem: dict[int, float] = {}
        remainders.append(band_rem)
        if amount <= eps:
            continue
        amount = _divide_band(band, amount, eps, fs, req, request, limit, weight, usage, k_value, band_rem)

    # leftover pass: rounding fractions go to the largest remainders, min(1, amount) each, band by band.
    # Deliberately ignores the queue's remaining request and limit (upstream divideRemainingResource).
    for band_rem in remainders:
        if amount <= eps:
            break
        for i in sorted(band_rem, key=lambda j: (-band_rem[j], order_rank[j])):
            if amount <= eps:
                break
            give = min(1.0, amount)
            fs[i] += give
            amount -= give
    return fs


def _divide_band(band, amount, eps, fs, req, request, limit, weight, usage, k_value, band_rem) -> float:
    """Rounds of one priority band; mutates ``fs`` and ``band_rem``; returns the amount left over."""
    while True:
        rem_req = {i: max(0.0, req[i] - fs[i]) for i in band}
        unsat = [i for i in band if rem_req[i] > 0]
        w_sum = 0.0
        for i in unsat:
            w_sum += weight[i]
        if w_sum == 0:
            break
        share_w: dict[int, float] = {}
        s_sum = 0.0
        for i in unsat:
            nw = weight[i] / w_sum
            p = max(0.0, nw + k_value * (nw - usage[i]))
            share_w[i] = p
            s_sum += p
        if s_sum == 0:
            break
        c = amount  # frozen for the whole round
        again = False
        for i in unsat:
            if amount <= eps:
                break
            if weight[i] == 0:
                continue  # weight-0 queues never get over-quota
            s = c * (share_w[i] / s_sum)
            rr = rem_req[i]
            if rr <= s:
                give = rr
                band_rem.pop(i, None)
            else:
                give = math.floor(s)
                if give <= 0:
                    give = 0.0
                if s - give > 0:
                    band_rem[i] = s - give
            if give == 0:
                continue
            fs[i] += give
            amount -= give
            again = again or rr < s
        if not again or amount <= eps:
            break
    return amount


# --------------------------------------------------------------------------------------------------
# the whole tree


def _as_matrix(name: str, value, q: int) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != (q, NRES):
        raise ValueError(f"{name}: expected shape ({q}, {NRES}), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        i = int(np.flatnonzero(~np.isfinite(arr).all(axis=1))[0])
        raise ValueError(f"{name}[{i}]: values must be finite")
    return arr


def compute_fair_share(
    *,
    parent: np.ndarray,
    deserved: np.ndarray,
    limit: np.ndarray,
    weight: np.ndarray,
    priority: np.ndarray,
    request: np.ndarray,
    usage: np.ndarray,
    order_rank: np.ndarray,
    total: Sequence[float] | np.ndarray,
    k_value: float,
) -> np.ndarray:
    """Fair share F (Q, 3) of every queue for one scheduling cycle (spec section a).

    * ``parent`` (Q,) int, -1 = top level.
    * ``deserved``, ``limit`` (Q, 3), internal units, -1 = unlimited (any other negative is an error).
    * ``weight`` (Q, 3) effective over-quota weight >= 0 (0 = no over-quota share).
    * ``priority`` (Q,) int: over-quota bands, higher served first.
    * ``request`` (Q, 3): already aggregated over each queue's descendants (see :func:`aggregate_up`).
    * ``usage`` (Q, 3) normalised historical usage in [0, 1] (fraction of the whole cluster).
    * ``order_rank`` (Q,) int: creation tie-break, 0 = oldest.
    * ``total`` (3,): capacity of the ready nodes.
    * ``k_value``: weight of usage; values <= 0 mean 0 (classic division), as upstream ``proportion.New``.

    Top-level queues divide ``total``; the children of q divide ``F[q]``. No capacity cap: the sum of
    fair shares may exceed what is divided (deserved over-subscription, leftover pass).
    """
    parent = _check_parent(parent)
    q = parent.size
    deserved = _as_matrix("deserved", deserved, q)
    limit = _as_matrix("limit", limit, q)
    weight = _as_matrix("weight", weight, q)
    request = _as_matrix("request", request, q)
    usage = _as_matrix("usage", usage, q)
    for name, arr in (("deserved", deserved), ("limit", limit)):
        bad = (arr < 0) & (arr != UNLIMITED)
        if np.any(bad):
            i, r = (int(x) for x in np.argwhere(bad)[0])
            raise ValueError(f"{name}[{i}][{r}]: must be >= 0 or -1 (unlimited), got {arr[i, r]}")
    for name, arr in (("weight", weight), ("request", request)):
        if np.any(arr < 0):
            i, r = (int(x) for x in np.argwhere(arr < 0)[0])
            raise ValueError(f"{name}[{i}][{r}]: must be >= 0, got {arr[i, r]}")
    priority = np.asarray(priority)
    if priority.shape != (q,):
        raise ValueError(f"priority: expected shape ({q},), got {priority.shape}")
    order_rank = np.asarray(order_rank)
    if order_rank.shape != (q,):
        raise ValueError(f"order_rank: expected shape ({q},), got {order_rank.shape}")
    total = np.asarray(total, dtype=np.float64).reshape(-1)
    if total.shape != (NRES,) or not np.all(np.isfinite(total)) or np.any(total < 0):
        raise ValueError(f"total: expected {NRES} finite non-negative capacities, got {total!r}")
    k = float(k_value)
    if math.isnan(k) or math.isinf(k):
        raise ValueError(f"k_value: must be finite, got {k_value!r}")
    k = max(0.0, k)

    fs = np.zeros((q, NRES), dtype=np.float64)
    for par, idx in tree_levels(parent, order_rank):
        level_total = total if par < 0 else fs[par]
        for r in range(NRES):
            fs[idx, r] = divide_level(
                total=level_total[r],
                deserved=deserved[idx, r],
                limit=limit[idx, r],
                weight=weight[idx, r],
                priority=priority[idx],
                request=request[idx, r],
                usage=usage[idx, r],
                order_rank=order_rank[idx],
                k_value=k,
            )
    return fs
