"""KAI PodGroups with subgroups and DRA devices on the Kubernetes path, against the API emulator
through the official client: the sync reads PodGroup trees, DeviceClasses, ResourceSlices and
ResourceClaims into rows; a cycle places the tasks; the dispatcher allocates and reserves each pod's
claims (the devices the cycle chose) before binding it, with the same fault handling as pods."""
from __future__ import annotations

import pytest

from queues_app.choices import TaskState
from queues_app.models import KubeOutbox, Node, SubGroup, Task, Workload
from queues_app.cycle.run import cycle_run
from queues_app.kube.observed_dra import kube_dra_relist
from tests.queues_app.kube.test_dispatch import (  # noqa: F401 - fixtures
    NS,
    assert_invariants,
    dispatch,
    kube_mode,
    node_of,
    sync as sync_pods,
)
from tests.queues_app.cycle_helpers import make_queues

pytestmark = pytest.mark.django_db(transaction=True)
CLAIM_STATUS = r"/resourceclaims/[^/]+/status$"
BIND_PATH = r"/pods/[^/]+/binding$"


def sync(emu) -> None:
    """A full relist of every resource, in the loop's order: nodes, device classes, slices, pods,
    claims, pod groups."""
    rv = str(emu.resource_version)
    from queues_app.kube.observed import kube_relist

    kube_relist(resource="nodes", objs=emu.list("nodes"), resource_version=rv)
    kube_dra_relist(resource="deviceclasses", objs=emu.list("deviceclasses"), resource_version=rv)
    kube_dra_relist(resource="resourceslices", objs=emu.list("resourceslices"), resource_version=rv)
    kube_relist(resource="pods", objs=emu.list("pods"), resource_version=rv)
    kube_dra_relist(resource="resourceclaims", objs=emu.list("resourceclaims"), resource_version=rv)
    kube_dra_relist(resource="podgroups", objs=emu.list("podgroups"), resource_version=rv)


@pytest.fixture
def dra_cluster(kube_emulator):
    make_queues({"qa": 8, "qb": 8})
    emu = kube_emulator
    emu.add_device_class("gpu.nvidia.com")
    emu.add_device_class("compute-domain.nvidia.com")
    for n in ("gb0", "gb1"):
        emu.add_node(n, gpus=0)
        emu.add_resource_slice(n, "gpu.nvidia.com", [f"gpu-{i}" for i in range(4)])
        emu.add_resource_slice(n, "compute-domain.nvidia.com", ["channel-0"])
    return emu


def claim_pod(emu, name: str, *, gpus: int = 2, channel: bool = False, queue: str = "qa"):
    reqs = [{"name": "gpus", "deviceClassName": "gpu.nvidia.com", "count": gpus}]
    if channel:
        reqs.append({"name": "channel", "deviceClassName": "compute-domain.nvidia.com"})
    emu.add_resource_claim(NS, f"{name}-claim", reqs)
    return emu.add_pod(NS, name, labels={"kai.scheduler/queue": queue}, requests={"cpu": "1", "memory": "1Gi"},
                       resource_claims=[{"name": "devices", "resourceClaimName": f"{name}-claim"}])


def claim_of(emu, name: str) -> dict:
    return emu.get("resourceclaims", NS, f"{name}-claim")


def test_nodes_devices_and_task_claims_come_from_the_dra_objects(dra_cluster):
    emu = dra_cluster
    claim_pod(emu, "imex", gpus=4, channel=True)
    sync(emu)
    gb0 = Node.objects.get(name="gb0")
    assert gb0.gpus == 0 and gb0.devices == {"gpu.nvidia.com": 4, "compute-domain.nvidia.com": 1}
    assert gb0.dra_gpus == 4  # a class named *gpu* counts as GPUs (KAI IsGPUDeviceClass)
    task = Task.objects.get(kube_pod__name="imex")
    assert task.claims == [{"device_class": "compute-domain.nvidia.com", "count": 1},
                           {"device_class": "gpu.nvidia.com", "count": 4}]
    assert task.dra_gpus == 4 and task.gpu == 0
    # a slice that goes away takes its devices with it; the relist is idempotent
    emu.delete("resourceslices", None, next(s["metadata"]["name"] for s in emu.list("resourceslices")
                                           if s["spec"]["nodeName"] == "gb1" and s["spec"]["driver"] != "gpu.nvidia.com"))
    sync(emu)
    sync(emu)
    assert Node.objects.get(name="gb1").devices == {"gpu.nvidia.com": 4}


