"""Every fault of the issue's list has a defined outcome and converges within two reconcile
intervals (``KAI_KUBE_DISPATCH_SECONDS`` = 2 here: dispatcher runs at t, t+2, t+4), with no GPU
leaked (invariants) and no pod bound twice (the emulator's request log, counting requests the
emulator *performed*, including those answered with an injected error)."""
from __future__ import annotations

import threading

import pytest

from queues_app.choices import TaskState
from queues_app.models import KubeOutbox, Task
from queues_app.cycle.run import cycle_run
from tests.queues_app.kube.test_dispatch import (  # noqa: F401 - fixtures
    BIND_PATH,
    EVICT_PATH,
    NS,
    assert_invariants,
    cluster,
    dispatch,
    gang,
    kube_mode,
    node_of,
    sync,
    task_states,
)

pytestmark = pytest.mark.django_db(transaction=True)
INTERVAL = 2


def performed_binds(emu) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in emu.request_records:
        if r.method == "POST" and r.path.endswith("/binding") and r.performed == 201:
            pod = r.path.split("/")[-2]
            out[pod] = out.get(pod, 0) + 1
    return out


def converge(emu, client, *, intervals: int = 2) -> None:
    """Dispatcher runs over ``intervals`` reconcile intervals, the sync after each."""
    for k in range(intervals + 1):
        dispatch(client, after=k * INTERVAL)
        sync(emu)


def one_pod(emu, name: str = "p"):
    gang(emu, name, 1)
    sync(emu)
    assert cycle_run(trigger="test").bound == 1
    return f"{name}-0"


# ----------------------------------------------------------------------------- bind faults


def test_bind_performed_but_answered_500_is_a_success_on_read_back(cluster, kube_client):
    emu = cluster
    pod = one_pod(emu)
    emu.faults.add("POST", BIND_PATH, status=500, after=True)
    report = dispatch(kube_client)
    assert report.outcomes == {"bound_on_readback": 1, "posted": 1}
    assert Task.objects.get(kube_pod__name=pod).state == TaskState.RUNNING
    converge(emu, kube_client)
    assert performed_binds(emu) == {pod: 1} and emu.count_requests("POST", BIND_PATH) == 1
    assert_invariants()


def test_bind_whose_connection_dropped_after_it_took_effect_is_not_repeated(cluster, kube_client):
    emu = cluster
    pod = one_pod(emu)
    emu.faults.add("POST", BIND_PATH, drop_connection=True, after=True)
    dispatch(kube_client)
    converge(emu, kube_client)
    assert performed_binds(emu) == {pod: 1} and emu.count_requests("POST", BIND_PATH) == 1
    assert Task.objects.get(kube_pod__name=pod).state == TaskState.RUNNING
    assert_invariants()


def test_bind_timeout_after_it_took_effect_is_reconciled(cluster, kube_client, settings):
    emu = cluster
    settings.KAI_KUBE_REQUEST_TIMEOUT = 1
    pod = one_pod(emu)
    emu.faults.add("POST", BIND_PATH, delay=1.5, after=True)  # performed, answered too late
    dispatch(kube_client)
    converge(emu, kube_client)
    assert KubeOutbox.objects.get(kind="bind").outcome == "bound_on_readback"
    assert performed_binds(emu) == {pod: 1}
    assert Task.objects.get(kube_pod__name=pod).state == TaskState.RUNNING
    assert_invariants()


@pytest.mark.parametrize("fault", [{"status": 429}, {"status": 503}, {"drop_connection": True}])
def test_bind_refused_for_now_is_retried_with_backoff(cluster, kube_client, fault):
    emu = cluster
    pod = one_pod(emu)
    emu.faults.add("POST", BIND_PATH, **fault)
    report = dispatch(kube_client)
    assert report.retried == 1 and node_of(emu, pod) == ""
    row = KubeOutbox.objects.get(kind="bind")
    assert row.status == "pending" and row.attempts == 1 and row.last_error
    dispatch(kube_client, after=0.1)
    assert emu.count_requests("POST", BIND_PATH) == 1, "backoff: no retry before next_attempt_at"
    dispatch(kube_client, after=INTERVAL)  # within one interval
    assert node_of(emu, pod) == "n0"
    assert Task.objects.get(kube_pod__name=pod).state == TaskState.RUNNING
    assert performed_binds(emu) == {pod: 1}
    assert_invariants()


