"""Scale-up preview: "what would N more nodes of this shape do in the next cycle?" -- the engine
function, the operator API and the admin page, and the check that matters: on a generated cluster
the preview equals what a real cycle decides after the nodes are actually added."""
from __future__ import annotations

import json
import zlib

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from queues_app.cycle import whatif
from queues_app.cycle.scenario import import_scenario
from queues_app.choices import CycleStatus, TaskState
from queues_app.models import Node, QueueStatus, SchedulingCycle, SchedulingEvent, Task, Workload
from queues_app.selectors import EVICTION_REASONS
from queues_app.cycle.run import cycle_run
from queues_app.services.nodes import node_upsert
from scheduler_engine.bench import generate
from scheduler_engine.loader import ScenarioError
from scheduler_engine.simulate import apply_edits

pytestmark = pytest.mark.django_db

UNL = {"quota": -1, "overQuotaWeight": 1, "limit": -1}


def small() -> dict:
    """One full 4-GPU node (queue wa); wb waits with a 2-GPU and a 4-GPU job; wc is at its limit."""
    def q(name, quota, limit=-1):
        return {"name": name, "resources": {"gpu": {"quota": quota, "overQuotaWeight": 1, "limit": limit},
                                            "cpu": dict(UNL), "memory": dict(UNL)}}
    return {
        "name": "scale-up", "config": {"now": "2026-01-01T00:00:00Z"},
        "nodes": [{"name": "gpu-a", "gpus": 4, "gpuMemory": 81920, "cpu": "64", "memory": "512Gi",
                   "labels": {"pool": "a100", "kubernetes.io/hostname": "gpu-a"}}],
        "queues": [q("wa", 4), q("wb", 4), q("wc", 2, limit=2)],
        "jobs": [{"name": "wa-run", "queue": "wa", "startedMinutesAgo": 30, "createdMinutesAgo": 40,
                  "tasks": [{"gpu": 4, "state": "Running", "node": "gpu-a"}]},
                 {"name": "wb-two", "queue": "wb", "createdMinutesAgo": 9, "tasks": [{"gpu": 2}]},
                 {"name": "wb-four", "queue": "wb", "createdMinutesAgo": 8, "tasks": [{"gpu": 4}]},
                 {"name": "wc-over", "queue": "wc", "createdMinutesAgo": 7, "tasks": [{"gpu": 3}]}],
    }


@pytest.fixture
def cluster():
    import_scenario(small())


def test_one_more_node_starts_what_fits_and_says_why_the_rest_waits(cluster):
    before = (list(Node.objects.values_list("name", flat=True)), list(Task.objects.values_list("state", flat=True)))
    answer = whatif.preview_scale_up(count=1, like="gpu-a")
    assert answer["nodesAdded"] == ["scale-up-1"]
    assert answer["node"]["labels"] == {"pool": "a100"}  # the copied node's hostname label is not copied
    assert answer["starts"] == ["wb-two"] or answer["starts"] == ["wb-four"]
    jobs = answer["jobs"]
    started = answer["starts"][0]
    assert jobs[started]["after"] == "Binding" and jobs[started]["nodes"] == ["scale-up-1"]
    assert jobs["wc-over"]["waitingBefore"] == "limit" and jobs["wc-over"]["waitingAfter"] == "limit"
    other = "wb-four" if started == "wb-two" else "wb-two"
    assert jobs[other]["waitingBefore"] == "capacity" and jobs[other]["waitingAfter"] == "capacity"
    wb = answer["queues"]["wb"]
    assert wb["allocated"]["gpu"] == 0 and wb["allocatedAfter"]["gpu"] > 0
    assert wb["fairShareAfter"]["gpu"] >= wb["fairShareBefore"]["gpu"]
    assert answer["workloads"][started] == Workload.objects.get(name=started).pk
    # two nodes start both wb jobs; wc still waits for its limit whatever is added
    two = whatif.preview_scale_up(count=2, node={"gpus": 4, "gpu_memory_mib": 81920, "cpu_millis": 64000,
                                                    "memory_bytes": 2**39, "labels": {"pool": "a100"}})
    assert sorted(two["starts"]) == ["wb-four", "wb-two"] and two["jobs"]["wc-over"]["placedAfter"] == 0
    # nothing was stored
    assert before == (list(Node.objects.values_list("name", flat=True)),
                      list(Task.objects.values_list("state", flat=True)))


