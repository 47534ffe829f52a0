"""What-if preview of a queue edit: the admin page and the operator API endpoint."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from queues_app.cycle import whatif
from queues_app.cycle.scenario import import_scenario
from queues_app.models import Queue, QueueResource, QuotaChange, Task

pytestmark = pytest.mark.django_db

UNL = {"quota": -1, "overQuotaWeight": 1, "limit": -1}


def scenario() -> dict:
    """One 8-GPU node fully used by queue wa (quota 8); wb (quota 0) has one pending 1-GPU job."""
    return {
        "name": "what-if",
        "config": {"now": "2026-01-01T00:00:00Z"},
        "nodes": [{"name": "w-node", "gpus": 8, "cpu": "64", "memory": "512Gi"}],
        "queues": [
            {"name": "wa", "resources": {"gpu": {"quota": 8, "overQuotaWeight": 1, "limit": -1},
                                         "cpu": dict(UNL), "memory": dict(UNL)}},
            {"name": "wb", "resources": {"gpu": {"quota": 0, "overQuotaWeight": 1, "limit": -1},
                                         "cpu": dict(UNL), "memory": dict(UNL)}},
        ],
        "jobs": [{"name": f"wa-run-{i}", "queue": "wa", "startedMinutesAgo": 30,
                  "tasks": [{"gpu": 1, "state": "Running", "node": "w-node"}]} for i in range(8)]
        + [{"name": "wb-wait", "queue": "wb", "tasks": [{"gpu": 1}]}],
    }


@pytest.fixture
def cluster():
    import_scenario(scenario())
    return {q.name: q for q in Queue.objects.filter(name__in=["wa", "wb"])}


def _gpu(answer, queue, key):
    return answer["queues"][queue][key]["gpu"]


def test_lowering_a_quota_shows_new_fair_shares_and_the_reclaim(cluster):
    wa = cluster["wa"]
    before_rows = list(QueueResource.objects.values_list("queue_id", "resource", "quota"))
    answer = whatif.preview_queue_edit(queue_id=wa.pk, resources={"gpu": {"quota": Decimal(4)}})
    assert answer["queue"] == "wa"
    assert _gpu(answer, "wa", "fairShareBefore") == 8 and _gpu(answer, "wb", "fairShareBefore") == 0
    assert _gpu(answer, "wb", "fairShareAfter") == 1 and _gpu(answer, "wa", "fairShareAfter") == 7
    assert answer["evictionsWithoutEdit"] == []
    assert len(answer["evictions"]) == 1
    ev = answer["evictions"][0]
    assert ev["reason"] == "Reclaimed" and ev["job"].startswith("wa-run-") and ev["victimOf"] == "wb-wait"
    assert answer["newEvictions"] == answer["evictions"]
    assert answer["placements"] == {"wb-wait-0": {"status": "Pipelined", "node": "w-node"}}
    # nothing stored: quotas, audit trail and task states unchanged
    assert list(QueueResource.objects.values_list("queue_id", "resource", "quota")) == before_rows
    assert not QuotaChange.objects.filter(queue=wa, source="whatif").exists()
    assert set(Task.objects.filter(workload__queue=wa).values_list("state", flat=True)) == {"Running"}


def test_an_edit_that_changes_nothing_previews_no_eviction(cluster):
    answer = whatif.preview_queue_edit(queue_id=cluster["wb"].pk, priority=50)
    assert answer["evictions"] == [] and answer["newEvictions"] == []
    assert _gpu(answer, "wb", "fairShareAfter") == _gpu(answer, "wb", "fairShareBefore") == 0


def test_bad_values_name_the_field(cluster):
    from queues_app.errors import ApplicationError

    with pytest.raises(ApplicationError) as exc:
        whatif.preview_queue_edit(queue_id=cluster["wa"].pk, resources={"gpu": {"quota": -5}})
    assert "gpu.quota" in exc.value.extra
    with pytest.raises(ApplicationError) as exc:
        whatif.preview_queue_edit(queue_id=cluster["wa"].pk, resources={"gpu": {"bogus": 1}})
    assert "gpu.bogus" in exc.value.extra
    with pytest.raises(ApplicationError) as exc:
        whatif.preview_queue_edit(queue_id=10**9)
    assert "queue" in exc.value.extra


# ---------------------------------------------------------------------------------------- admin


def test_admin_change_form_links_to_the_preview(client, operator, cluster):
    client.force_login(operator)
    wa = cluster["wa"]
    page = client.get(reverse("admin:queues_app_queue_change", args=[wa.pk]))
    url = reverse("admin:queues_app_queue_whatif", args=[wa.pk])
    assert page.status_code == 200 and url in page.content.decode()
    form = client.get(url)
    assert form.status_code == 200
    html = form.content.decode()
    assert 'name="gpu_quota"' in html and 'value="8' in html and 'name="priority"' in html


def _post_values(**over):
    data = {"priority": 100}
    for res in ("gpu", "cpu", "memory"):
        data[f"{res}_quota"] = -1
        data[f"{res}_over_quota_weight"] = 1
        data[f"{res}_limit"] = -1
    data.update(over)
    return data


def test_admin_preview_shows_fair_share_change_and_eviction(client, operator, cluster):
    client.force_login(operator)
    wa = cluster["wa"]
    resp = client.post(reverse("admin:queues_app_queue_whatif", args=[wa.pk]), _post_values(gpu_quota=4))
    assert resp.status_code == 200
    html = resp.content.decode()
    assert 'id="whatif-queues"' in html and "8 &rarr; <strong>7</strong>" in html
    assert 'id="whatif-evictions"' in html and "Reclaimed" in html and "wb-wait" in html
    assert QueueResource.objects.get(queue=wa, resource="gpu").quota == 8  # not saved


def test_admin_preview_rejects_bad_values_without_running(client, operator, cluster):
    client.force_login(operator)
    resp = client.post(reverse("admin:queues_app_queue_whatif", args=[cluster["wa"].pk]), _post_values(gpu_quota=-7))
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "Must be &gt;= 0, or -1" in html and 'id="whatif-queues"' not in html


def test_admin_preview_needs_staff(client, user_factory, cluster):
    client.force_login(user_factory("plain"))
    resp = client.get(reverse("admin:queues_app_queue_whatif", args=[cluster["wa"].pk]))
    assert resp.status_code == 302  # to the admin login
    client.force_login(user_factory("staff-no-perm", is_staff=True))
    assert client.get(reverse("admin:queues_app_queue_whatif", args=[cluster["wa"].pk])).status_code == 403


def test_admin_preview_unknown_queue_is_404(client, operator, cluster):
    client.force_login(operator)
    assert client.get(reverse("admin:queues_app_queue_whatif", args=[10**9])).status_code == 404


# ---------------------------------------------------------------------------------------- API


def _client(user) -> APIClient:
    from queues_app.services.tenants import api_token_issue

    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=user)}")
    return c


def _url(pk) -> str:
    return reverse("queues-api:queue-whatif", args=[pk])


def test_api_operator_preview(operator, cluster):
    resp = _client(operator).post(_url(cluster["wa"].pk), {"quotas": {"gpu": {"quota": 4}}}, format="json")
    assert resp.status_code == 200, resp.content
    body = resp.json()
    assert body["queues"]["wb"]["fairShareAfter"]["gpu"] == 1
    assert [e["reason"] for e in body["newEvictions"]] == ["Reclaimed"]


def test_api_validation_and_permissions(operator, tenants, cluster):
    op = _client(operator)
    bad = op.post(_url(cluster["wa"].pk), {"quotas": {"gpu": {"quota": -5}}}, format="json")
    assert bad.status_code == 400 and "quota" in bad.content.decode()
    unknown = op.post(_url(cluster["wa"].pk), {"quotas": {"gpu": {"quota": 1}}, "bogus": 1}, format="json")
    assert unknown.status_code == 400 and "bogus" in unknown.content.decode()
    assert op.post(_url(10**9), {}, format="json").status_code == 404
    assert op.post(_url("x"), {}, format="json").status_code == 404
    member = _client(tenants["alice"]).post(_url(cluster["wa"].pk), {}, format="json")
    assert member.status_code == 403
    assert APIClient().post(_url(cluster["wa"].pk), {}, format="json").status_code in (401, 403)
