"""Operator endpoints: queues and quotas (validated like the admin, audited), nodes, cycle
triggers; tenants get 403 on every one of them (T-S3)."""
from __future__ import annotations

from unittest import mock

import pytest

from queues_app.models import Node, Queue, QueueStatus, QuotaChange

QUEUES = "/api/v1/queues/"


class QueueStatementTests:
    def test_tenant_sees_its_fairness_statement(self, alice_client, queue_tree, tenants):
        QueueStatus.objects.create(queue=queue_tree["a-train"], allocated_gpu=3, fair_share_gpu=4.5,
                                   pending_workloads=9)
        body = alice_client.get(QUEUES).json()
        assert [q["name"] for q in body["results"]] == ["a-train"]
        q = body["results"][0]
        assert q["resources"]["gpu"] == {"quota": 4.0, "limit": -1.0, "over_quota_weight": 1.0, "allocated": 3.0,
                                         "fair_share": 4.5, "decayed_usage": 0.0}
        assert q["pending_workloads"] == 0  # counted live, not the cycle's stale number
        assert q["parent"] == "team-a-dept" and q["status_updated_at"] is not None
        detail = alice_client.get(f"{QUEUES}{q['id']}/").json()
        assert detail == q

    def test_operator_sees_the_whole_tree_in_order(self, operator_client, queue_tree):
        names = [q["name"] for q in operator_client.get(QUEUES).json()["results"]]
        assert names == ["root", "team-a-dept", "a-train", "team-b-dept", "b-train"]
        leaves = operator_client.get(QUEUES + "?leaf=true").json()["results"]
        assert {q["name"] for q in leaves} == {"a-train", "b-train"}


class QueueWriteTests:
    def test_create_update_delete_with_audit(self, operator_client, queue_tree, operator):
        response = operator_client.post(QUEUES, {"name": "c-dept", "parent": "root", "priority": 90,
                                                 "quotas": {"gpu": {"quota": 2, "limit": 4}}}, format="json")
        assert response.status_code == 201, response.content
        qid = response.json()["id"]
        assert response.json()["resources"]["gpu"]["limit"] == 4.0
        response = operator_client.patch(f"{QUEUES}{qid}/", {"description": "new", "reclaim_min_runtime_seconds": 60},
                                         format="json")
        assert response.status_code == 200 and response.json()["description"] == "new"
        response = operator_client.patch(f"{QUEUES}{qid}/quotas/", {"gpu": {"quota": 3}, "cpu": {"limit": 16}},
                                         format="json")
        assert response.status_code == 200
        assert response.json()["resources"]["gpu"]["quota"] == 3.0
        assert response.json()["resources"]["cpu"]["limit"] == 16.0
        history = operator_client.get(f"{QUEUES}{qid}/history/").json()["results"]
        latest = {(h["resource"], h["field"]): h for h in history[:2]}
        assert latest[("gpu", "quota")]["old_value"] == 2.0 and latest[("gpu", "quota")]["new_value"] == 3.0
        assert latest[("gpu", "quota")]["changed_by"] == "operator" and latest[("gpu", "quota")]["source"] == "api"
        assert operator_client.delete(f"{QUEUES}{qid}/").status_code == 204
        assert not Queue.objects.filter(pk=qid).exists()
        assert QuotaChange.objects.filter(queue_name="c-dept", source="delete").exists()

    def test_children_quotas_over_the_parent_s_are_accepted_with_a_warning(self, operator_client, alice_client,
                                                                           queue_tree, tenants):
        """KAI accepts children whose quotas add up to more than their parent's; the answer
        says so (the edited queue's statement carries its parent's warning), tenants see none."""
        a_train = queue_tree["a-train"]
        r = operator_client.patch(f"{QUEUES}{a_train.pk}/quotas/", {"gpu": {"quota": 6}}, format="json")
        assert r.status_code == 200, r.content
        [warning] = r.json()["warnings"]
        assert "add up to 6 GPUs (a-train 6)" in warning and "team-a-dept's own quota of 4 GPUs" in warning
        parent = operator_client.get(f"{QUEUES}{queue_tree['team-a-dept'].pk}/").json()
        assert parent["warnings"] == [warning]
        assert operator_client.get(f"{QUEUES}{queue_tree['b-train'].pk}/").json()["warnings"] == []
        assert alice_client.get(f"{QUEUES}{a_train.pk}/").json()["warnings"] == []

    def test_tree_rules_are_field_errors(self, operator_client, queue_tree, tenants):
        root = queue_tree["root"]
        response = operator_client.patch(f"{QUEUES}{root.pk}/", {"parent": "a-train"}, format="json")
        assert response.status_code == 400 and "parent" in response.json()["extra"]
        response = operator_client.post(QUEUES, {"name": "under-leaf", "parent": "a-train"}, format="json")
        assert response.status_code == 400 and "parent" in response.json()["extra"]
        response = operator_client.post(QUEUES, {"name": "x", "parent": "missing"}, format="json")
        assert response.status_code == 400 and "parent" in response.json()["extra"]
        response = operator_client.delete(f"{QUEUES}{root.pk}/")
        assert response.status_code == 400 and "children" in response.json()["extra"]
        response = operator_client.post(QUEUES, {"name": "root"}, format="json")
        assert response.status_code == 400 and "name" in response.json()["extra"]

    def test_tenant_can_read_history_of_own_queue_only(self, alice_client, queue_tree):
        assert alice_client.get(f"{QUEUES}{queue_tree['a-train'].pk}/history/").status_code == 200
        assert alice_client.get(f"{QUEUES}{queue_tree['root'].pk}/history/").status_code == 404


