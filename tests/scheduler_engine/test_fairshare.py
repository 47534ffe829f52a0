"""Fair-share division (spec section a): hand cases from the spec's named vectors plus properties.

Hand cases are written directly against ``compute_fair_share`` (gpu column only unless stated), so they
exercise the division independently of the scenario loader; the golden scenario files cover the same
ground end to end through ``python -m scheduler_engine check``.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_engine.fairshare import aggregate_up, compute_fair_share, depths, divide_level, tree_levels

U = -1.0


def gpu_case(queues, total_gpu, *, k=0.0, parent=None):
    """Run the division with only the gpu column populated.

    ``queues`` is a list of dicts with keys d (deserved), l (limit), w (weight), r (request of the
    queue itself, aggregated up the tree here), p (priority), u (usage); defaults d=0, l=-1, w=1, r=0,
    p=100, u=0. Queues are listed oldest first.
    """
    n = len(queues)
    par = np.full(n, -1) if parent is None else np.asarray(parent)

    def col(key, default):
        m = np.zeros((n, 3))
        m[:, 0] = [q.get(key, default) for q in queues]
        return m

    deserved, limit, weight, usage = col("d", 0.0), col("l", U), col("w", 1.0), col("u", 0.0)
    limit[:, 1:] = U
    request = aggregate_up(par, col("r", 0.0))
    fs = compute_fair_share(
        parent=par,
        deserved=deserved,
        limit=limit,
        weight=weight,
        priority=np.array([q.get("p", 100) for q in queues]),
        request=request,
        usage=usage,
        order_rank=np.arange(n),
        total=np.array([total_gpu, 0.0, 0.0]),
        k_value=k,
    )
    return fs[:, 0]


# ------------------------------------------------------------------------------------------------
# hand cases (named vectors of the spec)


def test_deserved_within_quota_gives_request():
    assert gpu_case([{"d": 3, "r": 2}], 10).tolist() == [2 + 0]  # weight 1 but request met


def test_single_queue_over_quota_gives_fraction_if_requested():
    # 013: deserved 3, request 4.5, cluster 5 -> 4.5
    assert gpu_case([{"d": 3, "r": 4.5}], 5).tolist() == [4.5]


def test_single_queue_gives_remainder_fraction():
    # 017: helper absorbs 0.5 with weight 0; 0.5 left is floored to 0 and handed out by the leftover pass
    fs = gpu_case([{"d": 3, "r": 5}, {"d": 0.5, "r": 0.5, "w": 0}], 4)
    assert fs.tolist() == pytest.approx([3.5, 0.5])


def test_remainder_goes_to_largest_remaining():
    # 023: over-quota 7 split 1:4 -> 1.4 / 5.6 floored to 1 / 5, leftover 1 to queue-2 (remainder 0.6)
    fs = gpu_case([{"d": 2, "w": 1, "r": 10}, {"d": 2, "w": 4, "r": 10}], 11)
    assert fs.tolist() == [3, 8]


def test_equal_remainders_go_to_older_queue():
    # 0.5 / 0.5 tie: the older queue (listed first, rank 0) wins the leftover GPU
    fs = gpu_case([{"w": 1, "r": 10}, {"w": 1, "r": 10}], 3)
    assert fs.tolist() == [2, 1]
    # swap ages: rank decides, not position
    n = 2
    deserved = np.zeros((n, 3))
    limit = np.full((n, 3), U)
    weight = np.ones((n, 3))
    request = np.array([[10.0, 0, 0], [10.0, 0, 0]])
    fs2 = compute_fair_share(
        parent=np.array([-1, -1]), deserved=deserved, limit=limit, weight=weight,
        priority=np.array([0, 0]), request=request, usage=np.zeros((n, 3)),
        order_rank=np.array([1, 0]), total=np.array([3.0, 0, 0]), k_value=0.0,
    )
    assert fs2[:, 0].tolist() == [1, 2]


def test_leftover_pass_exceeds_request():
    # 085: queue-1 ends at 1.6 > its request 1.45 (leftover 0.6 goes to the largest remainder 0.4)
    fs = gpu_case([{"w": 1, "r": 1.45}, {"w": 3, "r": 10}, {"d": 0.4, "w": 0, "r": 0.4}], 6)
    assert fs.tolist() == pytest.approx([1.6, 4, 0.4])


def test_leftover_pass_exceeds_limit():
    # same shape with a limit instead of a request: the leftover pass ignores the limit too
    fs = gpu_case([{"w": 1, "r": 10, "l": 1.45}, {"w": 3, "r": 10}, {"d": 0.4, "w": 0, "r": 0.4}], 6)
    assert fs.tolist() == pytest.approx([1.6, 4, 0.4])


def test_band_rounding_leak_flows_to_lower_band():
    # 087: band 2 floors 10/3 to 3 each; the 1 GPU left goes to the lower band before the leftover pass
    hi = {"w": 1, "r": 10, "p": 2}
    fs = gpu_case([hi, hi, hi, {"w": 1, "r": 10, "p": 1}], 10)
    assert fs.tolist() == [3, 3, 3, 1]
    # without the lower band the leftover pass gives it to the oldest band-2 queue
    assert gpu_case([hi, hi, hi], 10).tolist() == [4, 3, 3]


def test_remainder_with_priorities_leftover_pass_visits_high_band_first():
    # high band: 2 queues share 5 -> 2.5 each -> 2, 2, leftover 1; the low band is satisfied-less
    # (weight 0), so the leftover comes back to the high band's largest remainder (older first)
    fs = gpu_case([{"r": 10, "p": 2}, {"r": 10, "p": 2}, {"r": 10, "p": 1, "w": 0}], 5)
    assert fs.tolist() == [3, 2, 0]


def test_weight_zero_gets_no_over_quota_even_when_idle():
    fs = gpu_case([{"d": 1, "w": 0, "r": 8}], 8)
    assert fs.tolist() == [1]
    fs = gpu_case([{"d": 1, "w": 0, "r": 8}, {"d": 1, "w": 1, "r": 2}], 8)
    assert fs.tolist() == [1, 2]


def test_priority_does_not_affect_deserved_but_bands_over_quota():
    # deserved first regardless of priority; then the high band takes everything it requests
    fs = gpu_case([{"d": 2, "w": 1, "r": 6, "p": 1}, {"d": 2, "w": 10, "r": 6, "p": 0}], 10)
    assert fs.tolist() == [6, 4]


def test_unlimited_deserved_uses_level_total_and_can_oversubscribe():
    # fairshare-simulator-example: two -1 queues each get min(total, R)
    fs = gpu_case([{"d": U, "r": 16}, {"d": U, "r": 16}], 16)
    assert fs.tolist() == [16, 16]


def test_deserved_not_capped_child_exceeds_parent():
    # hier deserved department quota: q2 gets 2 under d2 whose fair share is 1
    fs = gpu_case([{"d": 1, "w": 0}, {"d": 2, "w": 0, "r": 5}], 10, parent=[-1, 0])
    assert fs.tolist() == [1, 2]


def test_children_divide_parents_fair_share():
    # d1 (prio 2) takes 11 of 12; its child q1 divides 11, d2's child divides 1
    queues = [
        {"d": 1, "w": 1, "p": 2},
        {"d": 1, "w": 1, "r": 100, "p": 0},
        {"d": 1, "w": 7, "p": 1},
        {"d": 1, "w": 1, "r": 100, "p": 0},
    ]
    fs = gpu_case(queues, 12, parent=[-1, 0, -1, 2])
    assert fs.tolist() == [11, 11, 1, 1]


def test_request_less_queue_gets_nothing():
    fs = gpu_case([{"d": 5, "w": 1, "r": 0}, {"d": U, "w": 1, "r": 0}, {"r": 3}], 10)
    assert fs.tolist() == [0, 0, 3]


def test_fractional_two_rounds():
    # 065 gpu-fractional-fair-share
    fs = gpu_case([{"d": 12, "w": 12, "r": 32.55}, {"d": 7, "w": 7, "r": 9.5}, {"d": 2, "w": 2, "l": 2, "r": 1.65}], 45)
    assert fs.tolist() == pytest.approx([32.55, 9.5, 1.65])


def test_zero_to_divide_does_not_break():
    assert gpu_case([{"d": 3, "r": 5}], 3).tolist() == [3]
    # nothing to divide: deserved is still given (no capacity cap), over-quota gets nothing
    assert gpu_case([{"d": 3, "r": 5}], 0).tolist() == [3]
    assert gpu_case([{"d": 0, "r": 5}], 0).tolist() == [0]


def test_kvalue_usage_penalty():
    # 077: usage 0.5 vs 0 with k=1 -> P 0.5 vs 1.0: 5.33 / 10.67 -> 5 / 11
    fs = gpu_case([{"r": 16, "u": 0.5}, {"r": 16, "u": 0.0}], 16, k=1.0)
    assert fs.tolist() == [5, 11]


def test_kvalue_penalty_floors_to_zero():
    # U >= w'(1+k)/k -> P = 0: usage 1.0, w' 0.5, k 1 -> 0
    fs = gpu_case([{"r": 16, "u": 1.0}, {"r": 16, "u": 0.0}], 16, k=1.0)
    assert fs.tolist() == [0, 16]


def test_kvalue_does_not_touch_deserved_and_band_precedes_usage():
    fs = gpu_case([{"d": 4, "r": 16, "u": 1.0, "p": 200}, {"d": 4, "r": 16, "p": 100}], 16, k=1.0)
    assert fs.tolist() == [12, 4]


def test_kvalue_all_penalised_distributes_nothing_in_band():
    fs = gpu_case([{"r": 16, "u": 1.0}, {"r": 16, "u": 1.0}], 16, k=1.0)
    assert fs.tolist() == [0, 0]


def test_kvalue_e2e_time_aware():
    # 083: weights 10000:1, k 10000, usage 1 vs 0 -> b gets its 1, then a alone takes the other 7
    fs = gpu_case([{"w": 10000, "r": 100, "u": 1.0}, {"w": 1, "r": 1}], 8, k=10000.0)
    assert fs.tolist() == pytest.approx([7, 1])


def test_negative_k_means_zero():
    q = [{"r": 16, "u": 1.0}, {"r": 16, "u": 0.0}]
    assert gpu_case(q, 16, k=-3.0).tolist() == gpu_case(q, 16, k=0.0).tolist() == [8, 8]


def test_resources_divided_independently():
    n = 2
    deserved = np.array([[1.0, 2000, 0], [0, 0, 2**30]])
    limit = np.full((n, 3), U)
    weight = np.array([[1.0, 0, 1], [1, 1, 0]])
    request = np.array([[4.0, 8000, 2**31], [4, 8000, 2**31]])
    fs = compute_fair_share(
        parent=np.array([-1, -1]), deserved=deserved, limit=limit, weight=weight, priority=np.array([1, 1]),
        request=request, usage=np.zeros((n, 3)), order_rank=np.arange(2), total=np.array([4.0, 6000, 2**32]),
        k_value=0.0,
    )
    # gpu: 1 + 0 deserved, 3 over-quota -> 1.5 each -> 1, 1 (+ leftover to larger remainder; tie -> older)
    assert fs[:, 0].tolist() == [3, 1]
    # cpu: deserved 2000; queue-1 weight 0 -> queue-2 gets the remaining 4000
    assert fs[:, 1].tolist() == [2000, 4000]
    # memory: queue-2 deserved 1Gi, weight 0; queue-1 gets the 3Gi rest (request 2Gi) -> 2Gi
    assert fs[:, 2].tolist() == [2**31, 2**30]


# ------------------------------------------------------------------------------------------------
# tree helpers and validation


def test_aggregate_up_sums_descendants():
    parent = np.array([-1, 0, 1, 1, -1, 0])
    vals = np.arange(6 * 3, dtype=float).reshape(6, 3)
    out = aggregate_up(parent, vals)
    expected = vals.copy()
    expected[1] = vals[1] + vals[2] + vals[3]
    expected[0] = vals[0] + expected[1] + vals[5]
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(aggregate_up(parent, vals[:, 0]), expected[:, 0])


def test_tree_levels_top_down():
    parent = np.array([2, -1, 1, -1, 3])
    groups = tree_levels(parent)
    seen = set()
    for par, idx in groups:
        assert par == -1 or par in seen
        seen.update(int(i) for i in idx)
    assert seen == set(range(5))
    assert depths(parent).tolist() == [2, 0, 1, 0, 1]


def test_cycle_is_rejected():
    with pytest.raises(ValueError, match="cycle"):
        aggregate_up(np.array([1, 0]), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="own parent"):
        depths(np.array([0]))
    with pytest.raises(ValueError, match="out of range"):
        depths(np.array([5]))


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("deserved", [[-2.0, 0, 0]], r"deserved\[0\]\[0\]"),
        ("limit", [[0, float("nan"), 0]], r"limit\[0\]"),
        ("weight", [[-1.0, 0, 0]], r"weight\[0\]\[0\]"),
        ("request", [[0, 0, float("inf")]], r"request\[0\]"),
    ],
)
def test_bad_input_names_the_field(field, value, match):
    kwargs = dict(
        parent=np.array([-1]), deserved=np.zeros((1, 3)), limit=np.full((1, 3), U), weight=np.ones((1, 3)),
        priority=np.array([0]), request=np.zeros((1, 3)), usage=np.zeros((1, 3)), order_rank=np.array([0]),
        total=np.array([1.0, 1, 1]), k_value=0.0,
    )
    kwargs[field] = np.array(value)
    with pytest.raises(ValueError, match=match):
        compute_fair_share(**kwargs)


def test_bad_total_and_k():
    kwargs = dict(
        parent=np.array([-1]), deserved=np.zeros((1, 3)), limit=np.full((1, 3), U), weight=np.ones((1, 3)),
        priority=np.array([0]), request=np.zeros((1, 3)), usage=np.zeros((1, 3)), order_rank=np.array([0]),
        total=np.array([-1.0, 1, 1]), k_value=0.0,
    )
    with pytest.raises(ValueError, match="total"):
        compute_fair_share(**kwargs)
    kwargs["total"] = np.array([1.0, 1, 1])
    kwargs["k_value"] = float("nan")
    with pytest.raises(ValueError, match="k_value"):
        compute_fair_share(**kwargs)


# ------------------------------------------------------------------------------------------------
# properties

# one sibling group: values in whole units (like cpu millicores) or with GPU fractions
_amount = st.one_of(st.integers(0, 40).map(float), st.sampled_from([0.25, 0.5, 1.45, 2.65, 7.05]))
_limit = st.one_of(st.just(U), _amount)
_queue = st.fixed_dictionaries(
    {
        "d": st.one_of(st.just(U), _amount),
        "l": _limit,
        "w": st.sampled_from([0.0, 1.0, 2.0, 3.0, 7.0]),
        "r": _amount,
        "p": st.sampled_from([0, 1, 2]),
        "u": st.sampled_from([0.0, 0.1, 0.5, 1.0]),
    }
)
_level = st.lists(_queue, min_size=1, max_size=6)
_total = st.one_of(st.integers(0, 80).map(float), st.sampled_from([0.5, 3.3, 10.75]))
_k = st.sampled_from([0.0, 0.5, 1.0, 3.0])


def _run_level(queues, total, k, ranks=None):
    arr = {key: np.array([q[key] for q in queues], dtype=float) for key in "dlwru"}
    return divide_level(
        total=total, deserved=arr["d"], limit=arr["l"], weight=arr["w"],
        priority=np.array([q["p"] for q in queues]), request=arr["r"], usage=arr["u"],
        order_rank=np.arange(len(queues)) if ranks is None else np.asarray(ranks), k_value=k,
    ), arr


def _requestable(arr):
    return np.where(arr["l"] == U, arr["r"], np.minimum(arr["l"], arr["r"]))


def _deserved_part(arr, total):
    d = np.where(arr["d"] == U, total, arr["d"])
    return np.minimum(d, _requestable(arr))


PROP = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROP
@given(_level, _total, _k)
def test_prop_never_more_than_requestable_plus_one_leftover_unit(queues, total, k):
    """F < requestable + 1: only the leftover pass exceeds the request/limit, by min(1, leftover) < ... <= 1
    given once to a queue whose remaining request is still > 0, so the excess is strictly below 1 unit."""
    fs, arr = _run_level(queues, total, k)
    req = _requestable(arr)
    assert np.all(fs < req + 1 + 1e-9)
    assert np.all(fs <= arr["r"] + 1 + 1e-9)
    lim = arr["l"]
    assert np.all((lim == U) | (fs < lim + 1 + 1e-9))
    assert np.all(fs >= -1e-12)


@PROP
@given(_level, _total, _k)
def test_prop_deserved_always_honoured(queues, total, k):
    """The deserved phase gives min(D or level total, requestable) and nothing is ever taken back."""
    fs, arr = _run_level(queues, total, k)
    assert np.all(fs >= _deserved_part(arr, total) - 1e-9)


@PROP
@given(_level, _total, _k)
def test_prop_weight_zero_gets_no_over_quota(queues, total, k):
    fs, arr = _run_level(queues, total, k)
    zero = arr["w"] == 0
    np.testing.assert_allclose(fs[zero], _deserved_part(arr, total)[zero])


@PROP
@given(_level, _total, _k)
def test_prop_request_less_queue_gets_zero(queues, total, k):
    fs, arr = _run_level(queues, total, k)
    assert np.all(fs[arr["r"] == 0] == 0)


@PROP
@given(_level, _total)
def test_prop_k_zero_ignores_usage(queues, total):
    fs, _ = _run_level(queues, total, 0.0)
    no_usage = [dict(q, u=0.0) for q in queues]
    fs0, _ = _run_level(no_usage, total, 0.0)
    np.testing.assert_array_equal(fs, fs0)


@PROP
@given(_level, _total, _k)
def test_prop_conserves_capacity_unless_deserved_oversubscribes(queues, total, k):
    fs, arr = _run_level(queues, total, k)
    base = _deserved_part(arr, total)
    if base.sum() <= total:
        assert fs.sum() <= total + 1e-9 * max(1.0, total)
    else:
        np.testing.assert_allclose(fs, base)


# Amounts a binary float holds exactly: sums and differences of them carry no rounding noise.
_exact_amount = st.one_of(st.integers(0, 40).map(float), st.sampled_from([0.25, 0.5, 0.75, 2.125]))
_exact_level = st.lists(st.fixed_dictionaries({
    "d": st.one_of(st.just(U), _exact_amount), "l": st.one_of(st.just(U), _exact_amount),
    "w": st.sampled_from([1.0, 2.0, 3.0, 7.0]), "r": _exact_amount, "p": st.sampled_from([0, 1, 2]),
    "u": st.just(0.0)}), min_size=1, max_size=6)


@PROP
@given(_exact_level, st.one_of(st.integers(0, 80).map(float), st.sampled_from([0.5, 10.75])))
def test_prop_everyone_satisfied_when_capacity_suffices(queues, total):
    """Classic division with positive weights is work-conserving: enough capacity -> F = requestable.

    Only with amounts a float holds exactly: the division compares ``remReq <= s`` in float64 as
    upstream does, so with 1.45-style amounts one ulp decides between "satisfied" and "floor(s) plus a
    remainder" (see the next test)."""
    fs, arr = _run_level(queues, total, 0.0)
    req = _requestable(arr)
    if req.sum() <= total:
        np.testing.assert_allclose(fs, req, atol=1e-9)


