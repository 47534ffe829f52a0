"""The sync loop against the API emulator, always through the real ``kubernetes`` client over a
socket: list + watch, resume, 410 relist, node removal, leader election; and the kube_sync
services fed plain dicts (idempotency, state following, rejections)."""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.utils import timezone
from kubernetes import client

from queues_app.choices import TaskState, WorkloadStatus
from queues_app.invariants import check_invariants
from queues_app.kube import translate
from queues_app.kube.reflector import Gone, KubeSync, OwnerResolver, Reflector
from queues_app.models import (
    KubeLease,
    KubeNode,
    KubeOutbox,
    KubePod,
    KubeSyncCursor,
    KubeWorkloadRef,
    Node,
    QueueStatus,
    SchedulingEvent,
    Task,
    Workload,
)
from queues_app.kube import observed
from queues_app.cycle.run import cycle_run
from queues_app.services.queues import queue_create

pytestmark = pytest.mark.django_db

QUEUE = {"kai.scheduler/queue": "qa"}
GPU1 = {"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"}


@pytest.fixture
def kube(settings):
    settings.KAI_CLUSTER_MODE = "kubernetes"
    root = queue_create(name="root", quotas={"gpu": {"quota": 16}})
    return {"root": root, "qa": queue_create(name="qa", parent=root, quotas={"gpu": {"quota": 16}})}


@pytest.fixture
def sync(kube, kube_client):
    return KubeSync(api_client=kube_client, holder="replica-a", watch_timeout=1, request_timeout=5)


def assert_invariants():
    assert check_invariants() == [], [v.as_dict() for v in check_invariants()]


def tasks():
    return {t.name: (t.state, t.node.name if t.node else None)
            for t in Task.objects.select_related("node").order_by("name")}


def gang(em, n=3, *, group="g", prefix="p", min_available="3", **kw):
    for i in range(n):
        ann = {"pod-group-name": group}
        if min_available:
            ann["kai.scheduler/min-available"] = min_available
        em.add_pod("ns", f"{prefix}{i}", labels=QUEUE, annotations=ann, requests=GPU1, **kw)


def bind(kube_client, name, node, namespace="ns"):
    body = client.V1Binding(metadata=client.V1ObjectMeta(name=name),
                            target=client.V1ObjectReference(kind="Node", name=node, api_version="v1"))
    client.CoreV1Api(kube_client).create_namespaced_binding(namespace, body, _preload_content=False)


# ----------------------------------------------------------------------------- list + grouping


def test_a_gang_of_our_pods_becomes_one_workload_and_other_schedulers_are_ignored(kube_emulator, sync):
    em = kube_emulator
    em.add_node("n1", gpus=4, gpu_memory_mib=81920)
    gang(em, 3)
    em.add_pod("ns", "theirs", scheduler_name="default-scheduler", labels=QUEUE, requests=GPU1)
    assert sync.sync_once()
    wl = Workload.objects.get()
    assert (wl.name, wl.min_available, wl.queue.name, wl.status) == ("ns.podgroup-g", 3, "qa", WorkloadStatus.PENDING)
    assert KubeWorkloadRef.objects.get(workload=wl).group == "podgroup/g"
    assert sorted(Task.objects.values_list("name", "state", "gpu")) == [
        ("p0", "Pending", 1), ("p1", "Pending", 1), ("p2", "Pending", 1)]
    assert not KubePod.objects.filter(name="theirs").exists()
    # the field selector keeps other schedulers' pods off the wire entirely
    pod_queries = [r.query for r in em.request_records if r.method == "GET" and r.path == "/api/v1/pods"]
    assert pod_queries and all("fieldSelector=spec.schedulerName%3Dkai-scheduler" in q for q in pod_queries)
    node = Node.objects.get(name="n1")
    assert (node.gpus, node.gpu_memory_mib, node.ready, node.unschedulable) == (4, 81920, True, False)
    assert KubeNode.objects.get(node=node).uid == em.get("nodes", None, "n1")["metadata"]["uid"]
    # a later pod of the same group joins it through the watch
    em.add_pod("ns", "p3", labels=QUEUE, annotations={"pod-group-name": "g"}, requests=GPU1)
    sync.pods.watch_once()
    assert Workload.objects.count() == 1 and Task.objects.filter(workload=wl).count() == 4
    assert KubeSyncCursor.objects.get(resource="pods").resource_version == sync.pods.resource_version
    assert_invariants()


