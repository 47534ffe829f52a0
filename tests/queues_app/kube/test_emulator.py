"""The API emulator, driven only through the official ``kubernetes`` client over a real socket.

Each test pins one documented API-server behaviour the control plane relies on (resourceVersion
resume, 410 after compaction, binding/eviction status codes, graceful deletion, pod GC), so a
regression in the emulator cannot silently make the sync/dispatch tests meaningless.
"""
from __future__ import annotations

import datetime
import json
import threading
import time

import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from tests.support.kube_emulator import KubeEmulator, ManualClock


@pytest.fixture(autouse=True)
def _ns(request):
    """The namespace most tests write into exists (the API refuses content in a missing namespace)."""
    if "kube_emulator" in request.fixturenames:
        request.getfixturevalue("kube_emulator").add_namespace("ns")


@pytest.fixture
def core(kube_client):
    return client.CoreV1Api(kube_client)


def _bind(core, ns, pod, node):
    """Bind as a scheduler does; _preload_content=False because the server answers with a Status."""
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name=pod, namespace=ns),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
    )
    resp = core.create_namespaced_pod_binding(pod, ns, body, _preload_content=False)
    return resp.status, json.loads(resp.data)


def _events(core, fn, *args, **kwargs):
    kwargs.setdefault("timeout_seconds", 1)
    return [(e["type"], e["object"].metadata.name) for e in watch.Watch().stream(fn, *args, **kwargs)]


def _evict(core, ns, name, **delete_options):
    body = client.V1Eviction(
        metadata=client.V1ObjectMeta(name=name, namespace=ns),
        delete_options=client.V1DeleteOptions(**delete_options) if delete_options else None,
    )
    return core.create_namespaced_pod_eviction(name, ns, body, _preload_content=False)


# ---- discovery, kubeconfig ------------------------------------------------------------------------


def test_discovery_and_unknown_path_status(kube_emulator, kube_client):
    assert client.VersionApi(kube_client).get_code().git_version.startswith("v1.31")
    assert client.CoreApi(kube_client).get_api_versions().versions == ["v1"]
    resources = {r.name for r in client.CoreV1Api(kube_client).get_api_resources().resources}
    assert {"pods", "pods/binding", "pods/eviction", "nodes", "events"} <= resources
    groups = {g.name for g in client.ApisApi(kube_client).get_api_versions().groups}
    assert {"policy", "events.k8s.io"} <= groups
    http = urllib3.PoolManager()
    resp = http.request("GET", kube_emulator.url + "/api/v1/namespaces/default/configmaps")
    assert resp.status == 404
    body = json.loads(resp.data)
    assert (body["kind"], body["code"], body["reason"]) == ("Status", 404, "NotFound")


def test_kubeconfig_loads_with_official_loader(kube_emulator, tmp_path):
    path = kube_emulator.write_kubeconfig(str(tmp_path / "kubeconfig"), context="kai-emulator")
    kube_emulator.add_node("n1")
    api_client = config.new_client_from_config(config_file=path, context="kai-emulator")
    try:
        assert [n.metadata.name for n in client.CoreV1Api(api_client).list_node().items] == ["n1"]
    finally:
        api_client.close()


# ---- list / watch -----------------------------------------------------------------------------------


def test_list_resource_version_and_watch_resumes_after_it(kube_emulator, core):
    kube_emulator.add_node("n1", gpus=4)
    kube_emulator.add_pod("ns1", "old")
    listed = core.list_namespaced_pod("ns1")
    assert [p.metadata.name for p in listed.items] == ["old"]
    rv = listed.metadata.resource_version
    assert int(rv) == kube_emulator.resource_version
    kube_emulator.add_pod("ns1", "new")
    kube_emulator.add_pod("ns2", "elsewhere")
    kube_emulator.set_pod_phase("ns1", "old", "Failed")
    assert _events(core, core.list_namespaced_pod, "ns1", resource_version=rv) == [("ADDED", "new"), ("MODIFIED", "old")]
    # From "0" (or no RV) the watch starts with synthetic ADDED events for the current state.
    assert _events(core, core.list_namespaced_pod, "ns1", resource_version="0") == [("ADDED", "new"), ("ADDED", "old")]
    node = core.list_node().items[0]
    assert node.status.allocatable["nvidia.com/gpu"] == "4"
    assert [c.type for c in node.status.conditions] == ["Ready"]


def test_watch_streams_live_events_and_bookmarks(kube_emulator, core):
    kube_emulator.bookmark_interval = 0.2
    rv = core.list_pod_for_all_namespaces().metadata.resource_version
    seen = []
    w = watch.Watch()

    def consume():
        for ev in w.stream(core.list_pod_for_all_namespaces, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=3):
            seen.append(ev["type"])
            if ev["type"] == "DELETED":
                w.stop()

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.5)
    kube_emulator.add_pod("ns", "p")
    kube_emulator.delete("pods", "ns", "p")
    t.join(5)
    assert not t.is_alive()
    assert "BOOKMARK" in seen
    assert [s for s in seen if s != "BOOKMARK"] == ["ADDED", "DELETED"]
    assert w.resource_version == str(kube_emulator.resource_version)