class NodeTests:
    def test_upsert_patch_cordon_delete(self, operator_client, db):
        response = operator_client.post("/api/v1/nodes/", {"name": "gpu-1", "gpus": 8, "cpu_millis": 64000,
                                                           "labels": {"rack": "r1"}}, format="json")
        assert response.status_code == 201, response.content
        nid = response.json()["id"]
        response = operator_client.post("/api/v1/nodes/", {"name": "gpu-1", "gpus": 4}, format="json")
        assert response.status_code == 200 and response.json()["gpus"] == 4
        response = operator_client.patch(f"/api/v1/nodes/{nid}/", {"reserved_gpus": 0.5}, format="json")
        assert response.status_code == 200 and response.json()["reserved_gpus"] == 0.5
        assert operator_client.post(f"/api/v1/nodes/{nid}/cordon/").json()["unschedulable"] is True
        assert operator_client.post(f"/api/v1/nodes/{nid}/uncordon/").json()["unschedulable"] is False
        listed = operator_client.get("/api/v1/nodes/?label=rack=r1").json()
        assert listed["count"] == 1 and listed["results"][0]["allocated_gpus"] == 0.0
        assert operator_client.delete(f"/api/v1/nodes/{nid}/").status_code == 204
        assert not Node.objects.exists()

    def test_shrinking_below_bound_tasks_is_400(self, operator_client, tenants, queue_tree, nodes):
        from queues_app.services import workload_import

        workload_import(queue=queue_tree["a-train"], name="r", tenant=tenants["team_a"],
                        tasks=[{"gpu": 6, "state": "Running", "node": "node-a"}])
        response = operator_client.patch(f"/api/v1/nodes/{nodes[0].pk}/", {"gpus": 2}, format="json")
        assert response.status_code == 400 and "gpus" in response.json()["extra"]


class CycleTriggerTests:
    def test_trigger_enqueues_after_commit(self, operator_client, django_capture_on_commit_callbacks, db):
        with mock.patch("celery.current_app.send_task") as send, \
                django_capture_on_commit_callbacks(execute=True):
            response = operator_client.post("/api/v1/cycles/trigger/")
        assert response.status_code == 202 and response.json()["queued"] is True
        send.assert_called_once()
        assert send.call_args.args[0] == response.json()["task"]
        assert operator_client.get("/api/v1/cycles/").status_code == 200


OPERATOR_CALLS = [
    ("post", QUEUES, {"name": "evil"}),
    ("patch", QUEUES + "{a_train}/", {"priority": 1}),
    ("delete", QUEUES + "{a_train}/", None),
    ("patch", QUEUES + "{a_train}/quotas/", {"gpu": {"quota": 100}}),
    ("get", "/api/v1/nodes/", None),
    ("post", "/api/v1/nodes/", {"name": "evil"}),
    ("get", "/api/v1/nodes/{node}/", None),
    ("patch", "/api/v1/nodes/{node}/", {"gpus": 0}),
    ("delete", "/api/v1/nodes/{node}/", None),
    ("post", "/api/v1/nodes/{node}/cordon/", None),
    ("post", "/api/v1/nodes/{node}/uncordon/", None),
    ("get", "/api/v1/cycles/", None),
    ("post", "/api/v1/cycles/trigger/", None),
]


@pytest.mark.parametrize(("method", "url", "body"), OPERATOR_CALLS)
def test_tenants_get_403_on_operator_endpoints(alice_client, queue_tree, nodes, method, url, body):
    """Even on their own queue (a-train is granted to team-a): writes are operator business."""
    url = url.format(a_train=queue_tree["a-train"].pk, node=nodes[0].pk)
    before = (list(Queue.objects.values()), list(Node.objects.values()), QuotaChange.objects.count())
    with mock.patch("celery.current_app.send_task") as send:
        response = getattr(alice_client, method)(url, body, format="json")
    assert response.status_code == 403, (url, response.content)
    assert response.json()["message"] == "This endpoint is for operators only."
    send.assert_not_called()
    assert (list(Queue.objects.values()), list(Node.objects.values()), QuotaChange.objects.count()) == before


def test_trigger_names_the_real_cycle_task():
    from queues_app.services.system import CYCLE_TASK_NAME
    from queues_app.tasks import CYCLE_TASK

    assert CYCLE_TASK_NAME == CYCLE_TASK


def test_statement_shows_decayed_usage_from_fairshare(alice_client, queue_tree, tenants):
    from fairshare_app.models import NormalizedUsage

    from django.utils import timezone

    NormalizedUsage.objects.create(queue=queue_tree["a-train"], gpu=0.25, cpu=0.0, memory=0.0, computed_at=timezone.now())
    q = alice_client.get(QUEUES).json()["results"][0]
    assert q["usage_source"] == "fairshare_app.normalized_usage"
    assert q["resources"]["gpu"]["decayed_usage"] == 0.25


def test_cycle_records_with_engine_phase_durations_are_listed(operator_client, tenants, queue_tree, nodes):
    """Issue 16 (3): ``phase_durations`` holds a nested ``engine`` dict; the list answered 500
    (``float() argument must be ... not 'dict'``) on every database that had run a cycle."""
    from queues_app.services import workload_submit
    from queues_app.cycle.run import cycle_run

    workload_submit(queue=queue_tree["a-train"], name="w", tenant=tenants["team_a"], replicas=1, task={"gpu": 1})
    assert cycle_run(trigger="test").status == "applied"
    response = operator_client.get("/api/v1/cycles/")
    assert response.status_code == 200, response.content[:300]
    [cycle] = response.json()["results"]
    assert cycle["status"] == "applied" and cycle["bound_count"] == 1 and cycle["quarantined_count"] == 0
    phases = cycle["phase_durations"]
    assert isinstance(phases["apply"], float) and isinstance(phases["engine"]["allocate"], float)
