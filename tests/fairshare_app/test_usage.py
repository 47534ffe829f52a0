"""Normalised usage: window, decay, reset periods, parents, compaction, and the decay
properties (k small steps = one big step, never negative, never growing without usage)."""
from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import numpy as np
import pytest
from django.db.models import Sum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairshare_app.clock import to_epoch
from fairshare_app.models import AccountingInterval, AccountingState, NormalizedUsage, QueueIntervalStat, UsageRecord
from fairshare_app.selectors import queue_usage_now, usage_report
from fairshare_app.services.accounting import usage_account
from fairshare_app.services.compaction import usage_compact
from fairshare_app.services.settings import fairshare_settings_get, fairshare_settings_update
from fairshare_app.usage import decayed_usage
from fairshare_app.windows import window_start
from tests.fairshare_app.factories import T0, finish, gpu_node, leaf_queue, minutes, running

pytestmark = pytest.mark.django_db
HYPO = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def U(name: str) -> float:
    row = NormalizedUsage.objects.filter(queue__name=name).first()
    return 0.0 if row is None else row.gpu


def reset_history() -> None:
    AccountingInterval.objects.all().delete()
    AccountingState.objects.all().delete()
    NormalizedUsage.objects.all().delete()


@pytest.fixture
def two():
    gpu_node("node0", gpus=8)
    dept = leaf_queue("dept")
    return {"dept": dept, "a": leaf_queue("a", dept), "b": leaf_queue("b", dept)}


class NormalizedUsageTests:
    def test_whole_cluster_for_the_whole_window_is_one_whatever_the_half_life(self, two):
        for h in (0, 60, 3600):
            reset_history()
            fairshare_settings_update(data={"half_life": timedelta(seconds=h), "window_size": timedelta(hours=1)})
            wl = running(two["a"], name=f"j{h}", gpus=8, started_at=T0 - timedelta(hours=2))
            usage_account(now=T0 - minutes(61))
            usage_account(now=T0)
            assert U("a") == pytest.approx(1.0), h
            assert U("dept") == pytest.approx(1.0) and U("b") == 0.0
            wl.delete()

    def test_parents_get_the_sum_of_their_children(self, two):
        running(two["a"], name="ja", gpus=2, started_at=T0 - minutes(5))
        running(two["b"], name="jb", gpus=4, started_at=T0 - minutes(5))
        usage_account(now=T0)
        assert (U("a"), U("b"), U("dept")) == pytest.approx((0.25, 0.5, 0.75))

    def test_decay_weights_recent_usage_more(self, two):
        fairshare_settings_update(data={"window_size": timedelta(minutes=20), "half_life": timedelta(minutes=5)})
        usage_account(now=T0)
        wa = running(two["a"], name="early", gpus=8, started_at=T0)
        usage_account(now=T0 + minutes(10))
        finish(wa, at=T0 + minutes(10))
        running(two["b"], name="late", gpus=8, started_at=T0 + minutes(10))
        usage_account(now=T0 + minutes(20))
        assert U("b") > U("a") > 0
        assert U("a") + U("b") == pytest.approx(1.0)  # the cluster was full the whole window
        # exact: the first 10 minutes weigh 2**-2 of the last 10
        assert U("a") / U("b") == pytest.approx(0.25)
        fairshare_settings_update(data={"half_life": timedelta(0)})
        usage = queue_usage_now(tenant=None, now=T0 + minutes(20))
        assert usage["a"]["gpu"] == pytest.approx(usage["b"]["gpu"]) == pytest.approx(0.5)

    def test_sliding_window_forgets_old_usage(self, two):
        fairshare_settings_update(data={"window_size": timedelta(minutes=10)})
        wl = running(two["a"], name="j", gpus=8, started_at=T0 - minutes(5))
        usage_account(now=T0)
        finish(wl, at=T0 + timedelta(seconds=30))
        usage_account(now=T0 + minutes(5))
        assert 0 < U("a") < 1
        usage_account(now=T0 + minutes(12))
        assert U("a") == 0.0
        assert not NormalizedUsage.objects.filter(queue__name="a").exists()

    def test_window_edges_are_pro_rated(self, two):
        fairshare_settings_update(data={"window_size": timedelta(seconds=90)})
        running(two["a"], name="j", gpus=8, started_at=T0 - minutes(5))
        usage_account(now=T0)
        usage_account(now=T0 + minutes(3))
        sums = decayed_usage(now=T0 + minutes(3), window_start=T0 + timedelta(seconds=90), half_life_s=0)
        assert sums.capacity[0] == pytest.approx(8 * 90)
        assert sums.by_queue[two["a"].pk][0] == pytest.approx(8 * 90)