def test_watch_from_compacted_resource_version_raises_410(kube_emulator, core):
    kube_emulator.add_pod("ns", "a")
    rv = core.list_namespaced_pod("ns").metadata.resource_version
    kube_emulator.add_pod("ns", "b")
    kube_emulator.compact()
    with pytest.raises(ApiException) as exc:
        list(watch.Watch().stream(core.list_namespaced_pod, "ns", resource_version=rv, timeout_seconds=1))
    assert exc.value.status == 410
    # Without timeout_seconds the client retries once from the same RV, then gives up with 410 too.
    with pytest.raises(ApiException) as exc:
        list(watch.Watch().stream(core.list_namespaced_pod, "ns", resource_version=rv))
    assert exc.value.status == 410
    # A fresh list gives a usable RV again.
    fresh = core.list_namespaced_pod("ns").metadata.resource_version
    assert _events(core, core.list_namespaced_pod, "ns", resource_version=fresh) == []


def test_history_limit_expires_slow_watchers(core):
    with KubeEmulator(history_limit=3) as em:
        api = client.CoreV1Api(client.ApiClient(em.configuration()))
        rv = api.list_namespaced_pod("ns").metadata.resource_version
        for i in range(5):
            em.add_pod("ns", f"p{i}")
        with pytest.raises(ApiException) as exc:
            list(watch.Watch().stream(api.list_namespaced_pod, "ns", resource_version=rv, timeout_seconds=1))
        assert exc.value.status == 410
        # A list at an RV still inside the history works (NotOlderThan -> current state).
        assert len(api.list_namespaced_pod("ns", resource_version=rv, resource_version_match="NotOlderThan").items) == 5


def test_disconnect_watches_ends_the_stream(kube_emulator, core):
    done = threading.Event()
    events = []

    def consume():
        for ev in watch.Watch().stream(core.list_node, timeout_seconds=30):
            events.append(ev["type"])
        done.set()

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.3)
    started = time.monotonic()
    kube_emulator.disconnect_watches()
    assert done.wait(5)
    assert time.monotonic() - started < 2
    t.join(1)


def test_abrupt_disconnect_is_a_protocol_error_for_raw_stream(kube_emulator, core):
    resp = core.list_node(watch=True, _preload_content=False)
    kube_emulator.add_node("n1")
    chunks = resp.stream(amt=None, decode_content=False)
    assert b'"ADDED"' in next(chunks)
    kube_emulator.disconnect_watches(abrupt=True)
    with pytest.raises(urllib3.exceptions.ProtocolError):
        for _ in chunks:
            pass
    resp.release_conn()


def test_label_and_field_selectors(kube_emulator, core):
    kube_emulator.add_node("n1")
    kube_emulator.add_pod("ns", "a", labels={"kai.scheduler/queue": "q1", "tier": "x"})
    kube_emulator.add_pod("ns", "b", labels={"kai.scheduler/queue": "q2"}, scheduler_name="default-scheduler")
    kube_emulator.add_pod("ns", "c", labels={"kai.scheduler/queue": "q1"}, node_name="n1")
    kube_emulator.add_pod("other", "d")

    def names(**kw):
        return sorted(p.metadata.name for p in core.list_pod_for_all_namespaces(**kw).items)

    assert names(label_selector="kai.scheduler/queue=q1") == ["a", "c"]
    assert names(label_selector="kai.scheduler/queue!=q1") == ["b", "d"]
    assert names(label_selector="kai.scheduler/queue in (q2, q3)") == ["b"]
    assert names(label_selector="kai.scheduler/queue notin (q1)") == ["b", "d"]
    assert names(label_selector="tier") == ["a"]
    assert names(label_selector="!tier,kai.scheduler/queue") == ["b", "c"]
    assert names(field_selector="spec.schedulerName=kai-scheduler") == ["a", "c", "d"]
    assert names(field_selector="spec.schedulerName=kai-scheduler,spec.nodeName=") == ["a", "d"]
    assert names(field_selector="spec.nodeName=n1") == ["c"]
    assert names(field_selector="metadata.namespace=other") == ["d"]
    assert names(field_selector="status.phase=Pending,metadata.name!=a") == ["b", "c", "d"]
    with pytest.raises(ApiException) as exc:
        names(field_selector="spec.priority=1")
    assert exc.value.status == 400 and "field label not supported" in json.loads(exc.value.body)["message"]
    assert [n.metadata.name for n in core.list_node(field_selector="metadata.name=n1").items] == ["n1"]


