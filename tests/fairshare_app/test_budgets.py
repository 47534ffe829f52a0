"""GPU-hour budgets: burn-down, projected exhaustion, exhaustion policies reaching the engine,
validation, tenant visibility."""
from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest

from fairshare_app.selectors import budget_list, budget_statuses, engine_inputs
from fairshare_app.services.accounting import usage_account
from fairshare_app.services.budgets import budget_create, budget_update
from queues_app.cycle.engine_io import build_engine_input
from queues_app.errors import ApplicationError
from tests.fairshare_app.factories import GpuBudgetFactory, finish, gpu_node, leaf_queue, running

pytestmark = pytest.mark.django_db
DAY1 = datetime(2026, 3, 1, tzinfo=dt_timezone.utc)


@pytest.fixture
def team():
    gpu_node("node0", gpus=8)
    dept = leaf_queue("dept", gpu_quota=4)
    leaf = leaf_queue("train", dept, gpu_quota=2)
    other = leaf_queue("other", dept, gpu_quota=2)
    return {"dept": dept, "train": leaf, "other": other}


def burn(queue, *, gpus: int, hours: int, start: datetime = DAY1, name: str = "burner") -> datetime:
    running(queue, name=name, gpus=gpus, started_at=start)
    usage_account(now=start)
    end = start + timedelta(hours=hours)
    usage_account(now=end)
    return end


class BudgetStatusTests:
    def test_burn_down_and_projected_exhaustion(self, team):
        budget = GpuBudgetFactory(queue=team["train"], gpu_hours=100, period="MONTHLY")
        now = burn(team["train"], gpus=4, hours=10)  # 40 GPU-hours, 4 GPU-h/h
        st = budget_statuses(tenant=None, now=now, budgets=[budget], with_burn_down=True)[0]
        assert (st.period_start, st.period_end) == (DAY1, datetime(2026, 4, 1, tzinfo=dt_timezone.utc))
        assert st.used_gpu_hours == pytest.approx(40)
        assert st.remaining_gpu_hours == pytest.approx(60)
        assert st.burn_rate_gpu_per_hour == pytest.approx(4)
        assert st.projected_exhaustion == now + timedelta(hours=15)
        assert not st.exhausted
        assert st.burn_down[0] == (DAY1, 100.0) and st.burn_down[-1][1] == pytest.approx(60)
        assert all(a[1] >= b[1] for a, b in zip(st.burn_down, st.burn_down[1:]))

    def test_burn_down_stays_flat_until_usage_began_and_the_rate_is_the_current_allocation(self, team):
        """Daily budget, usage starting at 13:52 with 34 GPUs: the line is flat at the full
        budget from 00:00 to 13:52 (was a straight line from 00:00), and the burn rate is the
        34 GPUs held now (was 0.33 GPU-h/h: usage averaged over the whole day)."""
        gpu_node("node1", gpus=40)
        budget = GpuBudgetFactory(queue=team["dept"], gpu_hours=40, period="DAILY")
        began = DAY1 + timedelta(hours=13, minutes=52)
        running(team["train"], name="big", gpus=34, node="node1", started_at=began)
        usage_account(now=DAY1)
        now = began + timedelta(minutes=10)
        usage_account(now=now)
        st = budget_statuses(tenant=None, now=now, budgets=[budget], with_burn_down=True)[0]
        assert st.used_gpu_hours == pytest.approx(34 * 10 / 60)
        assert st.burn_rate_gpu_per_hour == pytest.approx(34)
        assert st.projected_exhaustion == now + timedelta(hours=(40 - 34 * 10 / 60) / 34)
        assert st.burn_down[:2] == [(DAY1, 40.0), (began, 40.0)]
        assert st.burn_down[-1] == (now, pytest.approx(40 - 34 * 10 / 60))
        assert [t for t, r in st.burn_down if r < 40.0][0] > began

    def test_a_finished_workload_burns_nothing_more(self, team):
        budget = GpuBudgetFactory(queue=team["train"], gpu_hours=100, period="MONTHLY")
        now = burn(team["train"], gpus=4, hours=10)
        finish(team["train"].workloads.get(), at=now)
        st = budget_statuses(tenant=None, now=now, budgets=[budget])[0]
        assert st.used_gpu_hours == pytest.approx(40)
        assert st.burn_rate_gpu_per_hour == 0 and st.projected_exhaustion is None

    def test_a_parent_budget_counts_its_subtree(self, team):
        budget = GpuBudgetFactory(queue=team["dept"], gpu_hours=10, period="DAILY")
        running(team["other"], name="o", gpus=1, started_at=DAY1)
        now = burn(team["train"], gpus=1, hours=6)
        st = budget_statuses(tenant=None, now=now, budgets=[budget])[0]
        assert st.used_gpu_hours == pytest.approx(12) and st.exhausted
        assert st.projected_exhaustion is None

    def test_no_projection_when_the_period_ends_first(self, team):
        budget = GpuBudgetFactory(queue=team["train"], gpu_hours=1000, period="WEEKLY")
        now = burn(team["train"], gpus=1, hours=2)
        assert budget_statuses(tenant=None, now=now, budgets=[budget])[0].projected_exhaustion is None

    def test_usage_of_the_previous_period_does_not_count(self, team):
        budget = GpuBudgetFactory(queue=team["train"], gpu_hours=5, period="DAILY")
        now = burn(team["train"], gpus=8, hours=23)  # Mar 1: 184 GPU-hours
        usage_account(now=now + timedelta(hours=1, minutes=2))  # Mar 2 00:02
        st = budget_statuses(tenant=None, now=now + timedelta(hours=1, minutes=2), budgets=[budget])[0]
        assert st.period_start == DAY1 + timedelta(days=1)
        assert st.used_gpu_hours == pytest.approx(8 * 2 / 60)