class ResetPeriodTests:
    def test_tumbling_daily_reset_follows_the_exact_boundary_rule(self, two):
        fairshare_settings_update(data={"window_type": "tumbling", "reset_period": "DAILY"})
        midnight = datetime(2026, 3, 11, tzinfo=dt_timezone.utc)
        wl = running(two["a"], name="yesterday", gpus=8, started_at=midnight - minutes(30))
        usage_account(now=midnight - minutes(10))
        usage_account(now=midnight)
        finish(wl, at=midnight)
        running(two["b"], name="today", gpus=2, started_at=midnight)
        # at exactly 00:00 the day that just ended is still the window
        assert window_start(fairshare_settings_get(), midnight) == midnight - timedelta(days=1)
        assert U("a") == pytest.approx(1.0)
        usage_account(now=midnight + minutes(1))
        assert U("a") == 0.0 and U("b") == pytest.approx(0.25)

    def test_sliding_window_cut_at_a_weekly_reset(self, two):
        fairshare_settings_update(data={"window_size": timedelta(days=7), "reset_period": "WEEKLY"})
        sunday = datetime(2026, 3, 15, tzinfo=dt_timezone.utc)
        assert sunday.weekday() == 6
        running(two["a"], name="j", gpus=4, started_at=sunday - minutes(30))
        usage_account(now=sunday - minutes(2))
        usage_account(now=sunday + minutes(2))
        cfg = fairshare_settings_get()
        assert window_start(cfg, sunday + minutes(2)) == sunday
        assert window_start(cfg, sunday - minutes(2)) == sunday - timedelta(days=7)
        assert U("a") == pytest.approx(0.5)  # only the two post-reset intervals count
        sums = decayed_usage(now=sunday + minutes(2), window_start=sunday, half_life_s=0)
        assert sums.capacity[0] == pytest.approx(8 * 120)

    def test_a_tumbling_start_in_the_future_is_an_empty_window(self, two):
        fairshare_settings_update(data={"window_type": "tumbling", "window_size": timedelta(hours=1),
                                        "tumbling_start": T0 + timedelta(days=1)})
        running(two["a"], name="j", gpus=8, started_at=T0 - minutes(5))
        usage_account(now=T0)
        assert U("a") == 0.0

    def test_tumbling_without_calendar_reset_uses_start_plus_k_windows(self, two):
        fairshare_settings_update(data={"window_type": "tumbling", "window_size": timedelta(hours=1),
                                        "tumbling_start": T0 - timedelta(hours=5, minutes=30)})
        cfg = fairshare_settings_get()
        assert window_start(cfg, T0) == T0 - timedelta(minutes=30)
        assert window_start(cfg, T0 + minutes(30)) == T0 - timedelta(minutes=30)  # exact boundary
        assert window_start(cfg, T0 + minutes(31)) == T0 + minutes(30)


class CompactionTests:
    def test_compaction_keeps_totals_and_usage(self, two):
        fairshare_settings_update(data={"raw_retention": timedelta(hours=3), "max_catchup": timedelta(hours=2),
                                        "hourly_retention": timedelta(hours=6), "window_size": timedelta(days=2),
                                        "half_life": timedelta(hours=12)})
        running(two["a"], name="ja", gpus=3, started_at=T0 - timedelta(hours=9))
        usage_account(now=T0 - timedelta(hours=8))
        for h in range(-7, 1):
            usage_account(now=T0 + timedelta(hours=h))
        raw = AccountingInterval.objects.count()
        totals = UsageRecord.objects.aggregate(g=Sum("gpu"))["g"]
        before = queue_usage_now(tenant=None, now=T0)["a"]["gpu"]
        report = usage_report(tenant=None, start=T0 - timedelta(days=1), end=T0 + minutes(1))
        written = usage_compact(now=T0)
        assert written > 0
        # the last 3 hours stay raw, the 6 older hours (T0-9h .. T0-3h) became hourly buckets;
        # no UTC day is complete before the hourly cutoff, so no daily bucket yet
        res = list(AccountingInterval.objects.values_list("resolution", flat=True))
        assert res.count(60) == 180 and res.count(3600) == 6 and len(res) == 186 < raw
        assert UsageRecord.objects.aggregate(g=Sum("gpu"))["g"] == pytest.approx(totals)
        assert usage_report(tenant=None, start=T0 - timedelta(days=1), end=T0 + minutes(1)) == [
            pytest.approx(r) for r in report]
        after = queue_usage_now(tenant=None, now=T0)["a"]["gpu"]
        assert after == pytest.approx(before, rel=1e-6)
        assert QueueIntervalStat.objects.exists()
        assert usage_compact(now=T0) == 0  # idempotent
        assert usage_account(now=T0 + minutes(1)).intervals == 1  # accounting continues after compaction

    def test_nothing_younger_than_the_retention_is_touched(self, two):
        running(two["a"], name="ja", gpus=1, started_at=T0 - minutes(5))
        usage_account(now=T0)
        usage_account(now=T0 + minutes(30))
        assert usage_compact(now=T0 + minutes(30)) == 0
        assert set(AccountingInterval.objects.values_list("resolution", flat=True)) == {60}


