"""The HTTP side: discovery documents, routes, Table output for kubectl, the request handler."""
from __future__ import annotations

import copy
import json
import re
import socket
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, TYPE_CHECKING
from urllib.parse import parse_qs, unquote, urlsplit

from .common import (
    _deep, _invalid, _not_found, _parse_bool, _parse_int, _parse_time, ApiError, SERVER_VERSION, status_body,
)
from .faults import RequestRecord
from .resources import (
    _WORKLOADS, CRONJOBS, DEPLOYMENTS, DEVICECLASSES, EVENTS, EVENTS_V1, JOBS, NAMESPACES, NODES, PDBS,
    PODGROUPS, PODS, REPLICASETS, RESOURCECLAIMS, RESOURCESLICES, STATEFULSETS,
)
from .selectors import _Selector, parse_field_selector, parse_label_selector
from .validation import _node_ready

if TYPE_CHECKING:
    from .resources import _Resource
    from .store import _WatchEvent, KubeEmulator

def _human_duration(seconds: float) -> str:
    """apimachinery's HumanDuration, the AGE column format."""
    s = int(max(0, seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if h < 24 * 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    return f"{d}d" if d < 365 * 2 else f"{d // 365}y"


def _age(obj: dict, now: float) -> str:
    created = _parse_time(_deep(obj, "metadata.creationTimestamp"))
    return "<unknown>" if created is None else _human_duration(now - created)


def _pod_row(pod: dict, now: float) -> list[Any]:
    st = pod.get("status") or {}
    statuses = st.get("containerStatuses") or []
    total = len(_deep(pod, "spec.containers", []) or [])
    ready = sum(1 for c in statuses if c.get("ready"))
    reason = st.get("reason") or st.get("phase") or "Pending"
    for c in statuses:
        term = (c.get("state") or {}).get("terminated")
        if term and st.get("phase") in ("Succeeded", "Failed"):
            reason = term.get("reason") or reason
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    return [
        pod["metadata"]["name"], f"{ready}/{total}", reason, restarts, _age(pod, now),
        st.get("podIP") or "<none>", _deep(pod, "spec.nodeName") or "<none>",
        st.get("nominatedNodeName") or "<none>", "<none>",
    ]


def _node_row(node: dict, now: float) -> list[Any]:
    status = "Ready" if _node_ready(node) else "NotReady"
    if _deep(node, "spec.unschedulable"):
        status += ",SchedulingDisabled"
    labels = _deep(node, "metadata.labels", {}) or {}
    roles = ",".join(sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))) or "<none>"
    info = _deep(node, "status.nodeInfo", {}) or {}
    addresses = {a.get("type"): a.get("address") for a in _deep(node, "status.addresses", []) or []}
    return [
        node["metadata"]["name"], status, roles, _age(node, now), info.get("kubeletVersion", ""),
        addresses.get("InternalIP", "<none>"), addresses.get("ExternalIP", "<none>"),
        info.get("osImage", "<unknown>"), info.get("kernelVersion", "<unknown>"), info.get("containerRuntimeVersion", "<unknown>"),
    ]


def _event_row(ev: dict, now: float) -> list[Any]:
    inv = ev.get("involvedObject") or {}
    last = _parse_time(ev.get("lastTimestamp") or ev.get("eventTime") or _deep(ev, "metadata.creationTimestamp"))
    return [
        "<unknown>" if last is None else _human_duration(now - last), ev.get("type", ""), ev.get("reason", ""),
        f"{(inv.get('kind') or '').lower()}/{inv.get('name', '')}", ev.get("message", ""),
    ]


def _col(name: str, kind: str = "string", priority: int = 0, fmt: str = "") -> dict:
    return {"name": name, "type": kind, "format": fmt, "description": "", "priority": priority}