def test_a_claim_is_allocated_and_reserved_before_its_pod_is_bound(dra_cluster, kube_client):
    emu = dra_cluster
    claim_pod(emu, "imex", gpus=4, channel=True)
    sync(emu)
    assert cycle_run(trigger="test").bound == 1
    task = Task.objects.get(kube_pod__name="imex")
    assert task.state == TaskState.BINDING and task.devices == {"gpu.nvidia.com": [0, 1, 2, 3],
                                                               "compute-domain.nvidia.com": [0]}
    dispatch(kube_client)
    node = node_of(emu, "imex")
    claim = claim_of(emu, "imex")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert sorted((r["request"], r["device"]) for r in results) == [
        ("channel", "channel-0"), ("gpus", "gpu-0"), ("gpus", "gpu-1"), ("gpus", "gpu-2"), ("gpus", "gpu-3")]
    assert all(r["pool"] == node for r in results)
    assert claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [node]
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [emu.get("pods", NS, "imex")["metadata"]["uid"]]
    # the claim was written before the bind (the kubelet starts the pod once both are there)
    paths = [p for m, p, _s in emu.requests if m in ("POST", "PATCH")]
    assert next(i for i, p in enumerate(paths) if "resourceclaims" in p) < next(
        i for i, p in enumerate(paths) if p.endswith("/binding"))
    emu.advance(5)
    sync(emu)
    task.refresh_from_db()
    assert emu.get("pods", NS, "imex")["status"]["phase"] == "Running"
    assert task.state == TaskState.RUNNING and task.devices["gpu.nvidia.com"] == [0, 1, 2, 3]
    assert_invariants()


