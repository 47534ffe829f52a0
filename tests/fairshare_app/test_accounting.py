"""Accounting: idempotent per interval, missed intervals from timestamps, duplicate triggers,
clock going backwards, the catch-up cap, finished workloads, capacity."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import Sum

from fairshare_app.models import AccountingInterval, AccountingState, NormalizedUsage, UsageRecord
from fairshare_app.services.accounting import STATUS_ACCOUNTED, STATUS_CLOCK_BEHIND, STATUS_UP_TO_DATE, usage_account
from fairshare_app.services.settings import fairshare_settings_update
from tests.fairshare_app.factories import T0, finish, gpu_node, leaf_queue, minutes, running

pytestmark = pytest.mark.django_db


def gpu_seconds(queue_name: str | None = None) -> float:
    qs = UsageRecord.objects.all()
    if queue_name:
        qs = qs.filter(queue_name=queue_name)
    return qs.aggregate(s=Sum("gpu"))["s"] or 0.0


@pytest.fixture
def cluster():
    gpu_node("node0", gpus=8)
    a = leaf_queue("team-a")
    b = leaf_queue("team-b")
    return {"a": a, "b": b}


class AccountingTests:
    def test_first_run_accounts_the_interval_that_just_ended(self, cluster):
        running(cluster["a"], name="j1", gpus=4, started_at=T0 - minutes(30))
        result = usage_account(now=T0 + timedelta(seconds=5))
        assert result.status == STATUS_ACCOUNTED and result.intervals == 1
        iv = AccountingInterval.objects.get()
        assert (iv.start, iv.end) == (T0 - minutes(1), T0)
        assert iv.capacity_gpu == 8 * 60
        assert gpu_seconds("team-a") == 4 * 60
        assert NormalizedUsage.objects.get(queue=cluster["a"]).gpu == pytest.approx(0.5)

    def test_a_workload_started_mid_interval_counts_from_its_start(self, cluster):
        usage_account(now=T0)
        running(cluster["a"], name="j1", gpus=2, started_at=T0 + timedelta(seconds=45))
        usage_account(now=T0 + minutes(1))
        assert gpu_seconds("team-a") == pytest.approx(2 * 15)

    def test_duplicate_and_early_triggers_never_double_count(self, cluster):
        running(cluster["a"], name="j1", gpus=4, started_at=T0 - minutes(30))
        usage_account(now=T0)
        for s in (0, 1, 30, 59):  # the same interval again and again
            assert usage_account(now=T0 + timedelta(seconds=s)).status == STATUS_UP_TO_DATE
        assert AccountingInterval.objects.count() == 1
        assert gpu_seconds() == 4 * 60
        state = AccountingState.objects.get()
        assert state.noop_runs == 4 and state.runs == 5

    def test_missed_intervals_are_accounted_from_timestamps(self, cluster):
        running(cluster["a"], name="j1", gpus=4, started_at=T0 - minutes(30))
        usage_account(now=T0)
        result = usage_account(now=T0 + minutes(10) + timedelta(seconds=7))  # 9 triggers lost
        assert result.intervals == 10
        starts = list(AccountingInterval.objects.values_list("start", flat=True))
        assert starts == [T0 - minutes(1) + minutes(i) for i in range(11)]
        assert gpu_seconds() == 4 * 60 * 11

    def test_the_same_history_whether_triggered_every_minute_or_once(self, cluster):
        running(cluster["a"], name="j1", gpus=3, started_at=T0 - minutes(5))
        wl = running(cluster["b"], name="j2", gpus=2, started_at=T0 + timedelta(seconds=90))
        usage_account(now=T0)
        for m in range(1, 7):
            usage_account(now=T0 + minutes(m) + timedelta(seconds=m))
        stepwise = sorted(UsageRecord.objects.values_list("interval__start", "queue_name", "gpu"))
        UsageRecord.objects.all().delete()
        AccountingInterval.objects.all().delete()
        AccountingState.objects.all().delete()
        usage_account(now=T0)
        usage_account(now=T0 + minutes(6) + timedelta(seconds=6))
        once = sorted(UsageRecord.objects.values_list("interval__start", "queue_name", "gpu"))
        assert stepwise == once
        assert wl  # team-b counted from 12:01:30
        assert sum(g for _, q, g in once if q == "team-b") == pytest.approx(2 * (6 * 60 - 90))

    def test_clock_going_backwards_is_a_counted_no_op(self, cluster):
        running(cluster["a"], name="j1", gpus=8, started_at=T0 - minutes(30))
        usage_account(now=T0 + minutes(10))
        before = gpu_seconds()
        usage_before = NormalizedUsage.objects.get(queue=cluster["a"]).gpu
        result = usage_account(now=T0 + minutes(5))
        assert result.status == STATUS_CLOCK_BEHIND and result.intervals == 0
        assert gpu_seconds() == before
        assert NormalizedUsage.objects.get(queue=cluster["a"]).gpu == usage_before
        state = AccountingState.objects.get()
        assert state.clock_regressions == 1 and state.max_clock_seen == T0 + minutes(10)
        # when the clock is back ahead exactly the next interval is accounted, once
        assert usage_account(now=T0 + minutes(11)).intervals == 1
        assert gpu_seconds() == before + 8 * 60

    def test_an_outage_longer_than_the_catchup_cap_is_skipped_and_logged(self, cluster, caplog):
        fairshare_settings_update(data={"max_catchup": timedelta(hours=1)})
        running(cluster["a"], name="j1", gpus=1, started_at=T0 - minutes(30))
        usage_account(now=T0)
        result = usage_account(now=T0 + timedelta(hours=3))
        assert result.intervals == 60
        assert result.skipped_seconds == 2 * 3600
        assert AccountingState.objects.get().skipped_seconds == 2 * 3600
        assert "catch-up cap" in caplog.text
        assert gpu_seconds() == 60 + 3600

    def test_work_that_finished_during_a_gap_is_accounted_until_it_finished(self, cluster):
        usage_account(now=T0)
        wl = running(cluster["a"], name="short", gpus=4, started_at=T0 + minutes(1))
        finish(wl, at=T0 + minutes(3) + timedelta(seconds=30))
        usage_account(now=T0 + minutes(5))
        assert gpu_seconds("team-a") == pytest.approx(4 * 150)
        # and a later run does not count it again
        usage_account(now=T0 + minutes(6))
        assert gpu_seconds("team-a") == pytest.approx(4 * 150)

    def test_usage_is_recorded_per_tenant_and_user(self, cluster, tenants):
        from queues_app.services.tenants import tenant_grant_queue

        tenant_grant_queue(tenant=tenants["team_a"], queue=cluster["a"])
        running(cluster["a"], name="j1", gpus=2, started_at=T0 - minutes(5), tenant=tenants["team_a"],
                owner=tenants["alice"])
        running(cluster["a"], name="j2", gpus=1, started_at=T0 - minutes(5), tenant=tenants["team_a"],
                owner=tenants["bob"])
        usage_account(now=T0)
        rows = sorted(UsageRecord.objects.values_list("tenant_name", "user_name", "gpu"))
        assert rows == [("team-a", "alice", 120.0), ("team-a", "bob", 60.0)]

    def test_capacity_counts_ready_schedulable_nodes_minus_reservations(self, cluster):
        from queues_app.services.nodes import node_upsert

        node_upsert(name="cordoned", gpus=8, unschedulable=True)
        node_upsert(name="notready", gpus=8, ready=False)
        node_upsert(name="shared", gpus=8, reserved_gpus=2)
        usage_account(now=T0)
        assert AccountingInterval.objects.get().capacity_gpu == (8 + 6) * 60

    def test_a_changed_interval_setting_keeps_the_grid(self, cluster):
        running(cluster["a"], name="j1", gpus=1, started_at=T0 - minutes(30))
        usage_account(now=T0)
        fairshare_settings_update(data={"interval_seconds": 300})
        usage_account(now=T0 + minutes(12))
        spans = [(iv.start, iv.end) for iv in AccountingInterval.objects.all()]
        assert spans[1:] == [(T0, T0 + minutes(5)), (T0 + minutes(5), T0 + minutes(10))]
        assert gpu_seconds() == 60 + 600
