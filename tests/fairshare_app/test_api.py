"""Fair-share API: reports (JSON + CSV), sshare formats, budgets, settings; tenant isolation
(alice in team-a, charlie the outsider), clear 400s naming the field, query budgets."""
from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fairshare_app.services.accounting import usage_account
from tests.fairshare_app.factories import T0, GpuBudgetFactory, gpu_node, minutes, running

pytestmark = pytest.mark.django_db
BASE = "/api/v1/fairshare/"
RANGE = {"start": (T0 - timedelta(days=1)).isoformat(), "end": (T0 + timedelta(days=1)).isoformat()}


@pytest.fixture
def history(tenants, queue_tree):
    gpu_node("node0", gpus=8)
    running(queue_tree["a-train"], name="a1", gpus=2, started_at=T0 - minutes(5), tenant=tenants["team_a"],
            owner=tenants["alice"])
    running(queue_tree["a-train"], name="a2", gpus=1, started_at=T0 - minutes(5), tenant=tenants["team_a"],
            owner=tenants["bob"])
    running(queue_tree["b-train"], name="b1", gpus=4, started_at=T0 - minutes(5), tenant=tenants["team_b"],
            owner=tenants["charlie"])
    usage_account(now=T0 - minutes(2))
    usage_account(now=T0)
    return queue_tree


class UsageReportApiTests:
    def test_operator_sees_every_queue(self, operator_client, history):
        r = operator_client.get(BASE + "usage/", RANGE)
        assert r.status_code == 200
        hours = {row["queue"]: row["gpu_hours"] for row in r.json()["rows"]}
        assert hours == pytest.approx({"a-train": 3 * 180 / 3600, "b-train": 4 * 180 / 3600})

    def test_tenants_see_only_their_own_usage(self, alice_client, charlie_client, history):
        rows = alice_client.get(BASE + "usage/", {**RANGE, "group_by": "user"}).json()["rows"]
        assert {row["user"] for row in rows} == {"alice", "bob"}
        rows = charlie_client.get(BASE + "usage/", {**RANGE, "group_by": "queue"}).json()["rows"]
        assert [row["queue"] for row in rows] == ["b-train"]

    def test_csv_export(self, operator_client, history):
        r = operator_client.get(BASE + "usage/", {**RANGE, "group_by": "queue_user", "bucket": "hour",
                                                  "format": "csv"})
        assert r.status_code == 200 and r["Content-Type"].startswith("text/csv")
        assert "attachment" in r["Content-Disposition"]
        rows = list(csv.DictReader(io.StringIO(r.content.decode())))
        assert set(rows[0]) == {"period", "queue", "user", "gpu_hours", "cpu_hours", "memory_gib_hours"}
        assert {(row["queue"], row["user"]) for row in rows} == {("a-train", "alice"), ("a-train", "bob"),
                                                                 ("b-train", "charlie")}
        assert sum(float(row["gpu_hours"]) for row in rows) == pytest.approx(7 * 180 / 3600)

    @pytest.mark.parametrize("params, field", [
        ({}, "start"),
        ({"start": "yesterday", "end": "2026-03-11T00:00:00Z"}, "start"),
        ({"start": "2026-03-11T00:00:00Z", "end": "2026-03-10T00:00:00Z"}, "end"),
        ({**RANGE, "group_by": "planet"}, "group_by"),
        ({**RANGE, "bucket": "fortnight"}, "bucket"),
        ({"start": "2000-01-01T00:00:00Z", "end": "2026-03-10T00:00:00Z"}, "end"),
        ({**RANGE, "queues": "\u0000"}, "queues"),  # issue #16: a DataError (500) on PostgreSQL
        ({**RANGE, "queues": "a-train,b\u0000"}, "queues"),
    ])
    def test_bad_queries_are_400_naming_the_field(self, operator_client, history, params, field):
        r = operator_client.get(BASE + "usage/", params)
        assert r.status_code == 400, r.content
        assert field in r.json()["extra"]

    def test_bad_query_in_csv_is_a_readable_400(self, operator_client, history):
        r = operator_client.get(BASE + "usage/", {"format": "csv"})
        assert r.status_code == 400 and r.content.decode().startswith("error: ")

    def test_constant_number_of_queries(self, operator_client, history):
        def count() -> int:
            with CaptureQueriesContext(connection) as ctx:
                assert operator_client.get(BASE + "usage/", {**RANGE, "bucket": "hour"}).status_code == 200
            return len(ctx.captured_queries)

        small = count()
        usage_account(now=T0 + minutes(90))  # 90 more intervals, many more rows
        assert count() == small <= 8

    def test_anonymous_is_refused(self, history):
        from rest_framework.test import APIClient

        assert APIClient().get(BASE + "usage/", RANGE).status_code in (401, 403)

    def test_series_and_normalized_usage(self, alice_client, operator_client, history):
        series = operator_client.get(BASE + "usage/series/", RANGE).json()["series"]
        assert series["b-train"]["allocated_gpu"][-1] == pytest.approx(4)
        assert set(alice_client.get(BASE + "usage/series/", RANGE).json()["series"]) == {"a-train"}
        nu = alice_client.get(BASE + "usage/normalized/").json()
        assert set(nu["usage"]) == {"a-train"} and nu["usage"]["a-train"]["gpu"] == pytest.approx(3 / 8)

    def test_parent_queues_carry_their_subtree_allocation_in_the_series(self, operator_client, history):
        """Usage is recorded on leaves; a parent's line is its subtree's sum, as its fair share
        and QueueStatus.allocated_gpu are (was 0 at every point for every parent)."""
        series = operator_client.get(BASE + "usage/series/", RANGE).json()["series"]
        assert series["team-a-dept"]["allocated_gpu"][-1] == pytest.approx(3)
        assert series["team-b-dept"]["allocated_gpu"][-1] == pytest.approx(4)
        assert series["root"]["allocated_gpu"][-1] == pytest.approx(7)
        # a filter naming a parent reads its subtree; the leaves stay out of the answer
        only = operator_client.get(BASE + "usage/series/", {**RANGE, "queues": "team-a-dept"}).json()["series"]
        assert set(only) == {"team-a-dept"} and only["team-a-dept"]["allocated_gpu"][-1] == pytest.approx(3)


