"""Admin: the settings singleton (validation on the fields, version bump), budgets with
burn-down columns, read-only history, and the charts page."""
from __future__ import annotations

import pytest
from django.urls import reverse

from fairshare_app.models import FairshareSettings
from fairshare_app.services.accounting import usage_account
from fairshare_app.services.settings import fairshare_settings_get
from tests.fairshare_app.factories import T0, GpuBudgetFactory, gpu_node, leaf_queue, minutes, running

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_op(client, operator):
    client.force_login(operator)
    return client


def _form(cfg: FairshareSettings, **changes) -> dict:
    data = {
        "interval_seconds": cfg.interval_seconds, "window_type": cfg.window_type, "window_size": "7 00:00:00",
        "tumbling_start_0": "2026-01-01", "tumbling_start_1": "00:00:00", "reset_period": cfg.reset_period,
        "half_life": "00:00:00", "k_value": cfg.k_value, "max_catchup": "1 00:00:00", "raw_retention": "8 00:00:00",
        "hourly_retention": "92 00:00:00", "billing_weight_gpu": 1, "billing_weight_cpu": 0,
        "billing_weight_memory_gib": 0, "sshare_algorithm": cfg.sshare_algorithm,
    }
    data.update(changes)
    return data


class SettingsAdminTests:
    def test_the_list_redirects_to_the_single_row(self, admin_client_op):
        r = admin_client_op.get(reverse("admin:fairshare_app_fairsharesettings_changelist"))
        assert r.status_code == 302 and r["Location"].endswith("/1/change/")

    def test_bad_values_are_shown_on_their_fields_and_nothing_is_saved(self, admin_client_op):
        cfg = fairshare_settings_get()
        url = reverse("admin:fairshare_app_fairsharesettings_change", args=[1])
        r = admin_client_op.post(url, _form(cfg, k_value="-3", interval_seconds="0"))
        assert r.status_code == 200
        errors = r.context["adminform"].form.errors
        assert "k_value" in errors and "interval_seconds" in errors
        assert fairshare_settings_get().version == 1

    def test_a_good_edit_goes_through_the_service(self, admin_client_op, operator):
        cfg = fairshare_settings_get()
        url = reverse("admin:fairshare_app_fairsharesettings_change", args=[1])
        r = admin_client_op.post(url, _form(cfg, k_value="0.5", half_life="2 00:00:00"))
        assert r.status_code == 302, r.context["adminform"].form.errors if r.context else r
        cfg = fairshare_settings_get()
        assert cfg.k_value == 0.5 and cfg.half_life.days == 2 and cfg.version == 2 and cfg.updated_by == operator


class ChartsAndBudgetsAdminTests:
    def test_charts_page_renders_svg_charts(self, admin_client_op):
        gpu_node("node0", gpus=8)
        q = leaf_queue("a")
        running(q, name="j", gpus=4, started_at=T0 - minutes(5))
        GpuBudgetFactory(queue=q, gpu_hours=5, period="DAILY")
        usage_account(now=T0 - minutes(3))
        usage_account(now=T0)
        r = admin_client_op.get(reverse("admin:fairshare_charts"), {"days": "100000"})
        assert r.status_code == 200
        body = r.content.decode()
        charts = body.split('class="fairshare-chart"')[1:]
        assert len(charts) == 4 and all(c.split(">", 1)[1].lstrip().startswith("<svg") for c in charts)
        assert "no data in this range" not in charts[0] and "GPU-hour budgets" in body

    def test_charts_page_with_no_data_and_bad_params(self, admin_client_op):
        r = admin_client_op.get(reverse("admin:fairshare_charts"), {"days": "x", "queues": "nope"})
        assert r.status_code == 200 and "no data in this range" in r.content.decode()

    def test_budget_changelist_shows_burn_down(self, admin_client_op):
        gpu_node("node0", gpus=8)
        q = leaf_queue("a")
        running(q, name="j", gpus=4, started_at=T0 - minutes(5))
        usage_account(now=T0)
        GpuBudgetFactory(queue=q, gpu_hours=1000, period="YEARLY")
        r = admin_client_op.get(reverse("admin:fairshare_app_gpubudget_changelist"))
        body = r.content.decode()
        assert r.status_code == 200
        assert '<td class="field-used">0.1</td>' in body  # 4 GPUs x the one accounted minute
        assert '<td class="field-remaining">999.9</td>' in body

    def test_budget_add_through_the_admin(self, admin_client_op):
        q = leaf_queue("a")
        r = admin_client_op.post(reverse("admin:fairshare_app_gpubudget_add"), {
            "queue": q.pk, "period": "MONTHLY", "gpu_hours": "12.5", "policy": "deprioritize", "is_active": "on",
            "note": ""})
        assert r.status_code == 302
        assert q.gpu_budgets.get().gpu_hours == 12.5

    def test_history_is_read_only(self, admin_client_op):
        assert admin_client_op.get(reverse("admin:fairshare_app_accountinginterval_changelist")).status_code == 200
        assert admin_client_op.get(reverse("admin:fairshare_app_accountinginterval_add")).status_code == 403
