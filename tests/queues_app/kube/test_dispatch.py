"""The dispatcher against the API emulator, through the real ``kubernetes`` client over a socket:
a gang of pods with our scheduler name becomes one workload, a cycle places it, the dispatcher
binds every member (or none), reads each pod back and the database follows the cluster;
evictions free resources only once the pod is gone; events land on the pods."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from queues_app.choices import CycleStatus, TaskState
from queues_app.invariants import check_invariants
from queues_app.models import KubeOutbox, KubePod, SchedulingEvent, Task, Workload
from queues_app.cycle import faults
from queues_app.cycle.run import cycle_run
from queues_app.kube.outbox import kube_dispatch_due
from queues_app.kube.observed import kube_relist
from tests.queues_app.cycle_helpers import make_queues

pytestmark = pytest.mark.django_db(transaction=True)

NS = "team"
BIND_PATH = r"/pods/[^/]+/binding$"
EVICT_PATH = r"/pods/[^/]+/eviction$"


@pytest.fixture(autouse=True)
def kube_mode(settings, monkeypatch):
    from queues_app.kube import outbox

    settings.KAI_CLUSTER_MODE = "kubernetes"
    settings.KAI_KUBE_DISPATCH_SECONDS = 2
    settings.KAI_KUBE_MAX_ATTEMPTS = 4
    settings.KAI_KUBE_REQUEST_TIMEOUT = 2
    faults.clear()
    monkeypatch.setattr(outbox, "request_dispatch", lambda: None)  # tests call the dispatcher
    yield
    faults.clear()


def sync(emu) -> None:
    """What the sync loop would have stored: a full relist of nodes and pods."""
    rv = str(emu.resource_version)
    kube_relist(resource="nodes", objs=emu.list("nodes"), resource_version=rv)
    kube_relist(resource="pods", objs=emu.list("pods"), resource_version=rv)


def gang(emu, group: str, size: int, *, queue: str = "qa", gpu: int = 1, min_available: int | None = None) -> list:
    return [emu.add_pod(NS, f"{group}-{i}", labels={"kai.scheduler/queue": queue},
                        annotations={"kai.scheduler/pod-group": group,
                                     "kai.scheduler/min-available": str(min_available or size)},
                        requests={"nvidia.com/gpu": str(gpu), "cpu": "1", "memory": "1Gi"})
            for i in range(size)]


def dispatch(client, *, after: float = 0.0):
    return kube_dispatch_due(api_client=client, now=timezone.now() + timedelta(seconds=after))


def assert_invariants():
    violations = check_invariants()
    assert violations == [], [v.as_dict() for v in violations]


def task_states(group: str) -> list[str]:
    return list(Task.objects.filter(kube_pod__name__startswith=f"{group}-").order_by("kube_pod__name")
                .values_list("state", flat=True))


def node_of(emu, name: str) -> str:
    return ((emu.get("pods", NS, name) or {}).get("spec") or {}).get("nodeName") or ""


def binds_per_pod(emu) -> dict[str, int]:
    """Successful bindings per pod, from the emulator's request log."""
    out: dict[str, int] = {}
    for method, path, status in emu.requests:
        if method == "POST" and path.endswith("/binding") and status == 201:
            pod = path.split("/")[-2]
            out[pod] = out.get(pod, 0) + 1
    return out


@pytest.fixture
def cluster(kube_emulator):
    make_queues({"qa": 4, "qb": 4})
    kube_emulator.add_node("n0", gpus=4, gpu_memory_mib=81920)
    return kube_emulator