def test_bad_requests_name_the_field(cluster):
    from queues_app.errors import ApplicationError

    cases = [
        (dict(count=0, like="gpu-a"), "count"),
        (dict(count=1), "like"),
        (dict(count=1, like="gpu-a", node={"gpus": 1}), "like"),
        (dict(count=1, like="nope"), "like"),
        (dict(count=1, node={"gpus": -1}), "node.gpus"),
        (dict(count=1, node={"gpus": 2, "colour": "red"}), "node.colour"),
        (dict(count=1, node={"gpus": 2, "labels": {"pool": "x" * 64}}), "node.labels"),
        (dict(count=1, like="gpu-a", name_prefix="gpu"), None),  # gpu-1 is free: fine
    ]
    for kwargs, field in cases:
        if field is None:
            whatif.preview_scale_up(**kwargs)
            continue
        with pytest.raises(ApplicationError) as exc:
            whatif.preview_scale_up(**kwargs)
        assert field in exc.value.extra, (kwargs, exc.value.extra)
    node_upsert(name="scale-up-1", gpus=1)
    with pytest.raises(ApplicationError) as exc:
        whatif.preview_scale_up(count=2, like="gpu-a")
    assert "name_prefix" in exc.value.extra


def test_apply_edits_adds_nodes_in_name_order_and_checks_the_edit():
    data = small()
    out = apply_edits(data, [{"addNodes": {"count": 2, "namePrefix": "b", "node": {"gpus": 8}}}])
    assert [n["name"] for n in out["nodes"]] == ["b-1", "b-2", "gpu-a"] and len(data["nodes"]) == 1
    for edit, path in [({"addNodes": {"count": 0, "node": {}}}, "edits[0].addNodes.count"),
                       ({"addNodes": {"count": 1, "node": {"name": "x"}}}, "edits[0].addNodes.node.name"),
                       ({"addNodes": {"count": 1, "node": {}, "namePrefix": "gpu"}, "queue": "wa"}, "edits[0].queue"),
                       ({"addNodes": {"count": 1, "node": {}, "colour": 1}}, "edits[0].addNodes.colour")]:
        with pytest.raises(ScenarioError) as exc:
            apply_edits(data, [edit])
        assert path in [p for p, _ in exc.value.problems], exc.value.problems
    data["nodes"].append({"name": "gpu-1", "gpus": 1})
    with pytest.raises(ScenarioError):
        apply_edits(data, [{"addNodes": {"count": 1, "namePrefix": "gpu", "node": {}}}])


def test_operator_api_and_tenants_are_refused(cluster, django_user_model):
    from queues_app.services.tenants import api_token_issue

    op = django_user_model.objects.create_user("op", password="x", is_staff=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=op)}")
    url = "/api/v1/nodes/scale-up-preview/"
    r = client.post(url, {"count": 2, "like": "gpu-a"}, format="json")
    assert r.status_code == 200, r.content
    assert sorted(r.json()["starts"]) == ["wb-four", "wb-two"]
    r = client.post(url, {"count": 2, "node": {"gpus": -3}}, format="json")
    assert r.status_code == 400 and "node.gpus" in json.dumps(r.json()["extra"])
    r = client.post(url, {"count": 2, "like": "gpu-a", "extra": 1}, format="json")
    assert r.status_code == 400 and "extra" in r.json()["extra"]
    tenant_user = django_user_model.objects.create_user("t", password="x")
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=tenant_user)}")
    assert other.post(url, {"count": 1, "like": "gpu-a"}, format="json").status_code in (403, 404)


def test_admin_page(cluster, admin_client):
    url = reverse("admin:queues_app_node_scaleup")
    assert url in admin_client.get(reverse("admin:queues_app_node_changelist")).content.decode()  # the button
    page = admin_client.get(url)
    assert page.status_code == 200 and b"gpu-a" in page.content
    page = admin_client.post(url, {"count": 1, "like": "gpu-a"})
    assert page.status_code == 200
    text = page.content.decode()
    assert "scale-up-1" in text and ("wb-two" in text or "wb-four" in text) and "limit" in text
    page = admin_client.post(url, {"count": 0, "like": "gpu-a"})
    assert page.status_code == 200 and "errorlist" in page.content.decode()
    assert Node.objects.count() == 1


