"""What the cycle hands the engine from fair share: usage block, kValue, and the beat task."""
from __future__ import annotations

from datetime import timedelta

import pytest

from fairshare_app.services.settings import fairshare_settings_update
from fairshare_app.tasks import account_usage
from queues_app.cycle.engine_io import build_engine_input, build_snapshot
from queues_app.errors import ApplicationError
from tests.fairshare_app.factories import T0, gpu_node, leaf_queue, minutes, running

pytestmark = pytest.mark.django_db


@pytest.fixture
def used():
    gpu_node("node0", gpus=8)
    dept = leaf_queue("dept")
    a = leaf_queue("a", dept)
    leaf_queue("b", dept)
    running(a, name="j", gpus=6, started_at=T0 - minutes(5))
    from fairshare_app.services.accounting import usage_account

    usage_account(now=T0)
    return a


class EngineFeedTests:
    def test_usage_and_kvalue_reach_the_snapshot(self, used):
        fairshare_settings_update(data={"k_value": 2.5})
        snap = build_snapshot(now=T0)
        qa, qd, qb = (snap.queues.index[n] for n in ("a", "dept", "b"))
        assert snap.usage[qa, 0] == pytest.approx(0.75) and snap.usage[qd, 0] == pytest.approx(0.75)
        assert snap.usage[qb, 0] == 0.0
        assert snap.config.k_value == 2.5

    def test_explicit_inputs_win(self, used):
        data = build_engine_input(now=T0, config={"kValue": 0.0}).data
        assert data["config"]["kValue"] == 0.0 and data["usage"]["a"]["gpu"] == pytest.approx(0.75)
        data = build_engine_input(now=T0, usage={"b": {"gpu": 0.1}}).data
        assert data["usage"] == {"b": {"gpu": 0.1}} and "kValue" not in data["config"]
        assert "usage" not in build_engine_input(now=T0, fairshare=False).data

    def test_no_history_means_no_usage_block(self, db):
        leaf_queue("q")
        data = build_engine_input(now=T0).data
        assert "usage" not in data and "kValue" not in data["config"]

    def test_the_beat_task_accounts_and_compacts(self, used, settings):
        settings.CELERY_TASK_ALWAYS_EAGER = True
        out = account_usage.apply().get()
        assert out["status"] in ("accounted", "up_to_date") and out["compacted"] >= 0

    def test_beat_schedule_has_the_accounting_entry_with_expires(self):
        from kaiplatform.celery import app

        entry = app.conf.beat_schedule["fairshare-account-usage"]
        assert entry["task"] == "fairshare_app.tasks.account_usage" and entry["options"]["expires"] > 0


class SettingsServiceTests:
    @pytest.mark.parametrize("data, field", [
        ({"k_value": float("nan")}, "k_value"),
        ({"k_value": float("inf")}, "k_value"),
        ({"half_life": timedelta(days=-1)}, "half_life"),
        ({"window_size": timedelta(days=5000)}, "window_size"),
        ({"max_catchup": timedelta(seconds=1)}, "max_catchup"),
        ({"raw_retention": timedelta(hours=12)}, "raw_retention"),
        ({"interval_seconds": "soon"}, "interval_seconds"),
        ({"version": 7}, "version"),
    ])
    def test_bad_settings_name_the_field(self, db, data, field):
        with pytest.raises(ApplicationError) as err:
            fairshare_settings_update(data=data)
        assert field in err.value.extra
