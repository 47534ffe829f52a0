"""The admin shows a workload's subgroup tree (placed / required) and nodes' DRA devices; device
classes are managed through the services."""
from __future__ import annotations

import pytest
from django.urls import reverse

from queues_app.models import DeviceClass, Node
from queues_app.services.devices import device_class_upsert
from queues_app.services.nodes import node_upsert
from queues_app.services.workloads import workload_import

pytestmark = pytest.mark.django_db


@pytest.fixture
def tree(queue_tree):
    device_class_upsert(name="gpu.nvidia.com")
    node_upsert(name="n0", gpus=8, cpu_millis=64000, memory_bytes=2**40)
    node_upsert(name="gb0", gpus=0, cpu_millis=64000, memory_bytes=2**40, devices={"gpu.nvidia.com": 4})
    return workload_import(
        queue=queue_tree["a-train"], name="serve", min_sub_groups=1,
        sub_groups=[{"name": "decode", "topology_required": "rack"},
                    {"name": "decode-leader", "parent": "decode", "min_available": 1},
                    {"name": "decode-workers", "parent": "decode", "min_available": 2},
                    {"name": "prefill", "min_available": 2}],
        tasks=[{"sub_group": "decode-leader", "gpu": 1, "state": "Running", "node": "n0"},
               {"sub_group": "decode-workers", "gpu": 1, "state": "Running", "node": "n0"},
               {"sub_group": "decode-workers", "gpu": 1},
               {"sub_group": "prefill", "claims": [{"device_class": "gpu.nvidia.com", "count": 1}],
                "state": "Running", "node": "gb0", "devices": {"gpu.nvidia.com": [2]}},
               {"sub_group": "prefill", "claims": [{"device_class": "gpu.nvidia.com", "count": 1}],
                "state": "Running", "node": "gb0", "devices": {"gpu.nvidia.com": [0]}}])


def test_workload_page_shows_the_tree_with_placed_and_required(admin_client, tree):
    page = admin_client.get(reverse("admin:queues_app_workload_change", args=[tree.pk])).content.decode().lower()
    assert "subgroups (placed / required)" in page
    assert "decode-workers" in page and "1 / 2 tasks" in page and "not satisfied" in page
    assert "2 / 2 tasks" in page  # prefill
    assert "needs 1 top-level subgroup(s)" in page
    assert "gpu.nvidia.com 2" in page and "1 x gpu.nvidia.com" in page  # a task's devices and claims, formatted


def test_node_list_shows_devices_and_device_classes_are_managed(admin_client, tree):
    page = admin_client.get(reverse("admin:queues_app_node_changelist")).content.decode()
    assert "gpu.nvidia.com x4" in page
    r = admin_client.post(reverse("admin:queues_app_deviceclass_add"),
                          {"name": "compute-domain.nvidia.com", "counts_as": "", "description": "IMEX channels"})
    assert r.status_code == 302
    assert not DeviceClass.objects.get(name="compute-domain.nvidia.com").counts_as_gpu
    # a class in use is not deleted (nodes offer it, tasks claim it)
    gpu = DeviceClass.objects.get(name="gpu.nvidia.com")
    admin_client.post(reverse("admin:queues_app_deviceclass_delete", args=[gpu.pk]), {"post": "yes"})
    assert DeviceClass.objects.filter(name="gpu.nvidia.com").exists()
    assert Node.objects.get(name="gb0").dra_gpus == 4
