"""Workload endpoints: submit, list (filters, ordering, pagination, query budget), detail,
cancel, Idempotency-Key, ?dry_run=1 and "why pending / why evicted"."""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from queues_app.models import IdempotencyKey, SchedulingCycle, SchedulingEvent, Task, Workload
from queues_app.services import workload_import, workload_submit
from tests.queues_app.api.conftest import workload_body

URL = "/api/v1/workloads/"


class WorkloadSubmitTests:
    def test_it_submits_with_replicas(self, alice_client, nodes, tenants):
        response = alice_client.post(URL, workload_body(priority_class="build"), format="json")
        assert response.status_code == 201, response.content
        body = response.json()
        assert body["tenant"] == "team-a" and body["owner"] == "alice" and body["status"] == "Pending"
        assert body["priority"] == 100 and body["preemptible"] is False and body["min_available"] == 2
        assert [t["state"] for t in body["tasks"]] == ["Pending", "Pending"]
        assert Workload.objects.get(pk=body["id"]).tenant == tenants["team_a"]

    def test_it_submits_explicit_tasks_with_topology(self, alice_client, nodes):
        body = {"name": "gang", "queue": "a-train", "priority": 125, "preemptible": False, "min_available": 1,
                "topology_required": "kai.scheduler/rack", "node_selector": {"pool": "a"},
                "preemption_delay_seconds": 30,
                "tasks": [{"name": "lead", "gpu": 0.5, "cpu_millis": 250, "memory_bytes": 1024, "priority": 2},
                          {"gpu": 2}]}
        response = alice_client.post(URL, body, format="json")
        assert response.status_code == 201, response.content
        wl = Workload.objects.get(pk=response.json()["id"])
        assert wl.preemption_delay == timedelta(seconds=30) and wl.node_selector == {"pool": "a"}
        assert [(t.name, str(t.gpu)) for t in wl.tasks.order_by("index")] == [("lead", "0.5000"), ("gang-1", "2.0000")]

    def test_duplicate_name_is_a_field_error(self, alice_client, nodes):
        assert alice_client.post(URL, workload_body(), format="json").status_code == 201
        response = alice_client.post(URL, workload_body(), format="json")
        assert response.status_code == 400
        assert response.json()["extra"]


class WorkloadListTests:
    def _make(self, tenants, queue_tree, n: int, prefix: str = "job"):
        for i in range(n):
            workload_submit(queue=queue_tree["a-train"], name=f"{prefix}-{i:03d}", tenant=tenants["team_a"],
                            owner=tenants["alice"], task={"gpu": 1}, replicas=2, priority=50 + i % 3)

    def test_filters_ordering_pagination(self, alice_client, tenants, queue_tree):
        self._make(tenants, queue_tree, 7)
        body = alice_client.get(URL + "?page_size=3&ordering=name").json()
        assert body["count"] == 7 and [r["name"] for r in body["results"]] == ["job-000", "job-001", "job-002"]
        assert body["next"]
        body = alice_client.get(URL + "?priority__gte=52&ordering=-name").json()
        assert [r["name"] for r in body["results"]] == ["job-005", "job-002"]
        body = alice_client.get(URL + "?status=Pending&status=Running&queue=a-train&ancestor=root").json()
        assert body["count"] == 7
        assert alice_client.get(URL + "?status=Cancelled").json()["count"] == 0

    @pytest.mark.parametrize("path", [URL, "/api/v1/queues/"])
    def test_list_query_count_is_constant(self, alice_client, tenants, queue_tree, django_assert_num_queries, path):
        self._make(tenants, queue_tree, 2)
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as few:
            assert alice_client.get(path).status_code == 200
        self._make(tenants, queue_tree, 30, prefix="more")
        with CaptureQueriesContext(connection) as many:
            assert alice_client.get(path).status_code == 200
        assert len(many) == len(few)
        assert len(few) <= 8, [q["sql"] for q in few.captured_queries]

    def test_operator_list_budget(self, operator_client, tenants, queue_tree, django_assert_max_num_queries):
        self._make(tenants, queue_tree, 40)
        with django_assert_max_num_queries(6):
            body = operator_client.get(URL + "?page_size=100").json()
        assert body["count"] == 40


