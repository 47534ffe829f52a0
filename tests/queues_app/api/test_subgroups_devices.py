"""Hierarchical gangs and device claims through the tenant API: submit (validated by the engine's
rules, errors naming the API field), the scheduling cycle places them, the detail and ``why`` show
each subgroup's placed / required and each task's devices."""
from __future__ import annotations

import pytest

from queues_app.choices import TaskState
from queues_app.models import SubGroup, Task, Workload
from queues_app.cycle.run import cycle_run
from queues_app.services.devices import device_class_upsert
from queues_app.services.nodes import node_upsert
from tests.queues_app.api.conftest import workload_body

URL = "/api/v1/workloads/"


def serve_body(name="serve", decode_min=2, **extra):
    """decode: 1 leader + 2 workers (rack), prefill: 2 tasks; all 1 GPU."""
    body = {
        "name": name, "queue": "a-train",
        "sub_groups": [
            {"name": "decode", "topology_required": "rack"},
            {"name": "decode-leader", "parent": "decode", "min_available": 1},
            {"name": "decode-workers", "parent": "decode", "min_available": decode_min},
            {"name": "prefill", "min_available": 2},
        ],
        "tasks": ([{"sub_group": "decode-leader", "gpu": 1}]
                  + [{"sub_group": "decode-workers", "gpu": 1}] * 2
                  + [{"sub_group": "prefill", "gpu": 1}] * 2),
    }
    body.update(extra)
    return body


@pytest.fixture
def racks(db):
    return [node_upsert(name=f"n{i}", gpus=2, cpu_millis=64000, memory_bytes=2**40,
                        labels={"rack": f"r{i // 2}"})[0] for i in range(4)]


@pytest.fixture
def dra_pool(db):
    device_class_upsert(name="gpu.nvidia.com", counts_as="gpu")
    device_class_upsert(name="compute-domain.nvidia.com")
    return node_upsert(name="gb0", gpus=0, cpu_millis=64000, memory_bytes=2**40,
                       devices={"gpu.nvidia.com": 4, "compute-domain.nvidia.com": 1})[0]


@pytest.mark.django_db(transaction=True)
def test_a_tree_is_submitted_scheduled_and_explained(alice_client, racks):
    r = alice_client.post(URL, serve_body(), format="json")
    assert r.status_code == 201, r.content
    wl = Workload.objects.get(pk=r.json()["id"])
    assert wl.min_available == 5 and wl.min_sub_groups is None
    assert [g["name"] for g in r.json()["sub_groups"]] == ["decode", "decode-leader", "decode-workers", "prefill"]
    assert {t["sub_group"] for t in r.json()["tasks"]} == {"decode-leader", "decode-workers", "prefill"}
    out = cycle_run(trigger="test")
    assert out.bound == 5
    detail = alice_client.get(f"{URL}{wl.pk}/").json()
    by_name = {g["name"]: g for g in detail["sub_groups"]}
    assert by_name["decode"] == {"name": "decode", "parent": None, "depth": 0, "required": 2,
                                 "required_kind": "subgroups", "placed": 3, "satisfied": True,
                                 "topology_required": "rack"}
    assert by_name["decode-workers"]["placed"] == 2 and by_name["decode-workers"]["required"] == 2
    decode_nodes = {t.node.name for t in Task.objects.filter(workload=wl, sub_group__name__startswith="decode")}
    assert decode_nodes in ({"n0", "n1"}, {"n2", "n3"})  # one rack
    why = alice_client.get(f"{URL}{wl.pk}/why/").json()
    assert [g["name"] for g in why["sub_groups"]][:2] == ["decode", "decode-leader"]


@pytest.mark.django_db(transaction=True)
def test_why_names_the_subgroup_that_does_not_fit(alice_client, racks):
    """Racks of 4 GPUs (2 nodes x 2): three 2-GPU workers that must share a rack do not fit."""
    body = {"name": "serve", "queue": "a-train", "sub_groups": [
        {"name": "decode"}, {"name": "decode-leader", "parent": "decode", "min_available": 1},
        {"name": "decode-workers", "parent": "decode", "min_available": 3, "topology_required": "rack"},
        {"name": "prefill", "min_available": 1}],
        "tasks": ([{"sub_group": "decode-leader", "gpu": 1}] + [{"sub_group": "decode-workers", "gpu": 2}] * 3
                  + [{"sub_group": "prefill", "gpu": 1}])}
    r = alice_client.post(URL, body, format="json")
    assert r.status_code == 201, r.content
    cycle_run(trigger="test")
    why = alice_client.get(f"{URL}{r.json()['id']}/why/").json()
    assert why["status"] == "Pending"
    unsched = [e["message"] for e in why["events"] if e["reason"] == "Unschedulable"]
    assert unsched and unsched[0].startswith("subgroup decode-workers needs 3, 2 fit in any rack"), why["events"]
    assert all(not g["satisfied"] and g["placed"] == 0 for g in why["sub_groups"] if g["required"])