def test_grouping_by_controller_and_single_pods(kube_emulator, sync):
    em = kube_emulator
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-uid-1"}
    em.add_pod("ns", "train-a", labels=QUEUE, owner=job, requests=GPU1)
    em.add_pod("ns", "train-b", labels=QUEUE, owner=job, requests=GPU1)
    em.add_pod("ns", "solo", labels=QUEUE, requests={"cpu": "250m"})
    assert sync.sync_once()
    groups = dict(KubeWorkloadRef.objects.values_list("group", "owner_uid"))
    assert groups == {"Job/train": "job-uid-1", "pod/solo": ""}
    train = Workload.objects.get(kube_ref__group="Job/train")
    # no Job object named "train" exists (GET answers 404): the replica count is unknown -> gang of 1
    assert train.min_available == 1 and train.tasks.count() == 2


def test_owner_controllers_read_through_the_api_give_group_and_gang_size(kube_emulator, sync):
    em = kube_emulator
    job = em.add_owner("Job", "ns", "train", parallelism=3)
    deploy = em.add_owner("Deployment", "ns", "web", replicas=2)
    rs = em.add_owner("ReplicaSet", "ns", "web-5d8f", replicas=2, owner=deploy)
    cron = em.add_owner("CronJob", "ns", "nightly", parallelism=2)
    run = em.add_owner("Job", "ns", "nightly-290", parallelism=2, owner=cron)
    for i in range(3):
        em.add_pod("ns", f"train-{i}", labels=QUEUE, owner=job, requests=GPU1)
    em.add_pod("ns", "web-5d8f-a", labels=QUEUE, owner=rs, requests={"cpu": "1"})
    assert sync.sync_once()
    em.add_pod("ns", "web-5d8f-b", labels=QUEUE, owner=rs, requests={"cpu": "1"})  # through the watch
    em.add_pod("ns", "nightly-290-a", labels=QUEUE, owner=run, requests={"cpu": "1"})
    sync.pods.watch_once()
    got = {r.group: (r.owner_uid, r.workload.min_available, r.workload.tasks.count())
           for r in KubeWorkloadRef.objects.select_related("workload")}
    assert got == {
        "Job/train": (job["metadata"]["uid"], 3, 3),
        "Deployment/web": (deploy["metadata"]["uid"], 2, 2),  # the top owner, not the ReplicaSet
        "Job/nightly-290": (run["metadata"]["uid"], 2, 1),  # each CronJob run is its own workload
    }


def test_owner_resolver_climbs_to_the_top_controller_and_takes_its_replicas():
    objs = {
        ("ReplicaSet", "web-1"): {"kind": "ReplicaSet", "spec": {"replicas": 3}, "metadata": {"ownerReferences": [
            {"kind": "Deployment", "name": "web", "uid": "d1", "controller": True}]}},
        ("Deployment", "web"): {"kind": "Deployment", "spec": {"replicas": 5}, "metadata": {}},
        ("Job", "nightly-1"): {"kind": "Job", "spec": {"parallelism": 4}, "metadata": {"ownerReferences": [
            {"kind": "CronJob", "name": "nightly", "uid": "c1", "controller": True}]}},
        ("ReplicaSet", "orphan-1"): {"kind": "ReplicaSet", "spec": {"replicas": 2}, "metadata": {"ownerReferences": [
            {"kind": "Deployment", "name": "gone", "uid": "d2", "controller": True}]}},
    }

    class Fake(OwnerResolver):
        def _get(self, namespace, ref):
            self.lookups += 1
            return objs.get((ref["kind"], ref["name"]))

    def pod(kind, name, **ann):
        return {"metadata": {"namespace": "ns", "annotations": ann, "ownerReferences": [
            {"kind": kind, "name": name, "uid": f"u-{name}", "controller": True}]}}

    r = Fake(None, request_timeout=1)
    assert r.resolve(pod("ReplicaSet", "web-1")) == translate.OwnerInfo("Deployment/web", "d1", 5)
    assert r.resolve(pod("Job", "nightly-1")) == translate.OwnerInfo("Job/nightly-1", "u-nightly-1", 4)
    # the Deployment cannot be read: grouped by it anyway, counted by the ReplicaSet
    assert r.resolve(pod("ReplicaSet", "orphan-1")) == translate.OwnerInfo("Deployment/gone", "d2", 2)
    assert r.resolve(pod("Job", "nightly-1", **{"pod-group-name": "x"})) is None
    before = r.lookups
    r.resolve(pod("ReplicaSet", "web-1"))
    assert r.lookups == before  # cached