def test_float_noise_in_the_over_quota_round_is_kept_as_upstream_computes_it():
    """Found by hypothesis: six queues whose requests sum to the level's total exactly on paper (55), two
    of them with 17.55 left to request and 35.1 to share. In float64 ``19 - 1.45`` exceeds ``35.1 / 2`` by
    one ulp, so (spec a.4, as upstream's float64 comparison does) neither is satisfied in the round: each
    gets floor(17.55) = 17 with a 0.55 remainder, and the leftover pass hands out 1 then 0.1 by remainder
    and age, ignoring requests (spec: "This ignores the queue's remaining request"). Pinned so a change
    of the arithmetic order or an added tolerance shows up as a change of decisions, not silently."""
    queues = [dict(d=U, l=U, w=1.0, r=r, p=0, u=0.0) for r in (1.45, 1.45, 7.05, 7.05)]
    queues += [dict(d=1.45, l=U, w=1.0, r=19.0, p=0, u=0.0) for _ in range(2)]
    fs, _ = _run_level(queues, 55.0, 0.0)
    assert 19.0 - 1.45 > (55.0 - 1.45 - 1.45 - 7.05 - 7.05 - 1.45 - 1.45) / 2  # the ulp in question
    np.testing.assert_allclose(fs, [1.45, 1.45, 7.05, 7.05, 19.45, 18.55], atol=1e-9)


