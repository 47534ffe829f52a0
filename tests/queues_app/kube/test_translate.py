"""Pure translation of pod / node JSON (no database, no API server)."""
from __future__ import annotations

from decimal import Decimal

import pytest

from queues_app.errors import ApplicationError
from queues_app.kube import translate as tr

GiB = 2**30


def node(name="n1", *, alloc=None, labels=None, taints=None, unschedulable=None, ready="True"):
    obj = {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "7", "labels": labels or {}},
           "spec": {}, "status": {"allocatable": alloc if alloc is not None else
                                  {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}}}
    if taints is not None:
        obj["spec"]["taints"] = taints
    if unschedulable is not None:
        obj["spec"]["unschedulable"] = unschedulable
    if ready is not None:
        obj["status"]["conditions"] = [{"type": "MemoryPressure", "status": "False"},
                                       {"type": "Ready", "status": ready}]
    return obj


def pod(name="p0", *, containers=None, inits=None, annotations=None, labels=None, owners=None, **spec):
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "3",
                         "labels": {"kai.scheduler/queue": "qa"} if labels is None else labels,
                         "annotations": annotations or {}, "ownerReferences": owners or []},
            "spec": {"schedulerName": "kai-scheduler",
                     "containers": containers if containers is not None else
                     [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                                  "limits": {"nvidia.com/gpu": "1"}}}],
                     **({"initContainers": inits} if inits is not None else {}), **spec},
            "status": {"phase": "Pending"}}


def fields(obj):
    return tr.pod_fields(obj, queue_label="kai.scheduler/queue")


@pytest.mark.parametrize("value,expected", [
    ("1", Decimal(1)), ("500m", Decimal("0.5")), ("4Gi", Decimal(4 * GiB)), ("1Ki", Decimal(1024)),
    ("2k", Decimal(2000)), ("3M", Decimal(3 * 10**6)), ("1G", Decimal(10**9)), ("1e3", Decimal(1000)),
    ("1E3", Decimal(1000)), ("2E", Decimal(2 * 10**18)), ("1.5Gi", Decimal(3 * 2**29)), (".5", Decimal("0.5")),
    ("100u", Decimal("0.0001")), ("+2", Decimal(2)), (3, Decimal(3)), ("12e-1", Decimal("1.2")),
])
def test_quantities_follow_the_kubernetes_grammar(value, expected):
    assert tr.parse_quantity(value, field_name="x") == expected


@pytest.mark.parametrize("value", ["", "abc", "1Gb", "1 Gi", "-1", "1.2.3", None, True, "1e999", "Mi"])
def test_bad_quantities_name_the_field(value):
    with pytest.raises(ApplicationError) as exc:
        tr.parse_quantity(value, field_name="pod container c resources cpu")
    assert "pod container c resources cpu" in exc.value.extra


def test_cpu_and_memory_round_up():
    assert tr.quantity_millis("0.0001", field_name="cpu") == 1  # MilliValue rounds up
    assert tr.quantity_millis("250m", field_name="cpu") == 250
    assert tr.quantity_units("1.5", field_name="memory") == 2


def test_node_capacity_labels_and_readiness():
    info = tr.node_fields(node(labels={"nvidia.com/gpu.memory": "81920", "zone": "a"}),
                          gpu_memory_label="nvidia.com/gpu.memory", default_gpu_memory_mib=0)
    assert (info.name, info.uid, info.resource_version) == ("n1", "uid-n1", "7")
    f = info.fields
    assert (f["gpus"], f["cpu_millis"], f["memory_bytes"]) == (8, 64_000, 512 * GiB)
    assert f["gpu_memory_mib"] == 81920 and f["labels"]["zone"] == "a"
    assert f["ready"] is True and f["unschedulable"] is False


def test_node_gpu_memory_falls_back_to_the_configured_default():
    info = tr.node_fields(node(), gpu_memory_label="nvidia.com/gpu.memory", default_gpu_memory_mib=40960)
    assert info.fields["gpu_memory_mib"] == 40960
    with pytest.raises(ApplicationError) as exc:
        tr.node_fields(node(labels={"nvidia.com/gpu.memory": "80GB"}), gpu_memory_label="nvidia.com/gpu.memory",
                       default_gpu_memory_mib=0)
    assert "node label nvidia.com/gpu.memory" in exc.value.extra


