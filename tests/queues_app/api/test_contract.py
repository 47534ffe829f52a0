"""Issue 16 (1): the engine's input rules are checked at the API door.

Before: ``{"gpu": 1.5}`` (and 2.5, 1.0001, gpu + gpu_memory_mib) were accepted with 201 and made
every scheduling cycle fail; the same body with ``?dry_run=1`` answered a 500 HTML page.  Now
each is a 400 naming the API field, nothing is stored, and a dry run is the same 400.
"""
from __future__ import annotations

import pytest

from queues_app.models import Node, Task, Workload
from tests.queues_app.api.conftest import workload_body

pytestmark = pytest.mark.django_db

URL = "/api/v1/workloads/"

ENGINE_REFUSED = [
    ({"task": {"gpu": 1.5}}, "task.gpu", "whole devices"),
    ({"task": {"gpu": 2.5}}, "task.gpu", "whole devices"),
    ({"task": {"gpu": 1.0001}}, "task.gpu", "whole devices"),
    ({"task": {"gpu": 1, "gpu_memory_mib": 1000}}, "task.gpu_memory_mib", "not both"),
    ({"task": {"gpu": 0.5, "gpu_memory_mib": 1000}}, "task.gpu_memory_mib", "not both"),
    ({"replicas": None, "task": None, "tasks": [{"gpu": 1}, {"gpu": 1.5}]}, "tasks[1].gpu", "whole devices"),
    ({"task": {"gpu": 1, "node_selector": {"bad key": "x"}}}, "task.node_selector.bad key", "label key"),
    ({"node_selector": {"-x": "y"}}, "node_selector.-x", "label key"),
]


def _body(extra):
    body = workload_body(name="x")
    body["replicas"] = 1
    for k, v in extra.items():
        if v is None:
            body.pop(k, None)
        else:
            body[k] = v
    return body


@pytest.mark.parametrize("dry_run", [False, True], ids=["submit", "dry_run"])
@pytest.mark.parametrize("extra, field, fragment", ENGINE_REFUSED)
def test_what_the_engine_refuses_is_a_400_naming_the_api_field(alice_client, nodes, extra, field, fragment, dry_run):
    response = alice_client.post(URL + ("?dry_run=1" if dry_run else ""), _body(extra), format="json")
    assert response.status_code == 400, response.content[:500]
    assert response["Content-Type"].startswith("application/json")
    extra_out = response.json()["extra"]
    assert field in extra_out and fragment in " ".join(extra_out[field]), extra_out
    assert not Workload.objects.exists() and not Task.objects.exists()


def test_whole_and_fractional_gpus_and_gpu_memory_alone_are_still_accepted(alice_client, nodes):
    for i, task in enumerate(({"gpu": 2}, {"gpu": 0.5}, {"gpu_memory_mib": 1000}, {"gpu": 1})):
        body = {**workload_body(name=f"ok-{i}"), "replicas": 1, "task": task}
        assert alice_client.post(URL, body, format="json").status_code == 201


def test_node_reserved_above_capacity_is_a_400(operator_client):
    response = operator_client.post("/api/v1/nodes/", {"name": "n", "gpus": 2, "reserved_gpus": 5}, format="json")
    assert response.status_code == 400
    assert "reserved_gpus" in response.json()["extra"]
    assert not Node.objects.exists()
    node = operator_client.post("/api/v1/nodes/", {"name": "n", "gpus": 2, "reserved_gpus": 2}, format="json")
    assert node.status_code == 201
    response = operator_client.patch(f"/api/v1/nodes/{node.json()['id']}/", {"gpus": 1}, format="json")
    assert response.status_code == 400 and "reserved_gpus" in response.json()["extra"]
    assert Node.objects.get().gpus == 2


def test_node_label_keys_must_be_kubernetes_label_keys(operator_client):
    response = operator_client.post("/api/v1/nodes/", {"name": "n", "gpus": 2, "labels": {"a b": "c"}}, format="json")
    assert response.status_code == 400 and "labels.a b" in response.json()["extra"]
