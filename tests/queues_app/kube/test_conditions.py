"""The PodScheduled condition of waiting pods, against the API emulator through the real client.

Cluster autoscalers act only on ``PodScheduled=False`` with reason ``Unschedulable``.  The cycle
must therefore write that reason (with the engine's explanation) exactly for pods waiting for
capacity, other reasons for pods waiting for their queue or their gang, ``Pipelined`` for pods that
will get resources from victims, never overwrite a bound pod, write nothing when nothing changed,
and converge through API errors, lost replies and a dispatcher that stops between runs."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from queues_app.choices import CycleStatus, PendingCategory, TaskState
from queues_app.kube.conditions import observed_key
from queues_app.models import KubeOutbox, KubePod, SchedulingEvent, Task
from queues_app.cycle import faults
from queues_app.cycle.run import cycle_run
from queues_app.kube.outbox import kube_dispatch_due
from queues_app.kube.observed import kube_relist
from queues_app.services.queues import queue_create

pytestmark = pytest.mark.django_db(transaction=True)

NS = "team"
STATUS_PATH = r"/pods/[^/]+/status$"


@pytest.fixture(autouse=True)
def kube_mode(settings, monkeypatch):
    from queues_app.kube import outbox

    settings.KAI_CLUSTER_MODE = "kubernetes"
    settings.KAI_KUBE_DISPATCH_SECONDS = 2
    settings.KAI_KUBE_MAX_ATTEMPTS = 4
    settings.KAI_KUBE_REQUEST_TIMEOUT = 2
    faults.clear()
    monkeypatch.setattr(outbox, "request_dispatch", lambda: None)
    yield
    faults.clear()


def sync(emu) -> None:
    rv = str(emu.resource_version)
    kube_relist(resource="nodes", objs=emu.list("nodes"), resource_version=rv)
    kube_relist(resource="pods", objs=emu.list("pods"), resource_version=rv)


def dispatch(client, *, after: float = 0.0):
    return kube_dispatch_due(api_client=client, now=timezone.now() + timedelta(seconds=after))


def cycle():
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED, out
    return out


def pod(emu, name: str, *, gpu: str | None = "1", queue: str = "qa", priority: int | None = None,
        annotations: dict | None = None, **kw) -> dict:
    req = {"cpu": "1", "memory": "1Gi"}
    if gpu is not None:
        req["nvidia.com/gpu"] = gpu
    return emu.add_pod(NS, name, labels={"kai.scheduler/queue": queue}, requests=req, priority=priority,
                       annotations=annotations, **kw)


def scheduled(emu, name: str) -> dict | None:
    obj = emu.get("pods", NS, name) or {}
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"),
                None)


def status_patches(emu, status="any") -> int:
    return emu.count_requests("PATCH", STATUS_PATH, status)


@pytest.fixture
def cluster(kube_emulator):
    root = queue_create(name="root", quotas={"gpu": {"quota": 8}})
    queue_create(name="qa", parent=root, quotas={"gpu": {"quota": 4}})
    queue_create(name="qb", parent=root, quotas={"gpu": {"quota": 4}})
    queue_create(name="capped", parent=root, quotas={"gpu": {"quota": 4, "limit": 1}})
    queue_create(name="small", parent=root, quotas={"gpu": {"quota": 1}})
    kube_emulator.add_node("n0", gpus=4, gpu_memory_mib=81920)
    return kube_emulator


def fill_node(emu, client, name="big", gpus="4", queue="qa") -> None:
    pod(emu, name, gpu=gpus, queue=queue)
    sync(emu)
    cycle()
    dispatch(client)
    assert emu.get("pods", NS, name)["spec"]["nodeName"] == "n0"


def test_capacity_blocked_pod_is_unschedulable_with_the_engine_message(cluster, kube_client):
    emu = cluster
    fill_node(emu, kube_client)
    pod(emu, "wait", gpu="2", queue="qb")
    sync(emu)
    cycle()
    (row,) = KubeOutbox.objects.filter(kind="status")
    assert row.payload["reason"] == "Unschedulable" and row.pod_name == "wait"
    report = dispatch(kube_client)
    assert report.outcomes.get("patched") == 1
    cond = scheduled(emu, "wait")
    engine_msg = SchedulingEvent.objects.filter(reason="Unschedulable", workload__tasks__kube_pod__name="wait") \
        .values_list("message", flat=True).first()
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
    assert cond["message"] == engine_msg and "free GPUs" in engine_msg
    assert cond.get("lastTransitionTime")
    assert SchedulingEvent.objects.filter(category=PendingCategory.CAPACITY).exists()
    # the patch reply was observed: the database knows the condition is there
    assert KubePod.objects.get(name="wait").pod_scheduled == observed_key(emu.get("pods", NS, "wait"))
    # nothing changed: the next cycles write nothing and patch nothing
    before = status_patches(emu)
    sync(emu)
    cycle()
    cycle()
    dispatch(kube_client, after=3)
    assert KubeOutbox.objects.filter(kind="status").count() == 1 and status_patches(emu) == before
    # the kubelet's other conditions survive (strategic merge on "type")
    assert [c["type"] for c in emu.get("pods", NS, "big")["status"]["conditions"]].count("PodScheduled") == 1


def test_quota_and_limit_blocked_pods_get_other_reasons(cluster, kube_client):
    emu = cluster
    pod(emu, "over-limit", gpu="2", queue="capped")
    pod(emu, "np-over-quota", gpu="2", queue="small", priority=200)  # priority >= 100: non-preemptible
    sync(emu)
    cycle()
    dispatch(kube_client)
    assert scheduled(emu, "over-limit")["reason"] == "OverLimit"
    assert scheduled(emu, "np-over-quota")["reason"] == "NonPreemptibleOverQuota"
    assert "over its limit" in scheduled(emu, "over-limit")["message"]
    assert all(scheduled(emu, n)["status"] == "False" for n in ("over-limit", "np-over-quota"))
    assert set(SchedulingEvent.objects.filter(reason="Unschedulable").values_list("category", flat=True)) == {
        "limit", "quota"}


def test_a_gang_waiting_for_its_pods_is_not_unschedulable(cluster, kube_client):
    emu = cluster
    for i in range(2):
        pod(emu, f"g-{i}", annotations={"kai.scheduler/pod-group": "g", "kai.scheduler/min-available": "3"})
    sync(emu)
    cycle()
    dispatch(kube_client)
    for i in range(2):
        cond = scheduled(emu, f"g-{i}")
        assert cond["reason"] == "WaitingForPods" and "gang needs 3, 2 exist" in cond["message"]
    assert SchedulingEvent.objects.filter(reason="NotScheduled", category="gang").exists()
    # the third pod arrives: the gang is placed and bound, the API server sets PodScheduled=True
    pod(emu, "g-2", annotations={"kai.scheduler/pod-group": "g", "kai.scheduler/min-available": "3"})
    sync(emu)
    cycle()
    dispatch(kube_client)
    assert [scheduled(emu, f"g-{i}")["status"] for i in range(3)] == ["True"] * 3


def test_the_condition_clears_once_bound_and_follows_a_changing_reason(cluster, kube_client):
    emu = cluster
    fill_node(emu, kube_client)
    pod(emu, "wait", gpu="2", queue="qb")
    sync(emu)
    cycle()
    dispatch(kube_client)
    assert scheduled(emu, "wait")["reason"] == "Unschedulable"
    first_transition = scheduled(emu, "wait")["lastTransitionTime"]
    # the blocker shrinks but still leaves too little: same reason, new message, same transition time
    emu.delete("pods", NS, "big", grace_seconds=0)
    pod(emu, "big3", gpu="3", node_name="n0", queue="qa")  # bound by another binder
    sync(emu)
    cycle()
    dispatch(kube_client)
    cond = scheduled(emu, "wait")
    assert cond["reason"] == "Unschedulable" and "largest free: 1" in cond["message"]
    assert cond["lastTransitionTime"] == first_transition
    # room appears: the pod is bound, the binding sets True, no status row is written for it
    emu.delete("pods", NS, "big3", grace_seconds=0)
    sync(emu)
    rows = KubeOutbox.objects.filter(kind="status").count()
    cycle()
    dispatch(kube_client)
    assert emu.get("pods", NS, "wait")["spec"]["nodeName"] == "n0"
    assert scheduled(emu, "wait")["status"] == "True"
    assert KubeOutbox.objects.filter(kind="status").count() == rows


def test_a_pod_pipelined_by_reclaim_stops_asking_for_a_node(cluster, kube_client):
    emu = cluster
    emu.add_node("n1", gpus=4, gpu_memory_mib=81920)
    fill_node(emu, kube_client, "a1", queue="qa")  # qa borrows all 8 GPUs: 4 + 4
    pod(emu, "a2", gpu="4", queue="qa")
    sync(emu)
    cycle()
    dispatch(kube_client)
    pod(emu, "b", gpu="4", queue="qb")  # qb's quota is 4: reclaim one qa pod
    sync(emu)
    # first cycle with reclaim off: b waits for capacity
    from django.test import override_settings

    with override_settings(KAI_SCHEDULER_CONFIG={"actions": ["allocate"]}):
        cycle()
    dispatch(kube_client)
    assert scheduled(emu, "b")["reason"] == "Unschedulable"
    cycle()  # with reclaim: b is pipelined on the victim's node
    assert Task.objects.get(kube_pod__name="b").state == TaskState.PIPELINED
    dispatch(kube_client)
    assert scheduled(emu, "b")["reason"] == "Pipelined" and scheduled(emu, "b")["status"] == "False"


def test_api_errors_and_lost_replies_converge(cluster, kube_client):
    emu = cluster
    fill_node(emu, kube_client)
    pod(emu, "w1", gpu="2", queue="qb")
    pod(emu, "w2", gpu="2", queue="qb")
    sync(emu)
    cycle()
    emu.faults.add("PATCH", r"/pods/w1/status$", status=503, times=2)
    emu.faults.add("PATCH", r"/pods/w2/status$", status=500, after=True)  # performed, reported failed
    dispatch(kube_client)
    assert scheduled(emu, "w1") is None
    assert scheduled(emu, "w2")["reason"] == "Unschedulable"
    dispatch(kube_client, after=2)   # w1 second 503; w2 retried: 409 (rv moved) -> read back -> already set
    dispatch(kube_client, after=10)  # w1 goes through
    assert scheduled(emu, "w1")["reason"] == "Unschedulable"
    outcomes = dict(KubeOutbox.objects.filter(kind="status").values_list("pod_name", "outcome"))
    assert outcomes == {"w1": "patched", "w2": "already_set"}
    # one write took effect per pod: w1's third attempt, w2's first (answered 500); w2's retry got 409
    assert [st for m, path, st in emu.requests if m == "PATCH" and path.endswith("/w2/status")] == [500, 409]
    assert [st for m, path, st in emu.requests if m == "PATCH" and path.endswith("/w1/status")] == [503, 503, 200]


def test_a_pod_bound_by_someone_else_never_gets_a_false_condition(cluster, kube_client):
    emu = cluster
    fill_node(emu, kube_client)
    pod(emu, "w", gpu="2", queue="qb")
    sync(emu)
    cycle()
    # before the dispatcher runs, another binder binds the pod (the scheduler's view is stale)
    emu.add_node("n1", gpus=4)
    emu.mutate("pods", NS, "w", lambda p: (p["spec"].__setitem__("nodeName", "n1"),
                                          p["status"].setdefault("conditions", []).append(
                                              {"type": "PodScheduled", "status": "True"})))
    report = dispatch(kube_client)
    assert scheduled(emu, "w")["status"] == "True"
    assert report.outcomes.get("pod_bound_or_terminating") == 1
    assert status_patches(emu, 409) == 1 and status_patches(emu, 200) == 0


def test_a_condition_changed_by_someone_else_is_written_again(cluster, kube_client):
    emu = cluster
    fill_node(emu, kube_client)
    pod(emu, "w", gpu="2", queue="qb")
    sync(emu)
    cycle()
    dispatch(kube_client)

    def clobber(p):
        for c in p["status"]["conditions"]:
            if c["type"] == "PodScheduled":
                c["reason"], c["message"] = "SchedulerError", "someone else"

    emu.mutate("pods", NS, "w", clobber)
    sync(emu)
    cycle()
    dispatch(kube_client)
    assert scheduled(emu, "w")["reason"] == "Unschedulable"


def test_a_dispatcher_that_stops_between_runs_loses_nothing(cluster, kube_client):
    """Rows are committed with the cycle: a dispatcher process that dies before carrying them out
    (or a new one after a restart) finds them; a superseded wish is never written."""
    emu = cluster
    fill_node(emu, kube_client)
    pod(emu, "w", gpu="2", queue="qb")
    sync(emu)
    cycle()  # wants Unschedulable; no dispatcher runs
    emu.delete("pods", NS, "big", grace_seconds=0)
    sync(emu)
    cycle()  # now w is bound: the pending status row is stale
    report = dispatch(kube_client)  # "the restarted dispatcher"
    assert emu.get("pods", NS, "w")["spec"]["nodeName"] == "n0"
    assert scheduled(emu, "w")["status"] == "True"
    assert status_patches(emu) == 0 and report.outcomes.get("superseded", 0) >= 1