def test_owner_replicas_set_the_gang_size_when_there_is_no_annotation(kube):
    obj = _pod_obj("w-0", owners=[{"kind": "Job", "name": "w", "uid": "j", "controller": True}])
    task = observed.kube_pod_observed(obj=obj, owner=translate.OwnerInfo("Job/w", "j", 4))
    assert task.workload.min_available == 4
    annotated = _pod_obj("v-0", annotations={"kai.scheduler/min-available": "2"},
                         owners=[{"kind": "Job", "name": "v", "uid": "k", "controller": True}])
    assert observed.kube_pod_observed(obj=annotated, owner=translate.OwnerInfo("Job/v", "k", 4)).workload.min_available == 2


# ----------------------------------------------------------------------------- rejections


@pytest.mark.parametrize("labels,needle", [
    ({}, "has no kai.scheduler/queue label"),
    ({"kai.scheduler/queue": "nope"}, "names no queue"),
    ({"kai.scheduler/queue": "root"}, "names a queue with child queues"),
])
def test_queue_label_errors_give_an_event_and_no_rows(kube_emulator, sync, labels, needle):
    kube_emulator.add_pod("ns", "bad", labels=labels, requests=GPU1)
    gang(kube_emulator, 1, group="ok", min_available="1")
    assert sync.sync_once()
    assert not KubePod.objects.filter(name="bad").exists() and KubePod.objects.filter(name="p0").exists()
    ev = SchedulingEvent.objects.get(reason="InvalidQueue")
    assert needle in ev.message and "ns/bad" in ev.message
    out = KubeOutbox.objects.get(kind="event")
    assert (out.namespace, out.pod_name, out.payload["reason"], out.payload["type"]) == (
        "ns", "bad", "InvalidQueue", "Warning")
    assert out.pod_uid == kube_emulator.get("pods", "ns", "bad")["metadata"]["uid"]
    # observing the same pod again (relist) writes no second event
    sync.pods.relist()
    assert SchedulingEvent.objects.filter(reason="InvalidQueue").count() == 1 and KubeOutbox.objects.count() == 1


def test_bad_pod_input_is_an_event_and_never_stops_the_loop(kube_emulator, sync):
    em = kube_emulator
    em.add_pod("ns", "frac", labels=QUEUE, annotations={"gpu-fraction": "lots"}, requests={"cpu": "1"})
    gang(em, 2, group="fine", min_available="2")
    assert sync.sync_once()
    assert sorted(KubePod.objects.values_list("name", flat=True)) == ["p0", "p1"]
    ev = SchedulingEvent.objects.get(reason="InvalidPod")
    assert "ns/frac" in ev.message and "pod annotation gpu-fraction" in ev.message
    assert KubeOutbox.objects.filter(kind="event", pod_name="frac", payload__reason="InvalidPod").count() == 1
    # through the watch too: the bad pod is reported once, the good one after it is synced
    em.add_pod("ns", "mem", labels=QUEUE, annotations={"gpu-memory": "-3"}, requests={"cpu": "1"})
    em.add_pod("ns", "after", labels=QUEUE, requests={"cpu": "1"})
    sync.pods.watch_once()
    assert KubePod.objects.filter(name="after").exists() and not KubePod.objects.filter(name="mem").exists()
    assert Workload.objects.filter(tasks__isnull=True).count() == 0  # no half-written workload
    assert_invariants()


# ----------------------------------------------------------------------------- pod lifecycle


def test_pods_bound_at_creation_are_running_and_binds_are_confirmed(kube_emulator, kube_client, sync):
    em = kube_emulator
    em.add_node("n1", gpus=4)
    em.add_pod("ns", "pre", labels=QUEUE, requests=GPU1, node_name="n1")
    gang(em, 2, min_available="2")
    assert sync.sync_once()
    assert tasks()["pre"] == (TaskState.RUNNING, "n1")
    assert Workload.objects.get(kube_ref__group="pod/pre").started_at is not None
    cycle_run(trigger="test")
    assert tasks()["p0"] == tasks()["p1"] == (TaskState.BINDING, "n1")  # the cycle placed the gang
    bind(kube_client, "p0", "n1")
    bind(kube_client, "p1", "n1")
    sync.pods.watch_once()
    assert tasks()["p0"] == tasks()["p1"] == (TaskState.RUNNING, "n1")
    assert Workload.objects.get(kube_ref__group="podgroup/g").status == WorkloadStatus.RUNNING
    cycle_run(trigger="test")
    assert_invariants()