@PROP
@given(_level, _total, _k, st.randoms(use_true_random=False))
def test_prop_input_order_does_not_matter(queues, total, k, rnd):
    """Upstream iterates a Go map; the result only depends on the creation ranks, not on array order."""
    fs, _ = _run_level(queues, total, k)
    perm = list(range(len(queues)))
    rnd.shuffle(perm)
    shuffled = [queues[i] for i in perm]
    fs_p, _ = _run_level(shuffled, total, k, ranks=perm)
    np.testing.assert_allclose(fs_p, fs[perm], atol=1e-9)


@PROP
@given(st.lists(st.integers(-1, 6), min_size=1, max_size=8), st.data())
def test_prop_tree_children_divide_parent_share(raw_parents, data):
    """Children never exceed their parent's share beyond deserved over-subscription and leftovers."""
    n = len(raw_parents)
    parent = np.array([p if 0 <= p < i else -1 for i, p in enumerate(raw_parents)])  # acyclic by construction
    queues = [data.draw(_queue) for _ in range(n)]
    leaf_req = np.array([q["r"] for q in queues])
    is_parent = np.zeros(n, bool)
    is_parent[parent[parent >= 0]] = True
    leaf_req[is_parent] = 0.0  # only leaves take jobs
    deserved = np.zeros((n, 3))
    deserved[:, 0] = [q["d"] for q in queues]
    limit = np.full((n, 3), U)
    limit[:, 0] = [q["l"] for q in queues]
    weight = np.zeros((n, 3))
    weight[:, 0] = [q["w"] for q in queues]
    req = np.zeros((n, 3))
    req[:, 0] = leaf_req
    req = aggregate_up(parent, req)
    total = data.draw(_total)
    fs = compute_fair_share(
        parent=parent, deserved=deserved, limit=limit, weight=weight,
        priority=np.array([q["p"] for q in queues]), request=req, usage=np.zeros((n, 3)),
        order_rank=np.arange(n), total=np.array([total, 0, 0]), k_value=0.0,
    )[:, 0]
    for par, idx in tree_levels(parent):
        level_total = total if par < 0 else fs[par]
        got, arr = _run_level(
            [dict(queues[i], r=req[i, 0], u=0.0) for i in idx], level_total, 0.0, ranks=idx
        )
        np.testing.assert_array_equal(fs[idx], got)
        base = _deserved_part(arr, level_total)
        if base.sum() <= level_total:
            assert fs[idx].sum() <= level_total + 1e-9 * max(1.0, level_total)