class SshareApiTests:
    def test_json_default_and_text_formats(self, operator_client, history):
        doc = operator_client.get(BASE + "sshare/").json()
        names = {s["name"] for s in doc["shares"]["shares"]}
        assert {"root", "team-a-dept", "a-train", "alice", "bob", "b-train", "charlie"} <= names
        text = operator_client.get(BASE + "sshare/", {"format": "text", "long": "1"}).content.decode()
        assert text.splitlines()[0].split()[:3] == ["Account", "User", "RawShares"] and "LevelFS" in text
        assert operator_client.get(BASE + "sshare/", {"format": "sshare"}).content.decode() == \
            operator_client.get(BASE + "sshare/", {"format": "text"}).content.decode()
        p = operator_client.get(BASE + "sshare/", {"format": "parsable", "algorithm": "classic"}).content.decode()
        assert p.splitlines()[0] == "Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare|"
        p2 = operator_client.get(BASE + "sshare/", {"format": "parsable2", "users_only": "1", "kai": "1"})
        lines = p2.content.decode().splitlines()
        assert lines[0].endswith("GPUAllocated") and all(line.split("|")[1] for line in lines[1:])

    def test_a_tenant_sees_its_branch_only(self, alice_client, history):
        text = alice_client.get(BASE + "sshare/", {"format": "parsable2"}).content.decode()
        accounts = {line.split("|")[0] for line in text.splitlines()[1:]}
        assert accounts == {"root", "team-a-dept", "a-train"}
        assert "charlie" not in text

    def test_bad_parameters(self, operator_client, history):
        r = operator_client.get(BASE + "sshare/", {"algorithm": "lottery"})
        assert r.status_code == 400 and "algorithm" in r.json()["extra"]
        r = operator_client.get(BASE + "sshare/", {"columns": "Account,Nope"})
        assert r.status_code == 400 and "columns" in r.json()["extra"]
        r = operator_client.get(BASE + "sshare/", {"format": "parsable", "algorithm": "lottery"})
        assert r.status_code == 400 and r.content.decode().startswith("error: ")

    def test_an_unknown_format_is_a_400_naming_it(self, operator_client, history):
        """Issue #16: ``?format=bogus`` answered 404, as if the endpoint did not exist."""
        r = operator_client.get(BASE + "sshare/", {"format": "bogus"})
        assert r.status_code == 400, r.content
        assert "parsable2" in r.json()["extra"]["format"][0]
        r = operator_client.get(BASE + "usage/", {**RANGE, "format": "xlsx"})
        assert r.status_code == 400 and "csv" in r.json()["extra"]["format"][0]