def test_watch_retypes_events_for_selector(kube_emulator, core):
    """A pod leaving 'spec.nodeName=' (it got bound) is a DELETED event for that watcher, as the watch cache does."""
    kube_emulator.add_node("n1")
    kube_emulator.add_pod("ns", "p")
    rv = core.list_namespaced_pod("ns").metadata.resource_version
    assert _bind(core, "ns", "p", "n1")[0] == 201
    unbound = watch.Watch().stream(core.list_namespaced_pod, "ns", field_selector="spec.nodeName=", resource_version=rv, timeout_seconds=1)
    events = [(e["type"], e["object"].spec.node_name, e["object"].metadata.resource_version) for e in unbound]
    assert events == [("DELETED", None, str(kube_emulator.resource_version))]


def test_list_limit_and_continue(kube_emulator, core):
    for i in range(5):
        kube_emulator.add_pod("ns", f"p{i}")
    page = core.list_namespaced_pod("ns", limit=2)
    assert [p.metadata.name for p in page.items] == ["p0", "p1"]
    assert page.metadata.remaining_item_count == 3
    kube_emulator.add_pod("ns", "p9")  # not in the snapshot the continue token refers to
    rest = core.list_namespaced_pod("ns", limit=10, _continue=page.metadata._continue)
    assert [p.metadata.name for p in rest.items] == ["p2", "p3", "p4"]
    assert rest.metadata.resource_version == page.metadata.resource_version


# ---- binding ----------------------------------------------------------------------------------------


def test_binding_201_then_409_and_404(kube_emulator, core):
    kube_emulator.add_node("n1")
    kube_emulator.add_pod("ns", "p", requests={"nvidia.com/gpu": "1", "cpu": "1"})
    status, body = _bind(core, "ns", "p", "n1")
    assert (status, body["kind"], body["status"]) == (201, "Status", "Success")
    pod = core.read_namespaced_pod("p", "ns")
    assert pod.spec.node_name == "n1"
    assert [(c.type, c.status) for c in pod.status.conditions] == [("PodScheduled", "True")]
    with pytest.raises(ApiException) as exc:
        _bind(core, "ns", "p", "n2")
    assert exc.value.status == 409
    err = json.loads(exc.value.body)
    assert err["reason"] == "Conflict" and 'pod p is already assigned to node "n1"' in err["message"]
    with pytest.raises(ApiException) as exc:
        _bind(core, "ns", "missing", "n1")
    assert exc.value.status == 404
    # The legacy namespaced Binding endpoint behaves the same.
    kube_emulator.add_pod("ns", "q")
    resp = core.create_namespaced_binding(
        "ns",
        client.V1Binding(metadata=client.V1ObjectMeta(name="q"), target=client.V1ObjectReference(kind="Node", name="n1")),
        _preload_content=False,
    )
    assert resp.status == 201 and kube_emulator.get("pods", "ns", "q")["spec"]["nodeName"] == "n1"
    assert kube_emulator.count_requests("POST", r"/pods/p/binding$", status=201) == 1


def test_kubelet_runs_bound_pods_after_start_delay():
    with KubeEmulator(kubelet_start_seconds=5) as em:
        em.add_node("n1")
        em.add_node("down", ready=False)
        em.add_pod("ns", "p", node_name="n1")
        em.add_pod("ns", "q", node_name="down")
        em.advance(4)
        assert em.get("pods", "ns", "p")["status"]["phase"] == "Pending"
        em.advance(1)
        assert em.get("pods", "ns", "p")["status"]["phase"] == "Running"
        assert em.get("pods", "ns", "q")["status"]["phase"] == "Pending"


# ---- deletion, eviction, GC -------------------------------------------------------------------------


def test_graceful_delete_then_removed_after_grace(kube_emulator, core):
    kube_emulator.add_node("n1")
    kube_emulator.add_pod("ns", "p", node_name="n1")
    kube_emulator.add_pod("ns", "unbound")
    kube_emulator.advance(0)
    got = core.delete_namespaced_pod("p", "ns", grace_period_seconds=10)
    assert got.metadata.deletion_timestamp is not None and got.metadata.deletion_grace_period_seconds == 10
    assert core.read_namespaced_pod("p", "ns").metadata.deletion_timestamp is not None
    core.delete_namespaced_pod("unbound", "ns")  # nothing runs it: removed at once
    assert kube_emulator.get("pods", "ns", "unbound") is None
    kube_emulator.advance(9)
    assert kube_emulator.get("pods", "ns", "p") is not None
    kube_emulator.advance(1)
    with pytest.raises(ApiException) as exc:
        core.read_namespaced_pod("p", "ns")
    assert exc.value.status == 404


def test_delete_uid_precondition_conflict(kube_emulator, core):
    kube_emulator.add_pod("ns", "p")
    with pytest.raises(ApiException) as exc:
        core.delete_namespaced_pod("p", "ns", body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-the-uid")))
    assert exc.value.status == 409 and "Precondition failed" in json.loads(exc.value.body)["message"]
    uid = kube_emulator.get("pods", "ns", "p")["metadata"]["uid"]
    core.delete_namespaced_pod("p", "ns", body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)))
    assert kube_emulator.get("pods", "ns", "p") is None