_TABLES: dict[str, tuple[list[dict], Callable[[dict, float], list[Any]]]] = {
    "pods": ([
        _col("Name", fmt="name"), _col("Ready"), _col("Status"), _col("Restarts", "string"), _col("Age"),
        _col("IP", priority=1), _col("Node", priority=1), _col("Nominated Node", priority=1), _col("Readiness Gates", priority=1),
    ], _pod_row),
    "nodes": ([
        _col("Name", fmt="name"), _col("Status"), _col("Roles"), _col("Age"), _col("Version"),
        _col("Internal-IP", priority=1), _col("External-IP", priority=1), _col("OS-Image", priority=1),
        _col("Kernel-Version", priority=1), _col("Container-Runtime", priority=1),
    ], _node_row),
    "events": ([_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")], _event_row),
}


def _wants_table(accept: str) -> bool:
    return "as=Table" in accept.replace(" ", "")


def _table(res: _Resource, objs: list[dict], now: float, meta: dict, include: str) -> dict:
    cols, row_fn = _TABLES.get(res.store, (None, None))
    if cols is None:
        cols = [_col("Name", fmt="name"), _col("Age")]
        row_fn = lambda o, n: [o["metadata"]["name"], _age(o, n)]  # noqa: E731 - a one-line printer
    rows = []
    for obj in objs:
        row: dict[str, Any] = {"cells": row_fn(obj, now)}
        if include == "Object":
            row["object"] = res.view(obj)
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": cols, "rows": rows}


# --------------------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------------------


def _resource_list(group_version: str, resources: list[tuple[str, str, bool, list[str]]]) -> dict:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": [
            {"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": verbs}
            for name, kind, namespaced, verbs in resources
        ],
    }


_RW = ["create", "delete", "get", "list", "patch", "update", "watch"]
_CORE_RESOURCES = _resource_list(
    "v1",
    [
        ("nodes", "Node", False, _RW),
        ("nodes/status", "Node", False, ["get", "patch", "update"]),
        ("pods", "Pod", True, _RW),
        ("bindings", "Binding", True, ["create"]),
        ("pods/binding", "Binding", True, ["create"]),
        ("pods/eviction", "Eviction", True, ["create"]),
        ("pods/status", "Pod", True, ["get", "patch", "update"]),
        ("events", "Event", True, _RW),
        ("namespaces", "Namespace", False, ["create", "delete", "get", "list", "patch", "update", "watch"]),
        ("namespaces/status", "Namespace", False, ["get", "patch", "update"]),
    ],
)
_GROUPS = {
    "apps": ("v1", _resource_list("apps/v1", [
        (r.store, r.kind, True, _RW) for r in (DEPLOYMENTS, REPLICASETS, STATEFULSETS)
    ] + [(r.store + "/status", r.kind, True, ["get", "patch", "update"]) for r in (DEPLOYMENTS, REPLICASETS, STATEFULSETS)])),
    "batch": ("v1", _resource_list("batch/v1", [
        (r.store, r.kind, True, _RW) for r in (JOBS, CRONJOBS)
    ] + [(r.store + "/status", r.kind, True, ["get", "patch", "update"]) for r in (JOBS, CRONJOBS)])),
    "policy": ("v1", _resource_list("policy/v1", [
        ("poddisruptionbudgets", "PodDisruptionBudget", True, _RW),
        ("poddisruptionbudgets/status", "PodDisruptionBudget", True, ["get", "patch", "update"]),
    ])),
    "events.k8s.io": ("v1", _resource_list("events.k8s.io/v1", [("events", "Event", True, _RW)])),
    "scheduling.run.ai": ("v2alpha2", _resource_list("scheduling.run.ai/v2alpha2", [
        ("podgroups", "PodGroup", True, _RW), ("podgroups/status", "PodGroup", True, ["get", "patch", "update"]),
    ])),
    "resource.k8s.io": ("v1", _resource_list("resource.k8s.io/v1", [
        ("deviceclasses", "DeviceClass", False, _RW), ("resourceslices", "ResourceSlice", False, _RW),
        ("resourceclaims", "ResourceClaim", True, _RW),
        ("resourceclaims/status", "ResourceClaim", True, ["get", "patch", "update"]),
    ])),
}

