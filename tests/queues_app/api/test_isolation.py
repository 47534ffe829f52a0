"""Tenant isolation matrix (reliability.md T-S2 / T-S3).

Every operation of the served OpenAPI schema is called as alice (tenant team-a) with team-b's
objects: B's ids in the path, B's names in every filter of the query, and B's queue in the
relation field of bodies.  The operations come from the schema, so a new endpoint cannot
skip the matrix (and a route missing from the schema fails ``RouteInventoryTests``).

Pass: detail routes 404 (or 403 on operator endpoints), collections contain none of B's
rows, no response body contains any of B's names, and B's rows are byte-for-byte unchanged.
"""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from queues_app.models import Queue, QueueResource, QuotaChange, SchedulingCycle, SchedulingEvent, Task, Workload
from queues_app.services import queue_set_quota, workload_submit
from tests.queues_app.api.conftest import workload_body

B_WORKLOADS = ("bravo-secret-1", "bravo-secret-2", "bravo-secret-3")
B_NAMES = ("team-b", "b-train", "team-b-dept", "charlie", *B_WORKLOADS)


def _schema(client) -> dict:
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return json.loads(response.content)


def _b_state() -> str:
    """Everything of tenant B that a request could change, as one comparable string."""
    rows = {
        "workloads": list(Workload.objects.filter(tenant__name="team-b").order_by("pk").values()),
        "tasks": list(Task.objects.filter(workload__tenant__name="team-b").order_by("pk").values()),
        "queues": list(Queue.objects.filter(name__in=("b-train", "team-b-dept")).order_by("pk").values()),
        "resources": list(QueueResource.objects.filter(queue__name="b-train").order_by("pk").values()),
        "history": QuotaChange.objects.filter(queue_name="b-train").count(),
    }
    return json.dumps(rows, default=str, sort_keys=True)


@pytest.fixture
def world(tenants, queue_tree, nodes):
    """Team B with workloads, events and quota history; team A with one workload."""
    team_b = tenants["team_b"]
    b_train = queue_tree["b-train"]
    b_workloads = [
        workload_submit(queue=b_train, name=name, tenant=team_b, owner=tenants["charlie"],
                        task={"gpu": 1, "cpu_millis": 500, "memory_bytes": 2**20}, replicas=1)
        for name in B_WORKLOADS
    ]
    cycle = SchedulingCycle.objects.create(trigger="test", status="applied", generation=1,
                                           finished_at=timezone.now())
    for w in b_workloads:
        SchedulingEvent.objects.create(cycle=cycle, workload=w, reason="Unschedulable",
                                       message=f"job {w.name} of queue b-train: queue b-train is over its limit")
    queue_set_quota(queue=b_train, resource="gpu", limit=6, source="test")
    a_workload = workload_submit(queue=queue_tree["a-train"], name="alpha-1", tenant=tenants["team_a"],
                                 task={"gpu": 1}, replicas=1)
    SchedulingEvent.objects.create(cycle=cycle, workload=a_workload, reason="Unschedulable",
                                   message=f"job alpha-1 waits: job {B_WORKLOADS[0]} of queue b-train holds the GPUs",
                                   created_at=timezone.now() + timedelta(seconds=1))
    return {"b_workloads": b_workloads, "b_train": b_train, "a_workload": a_workload, "cycle": cycle}


def _is_operator_op(path: str, method: str) -> bool:
    if path.startswith(("/api/v1/nodes", "/api/v1/cycles")):
        return True
    if path.startswith("/api/v1/queues") and method != "get":
        return True
    return path.startswith("/api/v1/fairshare") and method != "get"


def _path_id(path: str, world, nodes) -> str:
    if path.startswith("/api/v1/workloads"):
        return str(world["b_workloads"][0].pk)
    if path.startswith("/api/v1/queues"):
        return str(world["b_train"].pk)
    if path.startswith("/api/v1/nodes"):
        return str(nodes[0].pk)
    return "1"


def _hostile_query(operation: dict) -> dict[str, str]:
    """Every documented query parameter set to one of B's names (or a B-shaped value)."""
    out = {}
    for p in operation.get("parameters", []):
        if p.get("in") != "query":
            continue
        name = p["name"]
        if name in ("page", "page_size"):
            continue
        if name == "ordering":
            out[name] = "name"
        elif name == "dry_run":
            out[name] = "1"
        elif p.get("schema", {}).get("type") in ("string", None) and "format" not in p.get("schema", {}):
            out[name] = "b-train" if name in ("queue", "parent", "ancestor", "name") else "team-b"
    return out