def test_a_gang_becomes_one_workload_and_is_bound_as_a_whole(cluster, kube_client):
    emu = cluster
    gang(emu, "train", 3)
    sync(emu)
    (wl,) = Workload.objects.all()
    assert wl.min_available == 3 and wl.tasks.count() == 3
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED and out.bound == 3
    assert task_states("train") == [TaskState.BINDING] * 3
    report = dispatch(kube_client)
    assert report.status == "ran" and report.failed == 0
    assert [node_of(emu, f"train-{i}") for i in range(3)] == ["n0"] * 3
    assert binds_per_pod(emu) == {"train-0": 1, "train-1": 1, "train-2": 1}
    # read back after each bind: the database confirmed what the cluster says
    assert task_states("train") == [TaskState.RUNNING] * 3
    assert set(KubeOutbox.objects.filter(kind="bind").values_list("status", "outcome")) == {("done", "bound")}
    # Scheduled events were posted on the pods in the same run
    events = [e for e in emu.list("events", NS) if e.get("reason") == "Scheduled"]
    assert sorted(e["involvedObject"]["name"] for e in events) == ["train-0", "train-1", "train-2"]
    assert all(e["involvedObject"]["uid"] == emu.get("pods", NS, e["involvedObject"]["name"])["metadata"]["uid"]
               for e in events)
    # a second run has nothing to do and sends no binding
    before = len(emu.requests)
    dispatch(kube_client, after=3)
    assert emu.count_requests("POST", BIND_PATH) == 3 and len(emu.requests) == before
    assert_invariants()


def test_a_gang_with_a_vanished_member_binds_none_and_is_placed_again(cluster, kube_client):
    emu = cluster
    gang(emu, "g", 3)
    sync(emu)
    cycle_run(trigger="test")
    emu.delete("pods", NS, "g-1")  # a pending pod is removed at once (no grace for unbound pods)
    assert emu.get("pods", NS, "g-1") is None
    report = dispatch(kube_client)
    assert emu.count_requests("POST", BIND_PATH) == 0, "no member is bound when one cannot be"
    assert report.outcomes.get("pod_gone") == 1 and report.outcomes.get("gang_aborted") == 2
    assert not Task.objects.filter(kube_pod__name="g-1").exists(), "the vanished pod's task is gone"
    assert task_states("g") == [TaskState.PENDING] * 2
    assert Task.objects.filter(node__isnull=False).count() == 0
    failed = [e for e in emu.list("events", NS) if e.get("reason") == "BindFailed"]
    assert sorted(e["involvedObject"]["name"] for e in failed) == ["g-0", "g-2"], "the aborted members say why"
    assert_invariants()
    # the controller recreates the pod: the gang is complete again and bound as a whole
    emu.add_pod(NS, "g-1", labels={"kai.scheduler/queue": "qa"},
                annotations={"kai.scheduler/pod-group": "g", "kai.scheduler/min-available": "3"},
                requests={"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"})
    sync(emu)
    assert Workload.objects.count() == 1
    assert cycle_run(trigger="test").bound == 3
    dispatch(kube_client, after=1)
    assert binds_per_pod(emu) == {"g-0": 1, "g-1": 1, "g-2": 1}
    assert task_states("g") == [TaskState.RUNNING] * 3
    assert_invariants()


def test_a_gang_member_bound_elsewhere_aborts_the_gang_and_the_cluster_wins(cluster, kube_client):
    emu = cluster
    emu.add_node("n1", gpus=4)
    gang(emu, "g", 2)
    sync(emu)
    cycle_run(trigger="test")
    target = KubeOutbox.objects.filter(kind="bind").first().node_name
    other = "n1" if target == "n0" else "n0"
    # someone else binds g-0 to the other node before we do
    from kubernetes import client as k8s

    k8s.CoreV1Api(kube_client).create_namespaced_pod_binding(
        name="g-0", namespace=NS, _preload_content=False,
        body=k8s.V1Binding(metadata=k8s.V1ObjectMeta(name="g-0"), target=k8s.V1ObjectReference(kind="Node", name=other)))
    dispatch(kube_client)
    assert node_of(emu, "g-0") == other and node_of(emu, "g-1") == ""
    t0 = Task.objects.get(kube_pod__name="g-0")
    assert t0.state == TaskState.RUNNING and t0.node.name == other, "the task follows the cluster"
    assert Task.objects.get(kube_pod__name="g-1").state == TaskState.PENDING
    assert binds_per_pod(emu) == {"g-0": 1}  # only the foreign binding
    assert_invariants()