def test_bind_failing_every_time_gives_up_and_returns_the_task_to_pending(cluster, kube_client, settings):
    emu = cluster
    pod = one_pod(emu)
    emu.faults.add("POST", BIND_PATH, status=503, times=None)
    t = 0.0
    for _ in range(settings.KAI_KUBE_MAX_ATTEMPTS):
        dispatch(kube_client, after=t)
        t += 60
    row = KubeOutbox.objects.get(kind="bind")
    assert row.status == "failed" and row.outcome == "retries_exhausted" and row.attempts == 4
    task = Task.objects.get(kube_pod__name=pod)
    assert task.state == TaskState.PENDING and task.node is None
    assert_invariants()
    emu.faults.clear()
    assert cycle_run(trigger="test").bound == 1  # placed again by the next cycle
    dispatch(kube_client, after=t)
    assert performed_binds(emu) == {pod: 1}
    assert_invariants()


def test_bind_409_already_bound_to_the_same_node_is_success(cluster, kube_client):
    emu = cluster
    pod = one_pod(emu)
    from kubernetes import client as k8s

    k8s.CoreV1Api(kube_client).create_namespaced_pod_binding(
        name=pod, namespace=NS, _preload_content=False,
        body=k8s.V1Binding(metadata=k8s.V1ObjectMeta(name=pod), target=k8s.V1ObjectReference(kind="Node", name="n0")))
    report = dispatch(kube_client)
    assert emu.count_requests("POST", BIND_PATH, 409) == 1
    assert report.done >= 1 and report.failed == 0
    assert KubeOutbox.objects.get(kind="bind").outcome == "bound_on_readback"
    assert Task.objects.get(kube_pod__name=pod).state == TaskState.RUNNING
    assert_invariants()


def test_bind_409_bound_to_another_node_the_cluster_wins(cluster, kube_client):
    emu = cluster
    emu.add_node("n1", gpus=4)
    sync(emu)
    pod = one_pod(emu)
    target = KubeOutbox.objects.get(kind="bind").node_name
    other = "n1" if target == "n0" else "n0"
    from kubernetes import client as k8s

    k8s.CoreV1Api(kube_client).create_namespaced_pod_binding(
        name=pod, namespace=NS, _preload_content=False,
        body=k8s.V1Binding(metadata=k8s.V1ObjectMeta(name=pod), target=k8s.V1ObjectReference(kind="Node", name=other)))
    dispatch(kube_client)
    row = KubeOutbox.objects.get(kind="bind")
    assert row.status == "failed" and row.outcome == "pod_elsewhere"
    task = Task.objects.get(kube_pod__name=pod)
    assert task.state == TaskState.RUNNING and task.node.name == other
    assert Task.objects.filter(node__name=target).count() == 0, "nothing left held on our target"
    assert_invariants()


def test_bind_404_pod_gone_deletes_the_task(cluster, kube_client):
    emu = cluster
    pod = one_pod(emu)
    emu.delete("pods", NS, pod)
    dispatch(kube_client)
    assert KubeOutbox.objects.get(kind="bind").outcome == "pod_gone"
    assert not Task.objects.filter(kube_pod__name=pod).exists()
    assert emu.count_requests("POST", BIND_PATH, 404) == 1
    assert_invariants()


def test_bind_to_a_deleted_node_is_not_sent_and_the_task_is_pending_again(cluster, kube_client):
    emu = cluster
    pod = one_pod(emu)
    emu.delete("nodes", None, "n0")  # the sync has not seen it yet
    dispatch(kube_client)
    assert emu.count_requests("POST", BIND_PATH) == 0, "the API server would bind to a missing node"
    assert KubeOutbox.objects.get(kind="bind").outcome == "node_gone"
    task = Task.objects.get(kube_pod__name=pod)
    assert task.state == TaskState.PENDING and task.node is None
    sync(emu)  # the node leaves the database; nothing is placed on it again
    cycle_run(trigger="test")
    assert Task.objects.get(kube_pod__name=pod).state == TaskState.PENDING
    assert_invariants()


def test_a_recreated_pod_of_the_same_name_is_not_bound_by_the_old_row(cluster, kube_client):
    emu = cluster
    pod = one_pod(emu)
    emu.delete("pods", NS, pod)
    gang(emu, "p", 1)  # same name, new uid; the sync has not seen it
    dispatch(kube_client)
    assert node_of(emu, pod) == "", "the uid precondition keeps the new pod unbound"
    assert emu.count_requests("POST", BIND_PATH, 201) == 0
    sync(emu)
    assert Task.objects.get(kube_pod__name=pod).state == TaskState.PENDING  # a new task for the new pod
    assert cycle_run(trigger="test").bound == 1
    dispatch(kube_client, after=1)
    assert node_of(emu, pod) == "n0"
    assert_invariants()