@pytest.mark.parametrize("taints,cordoned,expected", [
    ([], None, False),
    ([{"key": "a", "effect": "PreferNoSchedule"}], None, False),
    ([{"key": "a", "effect": "NoSchedule"}], None, True),
    ([{"key": "a", "value": "b", "effect": "NoExecute"}], None, True),
    ([], True, True),
])
def test_taints_and_cordon_make_a_node_unschedulable(taints, cordoned, expected):
    info = tr.node_fields(node(taints=taints, unschedulable=cordoned), gpu_memory_label="x",
                          default_gpu_memory_mib=0)
    assert info.fields["unschedulable"] is expected
    assert info.taints == taints


@pytest.mark.parametrize("ready,expected", [("True", True), ("False", False), ("Unknown", False), (None, False)])
def test_a_node_is_ready_only_when_its_ready_condition_is_true(ready, expected):
    assert tr.node_fields(node(ready=ready), gpu_memory_label="x", default_gpu_memory_mib=0).fields["ready"] is expected


def test_node_without_gpus_and_fractional_gpu_capacity():
    assert tr.node_fields(node(alloc={"cpu": "4", "memory": "8Gi"}), gpu_memory_label="x",
                          default_gpu_memory_mib=0).fields["gpus"] == 0
    with pytest.raises(ApplicationError) as exc:
        tr.node_fields(node(alloc={"nvidia.com/gpu": "1.5"}), gpu_memory_label="x", default_gpu_memory_mib=0)
    assert "node allocatable nvidia.com/gpu" in exc.value.extra


def test_pod_requests_sum_containers_and_take_limits_as_requests():
    info = fields(pod(containers=[
        {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": 2}}},
        {"name": "b", "resources": {"limits": {"cpu": "250m", "memory": "512Mi"}}},
        {"name": "c"},
    ]))
    assert info.task["cpu_millis"] == 1250 and info.task["memory_bytes"] == GiB + 512 * 2**20
    assert info.task["gpu"] == Decimal(2) and info.task["gpu_memory_mib"] is None


def test_init_containers_count_at_their_peak_and_sidecars_add_up():
    c = [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]
    assert fields(pod(containers=c, inits=[{"name": "i", "resources": {"requests": {"cpu": "3"}}}])
                  ).task["cpu_millis"] == 3000
    assert fields(pod(containers=c, inits=[{"name": "i", "resources": {"requests": {"cpu": "500m"}}}])
                  ).task["cpu_millis"] == 1000
    sidecar = {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "200m"}}}
    later_init = {"name": "i", "resources": {"requests": {"cpu": "2"}}}
    assert fields(pod(containers=c, inits=[sidecar, later_init])).task["cpu_millis"] == 2200
    assert fields(pod(containers=c, inits=[sidecar])).task["cpu_millis"] == 1200


def test_pod_overhead_is_added():
    info = fields(pod(overhead={"cpu": "100m", "memory": "64Mi"}))
    assert info.task["cpu_millis"] == 600 and info.task["memory_bytes"] == GiB + 64 * 2**20