def test_eviction_frees_resources_only_once_the_pod_is_gone(cluster, kube_client):
    emu = cluster
    gang(emu, "hog", 4, min_available=1)
    sync(emu)
    cycle_run(trigger="test")
    dispatch(kube_client)
    emu.advance(1)  # kubelet: bound pods start
    sync(emu)
    assert task_states("hog") == [TaskState.RUNNING] * 4
    wl = Workload.objects.get()
    from queues_app.services.workloads import workload_cancel

    workload_cancel(workload=wl)
    assert task_states("hog") == [TaskState.RELEASING] * 4
    report = dispatch(kube_client, after=1)
    assert report.evictions_requested == 4
    assert emu.count_requests("POST", EVICT_PATH, 201) == 4
    # graceful deletion: the pods still exist (terminating), the tasks still hold the node
    assert all(emu.get("pods", NS, f"hog-{i}")["metadata"].get("deletionTimestamp") for i in range(4))
    assert task_states("hog") == [TaskState.RELEASING] * 4
    assert Task.objects.filter(node__name="n0").count() == 4
    dispatch(kube_client, after=3)
    assert emu.count_requests("POST", EVICT_PATH) == 4, "one eviction per pod"
    emu.advance(60)  # the grace period elapses: the pods are removed
    sync(emu)
    assert Task.objects.filter(kube_pod__name__startswith="hog-").count() == 0
    cycle_run(trigger="test")  # the cancel (outside any cycle) left the queue status to the next cycle
    assert_invariants()


def test_a_stuck_eviction_is_reported_and_keeps_the_resources(cluster, kube_client, settings):
    emu = cluster
    settings.KAI_KUBE_STUCK_EVICTION_SECONDS = 30
    gang(emu, "s", 1)
    sync(emu)
    cycle_run(trigger="test")
    dispatch(kube_client)
    emu.advance(1)
    sync(emu)
    emu.mutate("pods", NS, "s-0", lambda p: p["metadata"].setdefault("finalizers", []).append("example.com/hold"))
    from queues_app.services.workloads import workload_cancel

    workload_cancel(workload=Workload.objects.get())
    dispatch(kube_client, after=1)
    emu.advance(60)
    sync(emu)
    t = Task.objects.get(kube_pod__name="s-0")
    assert t.state == TaskState.RELEASING and t.node is not None
    report = dispatch(kube_client, after=31)
    assert report.stuck == 1
    t.refresh_from_db()
    assert t.state == TaskState.STUCK_RELEASING and t.node.name == "n0"
    assert SchedulingEvent.objects.filter(reason="EvictionStuck", task=t).count() == 1
    assert [e["reason"] for e in emu.list("events", NS) if e.get("reason") == "EvictionStuck"] == ["EvictionStuck"]
    dispatch(kube_client, after=40)
    assert SchedulingEvent.objects.filter(reason="EvictionStuck").count() == 1, "reported once"
    # the finalizer is removed: the pod goes, the task with it
    emu.mutate("pods", NS, "s-0", lambda p: p["metadata"].update(finalizers=[]))
    emu.advance(1)
    sync(emu)
    assert not Task.objects.filter(kube_pod__name="s-0").exists()
    cycle_run(trigger="test")
    assert_invariants()


def test_reclaim_end_to_end_victims_evicted_then_the_gang_bound(cluster, kube_client):
    emu = cluster
    emu.add_node("n1", gpus=4)
    for i in range(8):
        emu.add_pod(NS, f"hog{i}", labels={"kai.scheduler/queue": "qa"},
                    requests={"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"})
    sync(emu)
    cycle_run(trigger="test")
    dispatch(kube_client)
    emu.advance(1)
    sync(emu)
    assert Task.objects.filter(state=TaskState.RUNNING).count() == 8
    gang(emu, "new", 4, queue="qb")
    sync(emu)
    for step in range(8):
        cycle_run(trigger="test")
        dispatch(kube_client, after=step * 3)
        emu.advance(60)
        sync(emu)
        assert_invariants()
        if task_states("new") == [TaskState.RUNNING] * 4:
            break
    assert task_states("new") == [TaskState.RUNNING] * 4
    assert all(n == 1 for n in binds_per_pod(emu).values()), "no pod bound twice"
    reclaimed = [e for e in emu.list("events", NS) if e.get("reason") == "Reclaimed"]
    assert len({e["involvedObject"]["name"] for e in reclaimed}) >= 4
    assert emu.count_requests("POST", EVICT_PATH, 201) >= 4
    assert_invariants()