class BudgetPolicyTests:
    def test_exhausted_deprioritize_sets_over_quota_weight_zero_for_the_engine(self, team):
        GpuBudgetFactory(queue=team["train"], gpu_hours=1, period="DAILY", policy="deprioritize")
        now = burn(team["train"], gpus=4, hours=1)
        assert engine_inputs(now=now)["queues"] == {"train": {"gpu": {"overQuotaWeight": 0}}}
        data = build_engine_input(now=now).data
        res = next(q for q in data["queues"] if q["name"] == "train")["resources"]["gpu"]
        assert res["overQuotaWeight"] == 0 and res["quota"] == 2
        assert data["config"]["kValue"] == 1.0 and data["usage"]["train"]["gpu"] == pytest.approx(4 * 60 / (8 * 61))  # + the idle first minute

    def test_exhausted_block_sets_the_limit_to_the_quota(self, team):
        GpuBudgetFactory(queue=team["train"], gpu_hours=1, period="DAILY", policy="block_over_quota")
        now = burn(team["train"], gpus=4, hours=1)
        res = next(q for q in build_engine_input(now=now).data["queues"] if q["name"] == "train")["resources"]["gpu"]
        assert res["limit"] == 2 and res["overQuotaWeight"] == 1

    def test_report_only_inactive_and_unspent_budgets_change_nothing(self, team):
        GpuBudgetFactory(queue=team["train"], gpu_hours=1, period="DAILY", policy="report_only")
        GpuBudgetFactory(queue=team["other"], gpu_hours=1, period="DAILY", is_active=False)
        GpuBudgetFactory(queue=team["dept"], gpu_hours=1000, period="DAILY")
        running(team["other"], name="o", gpus=4, started_at=DAY1)
        now = burn(team["train"], gpus=4, hours=1)
        assert engine_inputs(now=now)["queues"] == {}

    def test_the_engine_really_stops_admitting_over_quota_work(self, team):
        """End to end: after the budget is spent, a pending over-quota job no longer binds."""
        from queues_app.cycle.engine_io import build_snapshot_with_index, run_engine
        from queues_app.services.workloads import workload_import

        GpuBudgetFactory(queue=team["train"], gpu_hours=1, period="DAILY", policy="block_over_quota")
        now = burn(team["train"], gpus=2, hours=1)  # within quota: 2 GPUs
        workload_import(queue=team["train"], name="more", tasks=[{"gpu": 2, "state": "Pending"}], created_at=now)
        snap, _ = build_snapshot_with_index(now=now)
        result = run_engine(snap)
        assert result.jobs["more"]["status"] == "Pending"


class BudgetValidationTests:
    @pytest.mark.parametrize("value", [0, -5, "nan", "inf", "abc", None, 10**12])
    def test_bad_gpu_hours_name_the_field(self, team, value):
        with pytest.raises(ApplicationError) as err:
            budget_create(queue=team["train"], gpu_hours=value)
        assert "gpu_hours" in err.value.extra

    def test_bad_period_and_policy_and_duplicates(self, team):
        with pytest.raises(ApplicationError) as err:
            budget_create(queue=team["train"], gpu_hours=5, period="HOURLY")
        assert "period" in err.value.extra
        with pytest.raises(ApplicationError) as err:
            budget_create(queue=team["train"], gpu_hours=5, policy="explode")
        assert "policy" in err.value.extra
        b = budget_create(queue=team["train"], gpu_hours=5)
        with pytest.raises(ApplicationError) as err:
            budget_create(queue=team["train"], gpu_hours=7)
        assert "period" in err.value.extra
        with pytest.raises(ApplicationError) as err:
            budget_update(budget=b, data={"queue": team["other"]})
        assert "queue" in err.value.extra
        b.refresh_from_db()
        assert b.gpu_hours == 5


class BudgetVisibilityTests:
    def test_tenants_see_budgets_of_their_queues_and_ancestors_only(self, team, tenants):
        from queues_app.services.tenants import tenant_grant_queue

        tenant_grant_queue(tenant=tenants["team_a"], queue=team["train"])
        mine = GpuBudgetFactory(queue=team["train"])
        dept = GpuBudgetFactory(queue=team["dept"])
        GpuBudgetFactory(queue=team["other"])
        assert set(budget_list(tenant=tenants["team_a"])) == {mine, dept}
        assert list(budget_list(tenant=tenants["team_b"])) == []
        assert budget_list(tenant=None).count() == 3
