"""The scale adjuster against the API emulator through the real ``kubernetes`` client: utility pods
that ask for whole GPUs for the GPU-sharing demand an autoscaler cannot see -- created, resized and
deleted as demand changes, none for pods waiting for their queue, one group per kind of node, a
cool-down once capacity arrived, and convergence through API errors and restarts.  The last tests
run the whole chain: cycle -> PodScheduled conditions -> utility pods -> a node appears -> the
shared pods are bound there (annotated ``karpenter.sh/do-not-disrupt``) and the utility pods go."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from queues_app.choices import CycleStatus, TaskState
from queues_app.kube import scaling
from queues_app.models import KubeAutoscaleState, Task
from queues_app.cycle import faults
from queues_app.cycle.run import cycle_run
from queues_app.kube.autoscale import kube_scale_adjust
from queues_app.kube.outbox import kube_dispatch_due
from queues_app.kube.observed import kube_lease_acquire, kube_relist
from queues_app.services.queues import queue_create

pytestmark = pytest.mark.django_db(transaction=True)

NS = "team"
UNS = "kai-scale-adjust"


@pytest.fixture(autouse=True)
def kube_mode(settings, monkeypatch):
    from queues_app.kube import outbox

    settings.KAI_CLUSTER_MODE = "kubernetes"
    settings.KAI_AUTOSCALE_ENABLED = True
    settings.KAI_AUTOSCALE_NAMESPACE = UNS
    settings.KAI_AUTOSCALE_GPU_MEMORY_FRACTION = 0.1
    settings.KAI_AUTOSCALE_COOLDOWN_SECONDS = 60
    settings.KAI_KUBE_DISPATCH_SECONDS = 2
    settings.KAI_KUBE_MAX_ATTEMPTS = 4
    settings.KAI_KUBE_REQUEST_TIMEOUT = 2
    faults.clear()
    monkeypatch.setattr(outbox, "request_dispatch", lambda: None)
    yield
    faults.clear()


def adjust(client, *, after: float = 0.0):
    return kube_scale_adjust(api_client=client, now=timezone.now() + timedelta(seconds=after))


def unschedulable(emu, name: str, *, reason: str = "Unschedulable", ns: str = NS) -> None:
    """What our dispatcher writes on a capacity-blocked pod (tests of the adjuster alone)."""
    def mark(p):
        conds = [c for c in p["status"].get("conditions") or [] if c["type"] != "PodScheduled"]
        conds.append({"type": "PodScheduled", "status": "False", "reason": reason, "message": "no room"})
        p["status"]["conditions"] = conds

    emu.mutate("pods", ns, name, mark)


def shared(emu, name: str, *, fraction: str | None = "0.5", memory: str | None = None, selector=None,
           reason: str | None = "Unschedulable", cpu: str = "2", queue: str = "qa") -> dict:
    ann = {"gpu-fraction": fraction} if fraction else {"gpu-memory": memory}
    p = emu.add_pod(NS, name, labels={"kai.scheduler/queue": queue}, annotations=ann,
                    requests={"cpu": cpu, "memory": "4Gi"})
    if selector:
        emu.mutate("pods", NS, name, lambda o: o["spec"].__setitem__("nodeSelector", dict(selector)))
    if reason:
        unschedulable(emu, name, reason=reason)
    return p


def utility(emu) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in emu.list("pods", UNS)}


def test_utility_pods_follow_the_summed_fractions(kube_emulator, kube_client):
    emu = kube_emulator
    for i in range(3):
        shared(emu, f"half-{i}")
    report = adjust(kube_client)
    assert report.status == "ran" and report.demand_pods == 3 and report.wanted == 2
    assert emu.get("namespaces", None, UNS)["status"]["phase"] == "Active"  # created on demand
    pods = utility(emu)
    assert len(pods) == 2 and sorted(report.created) == sorted(pods)
    for p in pods.values():
        c = p["spec"]["containers"][0]
        assert c["resources"]["requests"]["nvidia.com/gpu"] == "1" and c["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert c["resources"]["requests"]["cpu"] == "3000m"  # 3 pods x 2 cores over 2 utility pods
        assert p["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
        assert p["metadata"]["labels"][scaling.LABEL_MANAGED] == "true"
        assert p["spec"]["schedulerName"] == "default-scheduler" and not p["spec"].get("nodeName")
        cond = next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled")
        assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")  # visible at once
    # one more half: still 2.0 GPUs -> nothing to do; another: 2.5 -> a third utility pod
    shared(emu, "half-3")
    assert adjust(kube_client).created == [] and len(utility(emu)) == 2
    shared(emu, "half-4")
    assert len(adjust(kube_client).created) == 1 and len(utility(emu)) == 3
    # demand falls (pods deleted, or scheduled): extra utility pods go, no cool-down for pending ones
    for i in range(3):
        emu.delete("pods", NS, f"half-{i}", grace_seconds=0)
    report = adjust(kube_client)
    assert len(report.deleted) == 2 and len(utility(emu)) == 1 and report.cooldown_until is None
    for i in (3, 4):
        emu.delete("pods", NS, f"half-{i}", grace_seconds=0)
    assert len(adjust(kube_client).deleted) == 1 and utility(emu) == {}
    assert KubeAutoscaleState.objects.get().last_report["deleted"]


def test_gpu_memory_requests_count_at_the_configured_fraction(kube_emulator, kube_client, settings):
    emu = kube_emulator
    for i in range(10):
        shared(emu, f"mem-{i}", fraction=None, memory="4000")
    assert adjust(kube_client).wanted == 1  # 10 x 0.1
    shared(emu, "mem-10", fraction=None, memory="4000")
    assert adjust(kube_client).wanted == 2  # 1.1 -> 2
    settings.KAI_AUTOSCALE_GPU_MEMORY_FRACTION = 0.25
    assert adjust(kube_client).wanted == 3  # 11 x 0.25 = 2.75
    assert len(utility(emu)) == 3


def test_no_utility_pod_for_pods_that_wait_for_their_queue_or_need_none(kube_emulator, kube_client):
    emu = kube_emulator
    emu.add_node("n0", gpus=4)
    shared(emu, "limited", reason="OverLimit")
    shared(emu, "np-quota", reason="NonPreemptibleOverQuota")
    shared(emu, "gang", reason="WaitingForPods")
    shared(emu, "pipelined", reason="Pipelined")
    shared(emu, "fresh", reason=None)  # not looked at by the scheduler yet
    emu.add_pod(NS, "whole", labels={"kai.scheduler/queue": "qa"}, requests={"nvidia.com/gpu": "2"})
    unschedulable(emu, "whole")  # visible to autoscalers through its own request: no utility pod
    shared(emu, "other-sched", reason=None)
    emu.mutate("pods", NS, "other-sched", lambda o: o["spec"].__setitem__("schedulerName", "default-scheduler"))
    unschedulable(emu, "other-sched")
    shared(emu, "bound", reason="Unschedulable")
    emu.mutate("pods", NS, "bound", lambda o: o["spec"].__setitem__("nodeName", "n0"))
    report = adjust(kube_client)
    assert report.demand_pods == 0 and report.wanted == 0 and utility(emu) == {}
    assert emu.get("namespaces", None, UNS) is None  # not even the namespace is needed yet


def test_each_kind_of_node_gets_its_own_utility_pods(kube_emulator, kube_client):
    emu = kube_emulator
    shared(emu, "a", fraction="0.3", selector={"pool": "a100"})
    shared(emu, "b", fraction="0.3", selector={"pool": "h100"})
    shared(emu, "c", fraction="0.3", selector={"pool": "a100"})
    emu.mutate("pods", NS, "c", lambda o: o["spec"].__setitem__("affinity", {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}}))
    report = adjust(kube_client)
    assert report.wanted == 3  # KAI would sum 0.9 into one pod with one pool's selector
    pods = list(utility(emu).values())
    assert sorted(p["spec"]["nodeSelector"]["pool"] for p in pods) == ["a100", "a100", "h100"]
    anti = [p["spec"]["affinity"] for p in pods if p["spec"].get("affinity")]
    term = anti[0]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["namespaces"] == [NS]  # still selects the original namespace's pods
    assert all(p["metadata"]["annotations"]["kai.scheduler/scale-for"].startswith(f"{NS}/") for p in pods)


def test_capacity_arriving_removes_the_utility_pod_and_starts_a_cool_down(kube_emulator, kube_client):
    emu = kube_emulator
    for i in range(4):
        shared(emu, f"h-{i}")
    adjust(kube_client)
    names = sorted(utility(emu))
    assert len(names) == 2
    # the autoscaler adds a node; the default scheduler binds one utility pod there
    emu.add_node("new-1", gpus=1)
    emu.mutate("pods", UNS, names[0], lambda o: o["spec"].__setitem__("nodeName", "new-1"))
    report = adjust(kube_client, after=1)
    assert report.deleted == [names[0]] and report.cooldown_until is not None
    assert sorted(utility(emu)) == [names[1]]
    # still unschedulable (our scheduler has not placed them yet): no new utility pod in the cool-down
    report = adjust(kube_client, after=30)
    assert report.created == [] and "cool-down" in report.note and sorted(utility(emu)) == [names[1]]
    report = adjust(kube_client, after=62)
    assert report.created == [names[0]]  # the demand was real: asked again after the cool-down


def test_api_errors_change_nothing_and_the_next_run_converges(kube_emulator, kube_client):
    emu = kube_emulator
    for i in range(2):
        shared(emu, f"h-{i}")
    emu.faults.add("GET", r"^/api/v1/pods$", status=500)  # the demand list fails
    report = adjust(kube_client)
    assert report.status == "error" and utility(emu) == {} and report.errors
    emu.faults.add("POST", rf"^/api/v1/namespaces/{UNS}/pods$", status=500, after=True)  # created, reply lost
    report = adjust(kube_client)
    assert report.created == [] and len(utility(emu)) == 1 and report.errors
    report = adjust(kube_client)  # 409 AlreadyExists: no duplicate, nothing to do
    assert report.created == [] and report.errors == [] and len(utility(emu)) == 1
    (name,) = utility(emu)
    # demand goes; the list of utility pods fails: nothing is deleted from a partial view
    for i in range(2):
        emu.delete("pods", NS, f"h-{i}", grace_seconds=0)
    emu.faults.add("GET", rf"^/api/v1/namespaces/{UNS}/pods$", status=503)
    assert adjust(kube_client).status == "error" and name in utility(emu)
    emu.faults.add("DELETE", rf"/pods/{name}$", status=503)
    assert adjust(kube_client).errors and name in utility(emu)
    assert adjust(kube_client).deleted == [name] and utility(emu) == {}


def test_restarts_and_a_second_worker_converge(kube_emulator, kube_client, settings):
    emu = kube_emulator
    for i in range(3):
        shared(emu, f"h-{i}")
    assert kube_lease_acquire(name="kube-scale-adjust", holder="other-worker", ttl_seconds=30)
    assert adjust(kube_client).status == "skipped" and utility(emu) == {}
    report = adjust(kube_client, after=31)  # the other worker died: its lease expired
    assert report.status == "ran" and len(utility(emu)) == 2
    # a restarted worker has nothing in memory: it reads the same state and does nothing new
    before = len(emu.requests)
    assert adjust(kube_client, after=40).created == []
    assert not [r for r in emu.requests[before:] if r[0] in ("POST", "DELETE")]


def test_a_terminating_namespace_is_waited_for(kube_emulator, kube_client):
    emu = kube_emulator
    emu.add_namespace(UNS)
    emu.add_node("n0")
    emu.add_pod(UNS, "leftover", node_name="n0")
    emu.advance(0)
    emu.delete("namespaces", None, UNS)
    shared(emu, "h")
    report = adjust(kube_client)
    assert report.created == [] and any("being deleted" in e for e in report.errors)
    emu.advance(31)  # the namespace is gone
    assert adjust(kube_client).created and len(utility(emu)) == 1


def test_off_unless_enabled_and_its_own_beat_entry(kube_emulator, kube_client, settings):
    from kaiplatform.celery import _beat_schedule, _task_routes

    entry = _beat_schedule()["kube-scale-adjust"]
    assert entry["task"] == "queues_app.tasks.kube_scale_adjust" and entry["schedule"] == 10.0
    assert _task_routes()["queues_app.tasks.kube_scale_adjust"] == {"queue": "dispatch"}
    settings.KAI_AUTOSCALE_ENABLED = False
    assert "kube-scale-adjust" not in _beat_schedule()
    shared(kube_emulator, "h")
    assert adjust(kube_client).status == "off" and utility(kube_emulator) == {}
    settings.KAI_AUTOSCALE_ENABLED = True
    settings.KAI_CLUSTER_MODE = "embedded"
    assert "kube-scale-adjust" not in _beat_schedule() and adjust(kube_client).status == "off"


# ---- the whole chain --------------------------------------------------------------------------------


def sync(emu) -> None:
    rv = str(emu.resource_version)
    kube_relist(resource="nodes", objs=emu.list("nodes"), resource_version=rv)
    kube_relist(resource="pods", objs=[p for p in emu.list("pods") if p["metadata"]["namespace"] != UNS],
                resource_version=rv)


def dispatch(client, *, after: float = 0.0):
    return kube_dispatch_due(api_client=client, now=timezone.now() + timedelta(seconds=after))


def cycle():
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED, out


def test_capacity_demand_of_shared_pods_gets_a_node_and_quota_demand_does_not(kube_emulator, kube_client):
    emu = kube_emulator
    root = queue_create(name="root", quotas={"gpu": {"quota": 8}})
    queue_create(name="qa", parent=root, quotas={"gpu": {"quota": 8}})
    queue_create(name="capped", parent=root, quotas={"gpu": {"quota": 0.5, "limit": 0.5}})
    emu.add_node("n0", gpus=2, gpu_memory_mib=81920)
    emu.add_pod(NS, "big", labels={"kai.scheduler/queue": "qa"}, requests={"nvidia.com/gpu": "2"})
    for i in range(3):
        shared(emu, f"nb-{i}", reason=None)  # three half-GPU notebooks: no room
    shared(emu, "capped-0", fraction="0.5", reason=None, queue="capped")
    shared(emu, "capped-1", fraction="0.75", reason=None, queue="capped")  # over the 0.5-GPU limit on its own
    sync(emu)
    cycle()
    dispatch(kube_client)
    emu.advance(0)
    sync(emu)
    cycle()  # "big" runs on n0; the notebooks wait for capacity, capped-1 for its queue's limit
    dispatch(kube_client)
    conds = {p["metadata"]["name"]: next((c["reason"] for c in p["status"].get("conditions") or []
                                          if c["type"] == "PodScheduled" and c["status"] == "False"), None)
             for p in emu.list("pods", NS)}
    assert conds == {"big": None, "nb-0": "Unschedulable", "nb-1": "Unschedulable", "nb-2": "Unschedulable",
                     "capped-0": "Unschedulable", "capped-1": "OverLimit"}
    report = adjust(kube_client)
    assert report.demand_pods == 4 and report.wanted == 2  # 3 x 0.5 + 0.5; not capped-1's 0.75
    names = sorted(utility(emu))
    # the autoscaler adds a 4-GPU node; the default scheduler binds a utility pod onto it
    emu.add_node("new-0", gpus=4, gpu_memory_mib=81920)
    emu.mutate("pods", UNS, names[0], lambda o: o["spec"].__setitem__("nodeName", "new-0"))
    report = adjust(kube_client, after=1)
    assert report.deleted == [names[0]] and report.cooldown_until
    sync(emu)
    cycle()
    dispatch(kube_client)
    placed = {t.kube_pod.name: t.state for t in Task.objects.select_related("kube_pod")}
    assert all(placed[f"nb-{i}"] == TaskState.RUNNING for i in range(3)) and placed["capped-0"] == TaskState.RUNNING
    assert placed["capped-1"] == TaskState.PENDING
    for i in range(3):
        pod = emu.get("pods", NS, f"nb-{i}")
        assert pod["spec"]["nodeName"] == "new-0"
        assert pod["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"  # set by the binding
        assert [c["status"] for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"] == ["True"]
    assert "karpenter.sh/do-not-disrupt" not in (emu.get("pods", NS, "big")["metadata"].get("annotations") or {})
    # no demand is left: the other utility pod goes (even in the cool-down), nothing is created
    report = adjust(kube_client, after=2)
    assert report.deleted == [names[1]] and report.wanted == 0 and utility(emu) == {}
    assert adjust(kube_client, after=120).created == []