_NS = r"(?P<ns>[^/]+)"
_NAME = r"(?P<name>[^/]+)"
_ROUTES: list[tuple[re.Pattern, _Resource, str | None]] = [
    (re.compile(r"^/api/v1/nodes$"), NODES, None),
    (re.compile(rf"^/api/v1/nodes/{_NAME}$"), NODES, None),
    (re.compile(rf"^/api/v1/nodes/{_NAME}/(?P<sub>status)$"), NODES, None),
    (re.compile(r"^/api/v1/namespaces$"), NAMESPACES, None),
    (re.compile(rf"^/api/v1/namespaces/{_NAME}$"), NAMESPACES, None),
    (re.compile(rf"^/api/v1/namespaces/{_NAME}/(?P<sub>status)$"), NAMESPACES, None),
    (re.compile(r"^/api/v1/pods$"), PODS, None),
    (re.compile(rf"^/api/v1/namespaces/{_NS}/pods$"), PODS, None),
    (re.compile(rf"^/api/v1/namespaces/{_NS}/pods/{_NAME}$"), PODS, None),
    (re.compile(rf"^/api/v1/namespaces/{_NS}/pods/{_NAME}/(?P<sub>status|binding|eviction)$"), PODS, None),
    (re.compile(rf"^/api/v1/namespaces/{_NS}/(?P<sub>bindings)$"), PODS, None),
    (re.compile(r"^/api/v1/events$"), EVENTS, None),
    (re.compile(rf"^/api/v1/namespaces/{_NS}/events$"), EVENTS, None),
    (re.compile(rf"^/api/v1/namespaces/{_NS}/events/{_NAME}$"), EVENTS, None),
    (re.compile(r"^/apis/events\.k8s\.io/v1/events$"), EVENTS_V1, None),
    (re.compile(rf"^/apis/events\.k8s\.io/v1/namespaces/{_NS}/events$"), EVENTS_V1, None),
    (re.compile(rf"^/apis/events\.k8s\.io/v1/namespaces/{_NS}/events/{_NAME}$"), EVENTS_V1, None),
]
for _w in (PODGROUPS, RESOURCECLAIMS):
    _prefix = f"/apis/{_w.api_version}"
    _ROUTES += [
        (re.compile(rf"^{_prefix}/{_w.store}$"), _w, None),
        (re.compile(rf"^{_prefix}/namespaces/{_NS}/{_w.store}$"), _w, None),
        (re.compile(rf"^{_prefix}/namespaces/{_NS}/{_w.store}/{_NAME}$"), _w, None),
        (re.compile(rf"^{_prefix}/namespaces/{_NS}/{_w.store}/{_NAME}/(?P<sub>status)$"), _w, None),
    ]
for _w in (DEVICECLASSES, RESOURCESLICES):
    _ROUTES += [
        (re.compile(rf"^/apis/{_w.api_version}/{_w.store}$"), _w, None),
        (re.compile(rf"^/apis/{_w.api_version}/{_w.store}/{_NAME}$"), _w, None),
    ]
for _w in (*_WORKLOADS, PDBS):
    _prefix = f"/apis/{_w.group}/v1"
    _ROUTES += [
        (re.compile(rf"^{_prefix}/{_w.store}$"), _w, None),
        (re.compile(rf"^{_prefix}/namespaces/{_NS}/{_w.store}$"), _w, None),
        (re.compile(rf"^{_prefix}/namespaces/{_NS}/{_w.store}/{_NAME}$"), _w, None),
        (re.compile(rf"^{_prefix}/namespaces/{_NS}/{_w.store}/{_NAME}/(?P<sub>status)$"), _w, None),
    ]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client closing a keep-alive connection is normal; anything else is printed."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Dropped(Exception):
    """The connection was closed on purpose (fault injection)."""