def test_eviction_201_429_404_and_graceful_removal(kube_emulator, core):
    kube_emulator.add_node("n1")
    for name in ("a", "b"):
        kube_emulator.add_pod("ns", name, node_name="n1")
    kube_emulator.advance(0)  # kubelet: both Running
    resp = _evict(core, "ns", "a")
    assert resp.status == 201 and json.loads(resp.data)["status"] == "Success"
    pod = kube_emulator.get("pods", "ns", "a")
    assert pod["metadata"]["deletionGracePeriodSeconds"] == 30
    assert {c["type"]: c.get("reason") for c in pod["status"]["conditions"]}["DisruptionTarget"] == "EvictionByEvictionAPI"
    kube_emulator.block_evictions("ns", "b")
    with pytest.raises(ApiException) as exc:
        _evict(core, "ns", "b")
    assert exc.value.status == 429
    assert json.loads(exc.value.body)["details"]["causes"][0]["reason"] == "DisruptionBudget"
    with pytest.raises(ApiException) as exc:
        _evict(core, "ns", "nope")
    assert exc.value.status == 404
    kube_emulator.advance(30)
    assert kube_emulator.get("pods", "ns", "a") is None
    assert kube_emulator.get("pods", "ns", "b")["status"]["phase"] == "Running"
    kube_emulator.unblock_evictions()
    assert _evict(core, "ns", "b", grace_period_seconds=0).status == 201
    assert kube_emulator.get("pods", "ns", "b") is None


def test_pod_gc_deletes_pods_of_a_deleted_node(core):
    with KubeEmulator(pod_gc_seconds=40) as em:
        api = client.CoreV1Api(client.ApiClient(em.configuration()))
        em.add_node("n1")
        em.add_pod("ns", "p", node_name="n1")
        em.advance(0)
        rv = api.list_namespaced_pod("ns").metadata.resource_version
        api.delete_node("n1")
        em.advance(39)
        assert em.get("pods", "ns", "p")["status"]["phase"] == "Running"
        em.advance(1)
        assert em.get("pods", "ns", "p") is None
        events = [(e["type"], e["object"].status.phase) for e in watch.Watch().stream(api.list_namespaced_pod, "ns", resource_version=rv, timeout_seconds=1)]
        assert events == [("MODIFIED", "Failed"), ("DELETED", "Failed")]


# ---- updates ------------------------------------------------------------------------------------------


def test_patch_labels_and_pod_spec_immutability(kube_emulator, core):
    kube_emulator.add_pod("ns", "p", labels={"a": "1"})
    before = kube_emulator.get("pods", "ns", "p")["metadata"]["resourceVersion"]
    patched = core.patch_namespaced_pod("p", "ns", {"metadata": {"labels": {"b": "2"}}})
    assert patched.metadata.labels == {"a": "1", "b": "2"}
    assert int(patched.metadata.resource_version) > int(before)
    with pytest.raises(ApiException) as exc:
        core.patch_namespaced_pod("p", "ns", {"spec": {"nodeName": "n1"}})
    assert exc.value.status == 422 and json.loads(exc.value.body)["reason"] == "Invalid"
    # A stale resourceVersion in an update is a 409 Conflict.
    pod = core.read_namespaced_pod("p", "ns")
    pod.metadata.resource_version = before
    with pytest.raises(ApiException) as exc:
        core.replace_namespaced_pod("p", "ns", pod)
    assert exc.value.status == 409


def test_status_subresource_strategic_merge_of_conditions(kube_emulator, core):
    kube_emulator.add_node("n1")
    kube_emulator.add_pod("ns", "p", node_name="n1")
    kube_emulator.advance(0)
    patch = {"status": {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]}}
    pod = core.patch_namespaced_pod_status("p", "ns", patch)
    types = [c.type for c in pod.status.conditions]
    assert "DisruptionTarget" in types and "Ready" in types  # merged by key "type", not replaced
    # Status written through the main resource is ignored.
    pod = core.patch_namespaced_pod("p", "ns", {"status": {"phase": "Failed"}})
    assert pod.status.phase == "Running"


def test_create_pod_validation_needs_gpu_limits(core):
    body = client.V1Pod(
        metadata=client.V1ObjectMeta(name="p"),
        spec=client.V1PodSpec(
            scheduler_name="kai-scheduler",
            containers=[client.V1Container(name="c", image="x:1", resources=client.V1ResourceRequirements(requests={"nvidia.com/gpu": "1"}))],
        ),
    )
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("ns", body)
    assert exc.value.status == 422
    body.spec.containers[0].resources.limits = {"nvidia.com/gpu": "1"}
    made = core.create_namespaced_pod("ns", body)
    assert made.status.phase == "Pending" and made.spec.termination_grace_period_seconds == 30
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("ns", body)
    assert exc.value.status == 409 and json.loads(exc.value.body)["reason"] == "AlreadyExists"


# ---- faults -------------------------------------------------------------------------------------------