def test_a_pod_bound_elsewhere_by_someone_else_follows_the_cluster(kube_emulator, kube_client, sync):
    em = kube_emulator
    em.add_node("n1", gpus=4)
    em.add_node("n2", gpus=4)
    em.add_pod("ns", "x", labels=QUEUE, requests=GPU1)
    assert sync.sync_once()
    cycle_run(trigger="test")
    state, planned = tasks()["x"]
    assert state == TaskState.BINDING
    other = "n2" if planned == "n1" else "n1"
    bind(kube_client, "x", other)
    sync.pods.watch_once()
    assert tasks()["x"] == (TaskState.RUNNING, other)
    cycle_run(trigger="test")
    assert_invariants()


def test_graceful_deletion_releases_only_when_the_pod_is_gone(kube_emulator, sync):
    em = kube_emulator
    em.add_node("n1", gpus=4)
    em.add_pod("ns", "a", labels=QUEUE, requests=GPU1, node_name="n1")
    em.add_pod("ns", "b", labels=QUEUE, annotations={"pod-group-name": "ab"}, requests=GPU1, node_name="n1")
    em.add_pod("ns", "c", labels=QUEUE, annotations={"pod-group-name": "ab"}, requests=GPU1, node_name="n1")
    assert sync.sync_once()
    cycle_run(trigger="test")
    em.advance(0)
    em.delete("pods", "ns", "a", grace_seconds=30)
    em.delete("pods", "ns", "b", grace_seconds=30)
    sync.pods.watch_once()
    assert tasks()["a"] == (TaskState.RELEASING, "n1") and tasks()["b"] == (TaskState.RELEASING, "n1")
    assert QueueStatus.objects.get(queue__name="qa").allocated_gpu == 3
    em.advance(31)
    sync.pods.watch_once()
    assert set(tasks()) == {"c"}
    assert not Workload.objects.filter(kube_ref__group="pod/a").exists()  # its last pod is gone
    assert Workload.objects.get(kube_ref__group="podgroup/ab").tasks.count() == 1
    assert_invariants()  # the deleted pods' allocation left the queue status with them
    cycle_run(trigger="test")
    assert QueueStatus.objects.get(queue__name="qa").allocated_gpu == 1
    assert_invariants()


def test_finished_pods_finish_their_tasks_and_a_recreated_pod_reopens_the_workload(kube_emulator, sync):
    em = kube_emulator
    em.add_node("n1", gpus=4)
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "ju"}
    em.add_pod("ns", "j-1", labels=QUEUE, owner=job, requests=GPU1, node_name="n1")
    assert sync.sync_once()
    em.set_pod_phase("ns", "j-1", "Failed")
    sync.pods.watch_once()
    wl = Workload.objects.get()
    assert tasks()["j-1"][0] == TaskState.FAILED and wl.status == WorkloadStatus.FAILED
    em.add_pod("ns", "j-2", labels=QUEUE, owner=job, requests=GPU1)  # the Job controller retries
    sync.pods.watch_once()
    wl.refresh_from_db()
    assert wl.status == WorkloadStatus.PENDING and wl.finished_at is None and wl.tasks.count() == 2
    em.set_pod_phase("ns", "j-1", "Failed")  # re-reporting a terminal pod changes nothing
    sync.pods.watch_once()
    assert tasks()["j-1"][0] == TaskState.FAILED
    assert_invariants()


def test_a_pending_pod_deleted_before_binding_never_schedules(kube):
    obj = _pod_obj("d")
    task = observed.kube_pod_observed(obj=obj)
    assert task.state == TaskState.PENDING
    obj["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    obj["metadata"]["resourceVersion"] = "11"
    task = observed.kube_pod_observed(obj=obj)
    assert task.state == TaskState.FAILED and task.node is None
    observed.kube_pod_gone(namespace="ns", name="d")
    assert not Task.objects.exists() and not Workload.objects.exists()


# ----------------------------------------------------------------------------- services: idempotency


def _pod_obj(name, *, uid=None, rv="10", node=None, phase="Pending", annotations=None, owners=None, labels=None):
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}", "resourceVersion": rv,
                         "labels": QUEUE if labels is None else labels, "annotations": annotations or {},
                         "ownerReferences": owners or []},
            "spec": {"schedulerName": "kai-scheduler", **({"nodeName": node} if node else {}),
                     "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": phase}}