class WorkloadCancelTests:
    def test_cancel_pending_and_running(self, alice_client, tenants, queue_tree, nodes):
        pending = workload_submit(queue=queue_tree["a-train"], name="p", tenant=tenants["team_a"], task={"gpu": 1})
        running = workload_import(queue=queue_tree["a-train"], name="r", tenant=tenants["team_a"],
                                  tasks=[{"gpu": 1, "state": "Running", "node": "node-a"}],
                                  started_at=timezone.now())
        body = alice_client.post(f"{URL}{pending.pk}/cancel/").json()
        assert body["status"] == "Cancelled" and body["tasks"][0]["state"] == "Failed"
        body = alice_client.post(f"{URL}{running.pk}/cancel/").json()
        assert body["status"] == "Cancelled"
        assert body["tasks"][0]["state"] == "Releasing" and body["tasks"][0]["node"] == "node-a"
        # Idempotent: cancelling again is fine.
        assert alice_client.post(f"{URL}{pending.pk}/cancel/").status_code == 200

    def test_cancel_finished_is_400(self, alice_client, tenants, queue_tree, nodes):
        done = workload_import(queue=queue_tree["a-train"], name="d", tenant=tenants["team_a"],
                               tasks=[{"gpu": 1, "state": "Succeeded"}])
        response = alice_client.post(f"{URL}{done.pk}/cancel/")
        assert response.status_code == 400 and "status" in response.json()["extra"]