def test_pending_reasons_are_written_as_events_once(cluster, kube_client):
    emu = cluster
    gang(emu, "big", 2, gpu=4)  # 8 GPUs on a 4-GPU node
    sync(emu)
    cycle_run(trigger="test")
    dispatch(kube_client)
    cycle_run(trigger="test")
    dispatch(kube_client, after=1)
    evs = [e for e in emu.list("events", NS) if e.get("reason") == "Unschedulable"]
    assert sorted(e["involvedObject"]["name"] for e in evs) == ["big-0", "big-1"]
    assert all(e["type"] == "Warning" and e["source"]["component"] == "kai-scheduler" for e in evs)
    assert KubePod.objects.filter(last_event_digest="").count() == 0
    assert KubeOutbox.objects.filter(kind="event", status="pending").count() == 0


def test_a_task_cancelled_before_its_bind_is_not_bound_and_its_pod_is_evicted(cluster, kube_client):
    from queues_app.services.workloads import workload_cancel

    emu = cluster
    gang(emu, "c", 2)
    sync(emu)
    cycle_run(trigger="test")
    workload_cancel(workload=Workload.objects.get())
    report = dispatch(kube_client)
    assert report.superseded == 2 and emu.count_requests("POST", BIND_PATH) == 0
    assert report.evictions_requested == 2 and emu.count_requests("POST", EVICT_PATH, 201) == 2
    # unbound pods are deleted at once: the tasks are gone with them
    assert emu.get("pods", NS, "c-0") is None
    assert Task.objects.count() == 0
    cycle_run(trigger="test")
    assert_invariants()


def test_a_second_dispatcher_skips_while_the_first_holds_the_lease(cluster, kube_client):
    from queues_app.kube.outbox import LEASE_NAME
    from queues_app.kube.observed import kube_lease_acquire

    emu = cluster
    gang(emu, "l", 1)
    sync(emu)
    cycle_run(trigger="test")
    assert kube_lease_acquire(name=LEASE_NAME, holder="other-replica", ttl_seconds=30, now=timezone.now())
    assert dispatch(kube_client).status == "skipped"
    assert emu.count_requests("POST", BIND_PATH) == 0
    assert dispatch(kube_client, after=31).status == "ran", "an expired lease is taken over"
    assert emu.count_requests("POST", BIND_PATH, 201) == 1
    from queues_app.models import KubeLease

    assert KubeLease.objects.get(name=LEASE_NAME).holder == "", "released after the run"


def test_the_celery_task_runs_the_dispatcher_with_the_configured_client(cluster, settings, tmp_path):
    from queues_app.tasks import kube_dispatch

    emu = cluster
    settings.KAI_KUBECONFIG = emu.write_kubeconfig(str(tmp_path / "kubeconfig"))
    gang(emu, "t", 1)
    sync(emu)
    cycle_run(trigger="test")
    assert kube_dispatch.apply().get()["done"] >= 1
    assert node_of(emu, "t-0") == "n0"
    settings.KAI_CLUSTER_MODE = "embedded"
    assert kube_dispatch.apply().get() == {"status": "off"}


def test_beat_and_route_exist_only_in_kubernetes_mode(settings):
    from kaiplatform.celery import _beat_schedule, _task_routes

    assert _beat_schedule()["kube-dispatch"]["schedule"] == 2.0
    assert _task_routes()["queues_app.tasks.kube_dispatch"] == {"queue": "dispatch"}
    settings.KAI_CLUSTER_MODE = "embedded"
    assert "kube-dispatch" not in _beat_schedule() and _task_routes() == {}


def test_the_syncs_invalid_queue_event_is_posted_on_the_pod(cluster, kube_client):
    emu = cluster
    emu.add_pod(NS, "lost", labels={"kai.scheduler/queue": "no-such-queue"}, requests={"cpu": "1"})
    sync(emu)
    assert Task.objects.count() == 0
    dispatch(kube_client)
    evs = [e for e in emu.list("events", NS) if e["involvedObject"]["name"] == "lost"]
    assert [e["reason"] for e in evs] == ["InvalidQueue"] and "no-such-queue" in evs[0]["message"]
    assert evs[0]["type"] == "Warning"