def test_gpu_fraction_and_gpu_memory_annotations():
    no_gpu = [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
    half = fields(pod(containers=no_gpu, annotations={"gpu-fraction": "0.5"}))
    assert half.task["gpu"] == Decimal("0.5") and half.task["gpu_memory_mib"] is None
    mem = fields(pod(containers=no_gpu, annotations={"gpu-memory": "20000"}))
    assert mem.task["gpu"] == 0 and mem.task["gpu_memory_mib"] == 20000


@pytest.mark.parametrize("annotations,field_name", [
    ({"gpu-fraction": "1.5"}, "pod annotation gpu-fraction"),
    ({"gpu-fraction": "0"}, "pod annotation gpu-fraction"),
    ({"gpu-fraction": "half"}, "pod annotation gpu-fraction"),
    ({"gpu-fraction": "NaN"}, "pod annotation gpu-fraction"),
    ({"gpu-fraction": "0.123456"}, "pod annotation gpu-fraction"),
    ({"gpu-memory": "20GiB"}, "pod annotation gpu-memory"),
    ({"gpu-memory": "0"}, "pod annotation gpu-memory"),
    ({"gpu-memory": "10", "gpu-fraction": "0.5"}, "pod annotation gpu-memory"),
    ({"kai.scheduler/min-available": "two"}, "pod annotation kai.scheduler/min-available"),
    ({"kai.scheduler/min-available": "0"}, "pod annotation kai.scheduler/min-available"),
])
def test_bad_annotations_name_the_annotation(annotations, field_name):
    no_gpu = [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]
    with pytest.raises(ApplicationError) as exc:
        fields(pod(containers=no_gpu, annotations=annotations))
    assert field_name in exc.value.extra


def test_a_fraction_together_with_a_whole_gpu_request_is_refused():
    with pytest.raises(ApplicationError) as exc:
        fields(pod(annotations={"gpu-fraction": "0.5"}))
    assert "pod annotation gpu-fraction" in exc.value.extra


def test_bad_container_quantity_names_the_container():
    with pytest.raises(ApplicationError) as exc:
        fields(pod(containers=[{"name": "trainer", "resources": {"requests": {"memory": "lots"}}}]))
    assert "pod container trainer resources memory" in exc.value.extra


def test_group_key_annotation_then_controller_then_the_pod():
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j1", "controller": True}
    plain_owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "c1"}
    assert fields(pod(annotations={"pod-group-name": "pg-1"}, owners=[job])).group == "podgroup/pg-1"
    assert fields(pod(annotations={"kai.scheduler/pod-group": "pg-2"})).group == "podgroup/pg-2"
    info = fields(pod(owners=[plain_owner, job]))
    assert info.group == "Job/train" and info.owner["uid"] == "j1"
    assert fields(pod(name="solo", owners=[plain_owner])).group == "pod/solo"


def test_queue_priority_gang_selector_and_status():
    obj = pod(annotations={"kai.scheduler/min-available": "4"}, priority=100, nodeSelector={"zone": "a"},
              nodeName="n1")
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    obj["status"]["phase"] = "Running"
    info = fields(obj)
    assert (info.queue, info.min_available, info.priority) == ("qa", 4, 100)
    assert info.task["node_selector"] == {"zone": "a"}
    assert info.status == tr.PodStatus(node_name="n1", phase="Running", deleting=True,
                                       deletion_timestamp="2026-01-01T00:00:00Z")
    assert fields(pod(labels={})).queue is None
    assert fields(pod(labels={"kai.scheduler/queue": "  "})).queue is None


def test_metadata_errors():
    with pytest.raises(ApplicationError):
        fields({"metadata": {"name": "x"}, "spec": {}})  # no uid
    with pytest.raises(ApplicationError):
        fields({"spec": {}})
    with pytest.raises(ApplicationError) as exc:
        fields(pod(priority="high"))
    assert "pod spec.priority" in exc.value.extra


@pytest.mark.parametrize("obj,expected", [
    ({"kind": "Job", "spec": {"parallelism": 3}}, 3),
    ({"kind": "Job", "spec": {}}, 1),
    ({"kind": "ReplicaSet", "spec": {"replicas": 5}}, 5),
    ({"kind": "StatefulSet", "spec": {"replicas": 0}}, 1),
    ({"kind": "Deployment", "spec": {"replicas": 2}}, 2),
    ({"kind": "PyTorchJob", "spec": {"replicas": 2}}, None),
])
def test_owner_replicas(obj, expected):
    assert tr.owner_replicas(obj) == expected


def test_owner_replicas_bad_value():
    with pytest.raises(ApplicationError) as exc:
        tr.owner_replicas({"kind": "Job", "spec": {"parallelism": "3"}})
    assert "job spec.parallelism" in exc.value.extra