def _node_obj(name, *, gpus="4", rv="1", unschedulable=False, ready="True"):
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": rv, "labels": {}},
            "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": gpus},
                       "conditions": [{"type": "Ready", "status": ready}]}}


def test_the_same_event_twice_is_a_no_op(kube):
    observed.kube_node_observed(obj=_node_obj("n1"))
    node_version = Node.objects.get().version
    observed.kube_node_observed(obj=_node_obj("n1", rv="2"))  # a kubelet heartbeat: nothing changed
    assert Node.objects.get().version == node_version
    obj = _pod_obj("p", node="n1", phase="Running")
    first = observed.kube_pod_observed(obj=obj)
    snapshot = (Task.objects.get().version, Workload.objects.get().version, SchedulingEvent.objects.count())
    again = observed.kube_pod_observed(obj=obj)
    assert again.pk == first.pk and again.state == TaskState.RUNNING
    assert (Task.objects.get().version, Workload.objects.get().version, SchedulingEvent.objects.count()) == snapshot
    observed.kube_pod_gone(uid="uid-p")
    observed.kube_pod_gone(uid="uid-p")
    assert not Task.objects.exists()
    with pytest.raises(observed.ApplicationError):
        observed.kube_pod_gone()


def test_a_stale_copy_of_a_pod_never_undoes_a_newer_observation(kube):
    """The dispatcher's read-back (rv 20, bound) can arrive before the watch event of the bind's
    predecessor (rv 15, unbound): the older copy changes nothing, and a copy without
    spec.nodeName never unbinds a pod (the field is immutable once set)."""
    observed.kube_node_observed(obj=_node_obj("n1"))
    observed.kube_pod_observed(obj=_pod_obj("p", rv="10"))
    observed.kube_pod_observed(obj=_pod_obj("p", rv="20", node="n1", phase="Running"))
    version = Task.objects.get().version
    observed.kube_pod_observed(obj=_pod_obj("p", rv="15"))
    assert tasks()["p"] == (TaskState.RUNNING, "n1") and Task.objects.get().version == version
    assert KubePod.objects.get().resource_version == "20"
    observed.kube_pod_observed(obj=_pod_obj("p", rv="not-a-number"))
    assert tasks()["p"] == (TaskState.RUNNING, "n1")


def test_a_pod_recreated_under_the_same_name_replaces_the_old_task(kube):
    observed.kube_pod_observed(obj=_pod_obj("s-0", uid="old", annotations={"pod-group-name": "s"}))
    observed.kube_pod_observed(obj=_pod_obj("s-1", uid="other", annotations={"pod-group-name": "s"}))
    observed.kube_pod_observed(obj=_pod_obj("s-0", uid="new", annotations={"pod-group-name": "s"}))
    assert sorted(KubePod.objects.values_list("name", "uid")) == [("s-0", "new"), ("s-1", "other")]
    assert Workload.objects.count() == 1
    observed.kube_pod_gone(uid="old")  # the late DELETED of the old pod does not touch the new one
    assert KubePod.objects.filter(uid="new").exists()


def test_pods_of_another_scheduler_are_ignored_by_the_service(kube):
    obj = _pod_obj("x")
    obj["spec"]["schedulerName"] = "default-scheduler"
    assert observed.kube_pod_observed(obj=obj) is None
    assert not Task.objects.exists() and not SchedulingEvent.objects.exists()


def test_node_flags_follow_cordon_taints_and_readiness(kube):
    observed.kube_node_observed(obj=_node_obj("n1", unschedulable=True))
    assert Node.objects.get().unschedulable
    obj = _node_obj("n1", rv="3", ready="False")
    obj["spec"]["taints"] = [{"key": "gpu", "effect": "NoSchedule"}]
    observed.kube_node_observed(obj=obj)
    node = Node.objects.get()
    assert node.unschedulable and not node.ready and KubeNode.objects.get().taints == obj["spec"]["taints"]


