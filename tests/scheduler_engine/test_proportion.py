"""Reclaim strategy predicates and derived queue quantities (spec a.6, b, c).

Every row of the spec's strategy predicate table (transcribed from upstream strategies_test.go) is a
case below; gpu values unless stated, cpu/memory zero. Multi-queue validator cases mirror upstream
reclaimable_test.go's departments / hierarchy cases, restated as arrays.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_engine.plugins.proportion import (
    QueueShares,
    allocatable,
    can_reclaim_resources,
    compare_quantities,
    dominant_share,
    effective_multiplier,
    fair_share_less_than_allocated,
    fits_maintain_fair_share,
    fits_reclaim_strategy,
    leveled_pair,
    less_equal,
    path_to_root,
    queue_paths_matrix,
    reclaimee_exceeds_deserved,
    reclaimer_fits_deserved,
    requestable,
    saturation_lower,
    saturation_ratio,
    saturation_ratios,
    validate_reclaim,
    victim_filter,
    victim_filter_many,
    weaker_allocatable,
    within_deserved,
    zero_share_violation,
)

U = -1.0
MIN_MEMORY = 1.0  # upstream resource_info.MinMemory in the tests' units (memory rows only)


def g(x):
    """A (gpu, cpu, memory) vector with only gpu set."""
    return np.array([float(x), 0.0, 0.0])


# ------------------------------------------------------------------------------------------------
# compareQuantities and derived quantities


@pytest.mark.parametrize(
    "a,b,expected",
    [(1, 2, -1), (2, 1, 1), (2, 2, 0), (U, U, 0), (U, 5, 1), (5, U, -1), (0, U, -1), (1e12, U, -1),
     (0.1 + 0.2, 0.3, 0), (1 + 1e-10, 1, 0), (1 + 1e-6, 1, 1)],
)
def test_compare_quantities_minus_one_is_infinite(a, b, expected):
    assert int(compare_quantities(a, b)) == expected


def test_less_equal_over_all_resources():
    assert less_equal([1, 2, 3], [1, 2, 3]) is True
    assert less_equal([1, 2, 3], [U, U, U]) is True
    assert less_equal([U, 0, 0], [100, 100, 100]) is False
    assert less_equal([1, 2, 4], [1, 2, 3]) is False
    np.testing.assert_array_equal(less_equal(np.array([[1, 1, 1], [2, 2, 2]]), [1.5, 2, 2]), [True, False])


def test_requestable():
    np.testing.assert_array_equal(requestable([5, 5, 5], [U, 3, 7]), [5, 3, 5])


@pytest.mark.parametrize(
    "d,f,l,expected",
    [(2000, 1000, 3000, 2000), (U, 5, 1000, 1000), (U, 5, U, U), (1000, 2000, U, 2000), (1000, 2000, 1500, 1500),
     (0, 0, U, 0), (0, 3, 2, 2)],
)
def test_allocatable_share(d, f, l, expected):
    assert float(allocatable(d, f, l)) == expected


def test_dominant_share_examples():
    # allocated (500,100,200) over allocatable 1000 each -> 0.5
    assert dominant_share([500, 100, 200], [1000, 1000, 1000], [4000, 4000, 4000]) == 0.5
    # cpu allocatable 0 with 500 allocated -> 500 * 1000
    assert dominant_share([0, 500, 0], [1000, 0, 1000], [4000, 4000, 4000]) == 500000
    # gpu D=-1 (allocatable = limit -1) uses the cluster total: 700 / 2000
    alloc = allocatable(np.array([U, 0, 0]), np.zeros(3), np.array([U, U, U]))
    assert dominant_share([700, 0, 0], alloc, [2000, 1, 1]) == 0.35
    # vectorised over queues
    out = dominant_share(np.array([[1.0, 0, 0], [0, 0, 0]]), np.array([[2.0, 1, 1], [0, 0, 0]]), [4, 4, 4])
    np.testing.assert_array_equal(out, [0.5, 0.0])


def test_queue_order_helpers():
    assert fair_share_less_than_allocated([1, 1, 1], [2, 2, 2]) is True
    assert fair_share_less_than_allocated([1, 0, 0], [2, 0, 0]) is False  # gpu-only: cpu/memory tie 0 <= 0
    assert within_deserved(g(2), g(2), g(4)) is True
    assert within_deserved(g(2), g(3), g(4)) is False
    assert within_deserved(g(100), g(3), [U, U, U]) is True
    assert zero_share_violation([0, 5, 5], [0, 0, 0], [1, 0, 0]) is True
    assert zero_share_violation([0, 5, 5], [0, 1, 0], [0, 0, 0]) is False
    assert weaker_allocatable([1, 2, 3], [1, 2, 4]) is True
    assert weaker_allocatable([1, 2, 3], [1, 2, 3]) is False
    assert weaker_allocatable([1, 2, 5], [1, 3, 4]) is False
    assert weaker_allocatable([1, 2, 3], [U, 2, 3]) is True


def test_effective_multiplier():
    assert effective_multiplier(1.6) == 1.6
    assert effective_multiplier(0.5) == 1.0
    assert effective_multiplier("junk") == 1.0
    assert effective_multiplier(float("nan")) == 1.0
    assert effective_multiplier(None) == 1.0


def test_saturation_ratio_edges():
    assert saturation_ratio(1, 0) == math.inf
    assert saturation_ratio(0, 0) == 0
    assert saturation_ratio(5, U) == 0
    assert saturation_ratio(5, 4) == 1.25
    out = saturation_ratios(np.array([[1, 0, 5, 5]]), np.array([[0, 0, U, 4]]))
    np.testing.assert_array_equal(out, [[math.inf, 0, 0, 1.25]])


# ------------------------------------------------------------------------------------------------
# strategy predicate table (spec c), one test per row


def test_mfs_predicate_against_allocatable():
    alloc = allocatable(g(2), g(4), [U, U, U])  # gpu 4, cpu/mem max(0, 0) = 0
    assert fits_maintain_fair_share(g(3), alloc) is False
    assert fits_maintain_fair_share(g(5), alloc) is True


def test_gdq_predicate_boundaries():
    assert reclaimer_fits_deserved(g(2), g(2), g(4)) is True
    assert reclaimer_fits_deserved(g(2), g(3), g(4)) is False
    assert reclaimee_exceeds_deserved(g(3), g(2)) is True
    assert reclaimee_exceeds_deserved(g(2), g(2)) is False


@pytest.mark.parametrize(
    "name,d,f,a,expected",
    [
        ("less than quota", 3, 4, 1, False),
        ("less than fair share", 3, 4, 3, False),
        ("exactly fair share, above quota", 1, 3, 3, False),
        ("exactly fair share = quota", 3, 3, 3, False),
        ("more than fair share", 2, 3, 4, True),
    ],
)
def test_mfs_table(name, d, f, a, expected):
    # reclaimer D5 F5 A0 is irrelevant to MFS; remaining = the reclaimee's allocation
    alloc = allocatable(g(d), g(f), [U, U, U])
    assert fits_maintain_fair_share(g(a), alloc) is expected, name


@pytest.mark.parametrize(
    "rem",
    [(80, 220, 220), (220, 80, 220), (220, 220, 80)],
)
def test_mfs_multi_resource_deserved_below_fair_share(rem):
    d = np.array([100, 100, 100 * MIN_MEMORY])
    f = np.array([200, 200, 200 * MIN_MEMORY])
    rem = np.array([rem[0], rem[1], rem[2] * MIN_MEMORY], dtype=float)
    assert fits_maintain_fair_share(rem, allocatable(d, f, [U, U, U])) is True


@pytest.mark.parametrize(
    "rem,expected",
    [
        ((80, 220, 220), True), ((220, 80, 220), True), ((220, 220, 80), True),
        ((220, 120, 120), True), ((120, 220, 120), True), ((120, 120, 220), True),
        ((120, 120, 120), False),
    ],
)
def test_mfs_multi_resource_deserved_equals_fair_share(rem, expected):
    d = f = np.array([200, 200, 200 * MIN_MEMORY])
    rem = np.array([rem[0], rem[1], rem[2] * MIN_MEMORY], dtype=float)
    assert fits_maintain_fair_share(rem, allocatable(d, f, [U, U, U])) is expected


def test_mfs_max_allowed_lower_than_deserved():
    d = f = np.array([200, 200, 200 * MIN_MEMORY])
    alloc = allocatable(d, f, [100, 100, 100])
    assert alloc.tolist() == [100, 100, 100]
    assert fits_maintain_fair_share(np.array([50, 120, 30 * MIN_MEMORY]), alloc) is True  # cpu 120 > 100
    assert fits_maintain_fair_share(np.array([50, 100, 30 * MIN_MEMORY]), alloc) is False


def _gdq(reclaimer_d, reclaimer_a, req, victim_d, victim_a):
    """GuaranteeDeservedQuota alone (the upstream table calls the strategy, not MFS)."""
    return reclaimer_fits_deserved(reclaimer_a, req, reclaimer_d) and reclaimee_exceeds_deserved(victim_a, victim_d)


@pytest.mark.parametrize(
    "name,rd,ra,req,vd,va,expected",
    [
        ("reclaimer above deserved", g(1), g(3), g(2), g(1), g(3), False),
        ("reclaimer reaches exactly deserved", g(5), g(3), g(2), g(1), g(4), True),
        ("reclaimee remains exactly deserved", g(5), g(3), g(2), g(1), g(3), True),
        ("reclaimee goes below deserved", g(4), g(2), g(2), np.array([3, 1, 1.0]), np.array([4, 0, 0.0]), True),
        ("reclaimee above deserved in only one resource", g(5), g(2), g(2), np.array([1, 100, 0.0]), g(3), True),
        ("reclaimee exactly deserved", g(5), g(2), g(2), g(3), g(3), False),
        ("reclaimee below deserved", g(5), g(2), g(2), g(3), g(2), False),
        ("zero quota queue gives up all", g(4), g(2), g(2), g(0), g(2), True),
    ],
)
def test_gdq_table(name, rd, ra, req, vd, va, expected):
    assert _gdq(rd, ra, req, vd, va) is expected, name


def test_combined_strategy_is_mfs_or_gdq():
    # MFS false (at fair share), GDQ true (reclaimer starved, victim above deserved) -> reclaimable
    kw = dict(req=g(2), allocated_a=g(3), deserved_a=g(5), remaining_b=g(3), deserved_b=g(1))
    assert fits_reclaim_strategy(**kw, allocatable_b=allocatable(g(1), g(3), [U, U, U])) is True
    # MFS true even though the reclaimer is above deserved
    kw = dict(req=g(2), allocated_a=g(3), deserved_a=g(1), remaining_b=g(4), deserved_b=g(2))
    assert fits_reclaim_strategy(**kw, allocatable_b=allocatable(g(2), g(3), [U, U, U])) is True
    # neither
    kw = dict(req=g(2), allocated_a=g(3), deserved_a=g(1), remaining_b=g(3), deserved_b=g(1))
    assert fits_reclaim_strategy(**kw, allocatable_b=allocatable(g(1), g(3), [U, U, U])) is False


# ------------------------------------------------------------------------------------------------
# tree helpers


def test_leveled_pair():
    # 0 top-a -> 1 mid-a -> 2 leaf-a1, 3 leaf-a2 ; 4 top-b -> 5 leaf-b
    parent = np.array([-1, 0, 1, 1, -1, 4])
    assert leveled_pair(parent, 2, 3) == (2, 3)  # siblings
    assert leveled_pair(parent, 2, 5) == (0, 4)  # different top-level queues
    assert leveled_pair(parent, 5, 3) == (4, 0)
    parent2 = np.array([-1, 0, 0, 1, 2])  # top -> {1, 2}; 3 under 1, 4 under 2
    assert leveled_pair(parent2, 3, 4) == (1, 2)
    assert path_to_root(parent, 3) == [3, 1, 0]
    with pytest.raises(ValueError, match="cycle"):
        path_to_root(np.array([1, 0]), 0)


# ------------------------------------------------------------------------------------------------
# queue-state gates: CanReclaimResources, victim filter, validator


def shares_from(rows, total=(100, 100, 100)):
    """rows: list of (parent, D, F, A[, Anp[, L]]) gpu-only values; cpu/memory zero."""
    n = len(rows)
    parent = np.array([r[0] for r in rows])
    mk = lambda col, default=0.0: np.array([[r[col] if len(r) > col else default, 0, 0] for r in rows], float)
    limit = mk(5, U)
    limit[:, 1:] = U
    return QueueShares(
        parent=parent, deserved=mk(1), fair_share=mk(2), allocated=mk(3), allocated_np=mk(4), limit=limit,
        total=np.array(total, float),
    ) if n else None


def test_can_reclaim_resources():
    s = shares_from([(-1, 3, 3, 2, 0), (-1, 2, 2, 3, 2)])
    assert can_reclaim_resources(s, 0, g(1), True) is True  # 2 + 1 <= 3
    assert can_reclaim_resources(s, 0, g(2), True) is False
    assert can_reclaim_resources(s, 1, g(0), True) is False  # already above its fair share
    s2 = shares_from([(-1, 1, 3, 1, 1)])
    assert can_reclaim_resources(s2, 0, g(1), True) is True
    assert can_reclaim_resources(s2, 0, g(1), False) is False  # non-preemptible: 1 + 1 > deserved 1


def test_victim_filter_reclaimer_over_deserved_needs_victim_over_allocatable():
    # reclaimer D1 A1 -> not within deserved; victim D2 F3 A4 -> over allocatable 3 -> keep
    s = shares_from([(-1, 1, 5, 1), (-1, 2, 3, 4)])
    assert victim_filter(s, 0, 1, g(1)) is True
    s = shares_from([(-1, 1, 5, 1), (-1, 2, 3, 3)])
    assert victim_filter(s, 0, 1, g(1)) is False


def test_victim_filter_reclaimer_within_deserved():
    # strictly under deserved -> filtered out; exactly at deserved -> kept; above -> kept
    assert victim_filter(shares_from([(-1, 4, 4, 0), (-1, 3, 3, 2)]), 0, 1, g(1)) is False
    assert victim_filter(shares_from([(-1, 4, 4, 0), (-1, 3, 3, 3)]), 0, 1, g(1)) is True
    assert victim_filter(shares_from([(-1, 4, 4, 0), (-1, 3, 3, 4)]), 0, 1, g(1)) is True
    # unlimited deserved on the victim side is skipped -> nothing under -> kept
    assert victim_filter(shares_from([(-1, 4, 4, 0), (-1, U, 3, 1)]), 0, 1, g(1)) is True


def test_victim_filter_only_requested_resources_count():
    parent = np.array([-1, -1])
    s = QueueShares(
        parent=parent,
        deserved=np.array([[4, 4, 4], [2, 10, 10]], float),
        limit=np.full((2, 3), U),
        fair_share=np.array([[4, 4, 4], [2, 10, 10]], float),
        allocated=np.array([[0, 0, 0], [2, 1, 1]], float),  # gpu at deserved, cpu/mem under
        allocated_np=np.zeros((2, 3)),
        total=np.array([10, 100, 100], float),
    )
    assert victim_filter(s, 0, 1, g(1)) is True  # only gpu considered: exactly at deserved
    assert victim_filter(s, 0, 1, np.array([1, 1, 0.0])) is False  # cpu under deserved now counts


def test_validator_departments():
    # p1 (leaf of d1) reclaims 1 GPU from p2 (leaf of d2): upstream "Multiple departments"
    rows = [
        (-1, 3, 3, 2),  # 0 d1
        (0, 3, 3, 2),  # 1 p1
        (-1, 2, 2, 3),  # 2 d2
        (2, 2, 2, 3),  # 3 p2
    ]
    s = shares_from(rows)
    assert validate_reclaim(s, reclaimer_leaf=1, req=g(1), reclaimer_preemptible=True, victims={3: [g(1)]})
    # victim department at its fair share -> refused by the strategy
    rows2 = [(-1, 3, 3, 2), (0, 3, 3, 2), (-1, 2, 2, 2), (2, 2, 2, 2)]
    v = validate_reclaim(shares_from(rows2), reclaimer_leaf=1, req=g(1), reclaimer_preemptible=True,
                         victims={3: [g(1)]})
    assert not v and v.reason.startswith("strategy")
    # reclaimer below deserved, victim above deserved but within fair share -> GDQ
    rows3 = [(-1, 3, 3, 1), (0, 3, 3, 1), (-1, 2, 4, 3), (2, 2, 4, 3)]
    assert validate_reclaim(shares_from(rows3), reclaimer_leaf=1, req=g(1), reclaimer_preemptible=True,
                            victims={3: [g(1)]})


def test_validator_checks_each_chunk_before_subtracting():
    # victim D1 F1 A3 gives up 3 chunks of 1: checks see rem 3, 2, 1 -> the last one (rem 1 = F) fails
    rows = [(-1, 5, 5, 0), (-1, 1, 1, 3)]
    s = shares_from(rows)
    assert validate_reclaim(s, reclaimer_leaf=0, req=g(2), reclaimer_preemptible=True, victims={1: [g(1), g(1)]})
    v = validate_reclaim(s, reclaimer_leaf=0, req=g(3), reclaimer_preemptible=True,
                         victims={1: [g(1), g(1), g(1)]})
    assert not v and v.queue == 1
    # one chunk of 3 is checked at rem 3 only: the queue may end below fair share and deserved
    assert validate_reclaim(s, reclaimer_leaf=0, req=g(3), reclaimer_preemptible=True, victims={1: [g(3)]})


def _hier(alloc_mid1, alloc_mid2, alloc_leaf2):
    # 0 top(D2 F2), 1 mid1(D1 F1), 2 mid2(D1 F1), 3 left-leaf1(D1 F1 A0), 4 left-leaf2(D0 F0), 5 right-leaf(D1 F1)
    return shares_from([
        (-1, 2, 2, alloc_mid1 + alloc_mid2),
        (0, 1, 1, alloc_mid1),
        (0, 1, 1, alloc_mid2),
        (1, 1, 1, 0),
        (1, 0, 0, alloc_leaf2),
        (2, 1, 1, alloc_mid2),
    ])


def test_validator_same_branch_reclaim():
    # spec c: victims 1.5 GPU in right-leaf + 0.5 in left-leaf2, reclaimer needs 1 in left-leaf1 -> true
    s = _hier(0.5, 1.5, 0.5)
    assert validate_reclaim(s, reclaimer_leaf=3, req=g(1), reclaimer_preemptible=True,
                            victims={5: [g(1.5)], 4: [g(0.5)]})
    assert validate_reclaim(s, reclaimer_leaf=3, req=g(1), reclaimer_preemptible=True,
                            victims=[(4, [g(0.5)]), (5, [g(1.5)])])


def test_validator_same_branch_over_fair_share_refused():
    # only the right-leaf victim: mid1 ends at 0.5 + 1 = 1.5 / 1 while mid2 drops to 0 -> refused
    s = _hier(0.5, 1.5, 0.5)
    v = validate_reclaim(s, reclaimer_leaf=3, req=g(1), reclaimer_preemptible=True, victims={5: [g(1.5)]})
    assert not v and v.reason.startswith("saturation") and v.queue == 1


def test_validator_top_queue_over_quota_refused():
    # left-top D1 F1 A1 (held by left-top-oq-leaf); reclaimer deep in left-top needs 1 from right-leaf
    rows = [
        (-1, 1, 1, 1),  # 0 left-top
        (0, 0, 0, 1),  # 1 left-top-oq-leaf
        (0, 1, 1, 0),  # 2 left-mid
        (2, 1, 1, 0),  # 3 left-leaf
        (-1, 1, 1, 2),  # 4 right-top
        (4, 1, 1, 2),  # 5 right-mid
        (5, 1, 1, 2),  # 6 right-leaf
    ]
    s = shares_from(rows)
    v = validate_reclaim(s, reclaimer_leaf=3, req=g(1), reclaimer_preemptible=True, victims={6: [g(2)]})
    assert not v and "sibling 4" in v.reason  # left-top 2/1 vs right-top 0/1
    # sanity variant without the over-quota leaf: reclaim
    rows[0] = (-1, 1, 1, 0)
    rows[1] = (0, 0, 0, 0)
    assert validate_reclaim(shares_from(rows), reclaimer_leaf=3, req=g(1), reclaimer_preemptible=True,
                            victims={6: [g(2)]})


def _multiplier_state():
    # d1 D4 F4 A4; d1-project-1 D3 F1 A0; d1-project-2 D1 F3 A4; d2 D3 F3 A7; d2-project-1 same
    return shares_from([(-1, 4, 4, 4), (0, 3, 1, 0), (0, 1, 3, 4), (-1, 3, 3, 7), (3, 3, 3, 7)])


@pytest.mark.parametrize("m,expected", [(1.0, True), (1.5, True), (1.6, False), (2.0, False)])
def test_validator_saturation_multiplier(m, expected):
    # after reclaim d1 is at 5/4 = 1.25, d2 at 6/3 = 2: refuse iff 1.25 * m >= 2
    v = validate_reclaim(_multiplier_state(), reclaimer_leaf=1, req=g(1), reclaimer_preemptible=True,
                         victims={4: [g(1)]}, multiplier=m)
    assert bool(v) is expected


def test_validator_uninvolved_resources_ignored():
    s = _multiplier_state()
    fair_share = s.fair_share.copy()
    allocated = s.allocated.copy()
    # d1 highly saturated on cpu (3000/1000) but neither the reclaimer nor the victim uses cpu
    allocated[0, 1], fair_share[0, 1] = 3000, 1000
    allocated[3, 1], fair_share[3, 1] = 1000, 1000
    s2 = QueueShares(parent=s.parent, deserved=s.deserved, limit=s.limit, fair_share=fair_share,
                     allocated=allocated, allocated_np=s.allocated_np, total=s.total)
    assert validate_reclaim(s2, reclaimer_leaf=1, req=g(1), reclaimer_preemptible=True, victims={4: [g(1)]})
    # once the reclaimer requests cpu too, cpu is involved and d1's 3001/1000 beats d2's 1000/1000
    v = validate_reclaim(s2, reclaimer_leaf=1, req=np.array([1, 1, 0.0]), reclaimer_preemptible=True,
                         victims={4: [g(1)]})
    assert not v


def test_validator_saturation_skipped_when_sibling_fair_share_zero():
    s = shares_from([(-1, 1, 1, 1), (-1, 0, 0, 3)])
    # MFS: 3 > allocatable 0; reclaimer 2/1 > 1 but the sibling's F is 0 -> not refused
    assert validate_reclaim(s, reclaimer_leaf=0, req=g(1), reclaimer_preemptible=True, victims={1: [g(1)]})


def test_saturation_lower_direct():
    inv = np.array([True, False, False])
    assert saturation_lower(inv, g(1), g(1), g(0), g(1), 1.0) is True  # ratio 1 not > 1
    assert saturation_lower(inv, g(2), g(1), g(3), g(1), 1.0) is True  # 2 < 3
    assert saturation_lower(inv, g(3), g(1), g(3), g(1), 1.0) is False  # 3 >= 3
    assert saturation_lower(inv, g(3), [U, 0, 0], g(3), [U, 0, 0], 1.0) is True  # both unlimited: skipped
    assert saturation_lower(~inv, g(9), g(1), g(0), g(1), 1.0) is True  # gpu not involved


def test_validator_non_preemptible_reclaimer_quota():
    # department "p1 D2, default D3": non-preemptible reclaimer allowed while Anp + req <= D on the path
    rows = [(-1, 3, 3, 2, 0), (0, 2, 3, 2, 0), (-1, 2, 2, 3), (2, 2, 2, 3)]
    s = shares_from(rows)
    assert validate_reclaim(s, reclaimer_leaf=1, req=g(1), reclaimer_preemptible=False, victims={3: [g(1)]})
    rows[0] = (-1, 3, 3, 2, 3)  # department already has 3 non-preemptible = its deserved
    v = validate_reclaim(shares_from(rows), reclaimer_leaf=1, req=g(1), reclaimer_preemptible=False,
                         victims={3: [g(1)]})
    assert not v and v.reason.startswith("non-preemptible") and v.queue == 0 and v.resource == 0


# ------------------------------------------------------------------------------------------------
# properties

_q = st.one_of(st.just(U), st.integers(0, 12).map(float), st.sampled_from([0.5, 2.5]))
_vec = st.tuples(_q, _q, _q).map(lambda t: np.array(t))
_pos = st.tuples(*[st.integers(0, 12).map(float)] * 3).map(lambda t: np.array(t))
PROP = settings(max_examples=300, deadline=None)


@PROP
@given(_vec, _vec)
def test_prop_compare_antisymmetric(a, b):
    np.testing.assert_array_equal(compare_quantities(a, b), -compare_quantities(b, a))
    assert less_equal(a, b) == bool(np.all(compare_quantities(a, b) <= 0))
    assert less_equal(a, [U, U, U])


@PROP
@given(_vec, _pos, _vec)
def test_prop_allocatable_bounds(d, f, lim):
    al = allocatable(d, f, lim)
    for r in range(3):
        if d[r] == U:
            assert al[r] == lim[r]
        elif lim[r] == U:
            assert al[r] == max(d[r], f[r])
        else:
            assert al[r] == min(lim[r], max(d[r], f[r]))


@PROP
@given(_pos, _vec, _pos, st.integers(1, 4))
def test_prop_dominant_share_scales_linearly(a, alloc, total, k):
    total = total + 1
    ds = dominant_share(a, alloc, total)
    assert ds >= 0
    assert dominant_share(a * k, alloc, total) == pytest.approx(ds * k)


@PROP
@given(_pos, _pos, _vec)
def test_prop_mfs_monotone_in_remaining(rem, extra, alloc):
    if fits_maintain_fair_share(rem, alloc):
        assert fits_maintain_fair_share(rem + extra, alloc)


def _random_tree(data, n):
    parent = np.array([data.draw(st.integers(-1, i - 1)) if i else -1 for i in range(n)])
    rows = []
    for i in range(n):
        d = data.draw(st.integers(0, 6).map(float))
        f = data.draw(st.integers(0, 8).map(float))
        rows.append((int(parent[i]), d, f, 0.0))
    s = shares_from(rows)
    # allocations: random per leaf, aggregated up the tree
    is_leaf = np.ones(n, bool)
    is_leaf[parent[parent >= 0]] = False
    leaf_alloc = np.zeros((n, 3))
    for i in np.flatnonzero(is_leaf):
        leaf_alloc[i, 0] = data.draw(st.integers(0, 6))
    alloc = np.zeros((n, 3))
    for i in range(n):
        for q in path_to_root(parent, i):
            alloc[q] += leaf_alloc[i]
    s = QueueShares(parent=s.parent, deserved=s.deserved, limit=s.limit, fair_share=s.fair_share,
                    allocated=alloc, allocated_np=np.zeros((n, 3)), total=s.total)
    return s, np.flatnonzero(is_leaf), leaf_alloc


@PROP
@given(st.integers(2, 7), st.data())
def test_prop_validator_multiplier_monotone_and_fair_share_side_never_saturated(n, data):
    s, leaves, leaf_alloc = _random_tree(data, n)
    if len(leaves) < 2:
        return
    reclaimer = int(data.draw(st.sampled_from(list(leaves))))
    others = [int(q) for q in leaves if q != reclaimer and leaf_alloc[q, 0] > 0]
    if not others:
        return
    victims = {}
    for q in data.draw(st.lists(st.sampled_from(others), min_size=1, max_size=3, unique=True)):
        victims[q] = [g(data.draw(st.integers(1, int(leaf_alloc[q, 0]))))]
    req = g(data.draw(st.integers(1, 3)))
    m1, m2 = sorted(data.draw(st.lists(st.sampled_from([1.0, 1.25, 1.6, 3.0]), min_size=2, max_size=2)))
    v1 = validate_reclaim(s, reclaimer_leaf=reclaimer, req=req, reclaimer_preemptible=True, victims=victims,
                          multiplier=m1)
    v2 = validate_reclaim(s, reclaimer_leaf=reclaimer, req=req, reclaimer_preemptible=True, victims=victims,
                          multiplier=m2)
    assert bool(v2) <= bool(v1)  # a larger multiplier never accepts more
    # if the whole reclaimer path ends within its fair share, saturation can never be the refusal
    rem = s.allocated.copy()
    for q, vecs in victims.items():
        for v in vecs:
            for x in path_to_root(s.parent, q):
                rem[x] -= v
    within = all(rem[x, 0] + req[0] <= s.fair_share[x, 0] for x in path_to_root(s.parent, reclaimer))
    if within:
        assert bool(v1) or v1.reason.startswith("strategy")


# ------------------------------------------------------------------------------------------------
# vectorised victim filter: the reclaim action evaluates it once per victim queue, not per job

_AMOUNT = st.sampled_from([U, 0.0, 1.0, 2.0, 2.0 + 1e-10, 3.0, 5.0])


@st.composite
def _random_tree_shares(draw):
    n = draw(st.integers(2, 9))
    parent = [-1]
    for q in range(1, n):
        parent.append(draw(st.integers(-1, q - 1)))
    rows = lambda: np.array([[draw(_AMOUNT) for _ in range(3)] for _ in range(n)], float)
    alloc = np.abs(rows())
    shares = QueueShares(parent=np.array(parent), deserved=rows(), limit=rows(), fair_share=rows(),
                         allocated=alloc, allocated_np=alloc.copy(), total=np.array([10.0, 10.0, 10.0]))
    req = np.array([draw(st.sampled_from([0.0, 1.0, 2.5])) for _ in range(3)])
    return shares, req


@settings(max_examples=300, deadline=None)
@given(_random_tree_shares())
def test_victim_filter_many_matches_victim_filter(case):
    shares, req = case
    n = shares.parent.size
    paths = queue_paths_matrix(shares.parent)
    for leaf in range(n):
        many = victim_filter_many(shares, leaf, np.arange(n), req, paths=paths)
        assert many.dtype == bool and many.shape == (n,)
        assert many.tolist() == [victim_filter(shares, leaf, v, req) for v in range(n)]
    assert victim_filter_many(shares, 0, [], req).shape == (0,)


def test_queue_paths_matrix_pads_top_down_paths():
    mat, lens = queue_paths_matrix(np.array([-1, 0, 1, -1]))
    assert mat.tolist() == [[0, -1, -1], [0, 1, -1], [0, 1, 2], [3, -1, -1]]
    assert lens.tolist() == [1, 2, 3, 1]



# ------------------------------------------------------------------------------------------------
# the validator's Python-float form decides and explains as its numpy form did

from scheduler_engine.plugins.proportion import (  # noqa: E402
    NRES, RESOURCES, Verdict, fits_reclaim_strategy, leveled_pair, path_to_root as _ptr)
from collections.abc import Mapping  # noqa: E402


def _validate_reclaim_numpy(
    shares: QueueShares,
    *,
    reclaimer_leaf: int,
    req,
    reclaimer_preemptible: bool,
    victims: Mapping[int, Sequence] | Iterable[tuple[int, Sequence]],
    multiplier: float = 1.0,
) -> Verdict:
    """The numpy form validate_reclaim had until Session 9 (the oracle of its Python-float form)."""
    req = np.asarray(req, dtype=np.float64)
    parent = np.asarray(shares.parent)
    items = list(victims.items()) if isinstance(victims, Mapping) else list(victims)
    remaining: dict[int, np.ndarray] = {}
    involved: dict[int, np.ndarray] = {}

    # 1. per-chunk strategy checks, then subtraction up the victim's path
    for victim_leaf, vectors in items:
        victim_leaf = int(victim_leaf)
        vecs = [np.asarray(v, dtype=np.float64) for v in vectors]
        a_star, b_star = leveled_pair(parent, reclaimer_leaf, victim_leaf)
        leaf_involved = np.zeros(NRES, dtype=bool)
        for v in vecs:
            leaf_involved |= v > 0
        involved[victim_leaf] = involved.get(victim_leaf, np.zeros(NRES, bool)) | leaf_involved
        if b_star not in remaining:
            remaining[b_star] = shares.allocated[b_star].astype(np.float64).copy()
        alloc_b = shares.allocatable(b_star)
        for v in vecs:
            ok = fits_reclaim_strategy(
                req=req,
                allocated_a=shares.allocated[a_star],
                deserved_a=shares.deserved[a_star],
                remaining_b=remaining[b_star],
                deserved_b=shares.deserved[b_star],
                allocatable_b=alloc_b,
            )
            if not ok:
                return Verdict(False, f"strategy: queue {b_star} may not give up {v.tolist()}", queue=b_star,
                               taken_from=b_star)
            for q in _ptr(parent, victim_leaf):
                if q not in remaining:
                    remaining[q] = shares.allocated[q].astype(np.float64).copy()
                remaining[q] = remaining[q] - v
                if q != victim_leaf:
                    involved[q] = involved.get(q, np.zeros(NRES, bool)) | involved[victim_leaf]

    # 2. the reclaimer's side must stay less saturated than every touched sibling
    req_involved = req > 0
    for x in _ptr(parent, reclaimer_leaf):
        x_alloc = (remaining[x] if x in remaining else shares.allocated[x]) + req
        for s in remaining:
            if s == x or int(parent[s]) != int(parent[x]):
                continue
            inv = involved.get(s, np.zeros(NRES, bool)) | req_involved
            if not saturation_lower(inv, x_alloc, shares.fair_share[x], remaining[s], shares.fair_share[s], multiplier):
                return Verdict(False, f"saturation: queue {x} would be more saturated than sibling {s}", queue=x,
                               taken_from=s)
        if not reclaimer_preemptible:
            cmp = compare_quantities(shares.allocated_np[x] + req, shares.deserved[x])
            if np.any(cmp > 0):
                r = int(np.flatnonzero(cmp > 0)[0])
                return Verdict(
                    False, f"non-preemptible over quota: queue {x} for {RESOURCES[r]}", queue=x, resource=r
                )
    return Verdict(True)



_CHUNK = st.sampled_from([0.0, 0.5, 1.0, 1.0 + 1e-10, 2.0, 3.0])


@settings(max_examples=400, deadline=None)
@given(_random_tree_shares(), st.data())
def test_validate_reclaim_matches_its_numpy_form(case, data):
    shares, req = case
    n = shares.parent.size
    anp = np.array([[data.draw(_AMOUNT) for _ in range(3)] for _ in range(n)], float)
    shares = QueueShares(parent=shares.parent, deserved=shares.deserved, limit=shares.limit,
                         fair_share=shares.fair_share, allocated=shares.allocated, allocated_np=np.abs(anp),
                         total=shares.total)
    leaf = data.draw(st.integers(0, n - 1))
    victims = {}
    for q in data.draw(st.lists(st.integers(0, n - 1), min_size=0, max_size=4, unique=True)):
        victims[q] = [np.array([data.draw(_CHUNK) for _ in range(3)])
                      for _ in range(data.draw(st.integers(1, 3)))]
    pre = data.draw(st.booleans())
    m = data.draw(st.sampled_from([1.0, 1.25, 3.0]))
    got = validate_reclaim(shares, reclaimer_leaf=leaf, req=req, reclaimer_preemptible=pre, victims=victims,
                           multiplier=m)
    want = _validate_reclaim_numpy(shares, reclaimer_leaf=leaf, req=req, reclaimer_preemptible=pre,
                                   victims=victims, multiplier=m)
    assert got == want


_NEAR = [2.0 - 2e-10, 2.0, 2.0 + 5e-10, 2.0 + 3e-9, U]


@pytest.mark.parametrize("a_b", _NEAR)
@pytest.mark.parametrize("d_b", _NEAR)
@pytest.mark.parametrize("f_b", [1.0, 2.0 + 5e-10])
@pytest.mark.parametrize("anp", [1.0 - 5e-10, 1.0 + 5e-10])
def test_validate_reclaim_matches_its_numpy_form_at_the_tolerance(a_b, d_b, f_b, anp):
    """Amounts within (and just beyond) the comparison tolerance of each other, every check."""
    a_b = abs(a_b)
    rows = [(-1, U, U, a_b + 3.0), (0, 1.0, 1.0, 0.0, anp), (0, d_b, f_b, a_b), (0, 1.0, 1.0, 3.0)]
    s = shares_from(rows)
    for pre in (True, False):
        for victims in ({2: [g(1.0)]}, {2: [g(1.0 + 5e-10), g(0.5)]}, {2: [g(0.5)], 3: [g(2.0)]}):
            for req in (g(1.0), g(1.0 + 1e-10), np.array([1.0, 0.0, 2.0])):
                kw = dict(reclaimer_leaf=1, req=req, reclaimer_preemptible=pre, victims=victims)
                assert validate_reclaim(s, **kw) == _validate_reclaim_numpy(s, **kw)


@settings(max_examples=300, deadline=None)
@given(_vec, _vec, _vec)
def test_allocatable_row_is_allocatable(d, f, lim):
    from scheduler_engine.plugins.proportion import _allocatable_row
    for vec in (d, f, lim):
        if vec[2] == 0.5:
            vec[2] = np.nan  # NaN propagates as numpy's maximum / minimum do
    got = _allocatable_row(d.tolist(), f.tolist(), lim.tolist())
    want = allocatable(d, f, lim).tolist()
    assert [("nan" if x != x else x) for x in got] == [("nan" if x != x else x) for x in want]


_AMOUNTS = st.one_of(st.sampled_from([0.0, -0.0, 1.0, 2.0, 3.0, 1e-10, 2.0 + 1e-10, 2.0 - 1e-10, U]),
                     st.floats(min_value=0, max_value=64, allow_nan=False))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_AMOUNTS, _AMOUNTS, _AMOUNTS, _AMOUNTS, _AMOUNTS), min_size=3, max_size=3),
       st.tuples(_AMOUNTS, _AMOUNTS, _AMOUNTS), st.booleans())
def test_can_reclaim_resources_in_python_floats_is_the_array_rule(rows, req, preemptible):
    """The gate in Python floats (``can_reclaim_resources``: the (3,) rows as lists) answers what the
    array rule answers (``less_equal`` of ``allocated + req`` against the fair share, and of the
    non-preemptible allocation against deserved), at the tolerance edges and with -1 (unlimited)."""
    from scheduler_engine.plugins.proportion import QueueShares
    col = lambda k: np.array([[r[k] for r in rows]], float)
    alloc = np.abs(col(0))
    s = QueueShares(parent=np.array([-1]), deserved=col(1), fair_share=col(2), allocated=alloc,
                    allocated_np=np.abs(col(3)), limit=col(4), total=np.array([100.0, 100.0, 100.0]))
    r = np.abs(np.array(req, float))
    want = bool(less_equal(s.allocated[0] + r, s.fair_share[0])) and (
        preemptible or bool(less_equal(s.allocated_np[0] + r, s.deserved[0])))
    assert can_reclaim_resources(s, 0, r, preemptible) is want


def test_shares_now_copy_is_the_allocations_at_the_call():
    """``shares_now(copy=True)`` (a reclaim attempt's start, copied as the one (Q, 2, 3) array both
    allocation rows view): bit for bit the state's allocation rows at the call, and unmoved when the
    state's allocations change afterwards (both rows); without ``copy`` the views follow the state."""
    from scheduler_engine.clusters import generate
    from scheduler_engine.plugins.proportion import shares_now
    from scheduler_engine.state import CycleState

    s = CycleState(generate(nodes=30, jobs=200, queues=12, seed=3, shape="mixed"))
    s.queue_alloc[:] = np.random.default_rng(3).random(s.queue_alloc.shape)
    s.queue_alloc_np[:] = np.random.default_rng(4).random(s.queue_alloc_np.shape)
    a0, anp0 = s.queue_alloc.copy(), s.queue_alloc_np.copy()
    start, live = shares_now(s, copy=True), shares_now(s)
    assert start.allocated.tobytes() == a0.tobytes() and start.allocated_np.tobytes() == anp0.tobytes()
    s.queue_alloc[2, 1] += 5.0
    s.queue_alloc_np[1, 0] += 7.0
    assert start.allocated.tobytes() == a0.tobytes() and start.allocated_np.tobytes() == anp0.tobytes()
    assert live.allocated[2, 1] == a0[2, 1] + 5.0 and live.allocated_np[1, 0] == anp0[1, 0] + 7.0