def test_devices_held_by_running_pods_are_read_from_their_allocation(dra_cluster, kube_client):
    """Another scheduler's allocation (devices 2 and 3) is respected: the next claim gets 0 and 1."""
    emu = dra_cluster
    claim_pod(emu, "old", gpus=2)
    res = {"devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gb0", "device": "gpu-2"},
                                   {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gb0", "device": "gpu-3"}]}}
    emu.mutate("resourceclaims", NS, "old-claim", lambda c: c.__setitem__("status", {
        "allocation": res, "reservedFor": [{"resource": "pods", "name": "old",
                                            "uid": emu.get("pods", NS, "old")["metadata"]["uid"]}]}))
    emu.mutate("pods", NS, "old", lambda p: p["spec"].__setitem__("nodeName", "gb0"))
    emu.delete("resourceslices", None, next(s["metadata"]["name"] for s in emu.list("resourceslices")
                                           if s["spec"]["nodeName"] == "gb1" and s["spec"]["driver"] == "gpu.nvidia.com"))
    claim_pod(emu, "new", gpus=2)
    sync(emu)
    assert Task.objects.get(kube_pod__name="old").devices == {"gpu.nvidia.com": [2, 3]}
    cycle_run(trigger="test")
    assert Task.objects.get(kube_pod__name="new").devices == {"gpu.nvidia.com": [0, 1]}
    dispatch(kube_client)
    got = sorted(r["device"] for r in claim_of(emu, "new")["status"]["allocation"]["devices"]["results"])
    assert got == ["gpu-0", "gpu-1"]


def test_a_pod_group_tree_shapes_its_workload(dra_cluster, kube_client):
    emu = dra_cluster
    emu.add_node("n0", gpus=4, labels={"rack": "r0"})
    emu.add_node("n1", gpus=4, labels={"rack": "r1"})
    emu.add_pod_group(NS, "serve", queue="qa", min_subgroup=2, sub_groups=[
        {"name": "decode", "minSubGroup": 2, "topologyConstraint": {"requiredTopologyLevel": "rack"}},
        {"name": "decode-leader", "parent": "decode", "minMember": 1},
        {"name": "decode-workers", "parent": "decode", "minMember": 2},
        {"name": "prefill", "minMember": 1}])
    for name, leaf in (("l0", "decode-leader"), ("w0", "decode-workers"), ("w1", "decode-workers"),
                       ("p0", "prefill")):
        emu.add_pod(NS, name, labels={"kai.scheduler/queue": "qa", "kai.scheduler/subgroup-name": leaf},
                    annotations={"kai.scheduler/pod-group": "serve"},
                    requests={"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"})
    sync(emu)
    (wl,) = Workload.objects.filter(sub_groups__isnull=False).distinct()
    assert wl.min_sub_groups == 2 and wl.min_available == 4
    assert dict(SubGroup.objects.filter(workload=wl).values_list("name", "topology_required")) == {
        "decode": "rack", "decode-leader": "", "decode-workers": "", "prefill": ""}
    assert dict(Task.objects.filter(workload=wl).values_list("kube_pod__name", "sub_group__name")) == {
        "l0": "decode-leader", "w0": "decode-workers", "w1": "decode-workers", "p0": "prefill"}
    assert cycle_run(trigger="test").bound == 4
    racks = {Task.objects.get(kube_pod__name=p).node.labels.get("rack") for p in ("l0", "w0", "w1")}
    assert len(racks) == 1  # decode in one rack
    dispatch(kube_client)
    assert all(node_of(emu, p) for p in ("l0", "w0", "w1", "p0"))
    assert_invariants()


def test_a_pod_group_the_engine_refuses_is_reported_and_not_applied(dra_cluster):
    emu = dra_cluster
    emu.add_pod_group(NS, "bad", queue="qa", sub_groups=[{"name": "a", "parent": "nope", "minMember": 1}])
    emu.add_pod(NS, "b0", labels={"kai.scheduler/queue": "qa", "kai.scheduler/subgroup-name": "a"},
                annotations={"kai.scheduler/pod-group": "bad"}, requests={"cpu": "1", "memory": "1Gi"})
    sync(emu)
    from queues_app.models import SchedulingEvent

    ev = SchedulingEvent.objects.get(reason="InvalidPodGroup")
    assert "unknown parent subgroup 'nope'" in ev.message and "sub_groups[0].parent" in ev.message
    assert not SubGroup.objects.exists()


# ----------------------------------------------------------------------------- faults, as for pods


def placed(emu, name="imex"):
    claim_pod(emu, name, gpus=4, channel=True)
    sync(emu)
    assert cycle_run(trigger="test").bound == 1


def test_claim_write_performed_but_answered_500_is_not_repeated(dra_cluster, kube_client):
    emu = dra_cluster
    placed(emu)
    emu.faults.add("PATCH", CLAIM_STATUS, status=500, after=True)
    dispatch(kube_client)
    row = KubeOutbox.objects.get(kind="bind")
    assert row.status == "pending" and not node_of(emu, "imex")  # no bind before the claim is confirmed
    dispatch(kube_client, after=2)
    assert node_of(emu, "imex") and KubeOutbox.objects.get(kind="bind").status == "done"
    assert emu.count_requests("PATCH", CLAIM_STATUS) == 1  # the retry saw it done, wrote nothing
    assert len(claim_of(emu, "imex")["status"]["reservedFor"]) == 1
    assert_invariants()


@pytest.mark.parametrize("fault", [{"status": 503}, {"status": 429}, {"drop_connection": True}])
def test_claim_write_refused_for_now_is_retried(dra_cluster, kube_client, fault):
    emu = dra_cluster
    placed(emu)
    emu.faults.add("PATCH", CLAIM_STATUS, **fault)
    report = dispatch(kube_client)
    assert report.retried == 1 and not node_of(emu, "imex")
    assert not (claim_of(emu, "imex").get("status") or {}).get("allocation")
    dispatch(kube_client, after=2)
    assert node_of(emu, "imex")
    assert claim_of(emu, "imex")["status"]["allocation"]
    assert_invariants()


def test_a_stale_reservation_is_dropped_and_the_claim_taken_over(dra_cluster, kube_client):
    """The claim was allocated (elsewhere) for a pod that no longer exists: its allocation is cleared
    and rewritten with the devices the cycle chose."""
    emu = dra_cluster
    placed(emu)
    res = {"devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "elsewhere",
                                    "device": "gpu-9"}]}}
    emu.mutate("resourceclaims", NS, "imex-claim", lambda c: c.__setitem__("status", {
        "allocation": res, "reservedFor": [{"resource": "pods", "name": "gone", "uid": "0000-gone"}]}))
    dispatch(kube_client)
    row = KubeOutbox.objects.get(kind="bind")
    assert row.status == "done" and node_of(emu, "imex")
    status = claim_of(emu, "imex")["status"]
    assert {r["pool"] for r in status["allocation"]["devices"]["results"]} == {node_of(emu, "imex")}
    assert [r["name"] for r in status["reservedFor"]] == ["imex"]
    assert_invariants()


def test_a_claim_reserved_by_a_live_pod_fails_the_bind_and_the_task_is_placed_again(dra_cluster, kube_client):
    emu = dra_cluster
    placed(emu)
    mate = emu.add_pod(NS, "mate", scheduler_name="other-scheduler", requests={"cpu": "1"})
    mate_uid = mate["metadata"]["uid"]
    res = {"devices": {"results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "gb1", "device": "gpu-3"}]}}
    emu.mutate("resourceclaims", NS, "imex-claim", lambda c: c.__setitem__("status", {
        "allocation": res, "reservedFor": [{"resource": "pods", "name": "mate", "uid": mate_uid}]}))
    dispatch(kube_client)
    row = KubeOutbox.objects.filter(kind="bind", pod_name="imex").get()
    assert row.status == "failed" and row.outcome == "claims_refused" and "reserved by mate" in row.last_error
    assert not node_of(emu, "imex")
    assert Task.objects.get(kube_pod__name="imex").state == TaskState.PENDING
    assert emu.count_requests("POST", BIND_PATH) == 0 or node_of(emu, "mate")