def test_a_node_cannot_shrink_below_what_its_tasks_hold(kube):
    observed.kube_node_observed(obj=_node_obj("n1", gpus="2"))
    observed.kube_pod_observed(obj=_pod_obj("a", node="n1", phase="Running"))
    observed.kube_pod_observed(obj=_pod_obj("b", node="n1", phase="Running"))
    assert observed.kube_node_observed_safe(obj=_node_obj("n1", gpus="1", rv="5")) is None
    assert Node.objects.get().gpus == 2
    assert "hold 2" in SchedulingEvent.objects.get(reason="InvalidNode").message
    assert_invariants()


def test_a_pod_bound_to_a_node_not_yet_known_is_adopted_when_the_node_arrives(kube):
    task = observed.kube_pod_observed(obj=_pod_obj("early", node="late-node", phase="Running"))
    assert (task.state, task.node) == (TaskState.PENDING, None)
    observed.kube_node_observed(obj=_node_obj("late-node"))
    assert tasks()["early"] == (TaskState.RUNNING, "late-node")
    assert_invariants()


# ----------------------------------------------------------------------------- watch: resume, 410


def test_watch_disconnects_resume_without_losing_events(kube_emulator, sync):
    """A clean end (as on server timeout) and an abrupt reset, with changes made while the
    watch was down: the reflector resumes from its last resourceVersion and misses nothing."""
    em = kube_emulator
    em.add_node("n1", gpus=8)
    assert sync.sync_once()
    pods = Reflector("pods", client.CoreV1Api(sync.api_client).list_pod_for_all_namespaces,
                     field_selector="spec.schedulerName=kai-scheduler", on_relist=sync._pods_relisted,
                     on_event=sync._pod_event, watch_timeout=30, request_timeout=5)
    pods.relist()
    stop = threading.Event()

    def cluster_side():  # no database access here: only the emulator
        for step, action in enumerate(("abrupt", "clean", "stop")):
            em.add_pod("ns", f"before-{step}", labels=QUEUE, requests=GPU1)
            stop.wait(0.4)
            if action == "abrupt":
                em.disconnect_watches(abrupt=True)
            elif action == "clean":
                em.disconnect_watches()
            else:
                stop.set()
                em.disconnect_watches()
                return
            em.add_pod("ns", f"while-down-{step}", labels=QUEUE, requests=GPU1)
            stop.wait(0.2)

    t = threading.Thread(target=cluster_side)
    t.start()
    pods.run(stop, listed=True)
    t.join()
    pods.watch_timeout = 1
    pods.watch_once()  # anything after the stop
    assert sorted(KubePod.objects.values_list("name", flat=True)) == [
        "before-0", "before-1", "before-2", "while-down-0", "while-down-1"]
    assert pods.watches >= 3 and pods.relists == 1 and pods.gone == 0
    assert pods.errors >= 1  # the reset surfaced as a connection error, backed off, then resumed
    assert_invariants()


def test_compaction_gives_410_and_the_relist_converges(kube_emulator, sync):
    em = kube_emulator
    em.add_node("n1", gpus=8)
    em.add_node("n2", gpus=8)
    em.add_pod("ns", "keep", labels=QUEUE, requests=GPU1)
    em.add_pod("ns", "drop", labels=QUEUE, requests=GPU1)
    em.add_pod("ns", "bound", labels=QUEUE, requests=GPU1, node_name="n2")
    assert sync.sync_once()
    assert KubeSyncCursor.objects.get(resource="pods").relists == 1
    # while we are not watching: a pod and a node go away, a pod arrives; history is compacted
    em.delete("pods", "ns", "drop")
    em.delete("nodes", None, "n2")
    em.advance(0)  # pod GC removes the pod bound to the deleted node
    em.add_pod("ns", "new", labels=QUEUE, requests=GPU1)
    em.compact()
    with pytest.raises(Gone):
        sync.pods.watch_once()
    with pytest.raises(Gone):
        sync.nodes.watch_once()
    sync.nodes.relist()
    sync.pods.relist()
    assert sorted(KubePod.objects.values_list("name", flat=True)) == ["keep", "new"]
    assert list(Node.objects.values_list("name", flat=True)) == ["n1"]
    assert KubeSyncCursor.objects.get(resource="pods").relists == 2
    assert_invariants()
    # the loop does the same by itself: 410 -> relist -> watch
    em.add_pod("ns", "later", labels=QUEUE, requests=GPU1)
    em.compact()
    stop = threading.Event()
    threading.Timer(1.5, stop.set).start()
    sync.pods.run(stop, listed=True)
    assert sync.pods.gone == 1 and KubePod.objects.filter(name="later").exists()