def test_fault_after_performs_the_bind_but_answers_500(kube_emulator, core):
    kube_emulator.add_node("n1")
    kube_emulator.add_pod("ns", "p")
    kube_emulator.faults.add("POST", r"/pods/p/binding$", status=500, after=True)
    with pytest.raises(ApiException) as exc:
        _bind(core, "ns", "p", "n1")
    assert exc.value.status == 500 and json.loads(exc.value.body)["kind"] == "Status"
    assert core.read_namespaced_pod("p", "ns").spec.node_name == "n1"
    with pytest.raises(ApiException) as exc:  # the retry then sees the conflict
        _bind(core, "ns", "p", "n1")
    assert exc.value.status == 409
    assert [s for m, p, s in kube_emulator.requests if p.endswith("/binding")] == [500, 409]
    assert [r.performed for r in kube_emulator.request_records if r.path.endswith("/binding")] == [201, 409]


def test_fault_before_does_not_perform_and_times_runs_out(kube_emulator, core):
    kube_emulator.add_pod("ns", "p")
    kube_emulator.faults.add("POST", r"/binding$", status=503, times=2)
    for _ in range(2):
        with pytest.raises(ApiException) as exc:
            _bind(core, "ns", "p", "n1")
        assert exc.value.status == 503
    assert kube_emulator.get("pods", "ns", "p")["spec"].get("nodeName") is None
    assert _bind(core, "ns", "p", "n1")[0] == 201


def test_fault_drop_connection_and_delay(kube_emulator, core):
    kube_emulator.add_pod("ns", "p")
    kube_emulator.faults.add("POST", r"/binding$", drop_connection=True, after=True)
    with pytest.raises(urllib3.exceptions.HTTPError):
        core.create_namespaced_pod_binding(
            "p", "ns",
            client.V1Binding(metadata=client.V1ObjectMeta(name="p"), target=client.V1ObjectReference(kind="Node", name="n1")),
            _preload_content=False,
        )
    assert kube_emulator.get("pods", "ns", "p")["spec"]["nodeName"] == "n1"
    # The client retries idempotent reads on a read timeout, so delay every attempt.
    kube_emulator.faults.add("GET", r"/pods/p$", delay=0.5, times=None)
    with pytest.raises(urllib3.exceptions.HTTPError):
        core.read_namespaced_pod("p", "ns", _request_timeout=0.1)
    kube_emulator.faults.clear()
    assert core.read_namespaced_pod("p", "ns").spec.node_name == "n1"


# ---- events -------------------------------------------------------------------------------------------


def test_core_and_events_k8s_io_events(kube_emulator, core, kube_client):
    pod = kube_emulator.add_pod("ns", "p")
    ref = client.V1ObjectReference(kind="Pod", namespace="ns", name="p", uid=pod["metadata"]["uid"], api_version="v1")
    made = core.create_namespaced_event(
        "ns",
        client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name="p."), involved_object=ref, reason="Scheduled",
            message="Successfully assigned ns/p to n1", type="Normal", source=client.V1EventSource(component="kai-scheduler"),
        ),
    )
    assert made.metadata.name.startswith("p.") and made.count == 1
    listed = core.list_namespaced_event("ns", field_selector="involvedObject.name=p,reason=Scheduled")
    assert [e.message for e in listed.items] == ["Successfully assigned ns/p to n1"]
    ev_api = client.EventsV1Api(kube_client)
    v1 = client.EventsV1Event(
        metadata=client.V1ObjectMeta(name="p.pending"), regarding=ref, reason="Unschedulable", note="0/1 nodes",
        type="Warning", action="Scheduling", reporting_controller="kai-scheduler", reporting_instance="kai-1",
        event_time=datetime.datetime.now(datetime.timezone.utc),
    )
    ev_api.create_namespaced_event("ns", v1)
    assert kube_emulator.get("events", "ns", "p.pending")["message"] == "0/1 nodes"
    # Both APIs serve one store.  (A core event has no eventTime, which the v37 EventsV1Event model
    # rejects, as it would against a real cluster; so read the events.k8s.io view of new-style events only.)
    assert [e.note for e in ev_api.list_namespaced_event("ns", field_selector="reportingController=kai-scheduler").items] == ["0/1 nodes"]
    raw = json.loads(ev_api.list_namespaced_event("ns", _preload_content=False).data)
    assert sorted(e.get("note") for e in raw["items"]) == ["0/1 nodes", "Successfully assigned ns/p to n1"]
    # events.k8s.io/v1 requires eventTime, reportingController, ... (the client validates this too: post raw).
    resp = urllib3.PoolManager().request(
        "POST", kube_emulator.url + "/apis/events.k8s.io/v1/namespaces/ns/events",
        body=json.dumps({"metadata": {"name": "bad"}, "regarding": {"kind": "Pod", "name": "p"}, "reason": "X", "type": "Normal"}),
        headers={"Content-Type": "application/json"},
    )
    err = json.loads(resp.data)
    assert resp.status == 422 and {c["field"] for c in err["details"]["causes"]} == {"eventTime", "reportingController", "reportingInstance", "action"}