class _Handler(BaseHTTPRequestHandler):
    emulator: KubeEmulator
    protocol_version = "HTTP/1.1"
    server_version = "kai-kube-emulator"
    _watch_table: str | None = None  # set per watch request that asked for Table output

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature from the base class
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # ---- plumbing -------------------------------------------------------------------------------

    def _record(self, method: str, path: str, query: str, status: int | None, performed: int | None) -> RequestRecord:
        """Log a request when it takes effect (so a performed-but-unanswered request is visible at once)."""
        rec = RequestRecord(method, path, query, status, performed)
        with self.emulator._lock:
            self.emulator.request_records.append(rec)
        return rec

    def _send_json(self, code: int, body: Any) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_text(self, code: int, text: str) -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        raise _Dropped()

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            raw = b"".join(chunks)
        else:
            raw = self.rfile.read(length) if length else b""
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ApiError(400, f"the body of the request was in an unknown format: {exc}") from None

    def _dispatch(self, method: str) -> None:
        split = urlsplit(self.path)
        path = unquote(split.path).rstrip("/") or "/"
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        em = self.emulator
        fault = em.faults.take(method, path, split.query)
        try:
            body = self._read_body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
        except ApiError as exc:
            self._send_json(exc.code, exc.body)
            self._record(method, path, split.query, exc.code, exc.code)
            return
        except (ValueError, OSError):
            self.close_connection = True
            return
        try:
            if fault is not None and not fault.after:
                if fault.delay:
                    time.sleep(fault.delay)
                if fault.drop_connection:
                    self._record(method, path, split.query, None, None)
                    self._drop()
                if fault.status is not None:
                    err = fault.body or status_body(fault.status, f"injected fault for {method} {path}")
                    rec = self._record(method, path, split.query, None, None)
                    self._send_json(fault.status, err)
                    rec.status = fault.status
                    return
            try:
                code, payload, stream = self._handle(method, path, query, body)
            except ApiError as exc:
                code, payload, stream = exc.code, exc.body, None
            except Exception as exc:  # an emulator bug: answer like the apiserver does, and show it
                import traceback

                traceback.print_exc()
                code, payload, stream = 500, status_body(500, f"emulator error: {exc!r}"), None
            rec = self._record(method, path, split.query, None, code)
            if fault is not None and fault.after:
                if fault.delay:
                    time.sleep(fault.delay)
                if fault.drop_connection:
                    self._drop()
                if fault.status is not None:
                    err = fault.body or status_body(fault.status, f"injected fault for {method} {path}")
                    self._send_json(fault.status, err)
                    rec.status = fault.status
                    return
            if stream is not None:
                rec.status = code
                stream()
            elif isinstance(payload, str):
                self._send_text(code, payload)
                rec.status = code
            else:
                self._send_json(code, payload)
                rec.status = code
        except _Dropped:
            return
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    # ---- routing --------------------------------------------------------------------------------

    def _handle(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any, Callable | None]:
        em = self.emulator
        if path in ("/healthz", "/readyz", "/livez"):
            return 200, "ok", None
        if method == "GET":
            if path == "/version":
                return 200, SERVER_VERSION, None
            if path == "/api":
                return 200, {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{em.port}"}],
                }, None
            if path == "/api/v1":
                return 200, _CORE_RESOURCES, None
            if path == "/apis":
                return 200, {
                    "kind": "APIGroupList",
                    "apiVersion": "v1",
                    "groups": [
                        {
                            "name": g,
                            "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                            "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v},
                        }
                        for g, (v, _) in _GROUPS.items()
                    ],
                }, None
            for g, (v, rl) in _GROUPS.items():
                if path == f"/apis/{g}":
                    return 200, {
                        "kind": "APIGroup", "apiVersion": "v1", "name": g,
                        "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                        "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v},
                    }, None
                if path == f"/apis/{g}/{v}":
                    return 200, rl, None
        for rx, res, _ in _ROUTES:
            m = rx.match(path)
            if m:
                gd = m.groupdict()
                return self._resource(method, res, gd.get("ns"), gd.get("name"), gd.get("sub"), query, body)
        raise ApiError(404, "the server could not find the requested resource", details={})

    def _resource(
        self, method: str, res: _Resource, ns: str | None, name: str | None, sub: str | None, query: dict[str, str], body: Any
    ) -> tuple[int, Any, Callable | None]:
        em = self.emulator
        if sub == "bindings":  # legacy POST namespaces/{ns}/bindings: the Binding names the pod
            if method != "POST":
                raise ApiError(405, "the server does not allow this method on the requested resource")
            pod = _deep(body, "metadata.name") if isinstance(body, dict) else None
            if not pod:
                raise _invalid("Binding", "", [("metadata.name", "Required value: name or generateName is required")])
            return 201, em.bind(ns, pod, body), None
        if name is None:  # collection
            if method == "GET":
                sel = _Selector(
                    labels=tuple(parse_label_selector(query.get("labelSelector"))),
                    fields=parse_field_selector(query.get("fieldSelector"), res.fields, res.resource),
                    namespace=ns,
                    field_fn=res.field_fn,
                )
                if _parse_bool(query.get("watch")):
                    return 200, None, lambda: self._watch(res, sel, query)
                listed = em.list_objects(res, sel, query)
                if _wants_table(self.headers.get("Accept", "")):
                    with em._lock:
                        stored = [
                            em._objects[res.store].get(em._key(res, i["metadata"].get("namespace"), i["metadata"]["name"])) or i
                            for i in listed["items"]
                        ]
                    return 200, _table(res, stored, em.now(), listed["metadata"], query.get("includeObject", "Metadata")), None
                return 200, listed, None
            if method == "POST" and (ns is not None or not res.namespaced):
                if query.get("dryRun"):
                    raise ApiError(400, "dryRun is not supported by the emulator")
                return 201, res.view(em.create_object(res, ns, body)), None
            raise ApiError(405, f"the server does not allow this method on the requested resource")
        if sub == "binding":
            if method != "POST":
                raise ApiError(405, "the server does not allow this method on the requested resource")
            return 201, em.bind(ns, name, body), None
        if sub == "eviction":
            if method != "POST":
                raise ApiError(405, "the server does not allow this method on the requested resource")
            if isinstance(body, dict) and body.get("apiVersion") not in (None, "policy/v1", "policy/v1beta1"):
                raise ApiError(400, f"unsupported Eviction apiVersion {body.get('apiVersion')!r}")
            return 201, em.evict(ns, name, body), None
        if method == "GET":
            with em._lock:
                obj = em._objects[res.store].get(em._key(res, ns, name))
                if obj is None:
                    raise _not_found(res.qualified, name)
                if _wants_table(self.headers.get("Accept", "")) and sub is None:
                    return 200, _table(res, [obj], em.now(), {"resourceVersion": obj["metadata"]["resourceVersion"]}, query.get("includeObject", "Metadata")), None
                return 200, res.view(obj), None
        if method == "PUT":
            return 200, res.view(em.update_object(res, ns, name, body, subresource=sub)), None
        if method == "PATCH":
            ctype = self.headers.get("Content-Type", "")
            return 200, res.view(em.patch_object(res, ns, name, body, ctype, subresource=sub)), None
        if method == "DELETE" and sub is None:
            options = dict(body) if isinstance(body, dict) else {}
            for qk, ok in (("gracePeriodSeconds", "gracePeriodSeconds"), ("propagationPolicy", "propagationPolicy"), ("dryRun", "dryRun")):
                if qk in query and ok not in options:
                    options[ok] = _parse_int(qk, query[qk]) if qk == "gracePeriodSeconds" else query[qk]
            code, obj = em.delete_object(res, ns, name, options)
            if res.store == "events":
                return code, status_body(200, ""), None
            return code, res.view(obj), None
        raise ApiError(405, "the server does not allow this method on the requested resource")

    # ---- watch ----------------------------------------------------------------------------------

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, res: _Resource, sel: _Selector, query: dict[str, str]) -> None:
        em = self.emulator
        rv_param = query.get("resourceVersion")
        timeout = _parse_int("timeoutSeconds", query.get("timeoutSeconds"))
        bookmarks = _parse_bool(query.get("allowWatchBookmarks"))
        send_initial = _parse_bool(query.get("sendInitialEvents"))
        self._watch_table = query.get("includeObject", "Metadata") if _wants_table(self.headers.get("Accept", "")) else None
        initial: list[dict] = []
        too_old: dict | None = None
        with em._cond:
            epoch, abrupt_epoch = em._watch_epoch, em._abrupt_epoch
            if rv_param in (None, "", "0") or send_initial:
                initial = [o for _, o in sorted(em._objects[res.store].items()) if sel.matches(o)]
                last = em._rv
            else:
                last = _parse_int("resourceVersion", rv_param)
                if last < em._compacted_rv:
                    too_old = status_body(410, f"too old resource version: {last} ({em._compacted_rv})", reason="Expired")
            em._watch_sockets.add(self.connection)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache, private")
            self.end_headers()
            self.wfile.flush()
            if too_old is not None:
                self._write_chunk(json.dumps({"type": "ERROR", "object": too_old}).encode() + b"\n")
                self._end_stream()
                return
            for obj in initial:
                self._write_chunk(self._event_json(res, "ADDED", obj))
            if send_initial and bookmarks:
                self._write_chunk(self._bookmark(res, last, initial_end=True))
            deadline = time.monotonic() + timeout if timeout else None
            next_bookmark = time.monotonic() + em.bookmark_interval
            while True:
                out: list[bytes] = []
                with em._cond:
                    while True:
                        if em._closing or em._abrupt_epoch != abrupt_epoch:
                            self.close_connection = True
                            return
                        if em._watch_epoch != epoch:
                            break
                        if last < em._compacted_rv and em._rv > last:
                            too_old = status_body(410, f"too old resource version: {last} ({em._compacted_rv})", reason="Expired")
                            break
                        if em._rv > last:
                            break
                        now = time.monotonic()
                        if deadline is not None and now >= deadline:
                            break
                        if bookmarks and now >= next_bookmark:
                            break
                        wait = 0.5
                        if deadline is not None:
                            wait = min(wait, deadline - now)
                        if bookmarks:
                            wait = min(wait, next_bookmark - now)
                        em._cond.wait(max(wait, 0.001))
                    ended = em._watch_epoch != epoch
                    if too_old is None and em._rv > last:
                        for ev in em._history:
                            if ev.rv <= last or ev.store != res.store:
                                continue
                            line = self._event_line(res, sel, ev, table=self._watch_table, now=em.now())
                            if line is not None:
                                out.append(line)
                        last = em._rv
                for line in out:
                    self._write_chunk(line)
                if too_old is not None:
                    self._write_chunk(json.dumps({"type": "ERROR", "object": too_old}).encode() + b"\n")
                    self._end_stream()
                    return
                now = time.monotonic()
                if ended or (deadline is not None and now >= deadline):
                    if bookmarks and not ended:
                        self._write_chunk(self._bookmark(res, last))
                    self._end_stream()
                    return
                if bookmarks and now >= next_bookmark:
                    self._write_chunk(self._bookmark(res, last))
                    next_bookmark = now + em.bookmark_interval
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            with em._cond:
                em._watch_sockets.discard(self.connection)

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        self.close_connection = True

    @staticmethod
    def _bookmark(res: _Resource, rv: int, *, initial_end: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return json.dumps({"type": "BOOKMARK", "object": {"kind": res.kind, "apiVersion": res.api_version, "metadata": meta}}).encode() + b"\n"

    def _event_json(self, res: _Resource, etype: str, obj: dict) -> bytes:
        if self._watch_table is not None:
            body = _table(res, [obj], self.emulator.now(), {"resourceVersion": obj["metadata"]["resourceVersion"]}, self._watch_table)
        else:
            body = res.view(obj)
        return json.dumps({"type": etype, "object": body}).encode() + b"\n"

    @staticmethod
    def _event_line(res: _Resource, sel: _Selector, ev: _WatchEvent, *, table: str | None = None, now: float = 0.0) -> bytes | None:
        """Re-type the event for this watcher's selector, as the watch cache does."""
        cur_ok = ev.type != "DELETED" and sel.matches(ev.obj)
        prev_ok = sel.matches(ev.prev) if ev.type != "ADDED" else False
        if ev.type == "DELETED":
            if not sel.matches(ev.obj) and not prev_ok:
                return None
            etype, obj = "DELETED", ev.obj
        elif cur_ok and (prev_ok or ev.type == "ADDED"):
            etype, obj = ev.type, ev.obj
        elif cur_ok:
            etype, obj = "ADDED", ev.obj
        elif prev_ok:
            obj = copy.deepcopy(ev.prev)
            obj["metadata"]["resourceVersion"] = str(ev.rv)
            etype = "DELETED"
        else:
            return None
        body = res.view(obj) if table is None else _table(res, [obj], now, {"resourceVersion": obj["metadata"]["resourceVersion"]}, table)
        return json.dumps({"type": etype, "object": body}).encode() + b"\n"