def test_a_gang_member_vanishing_between_preflight_and_bind_rolls_the_gang_back(cluster, kube_client):
    """The one window pre-flight cannot close: a member is deleted after it was read back and
    before its bind.  Bindings cannot be undone, so the members already bound are evicted."""
    emu = cluster
    gang(emu, "g", 2)
    sync(emu)
    assert cycle_run(trigger="test").bound == 2
    emu.faults.add("POST", r"/pods/g-1/binding$", delay=1.0)  # below the 2 s request timeout

    def kill_after_first_bind() -> None:  # g-1 is deleted once g-0 is bound, while g-1's bind waits
        for _ in range(1000):
            if emu.count_requests("POST", r"/pods/g-0/binding$"):
                emu.delete("pods", NS, "g-1")
                return
            threading.Event().wait(0.005)

    killer = threading.Thread(target=kill_after_first_bind)
    killer.start()
    try:
        report = dispatch(kube_client)
    finally:
        killer.join()
    assert node_of(emu, "g-0") == "n0" and emu.get("pods", NS, "g-1") is None
    assert report.outcomes.get("pod_gone") == 1
    assert Task.objects.get(kube_pod__name="g-0").state == TaskState.RELEASING
    assert KubeOutbox.objects.filter(kind="evict", pod_name="g-0").exists()
    converge(emu, kube_client)
    assert emu.count_requests("POST", EVICT_PATH, 201) == 1
    emu.advance(60)
    sync(emu)
    assert not Task.objects.filter(kube_pod__name="g-0").exists()
    cycle_run(trigger="test")
    assert_invariants()


# ----------------------------------------------------------------------------- eviction faults


def running(emu, client, name: str = "v", size: int = 1) -> list[str]:
    gang(emu, name, size, min_available=1)
    sync(emu)
    cycle_run(trigger="test")
    dispatch(client)
    emu.advance(1)
    sync(emu)
    pods = [f"{name}-{i}" for i in range(size)]
    assert task_states(name) == [TaskState.RUNNING] * size
    return pods


def cancel_all() -> None:
    from queues_app.models import Workload
    from queues_app.services.workloads import workload_cancel

    for w in Workload.objects.all():
        workload_cancel(workload=w)


def test_eviction_blocked_by_a_disruption_budget_is_retried_until_allowed(cluster, kube_client):
    emu = cluster
    (pod,) = running(emu, kube_client)
    emu.block_evictions(NS, pod)
    cancel_all()
    dispatch(kube_client, after=1)
    assert emu.count_requests("POST", EVICT_PATH, 429) == 1
    row = KubeOutbox.objects.get(kind="evict")
    assert row.status == "pending" and "disruption budget" in row.last_error
    emu.unblock_evictions()
    dispatch(kube_client, after=1 + INTERVAL)
    assert emu.count_requests("POST", EVICT_PATH, 201) == 1
    emu.advance(60)
    sync(emu)
    assert not Task.objects.filter(kube_pod__name=pod).exists()
    cycle_run(trigger="test")
    assert_invariants()


def test_eviction_performed_but_answered_500_is_done_on_read_back(cluster, kube_client):
    emu = cluster
    (pod,) = running(emu, kube_client)
    cancel_all()
    emu.faults.add("POST", EVICT_PATH, status=500, after=True)
    dispatch(kube_client, after=1)
    assert KubeOutbox.objects.get(kind="evict").outcome == "evicted_on_readback"
    assert Task.objects.get(kube_pod__name=pod).state == TaskState.RELEASING, "held until the pod is gone"
    converge(emu, kube_client)
    assert emu.count_requests("POST", EVICT_PATH) == 1
    emu.advance(60)
    sync(emu)
    assert not Task.objects.filter(kube_pod__name=pod).exists()
    cycle_run(trigger="test")
    assert_invariants()


def test_eviction_of_a_pod_already_gone_is_done(cluster, kube_client):
    emu = cluster
    (pod,) = running(emu, kube_client)
    cancel_all()
    emu.delete("pods", NS, pod, grace_seconds=0)
    dispatch(kube_client, after=1)
    assert KubeOutbox.objects.get(kind="evict").outcome == "pod_gone"
    assert not Task.objects.filter(kube_pod__name=pod).exists()
    cycle_run(trigger="test")
    assert_invariants()


