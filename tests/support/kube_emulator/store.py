"""The emulated API server's state: objects, the resourceVersion counter and watch history, the
controllers driven by its clock (kubelet, pod GC, namespace and node lifecycle), binding and eviction."""
from __future__ import annotations

import base64
import copy
import json
import random
import re
import socket
import sys
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from typing import Any, Callable, TYPE_CHECKING

from .common import (
    _conflict, _deep, _DNS1123_SUBDOMAIN, _GENERATE_ALPHABET, _invalid, _NATIVE_RESOURCES, _not_found,
    _parse_int, _parse_time, _RealClock, _rfc3339, ApiError, ManualClock, SERVER_VERSION, status_body,
)
from .faults import Faults
from .http import _Handler, _Server
from .patch import json_merge_patch, json_patch, strategic_merge_patch
from .resources import (
    _BY_KIND, _IMMORTAL_NAMESPACES, _INITIAL_NAMESPACES, _KIND_TO_STORE, _WORKLOADS, CRONJOBS, DEVICECLASSES,
    JOBS, NAMESPACES, NODES, PDBS, PODGROUPS, PODS, RESOURCECLAIMS, RESOURCESLICES, STATEFULSETS,
)
from .validation import (
    _check_pod_update, _default_and_validate_pod, _default_and_validate_workload, _DNS1123_LABEL,
    _int_or_percent, _label_selector_matches, _new_namespace, _node_ip, _node_ready, _node_ready_condition,
    _NOT_READY, _pod_ip, _pod_ready, _qos_class, _set_condition, _strip_rv, _tolerates,
    _validate_claim_status, _validate_event, _validate_pdb, _VALIDATORS,
)

if TYPE_CHECKING:
    from .faults import RequestRecord
    from .resources import _Resource
    from .selectors import _Selector


@dataclass
class _WatchEvent:
    rv: int
    store: str
    type: str  # ADDED / MODIFIED / DELETED
    obj: dict
    prev: dict | None


# --------------------------------------------------------------------------------------------------
# The emulator
# --------------------------------------------------------------------------------------------------


@dataclass
class _EvictionBlock:
    namespace: str | None
    name: str | None
    budget: str