def _hostile_body(path: str) -> dict:
    if path.startswith("/api/v1/workloads"):
        return workload_body("stolen", queue="b-train")
    if path.startswith("/api/v1/auth/token"):
        return {"username": "charlie", "password": "wrong"}
    return {"name": "b-train", "parent": "team-b-dept", "queue": "b-train", "gpu": {"limit": 0}}


def _assert_no_b_names(content: bytes, where: str) -> None:
    text = content.decode(errors="replace")
    for name in B_NAMES:
        assert name not in text, f"{where}: response leaks {name!r}: {text[:300]}"


class IsolationMatrixTests:
    def test_every_operation_as_tenant_a_with_tenant_b_objects(self, alice_client, world, nodes):
        schema = _schema(alice_client)
        before = _b_state()
        b_ids = {w.pk for w in world["b_workloads"]}
        called = 0
        for path, item in schema["paths"].items():
            for method, operation in item.items():
                if method not in ("get", "post", "put", "patch", "delete"):
                    continue
                url = path.replace("{id}", _path_id(path, world, nodes))
                query = _hostile_query(operation)
                kwargs = {"format": "json"}
                if method in ("post", "put", "patch"):
                    kwargs["data"] = _hostile_body(path)
                send = getattr(alice_client, method)
                if query:
                    url = f"{url}?{'&'.join(f'{k}={v}' for k, v in query.items())}"
                response = send(url, **kwargs)
                called += 1
                where = f"{method.upper()} {url}"
                assert response.status_code < 500, where
                _assert_no_b_names(response.content, where)
                if path.startswith("/api/v1/fairshare"):
                    # fairshare_app's own endpoints (issue #6): a tenant reads its own or is refused.
                    assert response.status_code in (200, 400, 403, 404), where
                elif path.startswith("/api/v1/auth/token"):
                    assert response.status_code == 400, where
                elif _is_operator_op(path, method):
                    assert response.status_code == 403, where
                elif "{id}" in path:
                    assert response.status_code == 404, where
                elif method == "get":
                    assert response.status_code == 200, where
                    body = response.json()
                    results = body.get("results", []) if isinstance(body, dict) else body
                    assert not ({r.get("id") for r in results if isinstance(r, dict)} & b_ids
                                if path.startswith("/api/v1/workloads") else False), where
                else:
                    assert response.status_code in (400, 403, 404), where
        assert called >= 20  # the schema really was enumerated
        assert _b_state() == before

    def test_b_ids_in_filters_and_bodies(self, alice_client, world):
        b_wl = world["b_workloads"][0]
        before = _b_state()
        for url in (
            f"/api/v1/workloads/?queue=b-train&tenant=team-b&name={b_wl.name}",
            "/api/v1/workloads/?ancestor=team-b-dept",
            f"/api/v1/workloads/?name__icontains=bravo&ordering=-name",
            "/api/v1/queues/?name=b-train",
            "/api/v1/queues/?ancestor=team-b-dept",
            "/api/v1/queues/?parent=team-b-dept",
        ):
            response = alice_client.get(url)
            assert response.status_code == 200, url
            assert response.json()["count"] == 0, url
            _assert_no_b_names(response.content, url)
        for queue_ref in ("b-train", str(world["b_train"].pk), world["b_train"].pk, "B-TRAIN", " b-train"):
            for suffix in ("", "?dry_run=1"):
                response = alice_client.post(f"/api/v1/workloads/{suffix}",
                                             workload_body("stolen", queue=queue_ref), format="json")
                assert response.status_code == 400, queue_ref
                assert "queue" in response.json()["extra"]
                _assert_no_b_names(response.content, str(queue_ref))
        # Property-level: a tenant cannot set tenant / status / node / owner.
        response = alice_client.post("/api/v1/workloads/", {**workload_body("sneaky"), "tenant": "team-b",
                                                           "status": "Running"}, format="json")
        assert response.status_code == 400
        assert set(response.json()["extra"]) == {"status", "tenant"}
        response = alice_client.post("/api/v1/workloads/", workload_body(
            "sneaky", task={"gpu": 1, "node": "node-a", "state": "Running"}, replicas=1), format="json")
        assert response.status_code == 400
        assert set(response.json()["extra"]) == {"task.node", "task.state"}
        assert _b_state() == before
        assert not Workload.objects.filter(name__in=("stolen", "sneaky")).exists()

    def test_own_views_redact_b_names_in_engine_messages(self, alice_client, world):
        response = alice_client.get(f"/api/v1/workloads/{world['a_workload'].pk}/why/")
        assert response.status_code == 200
        body = response.json()
        assert body["events"][0]["message"].startswith("job alpha-1 waits: job (another tenant's)")
        _assert_no_b_names(response.content, "why of own workload")

    def test_operator_sees_b(self, operator_client, world):
        response = operator_client.get("/api/v1/workloads/?tenant=team-b")
        assert response.json()["count"] == 3
        response = operator_client.get(f"/api/v1/workloads/{world['b_workloads'][0].pk}/why/")
        assert "b-train" in response.json()["events"][0]["message"]

    def test_bob_sees_alices_workloads_charlie_does_not(self, alice_client, bob_client, charlie_client, world):
        wid = world["a_workload"].pk
        assert bob_client.get(f"/api/v1/workloads/{wid}/").status_code == 200
        assert charlie_client.get(f"/api/v1/workloads/{wid}/").status_code == 404
        assert charlie_client.post(f"/api/v1/workloads/{wid}/cancel/").status_code == 404
        assert Workload.objects.get(pk=wid).status == "Pending"


