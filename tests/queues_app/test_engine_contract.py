"""Issue 16 (1): one contract at every door.

The engine's input rules (``scheduler_engine.loader.validate_*`` through ``engine_io``) are
checked by the services (so the API, the admin, commands and imports), by the admin forms (as
field errors) and by the Kubernetes sync (an event on the pod).  Before: a memory quota of 2**70
through a service or the admin was stored and every cycle failed with
``queues[5].resources.memory.quota: is too large``; the same for a node reserving more GPUs than
it has, a ``gpu`` of 1.5 and ``gpu`` + ``gpu_memory_mib`` through ``workload_submit``.
"""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from queues_app.choices import CycleStatus
from queues_app.errors import ApplicationError
from queues_app.models import Node, QueueResource, QuotaChange, SchedulingEvent, Task, Workload
from queues_app.services import node_upsert, queue_create, queue_set_quota, workload_import, workload_submit
from queues_app.cycle.run import cycle_run
from tests.queues_app.test_admin import admin_client_op, form_data  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db


def _errors(call) -> dict[str, list[str]]:
    with pytest.raises(ApplicationError) as info:
        call()
    return info.value.extra


# ----------------------------------------------------------------------------- services


def test_queue_quota_the_engine_cannot_represent_is_refused_by_the_service(queue_tree):
    q = queue_tree["a-train"]
    errors = _errors(lambda: queue_set_quota(queue=q, resource="memory", quota=Decimal(2**70)))
    assert list(errors) == ["quota"] and "too large" in errors["quota"][0]
    assert QueueResource.objects.get(queue=q, resource="memory").quota == 0
    errors = _errors(lambda: queue_create(name="huge", parent=queue_tree["team-a-dept"],
                                          quotas={"memory": {"limit": Decimal(2**70)}}))
    assert list(errors) == ["quotas.memory.limit"]
    queue_set_quota(queue=q, resource="memory", quota=Decimal(2**62))  # what the engine takes is fine


def test_a_cycle_still_applies_after_the_refused_quota(queue_tree, nodes_8):
    queue_set_quota(queue=queue_tree["a-train"], resource="memory", quota=Decimal(2**62))
    with pytest.raises(ApplicationError):
        queue_set_quota(queue=queue_tree["a-train"], resource="memory", quota=Decimal(2**70))
    workload_submit(queue=queue_tree["a-train"], name="w", replicas=1, task={"gpu": 1})
    assert cycle_run(trigger="test").status == CycleStatus.APPLIED


@pytest.mark.parametrize("task, field", [
    ({"gpu": 1.5}, "task.gpu"), ({"gpu": Decimal("2.5")}, "task.gpu"), ({"gpu": 1, "gpu_memory_mib": 1000},
                                                                          "task.gpu_memory_mib"),
    ({"gpu": 0.5, "gpu_memory_mib": 10}, "task.gpu_memory_mib"), ({"node_selector": {"a b": "c"}},
                                                                   "task.node_selector.a b"),
])
def test_workload_submit_refuses_what_the_engine_refuses(queue_tree, task, field):
    errors = _errors(lambda: workload_submit(queue=queue_tree["a-train"], name="w", replicas=3, task=task))
    assert field in errors, errors
    errors = _errors(lambda: workload_submit(queue=queue_tree["a-train"], name="w", tasks=[{"gpu": 1}, task]))
    assert field.replace("task.", "tasks[1].") in errors, errors
    assert not Workload.objects.exists() and not Task.objects.exists()


def test_workload_import_checks_task_nodes_and_states_with_the_engine(queue_tree, nodes_8):
    errors = _errors(lambda: workload_import(queue=queue_tree["a-train"], name="w", tasks=[
        {"gpu": 0.5, "state": "Pending", "gpu_groups": ["g0"]}]))
    assert errors == {"tasks[0].gpu_groups": ["only a task on a node has gpuGroups"]}
    workload_import(queue=queue_tree["a-train"], name="ok", tasks=[
        {"gpu": 0.5, "state": "Running", "node": "node-a", "gpu_groups": ["g0"]}])


def test_node_upsert_refuses_reserving_more_than_the_node_has(db):
    errors = _errors(lambda: node_upsert(name="n", gpus=2, reserved_gpus=Decimal(5)))
    assert list(errors) == ["reserved_gpus"] and "<= the node's gpus (2)" in errors["reserved_gpus"][0]
    node_upsert(name="n", gpus=2, reserved_gpus=Decimal(2), cpu_millis=1000)
    errors = _errors(lambda: node_upsert(name="n", reserved_cpu_millis=2000))
    assert list(errors) == ["reserved_cpu_millis"]
    assert Node.objects.get().reserved_cpu_millis == 0