def _recorded(cycle_id: int) -> tuple[dict, dict]:
    row = SchedulingCycle.objects.get(pk=cycle_id)
    scenario = json.loads(zlib.decompress(bytes(row.scenario_gz)))
    decisions = json.loads(zlib.decompress(bytes(row.decisions_gz)))
    return scenario, decisions


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("seed,count", [(3, 2), (11, 4)])
def test_the_preview_equals_the_cycle_run_after_adding_the_nodes(seed, count):
    """A generated cluster (racks, zones, mixed jobs and shared GPUs, a queue tree), one cycle run
    so that binds and evictions are in flight; then the preview of ``count`` nodes shaped like one
    of them, and the real thing: add the nodes, run the cycle with the same clock.  Placements,
    evictions and fair shares must be the same."""
    now = timezone.now()
    import_scenario(generate(nodes=16, jobs=160, queues=10, seed=seed, fill=0.9), now=now)
    assert cycle_run(trigger="test", now=now).status == CycleStatus.APPLIED
    like = Node.objects.filter(ready=True, unschedulable=False).order_by("-gpus", "name").first()
    answer = whatif.preview_scale_up(count=count, like=like.name, now=now)
    assert answer["starts"], "the generated cluster must have work the new nodes start"
    shape = answer["node"]
    for name in answer["nodesAdded"]:
        node_upsert(name=name, gpus=shape["gpus"], gpu_memory_mib=shape["gpu_memory_mib"],
                    cpu_millis=shape["cpu_millis"], memory_bytes=shape["memory_bytes"], labels=shape["labels"])
    out = cycle_run(trigger="test", now=now)
    assert out.status == CycleStatus.APPLIED
    _scenario, decisions = _recorded(out.cycle_id)
    real_placements = {t: {"status": v[0], "node": v[1]} for t, v in decisions.items()
                       if v[0] in (TaskState.BINDING, TaskState.PIPELINED)}
    assert answer["placements"] == real_placements
    # every eviction the cycle explained (victims that end Releasing, and tasks placed then given up
    # again within the cycle) is one the preview announced, for the same reason
    real_evictions = sorted(SchedulingEvent.objects.filter(cycle_id=out.cycle_id, reason__in=EVICTION_REASONS,
                                                           task__isnull=False)
                            .values_list("workload__name", "task__name", "reason"))
    assert sorted((e["job"], e["task"], e["reason"]) for e in answer["evictions"]) == real_evictions
    assert answer["evictions"], "the generated cluster must exercise reclaim / preemption"
    for status in QueueStatus.objects.select_related("queue"):
        want = answer["queues"][status.queue.name]["fairShareAfter"]["gpu"]
        assert status.fair_share_gpu == pytest.approx(want, abs=1e-6), status.queue.name
    started = {Workload.objects.get(pk=answer["workloads"][j]).name for j in answer["starts"]}
    placed = set(Task.objects.filter(state__in=(TaskState.BINDING, TaskState.PIPELINED))
                 .values_list("workload__name", flat=True))
    assert started <= placed


def test_a_dra_node_as_the_shape_copies_its_devices_and_starts_a_claim_task():
    """A scale-up like a DRA node carries its devices: the pending task that claims them starts;
    a shape naming an undeclared device class is refused on ``node.devices``."""
    data = small()
    data["deviceClasses"] = [{"name": "gpu.nvidia.com", "countsAs": "gpu"}]
    data["nodes"].append({"name": "gb-a", "gpus": 0, "cpu": "64", "memory": "512Gi",
                          "labels": {"pool": "gb200"}, "devices": {"gpu.nvidia.com": 4}})
    data["jobs"].append({"name": "dra-job", "queue": "wb", "createdMinutesAgo": 5,
                         "tasks": [{"claims": [{"deviceClass": "gpu.nvidia.com", "count": 4}]}] * 2})
    import_scenario(data)
    cycle_run(trigger="test")
    assert Workload.objects.get(name="dra-job").status == "Pending"  # one node's devices for two tasks
    answer = whatif.preview_scale_up(count=1, like="gb-a")
    assert answer["node"]["devices"] == {"gpu.nvidia.com": 4}
    assert "dra-job" in answer["starts"]
    with pytest.raises(Exception) as err:
        whatif.preview_scale_up(count=1, node={"gpus": 0, "devices": {"fpga.example.com": 1}})
    assert "node.devices" in getattr(err.value, "extra", {})