def _routes(resolver: URLResolver, prefix: str = "") -> list[str]:
    out = []
    for p in resolver.url_patterns:
        if isinstance(p, URLResolver):
            out.extend(_routes(p, prefix + str(p.pattern)))
        elif isinstance(p, URLPattern):
            out.append(prefix + str(p.pattern))
    return out


class RouteInventoryTests:
    """Every API route the resolver serves is documented in the schema (T-S13), so the matrix
    above, which walks the schema, covers it."""

    def test_every_api_route_is_in_the_schema(self, alice_client, db):
        documented = {p.strip("/") for p in _schema(alice_client)["paths"]}
        import re

        def normalise(route: str) -> str:
            route = route.replace("^", "").replace("$", "").replace("\\.(?P<format>[a-z0-9]+)/?", "")
            route = re.sub(r"\(\?P<pk>[^)]*\)", "{id}", route)
            route = re.sub(r"<[^>]+>", "{id}", route)
            return route.strip("/")

        api_routes = {normalise(r) for r in _routes(get_resolver())
                      if r.startswith("api/v1/") and "(?P<format>" not in r}
        missing = sorted(api_routes - documented)
        assert missing == []
        assert len(api_routes) >= 10


def test_redaction_keeps_prose_and_own_names(tenants, queue_tree):
    from queues_app.selectors import redact_message

    team_a = tenants["team_a"]
    msg = "preemption failed (victims: lower-priority preemptible job queue a-train below priority 50)"
    assert redact_message(tenant=team_a, message=msg) == msg
    assert redact_message(tenant=team_a, message="waiting for job bravo-x of queue b-train") == \
        "waiting for job (another tenant's) of queue (another tenant's)"
    assert redact_message(tenant=None, message="job bravo-x of queue b-train") == "job bravo-x of queue b-train"


class SharedQueueNameTests:
    """Issue #16: on a queue granted to two tenants, another tenant's workload name answered 400
    "Workload with this Queue and Name already exists." (dry run too): a tenant learned other
    tenants' names and could squat them. Names are unique per tenant (and queue) now."""

    @pytest.fixture
    def shared(self, tenants, queue_tree, nodes):
        from queues_app.services.tenants import tenant_grant_queue

        tenant_grant_queue(tenant=tenants["team_b"], queue=queue_tree["a-train"])
        return tenants

    def test_another_tenant_s_name_is_free_and_never_mentioned(self, shared, alice_client, charlie_client):
        body = workload_body("bravo-secret-1", queue="a-train", replicas=1)
        assert charlie_client.post("/api/v1/workloads/", body, format="json").status_code == 201
        dry = alice_client.post("/api/v1/workloads/?dry_run=1", body, format="json")
        assert dry.status_code == 200 and dry.json()["valid"] is True, dry.content
        mine = alice_client.post("/api/v1/workloads/", body, format="json")
        assert mine.status_code == 201, mine.content
        again = alice_client.post("/api/v1/workloads/", body, format="json")
        assert again.status_code == 400
        assert again.json()["extra"] == {"name": ["You already have a workload with this name in this queue."]}
        assert b"team-b" not in again.content and b"charlie" not in again.content
        # and charlie's own second one is refused for charlie, not because of alice
        assert charlie_client.post("/api/v1/workloads/", body, format="json").status_code == 400

    def test_both_same_named_workloads_are_scheduled(self, shared, alice_client, charlie_client):
        from queues_app.cycle.run import cycle_run

        body = workload_body("same", queue="a-train", replicas=1)
        ids = [c.post("/api/v1/workloads/", body, format="json").json()["id"] for c in (alice_client, charlie_client)]
        outcome = cycle_run(trigger="test")
        assert outcome.status == "applied", outcome
        assert set(Workload.objects.filter(pk__in=ids).values_list("status", flat=True)) <= {"Binding", "Running"}
        assert Task.objects.filter(workload_id__in=ids, node__isnull=False).count() == 2