def test_paged_lists_collect_every_page(kube_emulator, sync):
    for i in range(7):
        kube_emulator.add_pod("ns", f"p{i}", labels=QUEUE, requests={"cpu": "1"})
    sync.pods.page_size = 3
    items, rv = sync.pods.list_all()
    assert len(items) == 7 and int(rv) == kube_emulator.resource_version


# ----------------------------------------------------------------------------- node removal


def test_node_removal_with_pods_on_it_leaks_nothing(kube_emulator, kube_client, sync):
    em = kube_emulator
    em.add_node("n1", gpus=4)
    em.add_node("n2", gpus=4)
    em.add_pod("ns", "on-n1", labels=QUEUE, requests=GPU1, node_name="n1")
    em.add_pod("ns", "done-n1", labels=QUEUE, requests=GPU1, node_name="n1", phase="Succeeded")
    em.add_pod("ns", "on-n2", labels=QUEUE, requests=GPU1, node_name="n2")
    em.add_pod("ns", "pending", labels=QUEUE, requests={"nvidia.com/gpu": "8"})
    assert sync.sync_once()
    cycle_run(trigger="test")
    assert tasks()["pending"] == (TaskState.PENDING, None)  # no node has 8 GPUs
    # a bind in flight to n1 when n1 goes: make one by hand (the cycle would, on a freer node)
    observed.kube_pod_observed(obj=_pod_obj("binding-n1", uid="b1", labels=QUEUE))
    Task.objects.filter(name="binding-n1").update(state=TaskState.BINDING, node=Node.objects.get(name="n1"))
    em.delete("nodes", None, "n1")
    sync.nodes.watch_once()
    assert not Node.objects.filter(name="n1").exists()
    t = tasks()
    assert t["on-n1"] == (TaskState.FAILED, None) and t["done-n1"] == (TaskState.SUCCEEDED, None)
    assert t["binding-n1"] == (TaskState.PENDING, None) and t["on-n2"] == (TaskState.RUNNING, "n2")
    assert SchedulingEvent.objects.filter(reason="NodeGone").count() == 2
    assert_invariants()
    # pod GC deletes the orphans; their tasks leave; nothing holds n1's GPUs anywhere
    em.advance(1)
    sync.pods.watch_once()
    assert "on-n1" not in tasks() and "done-n1" not in tasks()
    cycle_run(trigger="test")
    assert_invariants()
    assert QueueStatus.objects.get(queue__name="qa").allocated_gpu == float(
        sum(t.gpu for t in Task.objects.filter(state__in=(TaskState.RUNNING, TaskState.BINDING))))


# ----------------------------------------------------------------------------- leader election


def test_a_second_replica_does_not_sync_while_the_lease_is_held_and_takes_over_after_expiry(
        kube_emulator, kube_client, kube):
    em = kube_emulator
    em.add_node("n1", gpus=4)
    now = timezone.now()
    a = KubeSync(api_client=kube_client, holder="a", lease_ttl=15, watch_timeout=1, clock=lambda: now)
    assert a.sync_once()
    em.add_pod("ns", "p", labels=QUEUE, requests=GPU1)
    b_now = [now + timedelta(seconds=5)]
    b = KubeSync(api_client=kube_client, holder="b", lease_ttl=15, watch_timeout=1, clock=lambda: b_now[0])
    before = len(em.requests)
    assert not b.sync_once()
    assert len(em.requests) == before  # b did not even list
    assert not KubePod.objects.exists()
    assert KubeLease.objects.get(name="kube-sync").holder == "a"
    b_now[0] = now + timedelta(seconds=16)  # a stopped renewing: its lease expired
    assert b.sync_once()
    assert KubePod.objects.filter(name="p").exists()
    assert KubeLease.objects.get(name="kube-sync").holder == "b"
    a.clock = lambda: now + timedelta(seconds=17)
    assert not a.acquire()  # a's next renewal fails: it stops
    b.release()
    assert a.acquire()  # a released lease is free at once