@pytest.mark.parametrize("patch, field, text", [
    ({"sub_groups": [{"name": "a", "parent": "zz"}], "tasks": [{"sub_group": "a"}]}, "sub_groups[0].parent",
     "unknown parent subgroup 'zz'"),
    ({"sub_groups": [{"name": "a", "min_sub_groups": 1}], "tasks": [{"sub_group": "a"}]},
     "sub_groups[0].min_sub_groups", "is a leaf"),
    ({"sub_groups": [{"name": "a"}, {"name": "b", "parent": "a", "min_available": 1}],
      "tasks": [{"sub_group": "a"}]}, "tasks[0].sub_group", "has child subgroups"),
    ({"sub_groups": [{"name": "a"}], "tasks": [{"gpu": 1}]}, "tasks[0].sub_group", "is required"),
    ({"sub_groups": [{"name": "a", "min_available": 3}], "tasks": [{"sub_group": "a"}]},
     "sub_groups[0].min_available", "must be <= the number of tasks"),
    ({"sub_groups": [{"name": "a"}], "tasks": [{"sub_group": "a"}], "min_sub_groups": 2}, "min_sub_groups",
     "top-level subgroups (1)"),
    ({"sub_groups": [{"name": "a"}], "tasks": [{"sub_group": "a"}], "min_available": 1}, "min_available",
     "no job-level minAvailable"),
    ({"tasks": [{"claims": [{"device_class": "nope"}]}]}, "tasks[0].claims[0].device_class",
     "unknown device class 'nope'"),
    ({"tasks": [{"gpu": 1, "claims": [{"device_class": "gpu.nvidia.com"}]}]}, "tasks[0].claims[0].device_class",
     "counts as gpu"),
    ({"tasks": [{"claims": [{"device_class": "gpu.nvidia.com", "count": 0}]}]}, "tasks.0.claims.0.count", ""),
])
@pytest.mark.django_db
def test_bad_trees_and_claims_are_400s_naming_the_field(alice_client, dra_pool, patch, field, text):
    body = {"name": "bad", "queue": "a-train", **patch}
    r = alice_client.post(URL, body, format="json")
    assert r.status_code == 400, r.content
    flat = _flatten(r.json())
    assert any(k.replace(".", "").replace("[", "").replace("]", "") == field.replace(".", "").replace("[", "")
               .replace("]", "") and text in m for k, m in flat), flat
    assert not Workload.objects.filter(name="bad").exists() and not SubGroup.objects.exists()


def _flatten(body, prefix=""):
    """Every (field path, message) of an error body, whatever its nesting."""
    out = []
    if isinstance(body, dict):
        for k, v in body.items():
            if k in ("message", "detail", "code") and not prefix:
                continue
            key = k if k.startswith("[") or not prefix else f"{prefix}.{k}"
            out.extend(_flatten(v, key if k not in ("errors", "extra", "fields") else prefix))
    elif isinstance(body, list):
        if all(isinstance(x, str) for x in body):
            out.extend((prefix, m) for m in body)
        else:
            for i, v in enumerate(body):
                out.extend(_flatten(v, f"{prefix}.{i}"))
    elif isinstance(body, str):
        out.append((prefix, body))
    return out


@pytest.mark.django_db(transaction=True)
def test_claims_are_placed_with_device_indices_and_count_as_gpus(alice_client, dra_pool):
    r = alice_client.post(URL, workload_body(name="imex", replicas=1, task={"claims": [
        {"device_class": "gpu.nvidia.com", "count": 4}, {"device_class": "compute-domain.nvidia.com"}]}),
        format="json")
    assert r.status_code == 201, r.content
    task = Task.objects.get(workload_id=r.json()["id"])
    assert task.dra_gpus == 4 and task.claims[0] == {"device_class": "gpu.nvidia.com", "count": 4}
    cycle_run(trigger="test")
    task.refresh_from_db()
    assert task.state == TaskState.BINDING and task.node.name == "gb0"
    assert task.devices == {"gpu.nvidia.com": [0, 1, 2, 3], "compute-domain.nvidia.com": [0]}
    out = cycle_run(trigger="test")
    task.refresh_from_db()
    assert out.confirmed == 1 and task.state == TaskState.RUNNING and task.devices["gpu.nvidia.com"] == [0, 1, 2, 3]
    from queues_app.models import QueueStatus

    assert QueueStatus.objects.get(queue__name="a-train").allocated_gpu == 4.0
    detail = alice_client.get(f"{URL}{r.json()['id']}/").json()
    assert detail["tasks"][0]["devices"] == {"gpu.nvidia.com": [0, 1, 2, 3], "compute-domain.nvidia.com": [0]}
    from queues_app.invariants import check_invariants

    assert check_invariants() == []


@pytest.mark.django_db
def test_node_devices_need_declared_classes_and_cover_what_tasks_hold(operator_client, dra_pool):
    r = operator_client.post("/api/v1/nodes/", {"name": "gb1", "devices": {"tpu.example.com": 2}}, format="json")
    assert r.status_code == 400 and "devices.tpu.example.com" in str(r.json())
    r = operator_client.post("/api/v1/nodes/", {"name": "gb1", "devices": {"gpu.nvidia.com": 8}}, format="json")
    assert r.status_code in (200, 201), r.content
    assert r.json()["devices"] == {"gpu.nvidia.com": 8}
    from queues_app.models import Node

    assert Node.objects.get(name="gb1").dra_gpus == 8