def test_manual_clock_drives_timestamps():
    clock = ManualClock(start=1_700_000_000)
    with KubeEmulator(clock=clock) as em:
        pod = em.add_pod("ns", "p")
        assert pod["metadata"]["creationTimestamp"] == "2023-11-14T22:13:20Z"
        em.advance(60)
        assert em.add_pod("ns", "q")["metadata"]["creationTimestamp"] == "2023-11-14T22:14:20Z"


# ---- owner controllers ----------------------------------------------------------------------------


def test_owner_kinds_are_served_with_defaults_and_deletion_cascades(kube_emulator, kube_client):
    apps, batch = client.AppsV1Api(kube_client), client.BatchV1Api(kube_client)
    deploy = kube_emulator.add_owner("Deployment", "ns", "web", replicas=3)
    rs = kube_emulator.add_owner("ReplicaSet", "ns", "web-1", replicas=3, owner=deploy)
    kube_emulator.add_owner("StatefulSet", "ns", "db", replicas=2)
    cron = kube_emulator.add_owner("CronJob", "ns", "nightly", parallelism=4)
    kube_emulator.add_owner("Job", "ns", "nightly-1", parallelism=4, owner=cron)
    train = kube_emulator.add_owner("Job", "ns", "train")
    kube_emulator.add_pod("ns", "web-1-a", owner=rs)
    kube_emulator.add_pod("ns", "train-a", owner=train)
    assert kube_emulator.get("pods", "ns", "web-1-a")["metadata"]["ownerReferences"][0]["uid"] == rs["metadata"]["uid"]
    assert apps.read_namespaced_replica_set("web-1", "ns").metadata.owner_references[0].kind == "Deployment"
    assert apps.read_namespaced_stateful_set("db", "ns").spec.replicas == 2
    assert batch.read_namespaced_cron_job("nightly", "ns").spec.job_template.spec.parallelism == 4
    job = batch.read_namespaced_job("train", "ns")
    assert (job.spec.parallelism, job.spec.completions, job.spec.backoff_limit) == (1, 1, 6)
    assert job.spec.template.metadata.labels["batch.kubernetes.io/job-name"] == "train"
    assert [d.metadata.name for d in apps.list_deployment_for_all_namespaces().items] == ["web"]
    patched = apps.patch_namespaced_stateful_set("db", "ns", {"spec": {"replicas": 5}})
    assert (patched.spec.replicas, patched.metadata.generation) == (5, 2)
    with pytest.raises(ApiException) as exc:  # selector must match the template labels
        apps.create_namespaced_replica_set("ns", {
            "metadata": {"name": "bad"},
            "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "c"}}, "spec": {"containers": [{"name": "c", "image": "x:1"}]}}},
        })
    assert exc.value.status == 422
    # apps/v1 deletes cascade in the background; batch/v1 Jobs orphan their pods by default.
    apps.delete_namespaced_deployment("web", "ns")
    assert kube_emulator.get("replicasets", "ns", "web-1") is None and kube_emulator.get("pods", "ns", "web-1-a") is None
    batch.delete_namespaced_job("train", "ns")
    assert kube_emulator.get("pods", "ns", "train-a") is not None


# ---- clock modes, CLI, less common API paths ----------------------------------------------------


def test_run_realtime_runs_the_kubelet_and_grace_on_the_wall_clock():
    with KubeEmulator(kubelet_start_seconds=0.2) as em:
        em.add_node("n1")
        em.add_pod("ns", "p", node_name="n1")
        em.run_realtime(interval=0.05)
        deadline = time.monotonic() + 5
        while em.get("pods", "ns", "p")["status"]["phase"] != "Running":
            assert time.monotonic() < deadline, "kubelet never started the pod"
            time.sleep(0.05)
        em.delete("pods", "ns", "p", grace_seconds=1)
        while em.get("pods", "ns", "p") is not None:
            assert time.monotonic() < deadline + 5, "graceful deletion never finished"
            time.sleep(0.05)
        em.stop_realtime()


