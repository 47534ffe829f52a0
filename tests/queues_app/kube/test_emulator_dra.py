"""The emulator's PodGroups (scheduling.run.ai/v2alpha2) and dynamic resource allocation
(resource.k8s.io/v1), driven through the official client: each test pins one documented API behaviour
the sync and the dispatcher rely on."""
from __future__ import annotations

import json

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException


@pytest.fixture
def res(kube_client):
    return client.ResourceV1Api(kube_client)


@pytest.fixture
def custom(kube_client):
    return client.CustomObjectsApi(kube_client)


def _alloc(request="gpus", device="dev-0", pool="gb0"):
    return {"devices": {"results": [{"request": request, "driver": "gpu.nvidia.com", "pool": pool, "device": device}]}}


def test_discovery_lists_the_groups(kube_client):
    groups = client.ApisApi(kube_client).get_api_versions()
    names = {g.name: g.preferred_version.version for g in groups.groups}
    assert names["resource.k8s.io"] == "v1" and names["scheduling.run.ai"] == "v2alpha2"


def test_pod_group_schema_types(kube_emulator, custom):
    pg = kube_emulator.add_pod_group("ns", "serve", queue="team-a", min_subgroup=1,
                                     sub_groups=[{"name": "decode", "minMember": 2,
                                                  "topologyConstraint": {"requiredTopologyLevel": "rack"}}])
    assert pg["apiVersion"] == "scheduling.run.ai/v2alpha2"
    got = custom.get_namespaced_custom_object("scheduling.run.ai", "v2alpha2", "ns", "podgroups", "serve")
    assert got["spec"]["subGroups"][0]["topologyConstraint"] == {"requiredTopologyLevel": "rack"}
    with pytest.raises(ApiException) as e:
        custom.create_namespaced_custom_object("scheduling.run.ai", "v2alpha2", "ns", "podgroups", {
            "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "bad"},
            "spec": {"minSubGroup": "two", "subGroups": [{"minMember": 1}]}})
    assert e.value.status == 422
    body = json.loads(e.value.body)
    assert {c["field"] for c in body["details"]["causes"]} == {"spec.minSubGroup", "spec.subGroups[0].name"}


def test_resource_slices_validation_and_field_selectors(kube_emulator, res):
    kube_emulator.add_resource_slice("gb0", "gpu.nvidia.com", 4)
    kube_emulator.add_resource_slice("gb1", "gpu.nvidia.com", 2)
    kube_emulator.add_resource_slice("gb0", "compute-domain.nvidia.com", ["channel-0"])
    on_gb0 = res.list_resource_slice(field_selector="spec.nodeName=gb0").items
    assert sorted(s.spec.driver for s in on_gb0) == ["compute-domain.nvidia.com", "gpu.nvidia.com"]
    gpus = res.list_resource_slice(field_selector="spec.driver=gpu.nvidia.com").items
    assert sorted(len(s.spec.devices) for s in gpus) == [2, 4]
    bad = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "x"},
           "spec": {"driver": "gpu.nvidia.com", "pool": {"name": "p", "generation": 0, "resourceSliceCount": 1},
                    "devices": [{"name": "Dev_0"}, {"name": "a"}, {"name": "a"}]}}
    with pytest.raises(ApiException) as e:
        res.create_resource_slice(bad)
    causes = {c["field"] for c in json.loads(e.value.body)["details"]["causes"]}
    assert causes == {"spec", "spec.devices[0].name", "spec.devices[2].name"}


def test_claim_defaults_and_immutable_spec(kube_emulator, res):
    kube_emulator.add_resource_claim("ns", "c", [{"name": "gpus", "deviceClassName": "gpu.nvidia.com"}])
    got = res.read_namespaced_resource_claim("c", "ns")
    assert (got.spec.devices.requests[0].exactly.allocation_mode, got.spec.devices.requests[0].exactly.count) == \
        ("ExactCount", 1)
    with pytest.raises(ApiException) as e:
        res.patch_namespaced_resource_claim("c", "ns", {"spec": {"devices": {"requests": [
            {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]}}})
    assert e.value.status == 422 and "field is immutable" in e.value.body


def test_claim_status_allocation_once_and_reserved_for(kube_emulator, res):
    kube_emulator.add_resource_claim("ns", "c", [{"name": "gpus", "deviceClassName": "gpu.nvidia.com"}])
    with pytest.raises(ApiException) as e:  # reservedFor without an allocation
        res.patch_namespaced_resource_claim_status("c", "ns", {"status": {"reservedFor": [
            {"resource": "pods", "name": "p", "uid": "u1"}]}})
    assert e.value.status == 422 and "status.reservedFor" in e.value.body
    with pytest.raises(ApiException) as e:  # a result for a request the claim does not have
        res.patch_namespaced_resource_claim_status("c", "ns", {"status": {"allocation": _alloc(request="nope")}})
    assert e.value.status == 422
    done = res.patch_namespaced_resource_claim_status("c", "ns", {"status": {
        "allocation": _alloc(), "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}]}})
    assert done.status.allocation.devices.results[0].device == "dev-0"
    again = res.patch_namespaced_resource_claim_status("c", "ns", {"status": {"allocation": _alloc()}})
    assert again.metadata.resource_version == done.metadata.resource_version  # same allocation: no-op
    with pytest.raises(ApiException) as e:
        res.patch_namespaced_resource_claim_status("c", "ns", {"status": {"allocation": _alloc(device="dev-1")}})
    assert e.value.status == 422 and "status.allocation" in e.value.body
    # the spec is untouched by a status write, the status by a spec write
    assert res.read_namespaced_resource_claim("c", "ns").status.reserved_for[0].uid == "u1"


def test_kubelet_starts_a_pod_only_once_its_claims_are_allocated_and_reserved(kube_emulator, kube_client, res):
    core = client.CoreV1Api(kube_client)
    kube_emulator.add_node("gb0", gpus=0)
    kube_emulator.add_resource_claim("ns", "c", [{"name": "gpus", "deviceClassName": "gpu.nvidia.com"}])
    pod = kube_emulator.add_pod("ns", "p", resource_claims=[{"name": "gpus", "resourceClaimName": "c"}],
                                node_name="gb0")
    kube_emulator.advance(5)
    assert core.read_namespaced_pod("p", "ns").status.phase == "Pending"
    res.patch_namespaced_resource_claim_status("c", "ns", {"status": {"allocation": _alloc()}})
    kube_emulator.advance(5)
    assert core.read_namespaced_pod("p", "ns").status.phase == "Pending"  # allocated, not reserved for it
    res.patch_namespaced_resource_claim_status("c", "ns", {"status": {"reservedFor": [
        {"resource": "pods", "name": "p", "uid": pod["metadata"]["uid"]}]}})
    kube_emulator.advance(5)
    assert core.read_namespaced_pod("p", "ns").status.phase == "Running"


def test_pod_resource_claims_are_validated(kube_emulator):
    from tests.support.kube_emulator import ApiError

    with pytest.raises(ApiError) as e:
        kube_emulator.add_pod("ns", "p", resource_claims=[{"name": "gpus"}])
    assert e.value.code == 422


def test_watch_device_classes(kube_emulator, res):
    kube_emulator.add_device_class("gpu.nvidia.com")
    rv = res.list_device_class().metadata.resource_version
    kube_emulator.add_device_class("compute-domain.nvidia.com")
    events = [(e["type"], e["object"].metadata.name) for e in watch.Watch().stream(
        res.list_device_class, resource_version=rv, timeout_seconds=1)]
    assert events == [("ADDED", "compute-domain.nvidia.com")]