@PROP
@given(st.lists(st.fixed_dictionaries({
    "d": st.one_of(st.just(U), st.integers(0, 5000).map(float)),
    "l": st.one_of(st.just(U), st.integers(0, 9000).map(float)),
    "w": st.sampled_from([0.0, 1.0, 2.0, 3.0]),
    "r": st.integers(0, 9000).map(float),
    "p": st.sampled_from([0, 1]),
    "u": st.just(0.0),
}), min_size=1, max_size=6), st.integers(0, 20000).map(float))
def test_prop_whole_units_stay_whole(queues, total):
    """cpu millicores / memory bytes: with whole inputs every share is whole (floor, whole leftovers)."""
    fs, _ = _run_level(queues, total, 0.0)
    np.testing.assert_array_equal(fs, np.round(fs))


def test_usage_is_a_cluster_fraction_at_child_level():
    # kvalue-usage-in-child-level: children of a 16-GPU parent, usage 0.5 of the *cluster* for c1.
    # w' = 0.5 each; P1 = max(0, 0.5 + (0.5 - 0.5)) = 0.5, P2 = 0.5 + 0.5 = 1 -> 16/3, 32/3 -> 5, 10 + 1
    queues = [{"d": U, "w": 1}, {"w": 1, "r": 16, "u": 0.5}, {"w": 1, "r": 16}]
    fs = gpu_case(queues, 16, k=1.0, parent=[-1, 0, 0])
    assert fs.tolist() == [16, 5, 11]
    # same usage on a top-level pair would be identical: U is not rescaled to the parent's share
    assert gpu_case(queues[1:], 16, k=1.0).tolist() == [5, 11]
    # but with a 32-GPU cluster where the parent holds 16, c1's usage 0.5 is half the cluster: P1 = 0.5
    fs = gpu_case([{"d": 16, "w": 0}, {"w": 1, "r": 16, "u": 0.5}, {"w": 1, "r": 16}, {"d": 16, "w": 0, "r": 16}],
                  32, k=1.0, parent=[-1, 0, 0, -1])
    assert fs.tolist() == [16, 5, 11, 16]