class IdempotencyTests:
    def test_retry_returns_the_first_result(self, alice_client, nodes):
        first = alice_client.post(URL, workload_body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
        again = alice_client.post(URL, workload_body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
        assert first.status_code == again.status_code == 201
        assert first.json()["id"] == again.json()["id"]
        assert again["Idempotent-Replayed"] == "true"
        assert Workload.objects.count() == 1

    def test_same_key_other_body_is_422(self, alice_client, nodes):
        alice_client.post(URL, workload_body(), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
        response = alice_client.post(URL, workload_body("other"), format="json", HTTP_IDEMPOTENCY_KEY="k-1")
        assert response.status_code == 422
        assert "Idempotency-Key" in response.json()["extra"]
        assert Workload.objects.count() == 1

    def test_keys_are_per_tenant(self, alice_client, bob_client, charlie_client, nodes):
        a = alice_client.post(URL, workload_body(), format="json", HTTP_IDEMPOTENCY_KEY="shared")
        b = bob_client.post(URL, workload_body(), format="json", HTTP_IDEMPOTENCY_KEY="shared")
        assert a.json()["id"] == b.json()["id"]  # same tenant: same key space
        c = charlie_client.post(URL, workload_body(queue="b-train"), format="json", HTTP_IDEMPOTENCY_KEY="shared")
        assert c.status_code == 201 and c.json()["id"] != a.json()["id"]
        assert "train-1" not in str(c.json()["queue"])

    def test_failed_submit_does_not_burn_the_key(self, alice_client, nodes):
        bad = alice_client.post(URL, workload_body(task={"gpu": 10**6}, replicas=1), format="json",
                                HTTP_IDEMPOTENCY_KEY="k-2")
        assert bad.status_code == 400
        assert not IdempotencyKey.objects.exists()
        ok = alice_client.post(URL, workload_body(task={"gpu": 1}, replicas=1), format="json",
                               HTTP_IDEMPOTENCY_KEY="k-2")
        assert ok.status_code == 201

    def test_bad_key_is_400(self, alice_client, nodes):
        response = alice_client.post(URL, workload_body(), format="json", HTTP_IDEMPOTENCY_KEY="x" * 300)
        assert response.status_code == 400 and "Idempotency-Key" in response.json()["extra"]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent transactions need PostgreSQL")
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_create_one_workload(queue_tree, user_factory, nodes):
    """T-R22: the same Idempotency-Key sent by 6 threads at once creates exactly one workload."""
    from rest_framework.test import APIClient

    from queues_app.services import tenant_create
    from queues_app.services.tenants import api_token_issue

    user = user_factory("racer")
    tenant_create(name="racers", members=[user], queues=[queue_tree["a-train"]])
    token = api_token_issue(user=user)
    barrier = threading.Barrier(6)
    results: list[tuple[int, int]] = []

    def post():
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        barrier.wait()
        r = client.post(URL, workload_body(), format="json", HTTP_IDEMPOTENCY_KEY="race")
        results.append((r.status_code, r.json().get("id")))
        connection.close()

    threads = [threading.Thread(target=post) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [s for s, _ in results] == [201] * 6
    assert len({i for _, i in results}) == 1
    assert Workload.objects.count() == 1


class DryRunTests:
    def test_it_places_without_storing(self, alice_client, nodes):
        before = (Workload.objects.count(), Task.objects.count(), IdempotencyKey.objects.count())
        response = alice_client.post(URL + "?dry_run=1", workload_body(), format="json",
                                     HTTP_IDEMPOTENCY_KEY="dry")
        assert response.status_code == 200, response.content
        body = response.json()
        assert body["dry_run"] is True and body["could_run_now"] is True and body["status"] == "Binding"
        assert {t["node"] for t in body["tasks"]} <= {"node-a", "node-b"}
        assert (Workload.objects.count(), Task.objects.count(), IdempotencyKey.objects.count()) == before

    def test_it_says_what_blocks(self, alice_client, nodes, operator_client, queue_tree):
        operator_client.patch(f"/api/v1/queues/{queue_tree['a-train'].pk}/quotas/", {"gpu": {"limit": 2}},
                              format="json")
        response = alice_client.post(URL + "?dry_run=1", workload_body(replicas=3), format="json")
        body = response.json()
        assert response.status_code == 200 and body["could_run_now"] is False and body["status"] == "Pending"
        assert body["blocked_by"] and body["blocked_by"][0]["reason"] == "Unschedulable"
        assert "limit" in body["blocked_by"][0]["message"]
        assert body["waiting_for"] == "limit"
        assert Workload.objects.count() == 0

    def test_it_says_when_more_nodes_would_help(self, alice_client, nodes):
        body = alice_client.post(URL + "?dry_run=1", workload_body(replicas=3, task={"gpu": 8}), format="json").json()
        assert body["status"] == "Pending" and body["waiting_for"] == "capacity"
        assert alice_client.post(URL + "?dry_run=1", workload_body(), format="json").json()["waiting_for"] is None

    def test_invalid_dry_run_is_400_like_a_submit(self, alice_client, nodes):
        response = alice_client.post(URL + "?dry_run=1", workload_body(task={"gpu": -1}), format="json")
        assert response.status_code == 400 and "task.gpu" in response.json()["extra"]
        response = alice_client.post(URL + "?dry_run=maybe", workload_body(), format="json")
        assert response.status_code == 400 and "dry_run" in response.json()["extra"]


class WhyTests:
    def test_why_pending_reason_and_position(self, alice_client, tenants, queue_tree, nodes):
        now = timezone.now()
        older = workload_submit(queue=queue_tree["a-train"], name="older", tenant=tenants["team_a"],
                                task={"gpu": 4}, replicas=2)
        urgent = workload_submit(queue=queue_tree["a-train"], name="urgent", tenant=tenants["team_a"],
                                 task={"gpu": 1}, priority=125)
        cycle = SchedulingCycle.objects.create(status="applied", generation=7, trigger="beat", finished_at=now)
        SchedulingEvent.objects.create(cycle=cycle, workload=older, reason="Unschedulable",
                                       message="queue a-train is over its limit for gpu: 4 used + 8 requested > 6")
        body = alice_client.get(f"{URL}{older.pk}/why/").json()
        assert body["status"] == "Pending" and body["position_in_queue"] == 2 and body["pending_in_queue"] == 2
        assert body["summary"] == "queue a-train is over its limit for gpu: 4 used + 8 requested > 6"
        assert body["events"][0]["cycle"] == cycle.pk and body["estimated_start"] is None
        assert body["last_cycle_at"] is not None
        assert alice_client.get(f"{URL}{urgent.pk}/why/").json()["position_in_queue"] == 1

    def test_why_says_capacity_versus_quota_from_real_cycles(self, alice_client, operator_client, tenants,
                                                              queue_tree, nodes):
        """The category comes from the engine's result through the cycle's events, never from text."""
        from queues_app.cycle.run import cycle_run

        big = workload_submit(queue=queue_tree["a-train"], name="big", tenant=tenants["team_a"], task={"gpu": 8},
                              replicas=3)  # 24 GPUs on a 16-GPU cluster: capacity
        np_ = workload_submit(queue=queue_tree["a-train"], name="np", tenant=tenants["team_a"], task={"gpu": 5},
                              priority=150)  # non-preemptible, over a-train's deserved 4: quota
        small = workload_submit(queue=queue_tree["a-train"], name="small", tenant=tenants["team_a"], task={"gpu": 1})
        assert cycle_run(trigger="test").status == "applied"
        body = alice_client.get(f"{URL}{big.pk}/why/").json()
        assert body["waiting_for"] == "capacity" and "More nodes" in body["waiting_for_note"]
        body = alice_client.get(f"{URL}{np_.pk}/why/").json()
        assert body["waiting_for"] == "quota" and "would not help" in body["waiting_for_note"]
        assert alice_client.get(f"{URL}{small.pk}/why/").json()["waiting_for"] is None  # bound: not pending
        operator_client.patch(f"/api/v1/queues/{queue_tree['a-train'].pk}/quotas/", {"gpu": {"limit": 2}},
                              format="json")
        assert cycle_run(trigger="test").status == "applied"
        assert alice_client.get(f"{URL}{big.pk}/why/").json()["waiting_for"] == "limit"

    def test_why_summary_is_the_allocation_verdict_of_the_latest_cycle(self, alice_client, tenants, queue_tree,
                                                                        nodes):
        """The engine writes Unschedulable, then NotReclaiming, then NotPreempting for a job it
        could not place; the summary explains the wait (the first), not the last attempt."""
        wl = workload_submit(queue=queue_tree["a-train"], name="big", tenant=tenants["team_a"], task={"gpu": 4},
                             replicas=2)
        old = SchedulingCycle.objects.create(status="applied", generation=1, finished_at=timezone.now())
        new = SchedulingCycle.objects.create(status="applied", generation=2, finished_at=timezone.now())
        SchedulingEvent.objects.create(cycle=old, workload=wl, reason="Unschedulable", message="stale reason")
        for reason, message in (("Unschedulable", "no node has 4 free GPUs"), ("NotReclaiming", "at fair share"),
                                ("NotPreempting", "no eligible victims")):
            SchedulingEvent.objects.create(cycle=new, workload=wl, reason=reason, message=message)
        body = alice_client.get(f"{URL}{wl.pk}/why/").json()
        assert body["summary"] == "no node has 4 free GPUs"
        assert [e["reason"] for e in body["events"]][:3] == ["NotPreempting", "NotReclaiming", "Unschedulable"]

    def test_why_evicted(self, alice_client, tenants, queue_tree, nodes):
        wl = workload_import(queue=queue_tree["a-train"], name="victim", tenant=tenants["team_a"],
                             tasks=[{"gpu": 1, "state": "Pending"}])
        task = wl.tasks.get()
        SchedulingEvent.objects.create(workload=wl, task=task, reason="Reclaimed",
                                       message="task victim-0 (1 GPU) on node node-a evicted to make room for job "
                                               "big of queue b-train")
        body = alice_client.get(f"{URL}{wl.pk}/why/").json()
        assert body["last_eviction"]["reason"] == "Reclaimed"
        assert body["last_eviction"]["task"] == "victim-0"
        assert "b-train" not in body["last_eviction"]["message"]
        assert "job (another tenant's) of queue (another tenant's)" in body["last_eviction"]["message"]

    def test_why_running(self, alice_client, tenants, queue_tree, nodes):
        started = timezone.now() - timedelta(minutes=5)
        wl = workload_import(queue=queue_tree["a-train"], name="run", tenant=tenants["team_a"],
                             tasks=[{"gpu": 1, "state": "Running", "node": "node-a"}], started_at=started)
        body = alice_client.get(f"{URL}{wl.pk}/why/").json()
        assert body["status"] == "Running" and body["position_in_queue"] is None
        assert body["estimated_start"] is not None and body["summary"].startswith("Running since")