class BudgetApiTests:
    def test_operator_creates_and_tenants_read(self, operator_client, alice_client, charlie_client, history):
        r = operator_client.post(BASE + "budgets/", {"queue": "a-train", "gpu_hours": 10, "period": "DAILY"},
                                 format="json")
        assert r.status_code == 201, r.content
        body = r.json()
        assert body["used_gpu_hours"] >= 0 and body["burn_down"][0]["remaining_gpu_hours"] == 10
        pk = body["id"]
        assert [b["id"] for b in alice_client.get(BASE + "budgets/").json()["results"]] == [pk]
        assert alice_client.get(BASE + f"budgets/{pk}/").status_code == 200
        assert charlie_client.get(BASE + f"budgets/{pk}/").status_code == 404
        assert charlie_client.get(BASE + "budgets/").json()["results"] == []
        assert alice_client.post(BASE + "budgets/", {"queue": "a-train", "gpu_hours": 1}, format="json"
                                 ).status_code == 403
        assert alice_client.patch(BASE + f"budgets/{pk}/", {"gpu_hours": 99}, format="json").status_code == 403
        assert alice_client.delete(BASE + f"budgets/{pk}/").status_code == 403
        r = operator_client.patch(BASE + f"budgets/{pk}/", {"policy": "block_over_quota"}, format="json")
        assert r.status_code == 200 and r.json()["policy"] == "block_over_quota"
        assert operator_client.delete(BASE + f"budgets/{pk}/").status_code == 204
        assert operator_client.get(BASE + f"budgets/{pk}/").status_code == 404
        assert operator_client.get(BASE + "budgets/99999999999999999999/").status_code == 404

    @pytest.mark.parametrize("body, field", [
        ({"queue": "nope", "gpu_hours": 1}, "queue"),
        ({"queue": "a-train", "gpu_hours": -1}, "gpu_hours"),
        ({"queue": "a-train", "gpu_hours": "NaN"}, "gpu_hours"),
        ({"queue": "a-train", "gpu_hours": 1e30}, "gpu_hours"),
        ({"queue": "a-train", "gpu_hours": 1, "policy": "pray"}, "policy"),
        ({"queue": "a-train", "gpu_hours": 1, "gpu_hourz": 2}, "gpu_hourz"),  # unknown fields are refused
        ({"queue": "a-tr\u0000ain", "gpu_hours": 1}, "queue"),
    ])
    def test_bad_budgets_are_400_naming_the_field(self, operator_client, history, body, field):
        r = operator_client.post(BASE + "budgets/", body, format="json")
        assert r.status_code == 400, r.content
        assert field in r.json()["extra"]

    def test_the_list_carries_each_budget_s_burn_down(self, operator_client, history, monkeypatch):
        monkeypatch.setattr("fairshare_app.selectors.db_now", lambda: T0)  # the history's clock
        GpuBudgetFactory(queue=history["team-a-dept"], period="DAILY", gpu_hours=10)
        [body] = operator_client.get(BASE + "budgets/").json()["results"]
        assert body["used_gpu_hours"] == pytest.approx(3 * 180 / 3600)
        assert body["burn_down"], "the list gave burn_down: [] while used_gpu_hours > 0"
        assert body["burn_down"][-1]["remaining_gpu_hours"] == pytest.approx(10 - 3 * 180 / 3600)
        assert body["burn_rate_gpu_per_hour"] == pytest.approx(3)  # a1 + a2 hold 3 GPUs now

    def test_budget_list_query_budget(self, operator_client, history):
        GpuBudgetFactory(queue=history["a-train"], period="DAILY")

        def count() -> int:
            with CaptureQueriesContext(connection) as ctx:
                assert operator_client.get(BASE + "budgets/").status_code == 200
            return len(ctx.captured_queries)

        small = count()
        for q in ("b-train", "team-a-dept", "team-b-dept", "root"):
            GpuBudgetFactory(queue=history[q], period="DAILY")
        assert count() == small <= 10


