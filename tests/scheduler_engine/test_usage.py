"""Time-based fairshare math (spec e): reset times, decay, normalised usage, the decayed accumulator."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_engine.usage import (
    DecayedUsage,
    decay_weights,
    fake_history_weights,
    history_usage,
    normalized_usage,
    parse_cron,
    period_reset,
    previous_cron_occurrence,
    slurm_decay_factor,
    sliding_window_start,
    tumbling_window_start,
    window_start,
)

UTC = timezone.utc


def at(*args):
    return datetime(*args, tzinfo=UTC)


H = timedelta(hours=1)

# ------------------------------------------------------------------------------------------------
# tumbling windows: every example of spec e.1


@pytest.mark.parametrize(
    "start,window,now,expected",
    [
        (at(2024, 1, 1, 10), H, at(2024, 1, 1, 12, 30), at(2024, 1, 1, 12)),
        (at(2024, 1, 1, 10), H, at(2024, 1, 1, 13), at(2024, 1, 1, 12)),  # exact boundary -> previous
        (at(2024, 1, 1, 10), H, at(2024, 1, 1, 13, 0, 1), at(2024, 1, 1, 13)),
        (at(2024, 1, 1, 14), timedelta(minutes=15), at(2024, 1, 1, 14, 37), at(2024, 1, 1, 14, 30)),
        (at(2024, 1, 1), timedelta(weeks=1), at(2024, 1, 18, 12), at(2024, 1, 15)),
        (at(2024, 1, 1, 10), H, at(2024, 1, 1, 10), at(2024, 1, 1, 10)),  # start == now -> start
        (at(2024, 1, 1, 10, 15, 30), H, at(2024, 1, 1, 12, 45, 30), at(2024, 1, 1, 12, 15, 30)),
    ],
)
def test_tumbling_examples(start, window, now, expected):
    assert tumbling_window_start(start, window, now) == expected


def test_tumbling_future_start_is_empty_window():
    assert tumbling_window_start(at(2024, 1, 2), H, at(2024, 1, 1)) is None


def test_tumbling_rejects_non_positive_window():
    with pytest.raises(ValueError, match="window_size"):
        tumbling_window_start(at(2024, 1, 1), timedelta(0), at(2024, 1, 2))


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 10**12),  # start offset, microseconds
    st.integers(1, 10**10),  # window, microseconds
    st.integers(0, 10**12),  # now - start, microseconds
)
def test_prop_tumbling_boundary_rule(start_us, window_us, elapsed_us):
    base = at(2020, 1, 1)
    start = base + timedelta(microseconds=start_us)
    window = timedelta(microseconds=window_us)
    now = start + timedelta(microseconds=elapsed_us)
    got = tumbling_window_start(start, window, now)
    k, rem = divmod((got - start) // timedelta(microseconds=1), window_us)
    assert rem == 0 and k >= 0  # on the grid
    if elapsed_us == 0:
        assert got == start
    else:
        assert got < now <= got + window  # strictly before now, and the window reaches now


# ------------------------------------------------------------------------------------------------
# cron: every example of spec e.1


@pytest.mark.parametrize(
    "expr,now,expected",
    [
        ("0 * * * *", at(2024, 1, 1, 14, 30), at(2024, 1, 1, 14)),
        ("0 * * * *", at(2024, 1, 1, 14), at(2024, 1, 1, 13)),
        ("0 0 * * *", at(2024, 1, 1, 10, 30), at(2024, 1, 1)),
        ("0 0 * * *", at(2024, 1, 1, 23, 59, 59), at(2024, 1, 1)),
        ("0 */6 * * *", at(2024, 1, 1, 10), at(2024, 1, 1, 6)),
        ("0 */6 * * *", at(2024, 1, 1, 12), at(2024, 1, 1, 6)),
        ("0 12 * * 1", at(2024, 1, 3, 15), at(2024, 1, 1, 12)),  # Wed 3 Jan 2024 -> Mon 1 Jan
        ("0 0 1 * *", at(2024, 3, 31, 23), at(2024, 3, 1)),
        ("*/15 * * * *", at(2024, 1, 1, 14, 37), at(2024, 1, 1, 14, 30)),
        ("*/15 * * * *", at(2024, 1, 1, 14, 45), at(2024, 1, 1, 14, 30)),
        ("@daily", at(2024, 1, 1, 0, 0, 0, 1), at(2024, 1, 1)),  # just after a boundary -> that boundary
        ("@monthly", at(2024, 1, 1), at(2023, 12, 1)),  # crosses a year
        ("0 0 29 2 *", at(2025, 3, 1), at(2024, 2, 29)),  # leap day
        ("30 9 * jan-mar mon-fri", at(2024, 1, 6, 12), at(2024, 1, 5, 9, 30)),  # Sat -> Fri
        ("0 0 13 * 5", at(2024, 1, 10), at(2024, 1, 5)),  # both day fields restricted: either matches
    ],
)
def test_cron_examples(expr, now, expected):
    assert previous_cron_occurrence(expr, now) == expected


def test_cron_naive_datetimes_stay_naive():
    assert previous_cron_occurrence("0 * * * *", datetime(2024, 1, 1, 14, 30)) == datetime(2024, 1, 1, 14)


@pytest.mark.parametrize("expr", ["* * * *", "60 * * * *", "*/0 * * * *", "a * * * *", "5-3 * * * *", 7])
def test_cron_bad_expressions(expr):
    with pytest.raises(ValueError, match="cron"):
        parse_cron(expr)


def test_cron_never_matching():
    with pytest.raises(ValueError, match="no occurrence"):
        previous_cron_occurrence("0 0 31 2 *", at(2024, 3, 1))


def _brute_previous(sched, now):
    t = now.replace(second=0, microsecond=0)
    if t == now:
        t -= timedelta(minutes=1)
    for _ in range(8 * 24 * 60 + 1):
        if sched.matches(t):
            return t
        t -= timedelta(minutes=1)
    raise AssertionError("no match in 8 days")


@settings(max_examples=60, deadline=None)
@given(
    st.sets(st.integers(0, 59), min_size=1, max_size=4),
    st.sets(st.integers(0, 23), min_size=1, max_size=3),
    st.one_of(st.just(None), st.sets(st.integers(0, 6), min_size=1, max_size=3)),
    st.integers(0, 3 * 365 * 24 * 3600),
    st.sampled_from([0, 1, 30]),
)
def test_prop_cron_matches_brute_force(minutes, hours, weekdays, offset_s, extra_s):
    expr = " ".join([
        ",".join(map(str, sorted(minutes))), ",".join(map(str, sorted(hours))), "*", "*",
        "*" if weekdays is None else ",".join(map(str, sorted(weekdays))),
    ])
    now = at(2023, 1, 1) + timedelta(seconds=offset_s - offset_s % 60 + extra_s)
    assert previous_cron_occurrence(expr, now) == _brute_previous(parse_cron(expr), now)


def test_window_start_dispatch_and_slurm_periods():
    now = at(2024, 1, 3, 15)  # Wednesday
    assert window_start("sliding", now, window_size=timedelta(days=7)) == at(2023, 12, 27, 15)
    assert sliding_window_start(now, H) == at(2024, 1, 3, 14)
    assert window_start("tumbling", now, window_size=timedelta(days=1), tumbling_start=at(2024, 1, 1)) == at(2024, 1, 3)
    assert window_start("cron", now, cron="@weekly") == at(2023, 12, 31)  # Sunday 00:00
    assert period_reset("WEEKLY", now) == at(2023, 12, 31)
    assert period_reset("monthly", now) == at(2024, 1, 1)
    assert period_reset("QUARTERLY", at(2024, 5, 2)) == at(2024, 4, 1)
    assert period_reset("YEARLY", at(2024, 1, 1)) == at(2023, 1, 1)
    assert period_reset("NONE", now) is None
    with pytest.raises(ValueError, match="window_type"):
        window_start("hopping", now)
    with pytest.raises(ValueError, match="period"):
        period_reset("HOURLY", now)


# ------------------------------------------------------------------------------------------------
# decay and normalised usage


def test_decay_weights():
    np.testing.assert_allclose(decay_weights([100, 90, 80], 100, 10), [1, 0.5, 0.25])
    np.testing.assert_array_equal(decay_weights([0, 50], 100, 0), [1, 1])
    np.testing.assert_array_equal(decay_weights([0, 50], 100, -5), [1, 1])
    np.testing.assert_array_equal(decay_weights([0, 50], 100, None), [1, 1])
    with pytest.raises(ValueError, match="half_life"):
        decay_weights([0], 1, float("nan"))


def test_full_cluster_holder_has_usage_one_whatever_half_life():
    t = np.arange(100.0)
    cap = np.tile([8.0, 64000, 1e12], (100, 1))
    alloc = np.stack([cap, np.zeros_like(cap)], axis=1)  # (S, Q=2, 3): queue 0 holds everything
    for h in (0, 5, 50, 1e9):
        u = normalized_usage(t, alloc, cap, now=99.0, half_life=h)
        np.testing.assert_allclose(u, [[1, 1, 1], [0, 0, 0]])


def test_usage_window_and_decay_weighting():
    t = np.array([0.0, 10.0, 20.0])
    cap = np.full((3, 3), 10.0)
    alloc = np.array([[10.0, 0, 0], [0, 0, 0], [5.0, 0, 0]])[:, None, :]  # one queue
    # no decay: (10 + 0 + 5) / 30
    assert normalized_usage(t, alloc, cap, now=20.0)[0, 0] == pytest.approx(0.5)
    # half-life 10: weights 0.25, 0.5, 1 -> (2.5 + 5) / (2.5 + 5 + 10)
    assert normalized_usage(t, alloc, cap, now=20.0, half_life=10)[0, 0] == pytest.approx(7.5 / 17.5)
    # window from t=10: (0 + 5) / 20
    assert normalized_usage(t, alloc, cap, now=20.0, window_start=10.0)[0, 0] == pytest.approx(0.25)
    # samples after now are ignored; an empty window is 0
    assert normalized_usage(t, alloc, cap, now=5.0)[0, 0] == pytest.approx(1.0)
    assert normalized_usage(t, alloc, cap, now=20.0, window_start=30.0)[0, 0] == 0
    # no capacity recorded for a resource -> 0
    assert normalized_usage(t, alloc, np.zeros((3, 3)), now=20.0)[0, 0] == 0


def test_usage_rejects_bad_samples():
    with pytest.raises(ValueError, match="samples"):
        normalized_usage([0, 1], np.zeros((3, 1, 3)), np.zeros((2, 3)), now=1)
    with pytest.raises(ValueError, match=">= 0"):
        normalized_usage([0], -np.ones((1, 1, 3)), np.ones((1, 3)), now=1)
    with pytest.raises(ValueError, match="finite"):
        normalized_usage([0], np.full((1, 1, 3), np.nan), np.ones((1, 3)), now=1)


_samples = st.lists(
    st.tuples(st.floats(0, 50), st.floats(0, 8), st.floats(0, 8)),  # (dt, queue0 gpu, queue1 gpu)
    min_size=1, max_size=20,
)


@settings(max_examples=200, deadline=None)
@given(_samples, st.sampled_from([0.0, 3.0, 60.0, 1e6]))
def test_prop_usage_is_a_fraction(samples, h):
    t = np.cumsum([s[0] for s in samples])
    a = np.array([[[s[1], 0, 0], [s[2], 0, 0]] for s in samples])
    cap = np.tile([16.0, 0, 0], (len(samples), 1))
    u = normalized_usage(t, a, cap, now=float(t[-1]), half_life=h)
    assert np.all((u >= 0) & (u <= 1))
    assert u[0, 0] + u[1, 0] <= 1 + 1e-12  # two queues sharing a 16-GPU cluster, each <= 8


def test_fake_history_weights():
    np.testing.assert_allclose(fake_history_weights(3, 5, 0), [1, 1, 1])
    w = fake_history_weights(6, 4, 2)
    np.testing.assert_allclose(w, [0, 0, 0.5**2, 0.5**1.5, 0.5**1, 0.5**0.5])
    assert fake_history_weights(0, 4, 2).size == 0


def test_slurm_decay_factor():
    assert slurm_decay_factor(7 * 86400, 7 * 86400) == pytest.approx(0.50007, abs=1e-5)
    assert slurm_decay_factor(100, 0) == 1.0


# ------------------------------------------------------------------------------------------------
# incremental accumulator


def test_accumulator_matches_sample_formula():
    acc = DecayedUsage(2, 30.0)
    t = np.array([0.0, 10, 25, 60, 61])
    alloc = np.array([[[4, 1, 0], [0, 0, 2]], [[8, 0, 0], [0, 0, 0]], [[2, 0, 0], [6, 3, 1]],
                      [[0, 0, 0], [8, 0, 0]], [[1, 1, 1], [1, 1, 1]]], float)
    cap = np.tile([8.0, 4, 4], (5, 1))
    for i in range(5):
        acc.add(t[i], alloc[i], cap[i])
    num, den = acc.decayed(100.0)
    w = decay_weights(t, 100.0, 30.0)
    np.testing.assert_allclose(num, np.tensordot(w, alloc, axes=(0, 0)), rtol=1e-13)
    np.testing.assert_allclose(den, w @ cap, rtol=1e-13)
    np.testing.assert_allclose(acc.usage(100.0), normalized_usage(t, alloc, cap, now=100.0, half_life=30.0),
                               rtol=1e-12)


def test_accumulator_without_decay_and_reset():
    acc = DecayedUsage(1, 0)
    acc.add(0, [[1, 2, 3]], [4, 4, 4], duration=2)
    acc.add(1000, [[1, 0, 0]], [4, 4, 4])
    num, den = acc.decayed(10**9)
    np.testing.assert_array_equal(num, [[3, 4, 6]])
    np.testing.assert_array_equal(den, [12, 12, 12])
    acc.reset(2000)
    assert acc.now == 2000 and not acc.decayed()[0].any()
    with pytest.raises(ValueError, match="backwards"):
        acc.add(1999, [[0, 0, 0]], [1, 1, 1])
    with pytest.raises(ValueError, match=">= 0"):
        acc.add(2001, [[-1, 0, 0]], [1, 1, 1])
    with pytest.raises(ValueError, match="now"):
        acc.decayed(1500)


def test_accumulator_survives_many_half_lives():
    acc = DecayedUsage(1, 1.0)
    acc.add(0, [[1e6, 0, 0]], [1e6, 1, 1])
    acc.advance(5000)  # 5000 half-lives: old usage has vanished, no overflow / NaN
    acc.add(5000, [[1, 0, 0]], [2, 1, 1])
    num, den = acc.decayed(5000)
    assert np.all(np.isfinite(num)) and num[0, 0] == pytest.approx(1.0) and den[0] == pytest.approx(2.0)
    assert acc.usage(5001)[0, 0] == pytest.approx(0.5)


_steps = st.lists(st.floats(0, 500, allow_nan=False), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(_samples, _steps, st.sampled_from([0.0, 1.0, 7.5, 100.0]))
def test_prop_k_small_steps_equal_one_big_step(samples, steps, h):
    def build():
        acc = DecayedUsage(2, h)
        t = 0.0
        for dt, a0, a1 in samples:
            t += dt
            acc.add(t, [[a0, 0, 0], [a1, 0, 0]], [16, 0, 0])
        return acc, t

    small, t0 = build()
    big, _ = build()
    t = t0
    for dt in steps:
        t += dt
        small.advance(t)
    big.advance(t)
    for now in (t, t + 3.3, t + 1000.0):
        n1, d1 = small.decayed(now)
        n2, d2 = big.decayed(now)
        assert np.array_equal(n1, n2) and np.array_equal(d1, d2)


@settings(max_examples=200, deadline=None)
@given(_samples, _steps, st.sampled_from([0.0, 0.5, 7.5, 100.0]))
def test_prop_never_negative_never_increasing_without_usage(samples, steps, h):
    acc = DecayedUsage(2, h)
    t = 0.0
    for dt, a0, a1 in samples:
        t += dt
        acc.add(t, [[a0, 0, 0], [a1, 0, 0]], [16, 0, 0])
    prev_num, prev_den = acc.decayed(t)
    for dt in steps:
        t += dt
        if dt > 100:
            acc.advance(t)  # mix reads with real decay steps
        num, den = acc.decayed(t)
        assert np.all(num >= 0) and np.all(den >= 0)
        assert np.all(num <= prev_num) and np.all(den <= prev_den)
        prev_num, prev_den = num, den


def test_history_usage_sliding_matches_fake_db_weighting():
    rng = np.random.default_rng(3)
    n, q, w, h = 10, 2, 4, 2.0
    alloc = rng.integers(0, 5, (n, q, 3)).astype(float)
    cap = np.full((n, 3), 10.0)
    got = history_usage(alloc, cap, window_size=w, window_type="sliding", half_life=h)
    fw = fake_history_weights(n, w, h)
    np.testing.assert_allclose(got, np.tensordot(fw, alloc, axes=(0, 0)) / (fw @ cap), rtol=1e-12)


def test_history_usage_tumbling_boundary_rule():
    cap = np.ones((8, 3))
    alloc = np.zeros((8, 1, 3))
    alloc[:4, 0, 0] = 1.0  # busy during ticks 0-3, idle 4-7
    # now = 4 (exact boundary of a 4-tick window): the window [0, 4) is still current -> U = 1
    assert history_usage(alloc[:4], cap[:4], window_size=4, window_type="tumbling")[0, 0] == 1.0
    # now = 5: new window from tick 4 -> only the idle tick 4 counts
    assert history_usage(alloc[:5], cap[:5], window_size=4, window_type="tumbling")[0, 0] == 0.0
    # sliding over the same 5 ticks: last 4 = ticks 1..4 -> 3/4
    assert history_usage(alloc[:5], cap[:5], window_size=4)[0, 0] == 0.75
    assert history_usage(np.zeros((0, 1, 3)), np.zeros((0, 3)), window_size=4).tolist() == [[0, 0, 0]]
    with pytest.raises(ValueError, match="window_type"):
        history_usage(alloc, cap, window_size=4, window_type="cron")