def test_subgroup_trees_claims_and_node_devices_are_checked_by_the_engine_at_the_services(queue_tree, nodes_8):
    """Issue 21's keys through the same entry: the tree, the claims (against the DeviceClass rows)
    and a node's devices; the errors name the service / API field."""
    from queues_app.services.devices import device_class_upsert

    q = queue_tree["a-train"]
    errors = _errors(lambda: workload_submit(queue=q, name="w", sub_groups=[{"name": "a"}, {"name": "b", "parent": "x"}],
                                             tasks=[{"gpu": 1, "sub_group": "a"}, {"gpu": 1, "sub_group": "b"}]))
    assert "sub_groups[1].parent" in errors, errors
    errors = _errors(lambda: workload_submit(queue=q, name="w", replicas=2,
                                             task={"claims": [{"device_class": "gpu.nvidia.com", "count": 1}]}))
    assert errors == {"task.claims[0].device_class": [
        "unknown device class 'gpu.nvidia.com' (declare it in deviceClasses)"]}
    errors = _errors(lambda: node_upsert(name="gb", gpus=0, devices={"gpu.nvidia.com": 4}))
    assert list(errors) == ["devices.gpu.nvidia.com"]
    device_class_upsert(name="gpu.nvidia.com", counts_as="gpu")
    node_upsert(name="gb", gpus=0, devices={"gpu.nvidia.com": 4})
    w = workload_submit(queue=q, name="w", replicas=2, task={"claims": [{"device_class": "gpu.nvidia.com", "count": 1}]})
    assert list(Task.objects.filter(workload=w).values_list("dra_gpus", flat=True)) == [1, 1]
    errors = _errors(lambda: workload_import(queue=q, name="pinned", tasks=[
        {"claims": [{"device_class": "gpu.nvidia.com", "count": 1}], "state": "Running", "node": "gb",
         "devices": {"gpu.nvidia.com": [4]}}]))
    assert list(errors) == ["tasks[0].devices.gpu.nvidia.com[0]"], errors
    assert not Workload.objects.filter(name="pinned").exists()


# ----------------------------------------------------------------------------- admin forms


def test_admin_quota_form_shows_the_engine_refusal_on_the_field(admin_client_op, queue_tree):  # noqa: F811
    q = queue_tree["a-train"]
    url = reverse("admin:queues_app_queue_change", args=[q.pk])
    data = form_data(admin_client_op.get(url))
    idx = next(i for i in range(3) if data[f"resources-{i}-id"] == [
        str(QueueResource.objects.get(queue=q, resource="memory").pk)])
    data[f"resources-{idx}-quota"] = [str(2**34)]  # GiB: 2**64 bytes, above the engine's 2**63
    resp = admin_client_op.post(url, data)
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "errornote" in html and "is too large" in html
    assert QueueResource.objects.get(queue=q, resource="memory").quota == 0
    assert not QuotaChange.objects.filter(source="admin").exists()


def test_admin_node_form_refuses_reserved_above_capacity(admin_client_op):  # noqa: F811
    node, _ = node_upsert(name="n0", gpus=2)
    url = reverse("admin:queues_app_node_change", args=[node.pk])
    data = form_data(admin_client_op.get(url))
    data["reserved_gpus"] = ["5"]
    resp = admin_client_op.post(url, data)
    assert resp.status_code == 200 and "the node&#x27;s gpus (2)" in resp.content.decode()
    assert Node.objects.get().reserved_gpus == 0


# ----------------------------------------------------------------------------- Kubernetes sync


def test_a_pod_the_engine_refuses_is_an_event_not_a_task(queue_tree):
    from queues_app.kube import observed

    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "uid-p", "resourceVersion": "1",
                        "labels": {"kai.scheduler/queue": "a-train"}},
           "spec": {"schedulerName": "kai-scheduler", "nodeSelector": {"not a key": "x"},
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
           "status": {"phase": "Pending"}}
    assert observed.kube_pod_observed(obj=pod) is None
    assert not Task.objects.exists() and not Workload.objects.exists()
    event = SchedulingEvent.objects.get()
    assert event.reason == "InvalidPod" and "node_selector.not a key" in event.message


# ----------------------------------------------------------------------------- scenario import


def test_scenario_import_refuses_rows_the_engine_refuses(db):
    from queues_app.cycle.engine_io import ScenarioError
    from queues_app.cycle.scenario import import_scenario

    with pytest.raises(ScenarioError) as info:
        import_scenario({"nodes": [{"name": "n", "gpus": 2, "reservedByOthers": {"gpu": 3}}], "queues": [],
                         "jobs": []})
    assert info.value.problems[0][0] == "nodes[0].reservedByOthers.gpu"
    assert not Node.objects.exists()


@pytest.fixture
def nodes_8(db):
    from tests.queues_app.factories import NodeFactory

    return [NodeFactory(name="node-a", gpus=8), NodeFactory(name="node-b", gpus=8)]