def test_the_run_loop_stops_watching_when_the_lease_is_lost(kube_emulator, kube_client, kube):
    em = kube_emulator
    em.add_node("n1", gpus=4)
    a = KubeSync(api_client=kube_client, holder="a", lease_ttl=30, watch_timeout=1)
    stop = threading.Event()
    # the loop's threads use their own database connections; the test transaction is invisible
    # to them, so drive the leader part in this thread: steal the lease, then watch run() give up
    observed.kube_lease_acquire(name="kube-sync", holder="other", ttl_seconds=60)
    threading.Timer(0.8, stop.set).start()
    a.run(stop, poll=0.2)
    assert not a.leader and not Node.objects.exists() and a.nodes.relists == 0


@pytest.mark.django_db(transaction=True)
def test_two_running_replicas_one_syncs_and_the_other_takes_over_after_the_lease_expires(
        kube_emulator, kube_client, settings):
    """The real loop, in threads with their own database connections: replica b waits while a
    leads; a dies without releasing (no clean shutdown), b takes over once the lease expired
    and catches up with what changed meanwhile."""
    import time

    settings.KAI_CLUSTER_MODE = "kubernetes"
    root = queue_create(name="root", quotas={"gpu": {"quota": 16}})
    queue_create(name="qa", parent=root, quotas={"gpu": {"quota": 16}})
    em = kube_emulator
    em.add_node("n1", gpus=8)
    em.add_pod("ns", "first", labels=QUEUE, requests=GPU1)
    a = KubeSync(api_client=kube_client, holder="a", lease_ttl=1.5, watch_timeout=1)
    b = KubeSync(api_client=kube_client, holder="b", lease_ttl=1.5, watch_timeout=1)
    a.release = lambda: None  # a "crashes": it never gives the lease back
    stop_a, stop_b = threading.Event(), threading.Event()

    def wait_for(cond, timeout=15.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return True
            time.sleep(0.1)
        return False

    ta = threading.Thread(target=a.run, args=(stop_a,), kwargs={"poll": 0.3})
    ta.start()
    try:
        assert wait_for(lambda: KubePod.objects.filter(name="first").exists())
        tb = threading.Thread(target=b.run, args=(stop_b,), kwargs={"poll": 0.3})
        tb.start()
        try:
            time.sleep(1.0)
            assert b.nodes.relists == 0 and b.pods.relists == 0 and not b.leader
            assert KubeLease.objects.get(name="kube-sync").holder == "a"
            stop_a.set()
            a.nodes.interrupt()
            a.pods.interrupt()
            ta.join(10)
            em.add_pod("ns", "while-nobody-leads", labels=QUEUE, requests=GPU1)
            assert wait_for(lambda: KubePod.objects.filter(name="while-nobody-leads").exists())
            assert b.leader and b.pods.relists >= 1
            assert KubeLease.objects.get(name="kube-sync").holder == "b"
            em.add_pod("ns", "watched-by-b", labels=QUEUE, requests=GPU1)
            assert wait_for(lambda: KubePod.objects.filter(name="watched-by-b").exists())
        finally:
            stop_b.set()
            b.nodes.interrupt()
            b.pods.interrupt()
            tb.join(10)
    finally:
        stop_a.set()
        ta.join(10)
    assert not ta.is_alive() and not tb.is_alive()
    assert KubeLease.objects.get(name="kube-sync").holder == ""  # b shut down cleanly
    assert_invariants()


def test_a_database_error_on_the_lease_does_not_end_the_loop(kube_emulator, kube_client, kube, monkeypatch):
    """PostgreSQL restarting (or SQLite busy) while the loop takes or renews its lease must not kill
    the sync thread: the replica counts as not leading and tries again at the next poll."""
    from django.db import OperationalError

    em = kube_emulator
    em.add_node("n1", gpus=4)
    a = KubeSync(api_client=kube_client, holder="a", lease_ttl=30, watch_timeout=1)
    real = observed.kube_lease_acquire
    failures = {"left": 2}

    def flaky(**kw):
        if failures["left"]:
            failures["left"] -= 1
            raise OperationalError("server closed the connection unexpectedly")
        return False  # then: another replica holds it (the loop keeps waiting, no sync)

    monkeypatch.setattr(observed, "kube_lease_acquire", flaky)
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    a.run(stop, poll=0.1)  # returns when stopped, instead of raising the first OperationalError
    assert failures["left"] == 0 and not a.leader and a.nodes.relists == 0
    monkeypatch.setattr(observed, "kube_lease_acquire", real)
    assert a.sync_once() and Node.objects.filter(name="n1").exists()