def test_cli_serves_nodes_and_writes_a_kubeconfig(tmp_path):
    import signal
    import socket
    import subprocess
    import sys

    with socket.socket() as s:  # a free port for the child
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "kc.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.kube_emulator", "--port", str(port), "--kubeconfig", str(kubeconfig),
         "--nodes", "3", "--gpus-per-node", "2"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert "listening on" in proc.stdout.readline()
        api_client = config.new_client_from_config(config_file=str(kubeconfig), context="kai-emulator")
        nodes = client.CoreV1Api(api_client).list_node().items
        assert [(n.metadata.name, n.status.allocatable["nvidia.com/gpu"]) for n in nodes] == [
            ("node-1", "2"), ("node-2", "2"), ("node-3", "2")]
        api_client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_send_initial_events_ends_with_the_initial_events_end_bookmark(kube_emulator, core):
    kube_emulator.add_pod("ns", "a")
    resp = core.list_namespaced_pod(
        "ns", watch=True, send_initial_events=True, allow_watch_bookmarks=True,
        resource_version_match="NotOlderThan", timeout_seconds=1, _preload_content=False,
    )
    lines = [json.loads(line) for line in resp.data.decode().splitlines() if line]
    assert lines[0]["type"] == "ADDED" and lines[1]["type"] == "BOOKMARK"
    assert lines[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_json_patch_and_finalizers_hold_deletion(kube_emulator, core):
    kube_emulator.add_pod("ns", "p")
    core.patch_namespaced_pod("p", "ns", [{"op": "add", "path": "/metadata/finalizers", "value": ["kai/hold"]}])
    core.delete_namespaced_pod("p", "ns")
    held = core.read_namespaced_pod("p", "ns")
    assert held.metadata.deletion_timestamp is not None and held.metadata.finalizers == ["kai/hold"]
    with pytest.raises(ApiException) as exc:  # a test op that fails aborts the whole patch
        core.patch_namespaced_pod("p", "ns", [{"op": "test", "path": "/metadata/name", "value": "other"}])
    assert exc.value.status == 422
    core.patch_namespaced_pod("p", "ns", [{"op": "remove", "path": "/metadata/finalizers"}])
    assert kube_emulator.get("pods", "ns", "p") is None


def test_pod_disruption_budget_objects_gate_evictions(kube_emulator, core, kube_client):
    policy = client.PolicyV1Api(kube_client)
    kube_emulator.add_node("n1")
    for i in range(3):
        kube_emulator.add_pod("ns", f"w{i}", labels={"app": "train"}, node_name="n1")
    kube_emulator.advance(0)  # all Running + Ready
    policy.create_namespaced_pod_disruption_budget("ns", client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="train-pdb"),
        spec=client.V1PodDisruptionBudgetSpec(min_available=2, selector=client.V1LabelSelector(match_labels={"app": "train"})),
    ))
    pdb = policy.read_namespaced_pod_disruption_budget("train-pdb", "ns")
    assert (pdb.status.current_healthy, pdb.status.desired_healthy, pdb.status.disruptions_allowed) == (3, 2, 1)
    assert _evict(core, "ns", "w0").status == 201
    with pytest.raises(ApiException) as exc:  # w0 is terminating: no longer healthy, budget exhausted
        _evict(core, "ns", "w1")
    assert exc.value.status == 429
    assert "needs 2 healthy pods and has 2 currently" in json.loads(exc.value.body)["details"]["causes"][0]["message"]
    kube_emulator.advance(0)
    assert policy.read_namespaced_pod_disruption_budget("train-pdb", "ns").status.disruptions_allowed == 0
    with pytest.raises(ApiException) as exc:
        policy.create_namespaced_pod_disruption_budget("ns", {
            "metadata": {"name": "bad"}, "spec": {"minAvailable": 1, "maxUnavailable": 1, "selector": {}},
        })
    assert exc.value.status == 422


def test_not_ready_node_is_tainted_and_its_pods_go_after_the_toleration(kube_emulator, core):
    kube_emulator.add_node("n1")
    kube_emulator.add_node("n2", taints=[{"key": "maintenance", "effect": "NoExecute"}])
    kube_emulator.add_pod("ns", "p", node_name="n1")
    kube_emulator.add_pod("ns", "q", node_name="n2")  # does not tolerate the taint: evicted at once
    kube_emulator.advance(0)
    assert kube_emulator.get("pods", "ns", "q")["metadata"].get("deletionTimestamp") is not None
    kube_emulator.set_node_ready("n1", False)
    kube_emulator.advance(0)
    node = core.read_node("n1")
    assert sorted((t.key, t.effect) for t in node.spec.taints) == [
        ("node.kubernetes.io/not-ready", "NoExecute"), ("node.kubernetes.io/not-ready", "NoSchedule")]
    kube_emulator.advance(299)  # the default toleration of the not-ready taint is 300 s
    assert kube_emulator.get("pods", "ns", "p")["metadata"].get("deletionTimestamp") is None
    kube_emulator.advance(1)
    pod = kube_emulator.get("pods", "ns", "p")
    assert pod["metadata"]["deletionTimestamp"] is not None
    assert {c["type"]: c.get("reason") for c in pod["status"]["conditions"]}["DisruptionTarget"] == "DeletionByTaintManager"
    kube_emulator.set_node_ready("n1", True)
    kube_emulator.advance(0)
    assert core.read_node("n1").spec.taints is None