class KubeEmulator:
    """The emulated API server: an object store, its HTTP front end, and the clock-driven controllers."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] | None = None,
        history_limit: int = 1000,
        pod_gc_seconds: float = 0.0,
        kubelet_start_seconds: float = 0.0,
        bookmark_interval: float = 1.0,
        request_log_limit: int = 100_000,
        taint_manager: bool = True,
    ) -> None:
        if history_limit < 1:
            raise ValueError(f"history_limit must be >= 1, got {history_limit!r}")
        self._clock: Callable[[], float] = clock if clock is not None else ManualClock()
        self.history_limit = history_limit
        self.pod_gc_seconds = float(pod_gc_seconds)
        self.kubelet_start_seconds = float(kubelet_start_seconds)
        self.bookmark_interval = float(bookmark_interval)
        self.taint_manager = taint_manager
        self.faults = Faults()
        # Bounded so a long real-time demo does not grow without limit; tests see every request.
        self.request_records: deque[RequestRecord] = deque(maxlen=request_log_limit)
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._objects: dict[str, dict[tuple[str, str], dict]] = {store: {} for store in _BY_KIND}
        # A fresh cluster's etcd revision is never 0 (and RV "0" means "any" to the API): start above it.
        self._rv = 100
        self._history: deque[_WatchEvent] = deque()
        self._compacted_rv = self._rv  # a watch/list from an RV below this lost events: 410
        self._watch_epoch = 0  # bumped by disconnect_watches()
        self._abrupt_epoch = 0
        self._watch_sockets: set[socket.socket] = set()
        self._bound_at: dict[str, float] = {}  # pod uid -> time it was bound (kubelet start delay)
        self._node_gone_at: dict[str, float] = {}  # node name -> time it was deleted (pod GC)
        self._orphan_seen: dict[str, float] = {}
        self._eviction_blocks: list[_EvictionBlock] = []
        self.eviction_policy: Callable[[dict], str | None] | None = None
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._realtime: threading.Thread | None = None
        self._realtime_stop = threading.Event()
        self._closing = False
        for i, ns in enumerate(_INITIAL_NAMESPACES):  # present "since before" the watch history starts
            self._objects["namespaces"][("", ns)] = _new_namespace(ns, uid=str(uuid.uuid4()), now=self._clock(),
                                                                   rv=str(i + 1))

    # ---- lifecycle ------------------------------------------------------------------------------

    def start(self, port: int = 0, host: str = "127.0.0.1") -> "KubeEmulator":
        if self._server is not None:
            raise RuntimeError("KubeEmulator.start(): already started")
        handler = type("_BoundHandler", (_Handler,), {"emulator": self})
        self._server = _Server((host, port), handler)
        self._closing = False
        self._thread = threading.Thread(target=self._server.serve_forever, name="kube-emulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stop_realtime()
        server, self._server = self._server, None
        if server is None:
            return
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self.disconnect_watches(abrupt=True)
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "KubeEmulator":
        return self if self._server is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("KubeEmulator is not started")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def configuration(self):
        """A ``kubernetes.client.Configuration`` for this emulator (no auth, plain HTTP)."""
        from kubernetes import client

        conf = client.Configuration()
        conf.host = self.url
        return conf

    def kubeconfig(self, context: str = "kai-emulator") -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": self.url}}],
            "users": [{"name": context, "user": {}}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context, "namespace": "default"}}],
            "current-context": context,
            "preferences": {},
        }

    def write_kubeconfig(self, path: str, context: str = "kai-emulator") -> str:
        """Write a kubeconfig (JSON, which is valid YAML) for ``kubernetes.config.load_kube_config``."""
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.kubeconfig(context), fh, indent=2)
            fh.write("\n")
        return path

    # ---- clock & controllers --------------------------------------------------------------------

    def now(self) -> float:
        return self._clock()

    def advance(self, seconds: float = 0.0) -> float:
        """Move the manual clock and run the due work (grace deletions, kubelet, pod GC)."""
        adv = getattr(self._clock, "advance", None)
        if adv is None:
            if seconds:
                raise RuntimeError("advance(seconds): the emulator's clock has no advance(); it is not a manual clock")
        else:
            adv(seconds)
        self.run_due()
        return self.now()

    def run_realtime(self, interval: float = 0.2) -> None:
        """Switch to the wall clock and run the controllers every ``interval`` seconds in a daemon thread."""
        if self._realtime is not None:
            return
        self._clock = _RealClock(self._clock())
        self._realtime_stop.clear()

        def loop() -> None:
            while not self._realtime_stop.wait(interval):
                try:
                    self.run_due()
                except Exception as exc:  # keep the demo alive; the error is printed, not swallowed
                    print(f"kube-emulator: controller tick failed: {exc!r}", file=sys.stderr)

        self._realtime = threading.Thread(target=loop, name="kube-emulator-controllers", daemon=True)
        self._realtime.start()

    def stop_realtime(self) -> None:
        thread, self._realtime = self._realtime, None
        if thread is not None:
            self._realtime_stop.set()
            thread.join(timeout=5)

    def run_due(self) -> None:
        """One pass of the clock-driven controllers, in the order a cluster would converge."""
        with self._lock:
            now = self.now()
            self._finish_graceful_deletions(now)
            if self.taint_manager:
                self._node_lifecycle(now)
                self._taint_eviction(now)
            self._pod_gc(now)
            self._kubelet(now)
            self._pdb_controller()
            self._namespace_controller()

    def _namespace_controller(self) -> None:
        """A terminating namespace: delete what is in it (pods gracefully), then the namespace."""
        for ns in list(self._objects["namespaces"].values()):
            if not ns["metadata"].get("deletionTimestamp"):
                continue
            name = ns["metadata"]["name"]
            for res in _BY_KIND.values():
                if not res.namespaced:
                    continue
                for key, obj in list(self._objects[res.store].items()):
                    if key[0] == name and not obj["metadata"].get("deletionTimestamp"):
                        self.delete_object(res, name, key[1], {"propagationPolicy": "Background"})
            if not any(k[0] == name for r in _BY_KIND.values() if r.namespaced for k in self._objects[r.store]):
                cur = self._objects["namespaces"].get(("", name))
                if cur is not None:
                    self._remove(NAMESPACES, cur)

    def _node_lifecycle(self, now: float) -> None:
        """A node whose Ready condition is not True gets the not-ready NoSchedule + NoExecute taints."""
        for node in list(self._objects["nodes"].values()):
            taints = list(_deep(node, "spec.taints", []) or [])
            others = [t for t in taints if t.get("key") != _NOT_READY]
            if _node_ready(node):
                wanted = others
            else:
                existing = {t.get("effect"): t for t in taints if t.get("key") == _NOT_READY}
                wanted = others + [
                    existing.get("NoSchedule") or {"key": _NOT_READY, "effect": "NoSchedule", "timeAdded": _rfc3339(now)},
                    existing.get("NoExecute") or {"key": _NOT_READY, "effect": "NoExecute", "timeAdded": _rfc3339(now)},
                ]
            if wanted != taints:
                new = copy.deepcopy(node)
                if wanted:
                    new.setdefault("spec", {})["taints"] = wanted
                else:
                    new.setdefault("spec", {}).pop("taints", None)
                self._commit(NODES, "MODIFIED", new, node)

    def _taint_eviction(self, now: float) -> None:
        """Pods on a node with a NoExecute taint they do not tolerate (or only for tolerationSeconds) are deleted."""
        for pod in list(self._objects["pods"].values()):
            node = self._objects["nodes"].get(("", _deep(pod, "spec.nodeName") or ""))
            if node is None or pod["metadata"].get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            tolerations = _deep(pod, "spec.tolerations", []) or []
            due = None
            for taint in _deep(node, "spec.taints", []) or []:
                if taint.get("effect") != "NoExecute":
                    continue
                matching = [t for t in tolerations if _tolerates(t, taint)]
                if not matching:
                    due = now
                    break
                if all(t.get("tolerationSeconds") is not None for t in matching):
                    added = _parse_time(taint.get("timeAdded")) or now
                    at = added + max(0, min(int(t["tolerationSeconds"]) for t in matching))
                    due = at if due is None else min(due, at)
            if due is None or due > now:
                continue
            marked = copy.deepcopy(pod)
            _set_condition(marked.setdefault("status", {}), "DisruptionTarget", "True", now,
                           reason="DeletionByTaintManager", message="Taint manager: deleting due to NoExecute taint")
            self._commit(PODS, "MODIFIED", marked, pod)
            self.delete_object(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], {})

    def _pdb_status(self, pdb: dict) -> dict:
        """currentHealthy / desiredHealthy / disruptionsAllowed / expectedPods, as the disruption controller
        computes them (expected = the matching pods that are not terminating, not the owner's scale)."""
        ns = pdb["metadata"]["namespace"]
        selector = _deep(pdb, "spec.selector")
        pods = [
            p for (pns, _), p in self._objects["pods"].items()
            if pns == ns and selector is not None and _label_selector_matches(selector, p)
            and not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        expected = len(pods)
        healthy = sum(1 for p in pods if _pod_ready(p))
        spec = pdb.get("spec") or {}
        if spec.get("minAvailable") is not None:
            desired = _int_or_percent(spec["minAvailable"], expected, round_up=True)
        elif spec.get("maxUnavailable") is not None:
            desired = expected - _int_or_percent(spec["maxUnavailable"], expected, round_up=True)
        else:
            desired = expected  # no field: nothing may be disrupted
        desired = max(0, desired)
        allowed = max(0, healthy - desired)
        status = dict(pdb.get("status") or {})
        status.update({
            "currentHealthy": healthy, "desiredHealthy": desired, "disruptionsAllowed": allowed,
            "expectedPods": expected, "observedGeneration": pdb["metadata"].get("generation", 1),
        })
        return status

    def _pdb_controller(self) -> None:
        for pdb in list(self._objects["poddisruptionbudgets"].values()):
            status = self._pdb_status(pdb)
            if status != pdb.get("status"):
                new = copy.deepcopy(pdb)
                new["status"] = status
                self._commit(PDBS, "MODIFIED", new, pdb)

    def _finish_graceful_deletions(self, now: float) -> None:
        for store in _BY_KIND:
            for obj in list(self._objects[store].values()):
                meta = obj["metadata"]
                ts = _parse_time(meta.get("deletionTimestamp"))
                if ts is None or ts > now:
                    continue
                if meta.get("finalizers"):
                    continue
                self._remove(_BY_KIND[store], obj)

    def _pod_gc(self, now: float) -> None:
        nodes = self._objects["nodes"]
        for pod in list(self._objects["pods"].values()):
            node = _deep(pod, "spec.nodeName")
            uid = pod["metadata"]["uid"]
            if not node or (None, node) in nodes or ("", node) in nodes:
                self._orphan_seen.pop(uid, None)
                continue
            since = self._node_gone_at.get(node)
            if since is None:
                since = self._orphan_seen.setdefault(uid, now)
            if now - since < self.pod_gc_seconds:
                continue
            # PodGC: mark the orphan Failed with a DisruptionTarget condition, then force-delete it.
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                new = copy.deepcopy(pod)
                st = new.setdefault("status", {})
                st["phase"] = "Failed"
                _set_condition(
                    st, "DisruptionTarget", "True", now, reason="DeletionByPodGC",
                    message="PodGC: node no longer exists",
                )
                pod = self._commit(PODS, "MODIFIED", new, pod)
            self._remove(PODS, pod)
            self._orphan_seen.pop(uid, None)

    def _kubelet(self, now: float) -> None:
        nodes = self._objects["nodes"]
        for pod in list(self._objects["pods"].values()):
            node_name = _deep(pod, "spec.nodeName")
            if not node_name or pod["metadata"].get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase", "Pending") != "Pending":
                continue
            node = nodes.get(("", node_name))
            if node is None or not _node_ready(node):
                continue
            bound = self._bound_at.setdefault(pod["metadata"]["uid"], now)
            if now - bound < self.kubelet_start_seconds:
                continue
            if not self._claims_ready(pod):
                continue  # the kubelet prepares claimed devices only once they are allocated and reserved
            new = copy.deepcopy(pod)
            st = new.setdefault("status", {})
            st["phase"] = "Running"
            st["hostIP"] = _node_ip(node)
            st.setdefault("podIP", _pod_ip(pod["metadata"]["uid"]))
            st.setdefault("podIPs", [{"ip": st["podIP"]}])
            st["hostIPs"] = [{"ip": st["hostIP"]}]
            st["startTime"] = _rfc3339(now)
            for ctype in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "PodScheduled"):
                _set_condition(st, ctype, "True", now)
            st["containerStatuses"] = [
                {
                    "name": c.get("name", "main"),
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": _rfc3339(now)}},
                }
                for c in (new.get("spec") or {}).get("containers") or []
            ]
            self._commit(PODS, "MODIFIED", new, pod)

    def _claims_ready(self, pod: dict) -> bool:
        """Every ResourceClaim of the pod exists, is allocated and lists the pod in ``reservedFor``."""
        refs = _deep(pod, "spec.resourceClaims") or []
        if not refs:
            return True
        ns = pod["metadata"].get("namespace", "default")
        statuses = {s.get("name"): s.get("resourceClaimName") for s in _deep(pod, "status.resourceClaimStatuses") or []
                    if isinstance(s, dict)}
        for ref in refs:
            cname = ref.get("resourceClaimName") or statuses.get(ref.get("name"))
            claim = self._objects["resourceclaims"].get((ns, cname)) if cname else None
            if claim is None or not _deep(claim, "status.allocation"):
                return False
            if not any(r.get("uid") == pod["metadata"]["uid"] for r in _deep(claim, "status.reservedFor") or []):
                return False
        return True

    # ---- store primitives -----------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    def _key(self, res: _Resource, namespace: str | None, name: str) -> tuple[str, str]:
        return ((namespace or "") if res.namespaced else "", name)

    def _commit(self, res: _Resource, etype: str, obj: dict, prev: dict | None) -> dict:
        """Stamp the next resourceVersion, store (or drop) the object, record the watch event."""
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        key = self._key(res, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if etype == "DELETED":
            self._objects[res.store].pop(key, None)
        else:
            self._objects[res.store][key] = obj
        self._history.append(_WatchEvent(self._rv, res.store, etype, obj, prev))
        while len(self._history) > self.history_limit:
            self._compacted_rv = self._history.popleft().rv
        self._cond.notify_all()
        return obj

    def _remove(self, res: _Resource, obj: dict) -> dict:
        gone = copy.deepcopy(obj)
        if res.store == "pods":
            self._bound_at.pop(gone["metadata"]["uid"], None)
        if res.store == "nodes":
            self._node_gone_at[gone["metadata"]["name"]] = self.now()
        return self._commit(res, "DELETED", gone, obj)

    def compact(self) -> int:
        """Forget all watch history (an etcd compaction): older RVs now get 410 Gone."""
        with self._cond:
            self._history.clear()
            self._compacted_rv = self._rv
            self._cond.notify_all()
            return self._rv

    def disconnect_watches(self, *, abrupt: bool = False) -> None:
        """End every open watch: cleanly (terminal chunk, as on server timeout) or by resetting the socket."""
        with self._cond:
            self._watch_epoch += 1
            if abrupt:
                self._abrupt_epoch += 1
            sockets = list(self._watch_sockets)
            self._cond.notify_all()
        if abrupt:
            for sock in sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _state_at(self, res: _Resource, rv: int) -> dict[tuple[str, str], dict]:
        """The objects of ``res`` as of ``rv``, rebuilt by undoing the history after it (Exact / continue)."""
        if rv < self._compacted_rv:
            raise ApiError(410, f"too old resource version: {rv} ({self._compacted_rv})", reason="Expired")
        state = dict(self._objects[res.store])
        for ev in reversed(self._history):
            if ev.rv <= rv:
                break
            if ev.store != res.store:
                continue
            key = self._key(res, ev.obj["metadata"].get("namespace"), ev.obj["metadata"]["name"])
            if ev.type == "ADDED":
                state.pop(key, None)
            elif ev.prev is not None:
                state[key] = ev.prev
        return state

    # ---- Python API for tests and the demo ------------------------------------------------------

    def _res(self, kind: str) -> _Resource:
        try:
            return _BY_KIND[_KIND_TO_STORE.get(kind, kind)]
        except KeyError:
            raise ValueError(f"kind must be one of {sorted(_BY_KIND)}, got {kind!r}") from None

    def get(self, kind: str, namespace: str | None, name: str) -> dict | None:
        res = self._res(kind)
        with self._lock:
            obj = self._objects[res.store].get(self._key(res, namespace, name))
            return res.view(copy.deepcopy(obj)) if obj is not None else None

    def list(self, kind: str, namespace: str | None = None) -> list[dict]:
        res = self._res(kind)
        with self._lock:
            items = [
                res.view(copy.deepcopy(o))
                for k, o in sorted(self._objects[res.store].items())
                if namespace is None or not res.namespaced or k[0] == namespace
            ]
        return items

    def delete(self, kind: str, namespace: str | None, name: str, grace_seconds: int | None = None) -> dict | None:
        """Delete as the API would (graceful for bound pods); returns the object, None if it did not exist."""
        res = self._res(kind)
        try:
            _, obj = self.delete_object(res, namespace, name, {"gracePeriodSeconds": grace_seconds} if grace_seconds is not None else {})
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise
        return copy.deepcopy(obj)

    def add_node(
        self,
        name: str,
        *,
        gpus: int = 8,
        cpu: str = "64",
        memory: str = "512Gi",
        labels: dict[str, str] | None = None,
        taints: list[dict] | None = None,
        unschedulable: bool = False,
        ready: bool = True,
        gpu_memory_mib: int | None = None,
        pods: str = "110",
    ) -> dict:
        """A node as the kubelet + NVIDIA device plugin / GPU feature discovery register it."""
        node_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        if gpus:
            node_labels["nvidia.com/gpu.present"] = "true"
            node_labels["nvidia.com/gpu.count"] = str(gpus)
        if gpu_memory_mib is not None:
            node_labels["nvidia.com/gpu.memory"] = str(int(gpu_memory_mib))
        node_labels.update(labels or {})
        resources = {"cpu": str(cpu), "memory": str(memory), "pods": pods, "ephemeral-storage": "1Ti"}
        if gpus:
            resources["nvidia.com/gpu"] = str(gpus)
        spec: dict[str, Any] = {}
        if taints:
            spec["taints"] = [dict(t) for t in taints]
        if unschedulable:
            spec["unschedulable"] = True
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": node_labels},
            "spec": spec,
            "status": {"capacity": dict(resources), "allocatable": dict(resources)},
        }
        with self._lock:
            obj = self.create_object(NODES, None, body)
            new = copy.deepcopy(obj)
            st = new["status"]
            now = self.now()
            st["conditions"] = [_node_ready_condition(ready, now)]
            st["addresses"] = [
                {"type": "InternalIP", "address": _node_ip(obj)},
                {"type": "Hostname", "address": name},
            ]
            st["nodeInfo"] = {
                "architecture": "amd64",
                "bootID": str(uuid.uuid5(uuid.NAMESPACE_URL, "boot/" + obj["metadata"]["uid"])),
                "containerRuntimeVersion": "containerd://1.7.20",
                "kernelVersion": "6.8.0-45-generic",
                "kubeProxyVersion": SERVER_VERSION["gitVersion"],
                "kubeletVersion": SERVER_VERSION["gitVersion"],
                "machineID": uuid.uuid5(uuid.NAMESPACE_URL, "machine/" + name).hex,
                "operatingSystem": "linux",
                "osImage": "Ubuntu 22.04.4 LTS",
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_URL, "system/" + name)),
            }
            self._node_gone_at.pop(name, None)
            return copy.deepcopy(self._commit(NODES, "MODIFIED", new, obj))

    def set_node_ready(self, name: str, ready: bool) -> dict:
        def mutate(node: dict) -> None:
            st = node.setdefault("status", {})
            st["conditions"] = [c for c in st.get("conditions") or [] if c.get("type") != "Ready"]
            st["conditions"].append(_node_ready_condition(ready, self.now()))

        return self.mutate("nodes", None, name, mutate)

    def mutate(self, kind: str, namespace: str | None, name: str, fn: Callable[[dict], None]) -> dict:
        """Apply ``fn`` to a copy of the object and write it (one MODIFIED event), bypassing validation."""
        res = self._res(kind)
        with self._lock:
            cur = self._objects[res.store].get(self._key(res, namespace, name))
            if cur is None:
                raise _not_found(res.qualified, name)
            new = copy.deepcopy(cur)
            fn(new)
            return copy.deepcopy(self._commit(res, "MODIFIED", new, cur))

    def add_namespace(self, name: str, *, labels: dict[str, str] | None = None) -> dict:
        """A namespace (as ``kubectl create namespace``); an existing one is returned as is."""
        with self._lock:
            cur = self._objects["namespaces"].get(("", name))
            if cur is not None:
                return NAMESPACES.view(copy.deepcopy(cur))
            body = {"metadata": {"name": name, "labels": dict(labels or {})}}
            return NAMESPACES.view(copy.deepcopy(self.create_object(NAMESPACES, None, body)))

    def add_pod(
        self,
        namespace: str,
        name: str,
        *,
        scheduler_name: str = "kai-scheduler",
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        owner: dict | None = None,
        requests: dict[str, str] | None = None,
        node_name: str | None = None,
        priority: int | None = None,
        priority_class_name: str | None = None,
        phase: str | None = None,
        resource_claims: list[dict] | None = None,
    ) -> dict:
        """A pod as a workload controller would create it (defaults applied as the API server does).
        ``resource_claims``: ``spec.resourceClaims`` entries (``{"name", "resourceClaimName"}``)."""
        resources: dict[str, Any] = {}
        if requests:
            resources["requests"] = {k: str(v) for k, v in requests.items()}
            limits = {k: str(v) for k, v in requests.items() if k not in _NATIVE_RESOURCES}
            if limits:
                resources["limits"] = limits
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if labels:
            meta["labels"] = dict(labels)
        if annotations:
            meta["annotations"] = dict(annotations)
        if owner and "metadata" in owner:  # an object (e.g. from add_owner): reference it
            owner = {
                "apiVersion": owner.get("apiVersion", "v1"), "kind": owner["kind"],
                "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
            }
        if owner:
            meta["ownerReferences"] = [
                {
                    "apiVersion": owner.get("apiVersion", "v1"),
                    "kind": owner["kind"],
                    "name": owner["name"],
                    "uid": owner.get("uid") or str(uuid.uuid4()),
                    "controller": owner.get("controller", True),
                    "blockOwnerDeletion": owner.get("blockOwnerDeletion", True),
                }
            ]
        spec: dict[str, Any] = {
            "schedulerName": scheduler_name,
            "containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04", "resources": resources}],
        }
        if node_name:
            spec["nodeName"] = node_name
        if priority is not None:
            spec["priority"] = int(priority)
        if priority_class_name:
            spec["priorityClassName"] = priority_class_name
        if resource_claims:
            spec["resourceClaims"] = [dict(c) for c in resource_claims]
            spec["containers"][0]["resources"]["claims"] = [{"name": c["name"]} for c in resource_claims]
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
        with self._lock:
            self.add_namespace(namespace)  # the test/demo helper creates it, as kubectl users do first
            obj = self.create_object(PODS, namespace, body)
            if phase and phase != "Pending":
                obj = self.set_pod_phase(namespace, name, phase)
            return copy.deepcopy(obj)

    def add_owner(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        replicas: int | None = None,
        parallelism: int | None = None,
        completions: int | None = None,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        owner: dict | None = None,
        schedule: str = "0 * * * *",
    ) -> dict:
        """A workload owner (Job, CronJob, ReplicaSet, StatefulSet, Deployment): stored, no controller runs it.

        Pass the result as ``add_pod(owner=...)``; ``owner`` here (an object) nests it (Deployment ->
        ReplicaSet, CronJob -> Job).
        """
        res = self._res(kind)
        if res not in _WORKLOADS:
            raise ValueError(f"add_owner: kind must be one of Job, CronJob, ReplicaSet, StatefulSet, Deployment, got {kind!r}")
        pod_labels = {"app.kubernetes.io/instance": name, **(labels or {})}
        template = {
            "metadata": {"labels": dict(pod_labels)},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.0-base-ubuntu22.04"}]},
        }
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(pod_labels)}
        if annotations:
            meta["annotations"] = dict(annotations)
        if owner is not None:
            meta["ownerReferences"] = [{
                "apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True,
            }]
        spec: dict[str, Any]
        if res is JOBS:
            spec = {"template": template}
            if parallelism is not None:
                spec["parallelism"] = parallelism
            if completions is not None:
                spec["completions"] = completions
        elif res is CRONJOBS:
            job_spec: dict[str, Any] = {"template": template}
            if parallelism is not None:
                job_spec["parallelism"] = parallelism
            if completions is not None:
                job_spec["completions"] = completions
            spec = {"schedule": schedule, "jobTemplate": {"spec": job_spec}}
        else:
            spec = {"selector": {"matchLabels": {"app.kubernetes.io/instance": name}}, "template": template}
            if res is STATEFULSETS:
                spec["serviceName"] = name
            if replicas is not None:
                spec["replicas"] = replicas
        with self._lock:
            self.add_namespace(namespace)
            return res.view(copy.deepcopy(self.create_object(res, namespace, {"metadata": meta, "spec": spec})))

    # ---- PodGroups and dynamic resource allocation ----------------------------------------------

    def add_pod_group(self, namespace: str, name: str, *, queue: str | None = None, min_member: int | None = None,
                      min_subgroup: int | None = None, sub_groups: list[dict] | None = None,
                      topology: dict | None = None, priority_class_name: str | None = None) -> dict:
        """A KAI PodGroup (``scheduling.run.ai/v2alpha2``) as the podgrouper would create it."""
        spec: dict[str, Any] = {}
        if queue is not None:
            spec["queue"] = queue
        if min_member is not None:
            spec["minMember"] = min_member
        if min_subgroup is not None:
            spec["minSubGroup"] = min_subgroup
        if sub_groups is not None:
            spec["subGroups"] = [dict(g) for g in sub_groups]
        if topology is not None:
            spec["topologyConstraint"] = dict(topology)
        if priority_class_name:
            spec["priorityClassName"] = priority_class_name
        body = {"metadata": {"name": name, "namespace": namespace}, "spec": spec}
        with self._lock:
            self.add_namespace(namespace)
            return PODGROUPS.view(copy.deepcopy(self.create_object(PODGROUPS, namespace, body)))

    def add_device_class(self, name: str, *, driver: str | None = None, extended_resource_name: str | None = None) -> dict:
        """A DeviceClass selecting the devices of ``driver`` (default: the class name), as DRA drivers install them."""
        spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f'device.driver == "{driver or name}"'}}]}
        if extended_resource_name:
            spec["extendedResourceName"] = extended_resource_name
        with self._lock:
            return DEVICECLASSES.view(copy.deepcopy(self.create_object(DEVICECLASSES, None, {"metadata": {"name": name},
                                                                                             "spec": spec})))

    def add_resource_slice(self, node: str, driver: str, devices: int | list[str], *, pool: str | None = None,
                           name: str | None = None) -> dict:
        """The ResourceSlice a DRA driver's kubelet plugin publishes for ``node`` (one pool per node)."""
        names = [f"dev-{i}" for i in range(devices)] if isinstance(devices, int) else list(devices)
        spec = {"driver": driver, "nodeName": node, "pool": {"name": pool or node, "generation": 0, "resourceSliceCount": 1},
                "devices": [{"name": d} for d in names]}
        meta = {"name": name} if name else {"generateName": f"{node}-{driver.split('.')[0]}-"}
        with self._lock:
            return RESOURCESLICES.view(copy.deepcopy(self.create_object(RESOURCESLICES, None, {"metadata": meta, "spec": spec})))

    def add_resource_claim(self, namespace: str, name: str, requests: list[dict]) -> dict:
        """A ResourceClaim; ``requests``: ``{"name", "deviceClassName", "count"?}`` (``exactly`` requests)."""
        reqs = [{"name": r["name"], "exactly": {"deviceClassName": r["deviceClassName"],
                                                **({"count": r["count"]} if "count" in r else {})}} for r in requests]
        body = {"metadata": {"name": name, "namespace": namespace}, "spec": {"devices": {"requests": reqs}}}
        with self._lock:
            self.add_namespace(namespace)
            return RESOURCECLAIMS.view(copy.deepcopy(self.create_object(RESOURCECLAIMS, namespace, body)))

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> dict:
        """What the kubelet reports: Running / Succeeded / Failed (container states follow)."""
        if phase not in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
            raise ValueError(f"set_pod_phase: phase must be a pod phase, got {phase!r}")

        def mutate(pod: dict) -> None:
            now = self.now()
            st = pod.setdefault("status", {})
            st["phase"] = phase
            if phase == "Running":
                st.setdefault("startTime", _rfc3339(now))
                for ctype in ("Initialized", "ContainersReady", "Ready"):
                    _set_condition(st, ctype, "True", now)
            if phase in ("Succeeded", "Failed"):
                code = 0 if phase == "Succeeded" else 1
                for ctype in ("ContainersReady", "Ready"):
                    _set_condition(st, ctype, "False", now, reason="PodCompleted")
                st["containerStatuses"] = [
                    {
                        "name": c.get("name", "main"),
                        "image": c.get("image", ""),
                        "imageID": "",
                        "ready": False,
                        "started": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": code,
                                "reason": "Completed" if code == 0 else "Error",
                                "finishedAt": _rfc3339(now),
                            }
                        },
                    }
                    for c in (pod.get("spec") or {}).get("containers") or []
                ]

        return self.mutate("pods", namespace, name, mutate)

    def block_evictions(self, namespace: str | None = None, name: str | None = None, *, budget: str = "kai-pdb") -> None:
        """Make the Eviction API answer 429 for matching pods, as a PodDisruptionBudget at its limit does."""
        with self._lock:
            self._eviction_blocks.append(_EvictionBlock(namespace, name, budget))

    def unblock_evictions(self) -> None:
        with self._lock:
            self._eviction_blocks.clear()

    @property
    def requests(self) -> list[tuple[str, str, int | None]]:
        """(method, path, status the client received) of every request served, in order."""
        with self._lock:
            return [(r.method, r.path, r.status) for r in self.request_records]

    def count_requests(self, method: str, path_regex: str, status: int | None | str = "any") -> int:
        rx = re.compile(path_regex)
        with self._lock:
            return sum(
                1
                for r in self.request_records
                if r.method == method.upper() and rx.search(r.path) and (status == "any" or r.status == status)
            )

    # ---- operations shared by HTTP and the Python API --------------------------------------------

    def create_object(self, res: _Resource, namespace: str | None, body: dict) -> dict:
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request was in an unknown format")
        obj = res.from_view(copy.deepcopy(body)) if res.from_view else copy.deepcopy(body)
        obj.pop("kind", None)
        obj.pop("apiVersion", None)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata: must be an object")
        with self._lock:
            if res.namespaced:
                body_ns = meta.get("namespace")
                if body_ns and namespace and body_ns != namespace:
                    raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
                meta["namespace"] = namespace or body_ns or "default"
                self._admit_namespace(meta["namespace"])
            else:
                meta.pop("namespace", None)
            if not meta.get("name"):
                gen = meta.get("generateName")
                if not gen:
                    raise _invalid(res.kind, "", [("metadata.name", "Required value: name or generateName is required")])
                for _ in range(8):
                    candidate = gen + "".join(random.choice(_GENERATE_ALPHABET) for _ in range(5))
                    if self._key(res, meta.get("namespace"), candidate) not in self._objects[res.store]:
                        break
                meta["name"] = candidate
            name = meta["name"]
            if not isinstance(name, str) or len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
                raise _invalid(
                    res.kind, str(name),
                    [("metadata.name", f"Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of lower "
                      "case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character")],
                )
            if self._key(res, meta.get("namespace"), name) in self._objects[res.store]:
                raise ApiError(
                    409, f'{res.qualified} "{name}" already exists', reason="AlreadyExists",
                    details={"name": name, "kind": res.resource, **({"group": res.group} if res.group else {})},
                )
            now = self.now()
            for k in ("uid", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
                meta.pop(k, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _rfc3339(now)
            if res.store == "pods":
                meta["generation"] = 1
                _default_and_validate_pod(obj)
                obj["status"] = {"phase": "Pending", "qosClass": _qos_class(obj["spec"])}
                if obj["spec"].get("nodeName"):
                    _set_condition(obj["status"], "PodScheduled", "True", now)
                    self._bound_at[meta["uid"]] = now
            elif res.store == "events":
                _validate_event(obj, res, now)
            elif res.store == "nodes":
                obj.setdefault("spec", {})
                obj.setdefault("status", {})
            elif res is NAMESPACES:
                if len(name) > 63 or not _DNS1123_LABEL.match(name):
                    raise _invalid("Namespace", name, [("metadata.name", f"Invalid value: {name!r}: a lowercase RFC "
                                                        "1123 label must consist of lower case alphanumeric characters "
                                                        "or '-', and must start and end with an alphanumeric character")])
                fresh = _new_namespace(name, uid=meta["uid"], now=now, rv="")
                meta.setdefault("labels", {}).update(fresh["metadata"]["labels"])
                obj["spec"], obj["status"] = fresh["spec"], fresh["status"]
            elif res is PDBS:
                meta["generation"] = 1
                _validate_pdb(obj)
                obj["status"] = self._pdb_status(obj)
            elif res.store in _VALIDATORS:
                meta["generation"] = 1
                _VALIDATORS[res.store](obj, None)
                if res.has_status:
                    obj["status"] = {}
            else:
                meta["generation"] = 1
                _default_and_validate_workload(res, obj)
            return self._commit(res, "ADDED", obj, None)

    def _admit_namespace(self, namespace: str) -> None:
        """The NamespaceLifecycle admission plugin: content only in a namespace that exists and is not
        terminating (404 NotFound / 403 Forbidden with cause NamespaceTerminating otherwise)."""
        ns = self._objects["namespaces"].get(("", namespace))
        if ns is None:
            raise ApiError(404, f'namespaces "{namespace}" not found', reason="NotFound",
                           details={"name": namespace, "kind": "namespaces"})
        if _deep(ns, "status.phase") == "Terminating":
            message = f"unable to create new content in namespace {namespace} because it is being terminated"
            raise ApiError(403, message, reason="Forbidden", details={
                "name": namespace, "kind": "namespaces",
                "causes": [{"reason": "NamespaceTerminating", "message": message, "field": "metadata.namespace"}]})

    def update_object(
        self, res: _Resource, namespace: str | None, name: str, body: dict, *, subresource: str | None = None
    ) -> dict:
        """PUT semantics: resourceVersion precondition, immutable identity, status only via /status."""
        if not isinstance(body, dict):
            raise ApiError(400, "the body of the request was in an unknown format")
        new = res.from_view(copy.deepcopy(body)) if res.from_view else copy.deepcopy(body)
        new.pop("kind", None)
        new.pop("apiVersion", None)
        with self._lock:
            cur = self._objects[res.store].get(self._key(res, namespace, name))
            if cur is None:
                raise _not_found(res.qualified, name)
            meta = new.setdefault("metadata", {})
            if meta.get("name", name) != name:
                raise ApiError(400, "the name of the object does not match the name on the URL")
            if res.namespaced and meta.get("namespace", namespace) != namespace:
                raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
            want_rv = meta.get("resourceVersion")
            if want_rv not in (None, "") and str(want_rv) != cur["metadata"]["resourceVersion"]:
                raise _conflict(res.qualified, name, "the object has been modified; please apply your changes to the latest version and try again")
            if meta.get("uid") not in (None, "", cur["metadata"]["uid"]):
                raise _conflict(res.qualified, name, f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: {cur['metadata']['uid']}")
            if subresource == "status":
                result = copy.deepcopy(cur)
                result["status"] = new.get("status") or {}
                if res is RESOURCECLAIMS:
                    _validate_claim_status(result, cur)
            else:
                result = new
                keep = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")
                for k in keep:
                    if k in cur["metadata"]:
                        meta[k] = cur["metadata"][k]
                    else:
                        meta.pop(k, None)
                meta["name"] = name
                if res.namespaced:
                    meta["namespace"] = cur["metadata"]["namespace"]
                if cur["metadata"].get("deletionTimestamp"):
                    added = set(meta.get("finalizers") or []) - set(cur["metadata"].get("finalizers") or [])
                    if added:
                        raise _invalid(res.kind, name, [("metadata.finalizers", "Forbidden: no new finalizers can be added if the object is being deleted")])
                if res.has_status:
                    result["status"] = copy.deepcopy(cur.get("status") or {})
                if res.store == "pods":
                    _check_pod_update(cur, result)
                elif res in _WORKLOADS:
                    _default_and_validate_workload(res, result)
                elif res is PDBS:
                    _validate_pdb(result)
                elif res.store in _VALIDATORS:
                    _VALIDATORS[res.store](result, cur)
                if res.has_generation and result.get("spec") != cur.get("spec"):
                    meta["generation"] = cur["metadata"].get("generation", 1) + 1
                if res.store == "events":
                    _validate_event(result, res, self.now(), update=True)
            if _strip_rv(result) == _strip_rv(cur):
                return cur  # a no-op write does not bump the resourceVersion (as the real server)
            out = self._commit(res, "MODIFIED", result, cur)
            if out["metadata"].get("deletionTimestamp") and not out["metadata"].get("finalizers"):
                ts = _parse_time(out["metadata"]["deletionTimestamp"])
                if ts is not None and ts <= self.now():
                    self._remove(res, out)
            return out

    def patch_object(
        self, res: _Resource, namespace: str | None, name: str, patch: Any, content_type: str, *, subresource: str | None = None
    ) -> dict:
        with self._lock:
            cur = self._objects[res.store].get(self._key(res, namespace, name))
            if cur is None:
                raise _not_found(res.qualified, name)
            doc = res.view(copy.deepcopy(cur))
            ctype = content_type.split(";")[0].strip().lower()
            if ctype == "application/merge-patch+json":
                if not isinstance(patch, dict):
                    raise ApiError(400, "merge patch: the body must be a JSON object")
                result = json_merge_patch(doc, patch)
            elif ctype == "application/strategic-merge-patch+json":
                if not isinstance(patch, dict):
                    raise ApiError(400, "strategic merge patch: the body must be a JSON object")
                result = strategic_merge_patch(doc, patch)
            elif ctype == "application/json-patch+json":
                result = json_patch(doc, patch)
            else:
                raise ApiError(
                    415,
                    f"the body of the request was in an unknown format - accepted media types include: "
                    f"application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json",
                )
            if not isinstance(result, dict):
                raise ApiError(422, "patch: the result is not an object", reason="Invalid")
            # A patch's resourceVersion is a precondition only if the patch itself sets one.
            patch_rv = _deep(patch, "metadata.resourceVersion") if isinstance(patch, dict) else None
            result.setdefault("metadata", {})
            if patch_rv is None:
                result["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
            return self.update_object(res, namespace, name, result, subresource=subresource)

    def delete_object(self, res: _Resource, namespace: str | None, name: str, options: dict) -> tuple[int, dict]:
        """Returns (HTTP status, object): 200 with the object (terminating or gone), as the pod API does."""
        with self._lock:
            cur = self._objects[res.store].get(self._key(res, namespace, name))
            if cur is None:
                raise _not_found(res.qualified, name)
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != cur["metadata"]["uid"]:
                raise _conflict(res.qualified, name, f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {cur['metadata']['uid']}")
            if pre.get("resourceVersion") and str(pre["resourceVersion"]) != cur["metadata"]["resourceVersion"]:
                raise _conflict(res.qualified, name, f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, ResourceVersion in object meta: {cur['metadata']['resourceVersion']}")
            if options.get("dryRun"):
                return 200, cur
            if res is NAMESPACES:
                return 200, self._delete_namespace(cur)
            grace = options.get("gracePeriodSeconds")
            if grace is not None:
                grace = int(grace)
                if grace < 0:
                    grace = 1  # the API server turns negative grace into 1 (delete "now-ish")
            now = self.now()
            if res.store == "pods":
                phase = (cur.get("status") or {}).get("phase")
                if grace is None:
                    grace = int(_deep(cur, "spec.terminationGracePeriodSeconds", 30) or 0)
                if not _deep(cur, "spec.nodeName") or phase in ("Succeeded", "Failed"):
                    grace = 0  # nothing runs it (or it already ended): removed at once
            else:
                grace = 0
            meta = cur["metadata"]
            if meta.get("deletionTimestamp"):
                # Already terminating: a shorter grace brings the deadline forward, a longer one is ignored.
                old_deadline = _parse_time(meta["deletionTimestamp"]) or now
                if now + grace >= old_deadline and not (grace == 0 and not meta.get("finalizers")):
                    return 200, cur
            if res in _WORKLOADS and not meta.get("deletionTimestamp"):
                self._collect_dependents(res, cur, options)
            if grace == 0 and not meta.get("finalizers"):
                return 200, self._remove(res, cur)
            new = copy.deepcopy(cur)
            new["metadata"]["deletionTimestamp"] = _rfc3339(now + grace)
            new["metadata"]["deletionGracePeriodSeconds"] = grace
            return 200, self._commit(res, "MODIFIED", new, cur)

    def _delete_namespace(self, cur: dict) -> dict:
        name = cur["metadata"]["name"]
        if name in _IMMORTAL_NAMESPACES:
            raise ApiError(403, f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                           reason="Forbidden", details={"name": name, "kind": "namespaces"})
        if cur["metadata"].get("deletionTimestamp"):
            return cur
        new = copy.deepcopy(cur)
        new["metadata"]["deletionTimestamp"] = _rfc3339(self.now())
        new["metadata"]["deletionGracePeriodSeconds"] = 0
        new["status"] = {"phase": "Terminating"}
        out = self._commit(NAMESPACES, "MODIFIED", new, cur)
        self._namespace_controller()  # an empty namespace goes at once; content first otherwise
        return out

    def _collect_dependents(self, res: _Resource, owner: dict, options: dict) -> None:
        """The garbage collector's cascade: Background/Foreground delete what the owner controls.

        batch/v1 Jobs default to orphaning (kept for compatibility by the real API); the apps/v1
        kinds default to Background.  The cascade happens at once (no foregroundDeletion wait).
        """
        policy = options.get("propagationPolicy")
        if policy is None:
            orphan = options.get("orphanDependents")
            policy = "Orphan" if orphan or (orphan is None and res.store in ("jobs", "cronjobs")) else "Background"
        if policy == "Orphan":
            return
        uid = owner["metadata"]["uid"]
        for store in ("pods", *(w.store for w in _WORKLOADS)):
            for obj in list(self._objects[store].values()):
                refs = obj["metadata"].get("ownerReferences") or []
                if any(r.get("uid") == uid for r in refs) and not obj["metadata"].get("deletionTimestamp"):
                    self.delete_object(_BY_KIND[store], obj["metadata"].get("namespace"), obj["metadata"]["name"], {"propagationPolicy": "Background"})

    def bind(self, namespace: str, name: str, binding: dict) -> dict:
        """POST pods/{name}/binding: assign the pod to target.name (the only way to set spec.nodeName)."""
        if not isinstance(binding, dict):
            raise ApiError(400, "the body of the request was in an unknown format")
        target = binding.get("target") or {}
        bmeta = binding.get("metadata") or {}
        with self._lock:
            if bmeta.get("name") not in (None, "", name):
                raise ApiError(400, "name in URL does not match name in Binding object")
            if bmeta.get("namespace") not in (None, "", namespace):
                raise ApiError(400, "the namespace of the provided object does not match the namespace sent on the request")
            node = target.get("name")
            if not node:
                raise _invalid("Binding", name, [("target.name", "Required value")])
            if target.get("kind") not in (None, "", "Node"):
                raise _invalid("Binding", name, [("target.kind", "Invalid value: must be empty or 'Node'")])
            cur = self._objects["pods"].get((namespace, name))
            if cur is None:
                raise _not_found("pods", name)
            if bmeta.get("uid") and bmeta["uid"] != cur["metadata"]["uid"]:
                raise _conflict("pods/binding", name, f"Precondition failed: UID in precondition: {bmeta['uid']}, UID in object meta: {cur['metadata']['uid']}")
            if bmeta.get("resourceVersion") and str(bmeta["resourceVersion"]) != cur["metadata"]["resourceVersion"]:
                raise _conflict("pods/binding", name, "the object has been modified; please apply your changes to the latest version and try again")
            if cur["metadata"].get("deletionTimestamp"):
                raise _conflict("pods/binding", name, f"pod {name} is being deleted, cannot be assigned to a host")
            assigned = _deep(cur, "spec.nodeName")
            if assigned:
                raise _conflict("pods/binding", name, f'pod {name} is already assigned to node "{assigned}"')
            new = copy.deepcopy(cur)
            new["spec"]["nodeName"] = node
            if bmeta.get("annotations"):
                new["metadata"].setdefault("annotations", {}).update(bmeta["annotations"])
            now = self.now()
            # podutil.UpdatePodCondition: the condition is replaced as a whole (a reason/message an
            # Unschedulable condition carried is gone), lastTransitionTime kept only if the status is
            st = new.setdefault("status", {})
            old = next((c for c in st.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
            st["conditions"] = [c for c in st.get("conditions") or [] if c.get("type") != "PodScheduled"]
            _set_condition(st, "PodScheduled", "True", now)
            if old is not None and old.get("status") == "True" and old.get("lastTransitionTime"):
                st["conditions"][-1]["lastTransitionTime"] = old["lastTransitionTime"]
            self._bound_at[cur["metadata"]["uid"]] = now
            self._commit(PODS, "MODIFIED", new, cur)
            return status_body(201, "")

    def evict(self, namespace: str, name: str, eviction: dict) -> dict:
        """POST pods/{name}/eviction: graceful delete unless a disruption budget forbids it (429)."""
        if not isinstance(eviction, dict):
            raise ApiError(400, "the body of the request was in an unknown format")
        emeta = eviction.get("metadata") or {}
        with self._lock:
            if emeta.get("name") not in (None, "", name):
                raise ApiError(400, "name in URL does not match name in Eviction object")
            cur = self._objects["pods"].get((namespace, name))
            if cur is None:
                raise _not_found("pods", name)
            phase = (cur.get("status") or {}).get("phase", "Pending")
            # Terminal, pending or already-terminating pods are not protected by disruption budgets.
            protected = phase not in ("Succeeded", "Failed", "Pending") and not cur["metadata"].get("deletionTimestamp")
            if protected:
                blocked = self._blocking_budget(cur)
                if blocked is not None:
                    budget, desired, healthy = blocked
                    raise ApiError(
                        429,
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        details={
                            "causes": [{"reason": "DisruptionBudget", "message": f"The disruption budget {budget} needs {desired} healthy pods and has {healthy} currently"}],
                            "retryAfterSeconds": 0,
                        },
                    )
            options = eviction.get("deleteOptions") or {}
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != cur["metadata"]["uid"]:
                raise _conflict("Pod", name, f"the UID in the precondition ({pre['uid']}) does not match the UID in record ({cur['metadata']['uid']}). The object might have been deleted and then recreated")
            if pre.get("resourceVersion") and str(pre["resourceVersion"]) != cur["metadata"]["resourceVersion"]:
                raise _conflict("Pod", name, f"the ResourceVersion in the precondition ({pre['resourceVersion']}) does not match the ResourceVersion in record ({cur['metadata']['resourceVersion']}). The object might have been modified")
            if not options.get("dryRun"):
                # The eviction API marks the pod before deleting it (PodDisruptionConditions).
                marked = copy.deepcopy(cur)
                _set_condition(marked.setdefault("status", {}), "DisruptionTarget", "True", self.now(),
                               reason="EvictionByEvictionAPI", message="Eviction API: evicting")
                self._commit(PODS, "MODIFIED", marked, cur)
            self.delete_object(PODS, namespace, name, {k: v for k, v in options.items() if k != "preconditions"})
            return status_body(201, "")

    def _blocking_budget(self, pod: dict) -> tuple[str, int, int] | None:
        """(budget name, desired healthy, current healthy) of the budget that forbids evicting ``pod``."""
        if self.eviction_policy is not None:
            verdict = self.eviction_policy(copy.deepcopy(pod))
            if verdict:
                return verdict, 1, 1
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        for block in self._eviction_blocks:
            if block.namespace not in (None, ns) or block.name not in (None, name):
                continue
            return block.budget, 1, 1
        pdbs = [
            b for (bns, _), b in sorted(self._objects["poddisruptionbudgets"].items())
            if bns == ns and _deep(b, "spec.selector") is not None and _label_selector_matches(b["spec"]["selector"], pod)
        ]
        if not pdbs:
            return None
        if len(pdbs) > 1:
            raise ApiError(500, "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.", reason="")
        pdb = pdbs[0]
        st = self._pdb_status(pdb)
        if not _pod_ready(pod):
            if _deep(pdb, "spec.unhealthyPodEvictionPolicy") == "AlwaysAllow":
                return None
            if st["currentHealthy"] >= st["desiredHealthy"] and st["desiredHealthy"] > 0:
                return None
        if st["disruptionsAllowed"] <= 0:
            return pdb["metadata"]["name"], st["desiredHealthy"], st["currentHealthy"]
        return None

    def list_objects(self, res: _Resource, sel: _Selector, query: dict[str, str]) -> dict:
        rv_param = query.get("resourceVersion")
        match = query.get("resourceVersionMatch")
        limit = _parse_int("limit", query.get("limit"))
        cont = query.get("continue")
        with self._cond:
            if cont:
                try:
                    token = json.loads(base64.urlsafe_b64decode(cont.encode()).decode())
                    list_rv, start = int(token["rv"]), token["start"]
                except (ValueError, KeyError, TypeError):
                    raise ApiError(400, "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)") from None
                try:
                    state = self._state_at(res, list_rv)
                except ApiError:
                    raise ApiError(
                        410,
                        "The provided continue parameter is too old to display a consistent list result. You can start a "
                        "new list without the continue parameter, or use the continue token in this response to retrieve "
                        "the remainder of the results. Continuing with the provided token results in an inconsistent list "
                        "- objects that were created, modified, or deleted between the time the first chunk was returned "
                        "and now may show up in the list.",
                        reason="Expired",
                    ) from None
            else:
                list_rv, start = self._rv, None
                state = self._objects[res.store]
                if rv_param not in (None, "", "0"):
                    want = _parse_int("resourceVersion", rv_param)
                    if want > self._rv:
                        deadline = time.monotonic() + 3.0
                        while self._rv < want and not self._closing:
                            left = deadline - time.monotonic()
                            if left <= 0:
                                raise ApiError(
                                    504, f"Too large resource version: {want}, current: {self._rv}", reason="Timeout",
                                    details={"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1},
                                )
                            self._cond.wait(left)
                        list_rv, state = self._rv, self._objects[res.store]
                    if match == "Exact":
                        state = self._state_at(res, want)
                        list_rv = want
            items = [(k, o) for k, o in sorted(state.items()) if sel.matches(o) and (start is None or list(k) > start)]
            next_token, remaining = None, None
            if limit and limit > 0 and len(items) > limit:
                remaining = len(items) - limit
                items = items[:limit]
                next_token = base64.urlsafe_b64encode(json.dumps({"rv": list_rv, "start": list(items[-1][0])}).encode()).decode()
            out_items = []
            for _, o in items:
                v = res.view(o)
                v.pop("kind", None)
                v.pop("apiVersion", None)
                out_items.append(v)
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if next_token:
            meta["continue"] = next_token
            meta["remainingItemCount"] = remaining
        return {"kind": res.kind + "List", "apiVersion": res.api_version, "metadata": meta, "items": out_items}