def test_rounds_then_leftover_tie_break():
    # Round 1 (C = 10): 3.33 each -> q0 satisfied (1), q1/q2 get 3 with remainder 0.33; round 2 (C = 3):
    # 1.5 each -> 1 + remainder 0.5 (overwrites 0.33); leftover 1 -> q1 (older) on the 0.5 tie
    fs = gpu_case([{"r": 1}, {"r": 10}, {"r": 10}], 10)
    assert fs.tolist() == [1, 5, 4]
    # Round 1 (C = 9): q0 satisfied with 1 (< 3), q1/q2 get exactly 3 (no remainder); round 2 (C = 2):
    # 1 each, nothing fractional -> no leftover pass
    assert gpu_case([{"r": 1}, {"r": 10}, {"r": 10}], 9).tolist() == [1, 4, 4]


def test_stale_remainder_kept_when_a_later_round_is_whole():
    """Upstream only overwrites a remainder when the new round leaves a fraction.

    C = 13, weights 2:3:3:1, requests 50, 3, 50, 2. Round 1: q0 2.89 -> 2 (rem .89), q1 satisfied (3),
    q2 4.33 -> 4 (rem .33), q3 1.44 -> 1 (rem .44); 3 left. Round 2 (weights 2:3:1 over C = 3): q0 gets
    exactly 1 (its .89 stays recorded), q2 1.5 -> 1 (rem .5), q3 0.5 -> 0 (rem .5); 1 left, and the
    leftover pass gives it to q0's stale .89 rather than the .5 tie of the last round.
    """
    queues = [{"w": 2, "r": 50}, {"w": 3, "r": 3}, {"w": 3, "r": 50}, {"w": 1, "r": 2}]
    assert gpu_case(queues, 13).tolist() == [4, 3, 5, 1]