class DecayPropertyTests:
    @HYPO
    @given(st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=8))
    def test_k_small_steps_equal_one_big_step(self, two, gaps):
        """Triggering accounting at arbitrary times (any number of triggers, jittered) leaves
        exactly the state of one catch-up run: same history, same normalised usage."""
        reset_history()
        fairshare_settings_update(data={"half_life": timedelta(minutes=7), "window_size": timedelta(hours=3)})
        if not running_fixture_made(two):
            running(two["a"], name="steady", gpus=3, started_at=T0 - minutes(10))
            running(two["b"], name="other", gpus=1, started_at=T0 + minutes(4))
        usage_account(now=T0)
        t = T0
        for g in gaps:
            t += timedelta(seconds=g)
            usage_account(now=t)
        stepwise = (sorted(UsageRecord.objects.values_list("interval__start", "queue_name", "gpu")),
                    sorted(NormalizedUsage.objects.values_list("queue__name", "gpu")))
        reset_history()
        usage_account(now=T0)
        usage_account(now=t)
        once = (sorted(UsageRecord.objects.values_list("interval__start", "queue_name", "gpu")),
                sorted(NormalizedUsage.objects.values_list("queue__name", "gpu")))
        assert stepwise == once

    @HYPO
    @given(st.lists(st.floats(min_value=0, max_value=5e5, allow_nan=False), min_size=2, max_size=10),
           st.sampled_from([0.0, 60.0, 1800.0, 86400.0]))
    def test_decayed_usage_never_negative_never_growing_and_exactly_multiplicative(self, two, offsets, h):
        reset_history()
        if not running_fixture_made(two):
            running(two["a"], name="steady", gpus=3, started_at=T0 - minutes(10))
            running(two["b"], name="other", gpus=1, started_at=T0 + minutes(4))
        usage_account(now=T0)
        usage_account(now=T0 + minutes(20))  # then no new usage is recorded
        ws = T0 - timedelta(days=30)
        times = sorted(T0 + minutes(20) + timedelta(seconds=o) for o in offsets)
        prev = None
        first = decayed_usage(now=times[0], window_start=ws, half_life_s=h)
        for now in times:
            sums = decayed_usage(now=now, window_start=ws, half_life_s=h)
            values = np.concatenate([sums.capacity] + [sums.by_queue.get(q, np.zeros(3)) for q in sorted(first.by_queue)])
            assert np.all(values >= 0)
            if prev is not None:
                assert np.all(values <= prev * (1 + 1e-12))
            prev = values
            # one big decay step from the first time equals the composition of the small ones
            factor = 1.0 if h <= 0 else 2.0 ** (-(to_epoch(now) - to_epoch(times[0])) / h)
            for q, v in first.by_queue.items():
                np.testing.assert_allclose(sums.by_queue.get(q, np.zeros(3)), v * factor, rtol=1e-9, atol=1e-250)
            np.testing.assert_allclose(sums.capacity, first.capacity * factor, rtol=1e-9, atol=1e-250)
            fractions = sums.fractions()
            assert all(np.all((0 <= u) & (u <= 1)) for u in fractions.values())

    def test_a_clock_behind_the_history_never_sees_usage_grow(self, two):
        running(two["a"], name="j", gpus=8, started_at=T0 - minutes(5))
        usage_account(now=T0)
        usage_account(now=T0 + minutes(10))
        later = decayed_usage(now=T0 + minutes(10), window_start=T0 - timedelta(days=1), half_life_s=60)
        earlier = decayed_usage(now=T0 + minutes(5), window_start=T0 - timedelta(days=1), half_life_s=60)
        # intervals after "now" are ignored, not weighted by factors above 1
        assert earlier.capacity[0] <= 8 * 60 * 6 + 1e-9
        assert later.capacity[0] > 0


def running_fixture_made(two) -> bool:
    from queues_app.models import Workload

    return Workload.objects.filter(name="steady").exists()