def test_eviction_never_allowed_fails_and_the_task_keeps_its_resources(cluster, kube_client, settings):
    emu = cluster
    (pod,) = running(emu, kube_client)
    emu.block_evictions(NS, pod)
    cancel_all()
    for k in range(settings.KAI_KUBE_MAX_ATTEMPTS):
        dispatch(kube_client, after=1 + 60 * k)
    row = KubeOutbox.objects.get(kind="evict")
    assert row.status == "failed" and row.attempts == settings.KAI_KUBE_MAX_ATTEMPTS
    task = Task.objects.get(kube_pod__name=pod)
    assert task.state in (TaskState.RELEASING, TaskState.STUCK_RELEASING) and task.node.name == "n0"
    assert KubeOutbox.objects.filter(kind="evict").count() == 1, "a failed eviction is not re-requested forever"
    assert_invariants()


# ----------------------------------------------------------------------------- event faults


def test_an_event_whose_reply_was_lost_is_not_duplicated(cluster, kube_client):
    emu = cluster
    gang(emu, "big", 1, gpu=8)
    sync(emu)
    cycle_run(trigger="test")
    emu.faults.add("POST", r"/events$", status=500, after=True, times=None)
    dispatch(kube_client)
    assert KubeOutbox.objects.filter(kind="event", status="pending").count() >= 1
    stored = len(emu.list("events", NS))
    emu.faults.clear()
    dispatch(kube_client, after=INTERVAL)
    assert KubeOutbox.objects.filter(kind="event", status="pending").count() == 0
    assert set(KubeOutbox.objects.filter(kind="event").values_list("outcome", flat=True)) == {"already_posted"}
    assert len(emu.list("events", NS)) == stored, "the retry answered 409 AlreadyExists"


def _bind_by_hand(client, pod: str, node: str) -> None:
    from kubernetes import client as k8s

    k8s.CoreV1Api(client).create_namespaced_pod_binding(
        name=pod, namespace=NS, _preload_content=False,
        body=k8s.V1Binding(metadata=k8s.V1ObjectMeta(name=pod), target=k8s.V1ObjectReference(kind="Node", name=node)))


def test_a_gang_member_bound_by_a_lost_attempt_is_evicted_when_another_member_vanished(cluster, kube_client):
    """Pre-flight finds g-0 already bound (an earlier attempt took effect, its outcome was never
    recorded) and g-1 gone: g-0 is not put back to Pending while bound, it is evicted."""
    emu = cluster
    gang(emu, "g", 2)
    sync(emu)
    cycle_run(trigger="test")
    _bind_by_hand(kube_client, "g-0", "n0")
    emu.delete("pods", NS, "g-1")
    dispatch(kube_client)
    assert emu.count_requests("POST", BIND_PATH) == 1, "only the earlier binding"
    assert Task.objects.get(kube_pod__name="g-0").state == TaskState.RELEASING
    converge(emu, kube_client)
    assert emu.count_requests("POST", EVICT_PATH, 201) == 1
    emu.advance(60)
    sync(emu)
    assert Task.objects.count() == 0
    cycle_run(trigger="test")
    assert_invariants()


def test_a_gang_member_failing_in_a_later_run_rolls_back_the_members_bound_before(cluster, kube_client):
    emu = cluster
    gang(emu, "g", 2)
    sync(emu)
    cycle_run(trigger="test")
    emu.faults.add("POST", r"/pods/g-1/binding$", status=503)
    dispatch(kube_client)
    assert node_of(emu, "g-0") == "n0" and node_of(emu, "g-1") == ""
    assert Task.objects.get(kube_pod__name="g-0").state == TaskState.RUNNING
    emu.delete("pods", NS, "g-1")  # before the retry
    dispatch(kube_client, after=INTERVAL)
    assert not Task.objects.filter(kube_pod__name="g-1").exists()
    assert Task.objects.get(kube_pod__name="g-0").state == TaskState.RELEASING, "not left running below gang size"
    converge(emu, kube_client)
    emu.advance(60)
    sync(emu)
    assert Task.objects.count() == 0
    assert performed_binds(emu) == {"g-0": 1}
    cycle_run(trigger="test")
    assert_invariants()