def test_table_output_for_kubectl(kube_emulator):
    kube_emulator.add_node("n1")
    kube_emulator.add_pod("ns", "p", node_name="n1")
    kube_emulator.add_pod("ns", "q")
    kube_emulator.advance(90)
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    resp = urllib3.PoolManager().request("GET", kube_emulator.url + "/api/v1/namespaces/ns/pods", headers={"Accept": accept})
    table = json.loads(resp.data)
    assert table["kind"] == "Table" and [c["name"] for c in table["columnDefinitions"]][:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert [r["cells"][:5] for r in table["rows"]] == [["p", "1/1", "Running", 0, "90s"], ["q", "0/1", "Pending", 0, "90s"]]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


@pytest.mark.skipif(__import__("shutil").which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_get_pods_wide(kube_emulator, tmp_path):
    import subprocess

    kube_emulator.add_node("n1")
    kube_emulator.add_pod("ns", "p", node_name="n1")
    kube_emulator.advance(0)
    kubeconfig = kube_emulator.write_kubeconfig(str(tmp_path / "kc"))
    out = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", "pods", "-n", "ns", "-o", "wide"],
                         capture_output=True, text=True, timeout=30, check=True).stdout.splitlines()
    assert out[0].split()[:3] == ["NAME", "READY", "STATUS"]
    assert out[1].split()[:3] == ["p", "1/1", "Running"] and "n1" in out[1].split()


# ---- namespaces, pod status conditions (cluster autoscaling, issue #22) ---------------------------


def test_namespaces_gate_content_and_are_deleted_with_it(kube_emulator, core):
    names = {n.metadata.name for n in core.list_namespace().items}
    assert {"default", "kube-system", "kube-public", "kube-node-lease", "ns"} <= names
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name="p"),
                       spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="x:1")]))
    with pytest.raises(ApiException) as exc:  # NamespaceLifecycle: no content in a missing namespace
        core.create_namespaced_pod("scale", pod)
    assert exc.value.status == 404 and json.loads(exc.value.body)["message"] == 'namespaces "scale" not found'
    made = core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="scale")))
    assert made.status.phase == "Active" and made.metadata.labels["kubernetes.io/metadata.name"] == "scale"
    with pytest.raises(ApiException) as exc:
        core.create_namespace({"metadata": {"name": "Not_A_Label"}})
    assert exc.value.status == 422
    kube_emulator.add_node("n1")
    core.create_namespaced_pod("scale", pod)
    kube_emulator.add_pod("scale", "bound", node_name="n1")
    kube_emulator.advance(0)
    core.delete_namespace("scale")
    assert kube_emulator.get("namespaces", None, "scale")["status"]["phase"] == "Terminating"
    with pytest.raises(ApiException) as exc:  # no new content while terminating
        core.create_namespaced_pod("scale", client.V1Pod(metadata=client.V1ObjectMeta(name="q"), spec=pod.spec))
    assert exc.value.status == 403 and "being terminated" in json.loads(exc.value.body)["message"]
    assert json.loads(exc.value.body)["details"]["causes"][0]["reason"] == "NamespaceTerminating"
    assert kube_emulator.get("pods", "scale", "p") is None  # unbound: removed at once
    assert kube_emulator.get("pods", "scale", "bound")["metadata"]["deletionTimestamp"]
    assert core.read_namespace("scale").status.phase == "Terminating"
    kube_emulator.advance(31)  # the bound pod's grace period ends, then the namespace goes
    with pytest.raises(ApiException) as exc:
        core.read_namespace("scale")
    assert exc.value.status == 404
    for immortal in ("default", "kube-system", "kube-public"):
        with pytest.raises(ApiException) as exc:
            core.delete_namespace(immortal)
        assert exc.value.status == 403


def test_pod_status_patch_with_a_resource_version_precondition(kube_emulator, core):
    kube_emulator.add_node("n1")
    p = kube_emulator.add_pod("ns", "w", requests={"nvidia.com/gpu": "1"})
    body = {"metadata": {"resourceVersion": p["metadata"]["resourceVersion"]},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                       "message": "no node has 1 free GPU"}]}}
    out = core.patch_namespaced_pod_status("w", "ns", body, _content_type="application/strategic-merge-patch+json")
    (cond,) = [c for c in out.status.conditions if c.type == "PodScheduled"]
    assert (cond.status, cond.reason) == ("False", "Unschedulable")
    with pytest.raises(ApiException) as exc:  # the same precondition again: the pod has moved on
        core.patch_namespaced_pod_status("w", "ns", body, _content_type="application/strategic-merge-patch+json")
    assert exc.value.status == 409
    body["spec"] = {"nodeName": "n1"}  # a status patch cannot change anything but the status
    body["metadata"] = {}
    core.patch_namespaced_pod_status("w", "ns", body, _content_type="application/strategic-merge-patch+json")
    assert not kube_emulator.get("pods", "ns", "w")["spec"].get("nodeName")
    # binding sets PodScheduled=True and copies the Binding's annotations onto the pod
    binding = client.V1Binding(metadata=client.V1ObjectMeta(name="w", annotations={"karpenter.sh/do-not-disrupt": "true"}),
                               target=client.V1ObjectReference(kind="Node", name="n1"))
    core.create_namespaced_pod_binding("w", "ns", binding, _preload_content=False)
    pod = kube_emulator.get("pods", "ns", "w")
    assert pod["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    # podutil.UpdatePodCondition replaces the condition: no reason or message of the old one stays
    assert [(c["status"], c.get("reason"), c.get("message")) for c in pod["status"]["conditions"]
            if c["type"] == "PodScheduled"] == [("True", None, None)]