class SettingsApiTests:
    def test_members_read_operators_write(self, alice_client, operator_client, history):
        assert alice_client.get(BASE + "settings/").json()["k_value"] == 1.0
        assert alice_client.patch(BASE + "settings/", {"k_value": 2}, format="json").status_code == 403
        r = operator_client.patch(BASE + "settings/", {"k_value": 2, "half_life": "01:00:00"}, format="json")
        assert r.status_code == 200 and r.json()["k_value"] == 2 and r.json()["half_life_seconds"] == 3600
        assert r.json()["version"] == 2

    @pytest.mark.parametrize("body, field", [
        ({"k_value": -1}, "k_value"),
        ({"k_value": 1e6}, "k_value"),
        ({"interval_seconds": 0}, "interval_seconds"),
        ({"window_size": "00:00:00"}, "window_size"),
        ({"half_life": "-1 00:00:00"}, "half_life"),
        ({"window_type": "wobbly"}, "window_type"),
        ({"reset_period": "FORTNIGHTLY"}, "reset_period"),
        ({"raw_retention": "30 00:00:00", "hourly_retention": "1 00:00:00"}, "hourly_retention"),
        ({"billing_weight_gpu": -0.5}, "billing_weight_gpu"),
        ({"interval_seconds": 2**63}, "interval_seconds"),  # was an OverflowError (500)
        ({"interval_seconds": 10**30}, "interval_seconds"),
        ({"interval_seconds": 120, "intervall_seconds": 60}, "intervall_seconds"),  # was silently ignored
    ])
    def test_bad_settings_are_400_naming_the_field_and_write_nothing(self, operator_client, history, body, field):
        r = operator_client.patch(BASE + "settings/", body, format="json")
        assert r.status_code == 400, r.content
        assert field in r.json()["extra"]
        assert operator_client.get(BASE + "settings/").json()["version"] == 1

    def test_the_service_refuses_a_huge_interval_naming_it(self, history):
        from fairshare_app.services.settings import fairshare_settings_update
        from queues_app.errors import ApplicationError

        with pytest.raises(ApplicationError) as err:
            fairshare_settings_update(data={"interval_seconds": 2**63})
        assert "interval_seconds" in err.value.extra

    def test_a_budget_update_refuses_unknown_fields(self, operator_client, history):
        pk = operator_client.post(BASE + "budgets/", {"queue": "a-train", "gpu_hours": 5}, format="json").json()["id"]
        r = operator_client.patch(BASE + f"budgets/{pk}/", {"gpu_hours": 6, "hours": 7}, format="json")
        assert r.status_code == 400 and "hours" in r.json()["extra"]

    def test_nan_in_a_raw_body(self, operator_client, history):
        r = operator_client.generic("PATCH", BASE + "settings/", '{"k_value": NaN}', content_type="application/json")
        assert r.status_code == 400

    def test_accounting_state_is_for_operators(self, alice_client, operator_client, history):
        assert alice_client.get(BASE + "accounting/").status_code == 403
        body = operator_client.get(BASE + "accounting/").json()
        assert body["runs"] == 2 and body["clock_regressions"] == 0
        assert json.dumps(body)
