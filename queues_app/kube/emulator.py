"""An in-process emulator of the Kubernetes API server (core/v1 nodes, pods, events; bindings, evictions).

Why it exists: the control plane talks to real clusters only through the official ``kubernetes``
Python client, but no kube-apiserver can run in development or CI.  Tests and the one-command demo
therefore point the *real* client, over a real TCP socket, at this server.  It encodes only behaviour
documented for the real API server (API reference, "API concepts", pod lifecycle docs), so code that
passes against it makes the same requests it would make against a cluster:

* one global ``resourceVersion`` counter (like etcd's revision), stamped on every write and on list
  metadata; a bounded event history that watches resume from; ``compact()`` forgets the history so
  old resourceVersions get ``410 Gone`` exactly as after an etcd compaction;
* list / watch with label and field selectors, bookmarks, ``timeoutSeconds``, ``limit``/``continue``;
  watch events are re-typed per selector (an object leaving a selector is seen as ``DELETED``,
  entering it as ``ADDED``), as the watch cache does;
* graceful pod deletion (``deletionTimestamp`` + ``deletionGracePeriodSeconds``; removal once the
  grace elapsed on the emulator's clock), finalizers, uid/resourceVersion preconditions;
* the ``binding`` subresource (``201`` Status Success, ``409`` when already assigned), the
  ``eviction`` subresource (``201``, ``429`` when a disruption budget blocks it), ``status``
  subresources, pod-spec immutability on update;
* a tiny "kubelet" (bound pods on a Ready node become Running) and "pod GC" (pods bound to a node
  that no longer exists are failed and deleted) driven by ``advance()`` or ``run_realtime()``;
* owner kinds (batch/v1 Job, CronJob; apps/v1 ReplicaSet, StatefulSet, Deployment) stored with
  API defaults and validation, cascading deletion as the garbage collector does (Jobs orphan by
  default); policy/v1 PodDisruptionBudgets enforced by the eviction subresource;
* a node lifecycle controller (not-ready taints) and taint-based eviction (NoExecute, tolerationSeconds);
* KAI's PodGroups (``scheduling.run.ai/v2alpha2``: ``spec.subGroups``, ``minSubGroup``,
  ``topologyConstraint``; the CRD's structural schema, no admission webhook) and dynamic resource
  allocation (``resource.k8s.io/v1`` DeviceClasses, ResourceSlices with their ``spec.nodeName`` /
  ``spec.driver`` / ``spec.pool.name`` field selectors, ResourceClaims whose spec is immutable and whose
  ``status.allocation`` can only be set once, ``reservedFor`` needing it); the kubelet starts a pod only
  when each of its ResourceClaims is allocated and reserved for it;
* fault injection (error statuses, "performed but answered with an error", dropped connections,
  delays), watch disconnection, and a request log so tests can assert on exact traffic.

* namespaces (``default``, ``kube-system``, ``kube-public``, ``kube-node-lease`` exist from the start;
  the first three cannot be deleted): creating content in a namespace that does not exist is ``404``
  and in a terminating one ``403`` (the NamespaceLifecycle admission plugin); deleting a namespace
  marks it Terminating and the namespace controller deletes its content, then the namespace.  The
  Python helpers (``add_pod``, ``add_owner``, ``add_namespace``) create the namespace they need;
* pod status patches (``pods/{name}/status``) with a ``metadata.resourceVersion`` precondition (409);
  the Binding subresource sets ``PodScheduled=True`` and copies the Binding's annotations onto the pod.

Not emulated (requests for them get a 404 / 405 / 415 / 400 Status): other resource types, server-side apply, dryRun on create, protobuf,
authn/authz/admission webhooks, workload controllers creating pods, the scheduler, the node
monitor (a node is NotReady only when told: ``set_node_ready``).  ``kubectl get`` works (Table
output for pods, nodes, events; name + age for the other kinds).  Binding to a node that does not exist succeeds, as on a real API server (pod GC then
removes the pod).  The binding answer is a Status object, which the v37 client cannot deserialise
into V1Binding: call it with ``_preload_content=False``, as against a real cluster (the eviction's
Status deserialises into an empty V1Eviction).

Pure stdlib (``http.server`` + ``threading``); the ``kubernetes`` package is only needed for
``configuration()``.
"""
from __future__ import annotations

import argparse
import base64
import copy
import datetime as _dt
import json
import random
import re
import signal
import socket
import sys
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["KubeEmulator", "ManualClock", "ApiError", "Faults"]

SERVER_VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-kai-emulator",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-08-13T00:00:00Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}

# Default tolerations that the DefaultTolerationSeconds admission plugin adds to every pod.
_DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]
# Resources the API server treats as overcommittable; every other (extended) resource needs limits.
_NATIVE_RESOURCES = {"cpu", "memory", "ephemeral-storage", "storage"}
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's SimpleNameGenerator alphabet


# --------------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------------


class ManualClock:
    """A clock that only moves when told to: tests decide exactly when grace periods elapse."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else float(start)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError(f"advance(seconds): must be >= 0, got {seconds!r}")
        with self._lock:
            self._now += float(seconds)
            return self._now


class _RealClock:
    """Wall clock, offset so it never runs behind a manual clock it replaces (time stays monotonic)."""

    def __init__(self, not_before: float) -> None:
        self._offset = max(0.0, not_before - time.time())

    def __call__(self) -> float:
        return time.time() + self._offset


def _rfc3339(ts: float) -> str:
    return _dt.datetime.fromtimestamp(int(ts), tz=_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(value: str | None) -> float | None:
    if not value:
        return None
    text = value.replace("Z", "+00:00")
    return _dt.datetime.fromisoformat(text).timestamp()


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_body(code: int, message: str, *, reason: str | None = None, details: dict | None = None) -> dict:
    """A ``meta/v1 Status`` as the API server returns it for errors (and for a few successes)."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if 200 <= code < 300 else "Failure",
        "message": message,
        "reason": reason if reason is not None else _REASONS.get(code, HTTPStatus(code).phrase.replace(" ", "")),
        "code": code,
    }
    if 200 <= code < 300:  # success Statuses (binding, eviction) carry no message, reason or code
        body.pop("message")
        body.pop("reason")
        body.pop("code")
    if body.get("reason") == "":
        body.pop("reason")
    if details is not None:
        body["details"] = details
    return body


class ApiError(Exception):
    """An error the emulator answers with a Status body (raised from the store, also from the Python API)."""

    def __init__(self, code: int, message: str, *, reason: str | None = None, details: dict | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.body = status_body(code, message, reason=reason, details=details)


def _not_found(resource: str, name: str) -> ApiError:
    group, _, plural = resource.rpartition("/")
    return ApiError(
        404,
        f'{plural} "{name}" not found' if not group else f'{plural}.{group} "{name}" not found',
        details={"name": name, "kind": plural, **({"group": group} if group else {})},
    )


def _conflict(resource: str, name: str, why: str) -> ApiError:
    return ApiError(
        409, f'Operation cannot be fulfilled on {resource} "{name}": {why}', details={"name": name, "kind": resource}
    )


def _invalid(kind: str, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 Invalid with one cause per field, message shaped like the API server's aggregate."""
    text = "; ".join(f"{fld}: {msg}" for fld, msg in causes)
    if len(causes) > 1:
        text = "[" + ", ".join(f"{fld}: {msg}" for fld, msg in causes) + "]"
    return ApiError(
        422,
        f'{kind} "{name}" is invalid: {text}',
        details={
            "name": name,
            "kind": kind,
            "causes": [{"reason": "FieldValueInvalid", "message": msg, "field": fld} for fld, msg in causes],
        },
    )


def _parse_bool(value: str | None) -> bool:
    """Go's strconv.ParseBool, which the API server uses for query booleans (the client sends 'True')."""
    if value is None:
        return False
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("", "0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ApiError(400, f"invalid boolean value {value!r}")


def _parse_int(name: str, value: str | None) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ApiError(400, f"{name}: invalid value {value!r}: must be an integer") from None


def _deep(obj: Any, path: str, default: Any = None) -> Any:
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return default
        cur = cur[part]
    return cur


# --------------------------------------------------------------------------------------------------
# Selectors
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        if self.op == "exists":
            return present
        return not present  # "!"


def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


_SET_RE = re.compile(r"^([A-Za-z0-9./_-]+)\s+(in|notin)\s*\(([^()]*)\)$")
_EQ_RE = re.compile(r"^([A-Za-z0-9./_-]+)\s*(==|!=|=)\s*([A-Za-z0-9._-]*)$")
_KEY_RE = re.compile(r"^(!?)\s*([A-Za-z0-9./_-]+)$")


def parse_label_selector(text: str | None) -> list[_Requirement]:
    """Equality (``=``, ``==``, ``!=``) and set-based (``in``, ``notin``, ``key``, ``!key``) requirements."""
    if not text:
        return []
    reqs = []
    for part in _split_top_level(text):
        if m := _SET_RE.match(part):
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append(_Requirement(m.group(1), m.group(2), values))
        elif m := _EQ_RE.match(part):
            reqs.append(_Requirement(m.group(1), "!=" if m.group(2) == "!=" else "=", (m.group(3),)))
        elif m := _KEY_RE.match(part):
            reqs.append(_Requirement(m.group(2), "!" if m.group(1) else "exists"))
        else:
            raise ApiError(400, f"unable to parse requirement: {part!r}: invalid label selector")
    return reqs


def _pod_fields(obj: dict) -> dict[str, str]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return {
        "metadata.name": obj["metadata"].get("name", ""),
        "metadata.namespace": obj["metadata"].get("namespace", ""),
        "spec.nodeName": spec.get("nodeName", "") or "",
        "spec.restartPolicy": spec.get("restartPolicy", "") or "",
        "spec.schedulerName": spec.get("schedulerName", "") or "",
        "spec.serviceAccountName": spec.get("serviceAccountName", "") or "",
        "spec.hostNetwork": "true" if spec.get("hostNetwork") else "false",
        "status.phase": status.get("phase", "") or "",
        "status.podIP": status.get("podIP", "") or "",
        "status.nominatedNodeName": status.get("nominatedNodeName", "") or "",
    }


def _node_fields(obj: dict) -> dict[str, str]:
    return {
        "metadata.name": obj["metadata"].get("name", ""),
        "spec.unschedulable": "true" if _deep(obj, "spec.unschedulable") else "false",
    }


def _event_fields(obj: dict) -> dict[str, str]:
    inv = obj.get("involvedObject") or {}
    src = obj.get("source") or {}
    return {
        "metadata.name": obj["metadata"].get("name", ""),
        "metadata.namespace": obj["metadata"].get("namespace", ""),
        "involvedObject.kind": inv.get("kind", "") or "",
        "involvedObject.namespace": inv.get("namespace", "") or "",
        "involvedObject.name": inv.get("name", "") or "",
        "involvedObject.uid": inv.get("uid", "") or "",
        "involvedObject.apiVersion": inv.get("apiVersion", "") or "",
        "involvedObject.resourceVersion": inv.get("resourceVersion", "") or "",
        "involvedObject.fieldPath": inv.get("fieldPath", "") or "",
        "reason": obj.get("reason", "") or "",
        "reportingComponent": obj.get("reportingComponent", "") or "",
        "source": src.get("component", "") or "",
        "type": obj.get("type", "") or "",
    }


def _events_v1_fields(obj: dict) -> dict[str, str]:
    """Field labels of events.k8s.io/v1 (computed on the core form the store keeps)."""
    core = _event_fields(obj)
    return {
        "metadata.name": core["metadata.name"],
        "metadata.namespace": core["metadata.namespace"],
        "regarding.kind": core["involvedObject.kind"],
        "regarding.namespace": core["involvedObject.namespace"],
        "regarding.name": core["involvedObject.name"],
        "regarding.uid": core["involvedObject.uid"],
        "regarding.apiVersion": core["involvedObject.apiVersion"],
        "regarding.resourceVersion": core["involvedObject.resourceVersion"],
        "regarding.fieldPath": core["involvedObject.fieldPath"],
        "reason": core["reason"],
        "reportingController": core["reportingComponent"],
        "type": core["type"],
    }


@dataclass(frozen=True)
class _Selector:
    labels: tuple[_Requirement, ...] = ()
    fields: tuple[tuple[str, bool, str], ...] = ()  # (field, equal?, value)
    namespace: str | None = None
    field_fn: Callable[[dict], dict[str, str]] | None = None

    def matches(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        labels = meta.get("labels") or {}
        if not all(r.matches(labels) for r in self.labels):
            return False
        if self.fields:
            values = self.field_fn(obj)
            for fld, equal, want in self.fields:
                if (values[fld] == want) != equal:
                    return False
        return True


def parse_field_selector(text: str | None, supported: Iterable[str], kind: str) -> tuple[tuple[str, bool, str], ...]:
    if not text:
        return ()
    allowed = set(supported)
    out = []
    for part in _split_top_level(text):
        m = re.match(r"^([A-Za-z.]+)\s*(==|!=|=)\s*(.*)$", part)
        if not m:
            raise ApiError(400, f"invalid selector: '{text}'; can't understand '{part}'")
        fld, op, value = m.group(1), m.group(2), m.group(3).strip()
        if fld not in allowed:
            raise ApiError(400, f'field label not supported: {fld}', details={"kind": kind})
        out.append((fld, op != "!=", value))
    return tuple(out)


# --------------------------------------------------------------------------------------------------
# Patches
# --------------------------------------------------------------------------------------------------


def json_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 merge patch: objects merge recursively, ``null`` removes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge_patch(result.get(key), value)
    return result


# patchMergeKey of the list fields a control plane plausibly patches (from the core/v1 OpenAPI
# x-kubernetes-patch-merge-key / patch-strategy=merge markers).  Lists not named here are replaced.
_SMP_MERGE_KEYS = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "ownerReferences": "uid",
    "addresses": "type",
    "imagePullSecrets": "name",
    "resourceClaims": "name",
    "schedulingGates": "name",
}
_SMP_PRIMITIVE_MERGE = {"finalizers"}


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge patch for the core/v1 fields above: keyed lists merge, ``$patch`` directives honoured."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$retainKeys") or key == "$patch":
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            fld = key.split("/", 1)[1]
            result[fld] = [v for v in result.get(fld) or [] if v not in value]
            continue
        if key.startswith("$setElementOrder/"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in _SMP_MERGE_KEYS and isinstance(result.get(key), list):
            result[key] = _smp_merge_list(result[key], value, _SMP_MERGE_KEYS[key])
        elif isinstance(value, list) and key in _SMP_PRIMITIVE_MERGE and isinstance(result.get(key), list):
            merged = list(result[key])
            merged.extend(v for v in value if v not in merged)
            result[key] = merged
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = copy.deepcopy(value)
    return result


def _smp_merge_list(current: list, patch: list, merge_key: str) -> list:
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and i.get("$patch") == "replace")]
    result = [copy.deepcopy(i) for i in current]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise ApiError(400, f"map: {item!r} does not contain declared merge key: {merge_key}")
        idx = next((n for n, cur in enumerate(result) if isinstance(cur, dict) and cur.get(merge_key) == item[merge_key]), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                result.pop(idx)
            continue
        if idx is None:
            result.append({k: copy.deepcopy(v) for k, v in item.items() if v is not None})
        else:
            result[idx] = strategic_merge_patch(result[idx], item)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(400, f"json patch: invalid path {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(doc: Any, ops: list) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    doc = copy.deepcopy(doc)

    def parent(d: Any, parts: list[str]) -> tuple[Any, str]:
        cur = d
        for p in parts[:-1]:
            if isinstance(cur, list):
                cur = cur[int(p)]
            elif isinstance(cur, dict) and p in cur:
                cur = cur[p]
            else:
                raise ApiError(422, f"json patch: path segment {p!r} does not exist", reason="Invalid")
        return cur, parts[-1]

    def get(d: Any, parts: list[str]) -> Any:
        cur = d
        for p in parts:
            try:
                cur = cur[int(p)] if isinstance(cur, list) else cur[p]
            except (KeyError, IndexError, ValueError, TypeError):
                raise ApiError(422, f"json patch: path {'/'.join(parts)!r} does not exist", reason="Invalid") from None
        return cur

    def remove(d: Any, parts: list[str]) -> Any:
        par, last = parent(d, parts)
        try:
            return par.pop(int(last)) if isinstance(par, list) else par.pop(last)
        except (KeyError, IndexError, ValueError):
            raise ApiError(422, f"json patch: cannot remove missing path /{'/'.join(parts)}", reason="Invalid") from None

    def add(d: Any, parts: list[str], value: Any) -> Any:
        if not parts:
            return value
        par, last = parent(d, parts)
        if isinstance(par, list):
            if last == "-":
                par.append(value)
            else:
                par.insert(int(last), value)
        elif isinstance(par, dict):
            par[last] = value
        else:
            raise ApiError(422, f"json patch: cannot add at /{'/'.join(parts)}", reason="Invalid")
        return d

    if not isinstance(ops, list):
        raise ApiError(400, "json patch: the body must be a JSON array of operations")
    for op in ops:
        kind = op.get("op")
        parts = _pointer(op.get("path", ""))
        if kind == "add":
            doc = add(doc, parts, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            remove(doc, parts)
        elif kind == "replace":
            get(doc, parts)
            if not parts:
                doc = copy.deepcopy(op.get("value"))
            else:
                par, last = parent(doc, parts)
                par[int(last) if isinstance(par, list) else last] = copy.deepcopy(op.get("value"))
        elif kind == "move":
            value = remove(doc, _pointer(op["from"]))
            doc = add(doc, parts, value)
        elif kind == "copy":
            doc = add(doc, parts, copy.deepcopy(get(doc, _pointer(op["from"]))))
        elif kind == "test":
            if get(doc, parts) != op.get("value"):
                raise ApiError(422, f"json patch: test operation failed at {op.get('path')}", reason="Invalid")
        else:
            raise ApiError(400, f"json patch: unknown operation {kind!r}")
    return doc


# --------------------------------------------------------------------------------------------------
# Resources
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Resource:
    store: str  # key in the object store: "nodes", "pods", "events"
    resource: str  # plural used in messages ("pods", "events.events.k8s.io" style handled by group)
    group: str
    kind: str
    api_version: str
    namespaced: bool
    field_fn: Callable[[dict], dict[str, str]]
    to_view: Callable[[dict], dict] | None = None  # store form -> served form
    from_view: Callable[[dict], dict] | None = None  # served form -> store form
    has_status: bool = False  # status is a subresource: PUT/PATCH on the object keep the old status
    has_generation: bool = False  # metadata.generation counts spec changes

    @property
    def qualified(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def fields(self) -> list[str]:
        return list(self.field_fn({"metadata": {}}).keys())

    def view(self, obj: dict) -> dict:
        out = self.to_view(obj) if self.to_view else dict(obj)
        out["kind"], out["apiVersion"] = self.kind, self.api_version
        return out


_EVENT_V1_MAP = [  # (events.k8s.io/v1 field, core/v1 field)
    ("regarding", "involvedObject"),
    ("related", "related"),
    ("note", "message"),
    ("reason", "reason"),
    ("type", "type"),
    ("action", "action"),
    ("reportingController", "reportingComponent"),
    ("reportingInstance", "reportingInstance"),
    ("eventTime", "eventTime"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
]


def _event_to_v1(core: dict) -> dict:
    out: dict[str, Any] = {"metadata": core["metadata"]}
    for new, old in _EVENT_V1_MAP:
        if core.get(old) not in (None, "", {}):
            out[new] = core[old]
    if core.get("series"):
        out["series"] = {"count": core["series"].get("count"), "lastObservedTime": core["series"].get("lastObservedTime")}
    return out


def _event_from_v1(v1: dict) -> dict:
    out: dict[str, Any] = {"metadata": v1.get("metadata") or {}}
    for new, old in _EVENT_V1_MAP:
        if v1.get(new) not in (None, "", {}):
            out[old] = v1[new]
    if v1.get("series"):
        out["series"] = dict(v1["series"])
    return out


NODES = _Resource("nodes", "nodes", "", "Node", "v1", False, _node_fields, has_status=True)
PODS = _Resource("pods", "pods", "", "Pod", "v1", True, _pod_fields, has_status=True, has_generation=True)
EVENTS = _Resource("events", "events", "", "Event", "v1", True, _event_fields)
EVENTS_V1 = _Resource(
    "events", "events", "events.k8s.io", "Event", "events.k8s.io/v1", True, _events_v1_fields, _event_to_v1, _event_from_v1
)


def _meta_fields(obj: dict) -> dict[str, str]:
    return {"metadata.name": obj["metadata"].get("name", ""), "metadata.namespace": obj["metadata"].get("namespace", "")}


def _job_fields(obj: dict) -> dict[str, str]:
    return {**_meta_fields(obj), "status.successful": str(_deep(obj, "status.succeeded", 0) or 0)}


def _workload(store: str, group: str, kind: str, fields: Callable[[dict], dict[str, str]] = _meta_fields) -> _Resource:
    return _Resource(store, store, group, kind, f"{group}/v1", True, fields, has_status=True, has_generation=True)


# Owner controllers: stored and served (the sync reads replica counts), but no controller acts on them.
JOBS = _workload("jobs", "batch", "Job", _job_fields)
CRONJOBS = _workload("cronjobs", "batch", "CronJob")
REPLICASETS = _workload("replicasets", "apps", "ReplicaSet")
STATEFULSETS = _workload("statefulsets", "apps", "StatefulSet")
DEPLOYMENTS = _workload("deployments", "apps", "Deployment")
_WORKLOADS = (JOBS, CRONJOBS, REPLICASETS, STATEFULSETS, DEPLOYMENTS)
# Disruption budgets: the eviction subresource enforces them; status is kept by run_due (the PDB controller).
PDBS = _Resource("poddisruptionbudgets", "poddisruptionbudgets", "policy", "PodDisruptionBudget", "policy/v1", True,
                 _meta_fields, has_status=True, has_generation=True)


def _slice_fields(obj: dict) -> dict[str, str]:
    return {"metadata.name": obj["metadata"].get("name", ""), "spec.nodeName": str(_deep(obj, "spec.nodeName", "") or ""),
            "spec.driver": str(_deep(obj, "spec.driver", "") or ""), "spec.pool.name": str(_deep(obj, "spec.pool.name", "") or "")}


# KAI's PodGroup custom resource (the CRD is served; its validating webhook is not emulated).
PODGROUPS = _Resource("podgroups", "podgroups", "scheduling.run.ai", "PodGroup", "scheduling.run.ai/v2alpha2", True,
                      _meta_fields, has_status=True, has_generation=True)
# Dynamic resource allocation (resource.k8s.io/v1).
DEVICECLASSES = _Resource("deviceclasses", "deviceclasses", "resource.k8s.io", "DeviceClass", "resource.k8s.io/v1",
                          False, _meta_fields, has_generation=True)
RESOURCESLICES = _Resource("resourceslices", "resourceslices", "resource.k8s.io", "ResourceSlice",
                           "resource.k8s.io/v1", False, _slice_fields, has_generation=True)
RESOURCECLAIMS = _Resource("resourceclaims", "resourceclaims", "resource.k8s.io", "ResourceClaim",
                           "resource.k8s.io/v1", True, _meta_fields, has_status=True, has_generation=True)
_DRA = (DEVICECLASSES, RESOURCESLICES, RESOURCECLAIMS)


def _namespace_fields(obj: dict) -> dict[str, str]:
    return {"metadata.name": obj["metadata"].get("name", ""), "status.phase": _deep(obj, "status.phase", "") or ""}


# Namespaces: created Active; NamespaceLifecycle admission refuses content in a namespace that does not
# exist (404) or is terminating (403); deletion marks it Terminating and the namespace controller
# (run_due) deletes its content, then the namespace.
NAMESPACES = _Resource("namespaces", "namespaces", "", "Namespace", "v1", False, _namespace_fields, has_status=True)
#: Namespaces a new cluster has; the first three cannot be deleted (the API server's immortal namespaces).
_INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_IMMORTAL_NAMESPACES = ("default", "kube-system", "kube-public")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_BY_KIND = {r.store: r for r in (NODES, PODS, EVENTS, *_WORKLOADS, PDBS, PODGROUPS, *_DRA, NAMESPACES)}
_KIND_TO_STORE = {r.kind: r.store for r in (NODES, PODS, *_WORKLOADS, PDBS, PODGROUPS, *_DRA, NAMESPACES)}


@dataclass
class _WatchEvent:
    rv: int
    store: str
    type: str  # ADDED / MODIFIED / DELETED
    obj: dict
    prev: dict | None


# --------------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------------


@dataclass
class _Fault:
    method: str
    path_re: re.Pattern
    status: int | None
    times: int | None
    after: bool
    delay: float
    drop_connection: bool
    body: dict | None
    query_re: re.Pattern | None
    hits: int = 0


class Faults:
    """Rules that make the next matching requests fail, be delayed, or lose their connection."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[_Fault] = []

    def add(
        self,
        method: str,
        path_regex: str,
        *,
        status: int | None = None,
        times: int | None = 1,
        after: bool = False,
        delay: float = 0.0,
        drop_connection: bool = False,
        body: dict | None = None,
        query_regex: str | None = None,
    ) -> _Fault:
        """``times=None`` means every matching request until ``clear()``.

        ``after=True``: the request is performed first, then answered with ``status`` / dropped
        (the client sees a failure for an operation that took effect).  ``delay`` seconds are slept
        before answering (before performing, unless ``after``).  With neither ``status`` nor
        ``drop_connection`` the request is only delayed.
        """
        if status is None and not drop_connection and delay <= 0:
            raise ValueError("faults.add: give status=, drop_connection=True or delay=")
        if times is not None and times < 1:
            raise ValueError(f"faults.add: times must be >= 1 or None, got {times!r}")
        rule = _Fault(
            method.upper(),
            re.compile(path_regex),
            status,
            times,
            after,
            delay,
            drop_connection,
            body,
            re.compile(query_regex) if query_regex else None,
        )
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def take(self, method: str, path: str, query: str) -> _Fault | None:
        with self._lock:
            for rule in self._rules:
                if rule.method not in (method, "*") or not rule.path_re.search(path):
                    continue
                if rule.query_re is not None and not rule.query_re.search(query):
                    continue
                rule.hits += 1
                if rule.times is not None:
                    rule.times -= 1
                    if rule.times == 0:
                        self._rules.remove(rule)
                return rule
        return None

    def __len__(self) -> int:
        with self._lock:
            return len(self._rules)


# --------------------------------------------------------------------------------------------------
# The emulator
# --------------------------------------------------------------------------------------------------


@dataclass
class _EvictionBlock:
    namespace: str | None
    name: str | None
    budget: str


@dataclass
class RequestRecord:
    method: str
    path: str
    query: str
    status: int | None  # what the client was sent (None: dropped, or not answered yet)
    performed: int | None  # what the emulator produced before any fault rewrote it (None: not performed)


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


def _new_namespace(name: str, *, uid: str, now: float, rv: str) -> dict:
    """A namespace as the API server stores it: the immutable name label, the kubernetes finalizer, Active."""
    return {
        "metadata": {"name": name, "uid": uid, "resourceVersion": rv, "creationTimestamp": _rfc3339(now),
                     "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def _strip_rv(obj: dict) -> dict:
    o = dict(obj)
    o["metadata"] = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
    return o


def _set_condition(status: dict, ctype: str, value: str, now: float, *, reason: str | None = None, message: str | None = None) -> None:
    conds = status.setdefault("conditions", [])
    for c in conds:
        if c.get("type") == ctype:
            if c.get("status") != value:
                c["lastTransitionTime"] = _rfc3339(now)
            c["status"] = value
            if reason:
                c["reason"] = reason
            if message:
                c["message"] = message
            return
    cond = {"type": ctype, "status": value, "lastProbeTime": None, "lastTransitionTime": _rfc3339(now)}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    conds.append(cond)


def _node_ready_condition(ready: bool, now: float) -> dict:
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status" if ready else "container runtime is down",
        "lastHeartbeatTime": _rfc3339(now),
        "lastTransitionTime": _rfc3339(now),
    }


def _pod_ready(pod: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in (pod.get("status") or {}).get("conditions") or []
    )


def _label_selector_matches(selector: dict, obj: dict) -> bool:
    """A metav1.LabelSelector (matchLabels + matchExpressions); ``{}`` matches everything."""
    labels = _deep(obj, "metadata.labels", {}) or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in selector.get("matchExpressions") or []:
        if not _Requirement(expr.get("key", ""), ops.get(expr.get("operator"), "exists"), tuple(expr.get("values") or ())).matches(labels):
            return False
    return True


def _int_or_percent(value: Any, total: int, *, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        pct = int(value[:-1])
        scaled = pct * total
        return -(-scaled // 100) if round_up else scaled // 100
    return int(value)


def _validate_pdb(pdb: dict) -> None:
    name = pdb["metadata"]["name"]
    spec = pdb.setdefault("spec", {})
    causes = []
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        causes.append(("spec", "Invalid value: minAvailable and maxUnavailable cannot be both set"))
    for fld in ("minAvailable", "maxUnavailable"):
        v = spec.get(fld)
        if v is None:
            continue
        ok = (isinstance(v, int) and v >= 0) or (isinstance(v, str) and re.fullmatch(r"\d+%", v) and int(v[:-1]) <= 100)
        if not ok:
            causes.append((f"spec.{fld}", f"Invalid value: {v!r}: must be a non-negative integer or a percentage <= 100%"))
    if causes:
        raise _invalid("PodDisruptionBudget", name, causes)


_NOT_READY = "node.kubernetes.io/not-ready"


def _tolerates(toleration: dict, taint: dict) -> bool:
    """v1.Toleration.ToleratesTaint: empty effect matches all, Exists ignores the value, empty key+Exists matches all."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    op = toleration.get("operator") or "Equal"
    if not toleration.get("key"):
        return op == "Exists"
    if toleration["key"] != taint.get("key"):
        return False
    if op == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def _node_ready(node: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in (node.get("status") or {}).get("conditions") or []
    )


def _node_ip(node: dict) -> str:
    h = uuid.UUID(node["metadata"]["uid"]).int
    return f"10.{(h >> 16) & 0xFF}.{(h >> 8) & 0xFF}.{h & 0xFF or 1}"


def _pod_ip(uid: str) -> str:
    h = uuid.UUID(uid).int
    return f"10.244.{(h >> 8) & 0xFF}.{h & 0xFF or 1}"


def _qos_class(spec: dict) -> str:
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if any(k in req or k in lim for k in ("cpu", "memory")):
            any_set = True
        for k in ("cpu", "memory"):
            if k not in lim or req.get(k, lim[k]) != lim[k]:
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _default_and_validate_pod(pod: dict, *, admission: bool = True) -> None:
    """Defaults from the API server's defaulting + admission, and the validation a control plane can trip."""
    name = pod["metadata"]["name"]
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise _invalid("Pod", name, [("spec.containers", "Required value")])
    causes: list[tuple[str, str]] = []
    containers = spec.get("containers")
    if not containers or not isinstance(containers, list):
        causes.append(("spec.containers", "Required value"))
        containers = []
    for i, c in enumerate(containers):
        if not isinstance(c, dict) or not c.get("name"):
            causes.append((f"spec.containers[{i}].name", "Required value"))
            continue
        if not c.get("image"):
            causes.append((f"spec.containers[{i}].image", "Required value"))
        res = c.setdefault("resources", {})
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for k, v in lim.items():
            req.setdefault(k, v)  # requests default to limits
        if req:
            res["requests"] = req
        for k, v in req.items():
            if k in _NATIVE_RESOURCES or k.startswith("hugepages-"):
                continue
            if k not in lim:
                causes.append((f"spec.containers[{i}].resources.limits[{k}]", "Required value: Limit must be set for non overcommitable resources"))
            elif str(lim[k]) != str(v):
                causes.append((f"spec.containers[{i}].resources.requests[{k}]", f"Invalid value: {v!r}: must be equal to {k} limit of {lim[k]}"))
        image = str(c.get("image", ""))
        tag = image.rsplit("/", 1)[-1]
        c.setdefault("imagePullPolicy", "Always" if ":" not in tag or tag.endswith(":latest") else "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
    claims = spec.get("resourceClaims") or []
    if not isinstance(claims, list):
        causes.append(("spec.resourceClaims", "Invalid value: must be a list"))
        claims = []
    for i, rc in enumerate(claims):
        if not isinstance(rc, dict) or not isinstance(rc.get("name"), str) or not _DNS1123_LABEL.match(rc["name"]):
            causes.append((f"spec.resourceClaims[{i}].name", "Invalid value: must be a DNS label"))
            continue
        if bool(rc.get("resourceClaimName")) == bool(rc.get("resourceClaimTemplateName")):
            causes.append((f"spec.resourceClaims[{i}]", "Invalid value: exactly one of `resourceClaimName` or "
                                                      "`resourceClaimTemplateName` is required"))
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if grace is not None and (not isinstance(grace, int) or grace < 0):
        causes.append(("spec.terminationGracePeriodSeconds", f"Invalid value: {grace!r}: must be greater than or equal to 0"))
    if causes:
        raise _invalid("Pod", name, causes)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("enableServiceLinks", True)
    if not admission:  # a pod template: defaulted, but admission plugins only run on pods
        return
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    tolerations = spec.setdefault("tolerations", [])
    for default in _DEFAULT_TOLERATIONS:
        if not any(t.get("key") == default["key"] for t in tolerations):
            tolerations.append(dict(default))


def _default_template(kind: str, name: str, template: Any, prefix: str, causes: list[tuple[str, str]]) -> None:
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        causes.append((f"{prefix}.spec.containers", "Required value"))
        return
    template.setdefault("metadata", {})
    fake = {"metadata": {"name": name}, "spec": template["spec"]}
    try:
        _default_and_validate_pod(fake, admission=False)
    except ApiError as exc:
        causes.extend((f"{prefix}.{c['field']}", c["message"]) for c in exc.body["details"]["causes"])


def _selector_matches_template(selector: Any, template: Any) -> bool:
    if not isinstance(selector, dict) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return False
    return _label_selector_matches(selector, template)


def _default_and_validate_workload(res: _Resource, obj: dict) -> None:
    """Defaulting + the validation of the owner kinds that a test or the demo could get wrong."""
    meta = obj["metadata"]
    name, kind = meta["name"], res.kind
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        raise _invalid(kind, name, [("spec", "Invalid value: must be an object")])
    causes: list[tuple[str, str]] = []
    status = obj.setdefault("status", {})
    if res is CRONJOBS:
        if not spec.get("schedule"):
            causes.append(("spec.schedule", "Required value"))
        jt = spec.setdefault("jobTemplate", {})
        jt.setdefault("spec", {})
        _default_template(kind, name, jt["spec"].get("template"), "spec.jobTemplate.spec.template", causes)
        spec.setdefault("concurrencyPolicy", "Allow")
        spec.setdefault("suspend", False)
        spec.setdefault("successfulJobsHistoryLimit", 3)
        spec.setdefault("failedJobsHistoryLimit", 1)
    elif res is JOBS:
        template = spec.get("template")
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            template["spec"].setdefault("restartPolicy", "Never")
            if template["spec"]["restartPolicy"] not in ("OnFailure", "Never"):
                causes.append(("spec.template.spec.restartPolicy", f'Unsupported value: "{template["spec"]["restartPolicy"]}": supported values: "OnFailure", "Never"'))
        _default_template(kind, name, template, "spec.template", causes)
        if spec.get("parallelism") is None and spec.get("completions") is None:
            spec["completions"] = 1
        spec.setdefault("parallelism", 1)
        for fld in ("parallelism", "completions"):
            if spec.get(fld) is not None and (not isinstance(spec[fld], int) or spec[fld] < 0):
                causes.append((f"spec.{fld}", f"Invalid value: {spec[fld]!r}: must be greater than or equal to 0"))
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        if "selector" not in spec and not causes:
            uid = meta["uid"]
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
            labels = spec["template"]["metadata"].setdefault("labels", {})
            labels.update({
                "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                "controller-uid": uid, "job-name": name,
            })
    else:
        if not spec.get("selector"):
            causes.append(("spec.selector", "Required value"))
        _default_template(kind, name, spec.get("template"), "spec.template", causes)
        if spec.get("selector") and isinstance(spec.get("template"), dict) and not _selector_matches_template(spec["selector"], spec["template"]):
            causes.append(("spec.template.metadata.labels", "Invalid value: `selector` does not match template `labels`"))
        spec.setdefault("replicas", 1)
        if not isinstance(spec["replicas"], int) or spec["replicas"] < 0:
            causes.append(("spec.replicas", f"Invalid value: {spec['replicas']!r}: must be greater than or equal to 0"))
        if res is not REPLICASETS:
            spec.setdefault("revisionHistoryLimit", 10)
        if res is STATEFULSETS:
            spec.setdefault("podManagementPolicy", "OrderedReady")
            spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
            spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})
        if res is DEPLOYMENTS:
            spec.setdefault("strategy", {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
            spec.setdefault("progressDeadlineSeconds", 600)
        if res in (REPLICASETS, STATEFULSETS):
            status.setdefault("replicas", 0)
    if causes:
        raise _invalid(kind, name, causes)


_MUTABLE_POD_SPEC = ("activeDeadlineSeconds", "tolerations", "schedulingGates", "terminationGracePeriodSeconds")


_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _validate_pod_group(obj: dict, old: dict | None) -> None:
    """The PodGroup CRD's structural schema (types only; KAI's webhook rules are not emulated)."""
    name = obj["metadata"]["name"]
    spec = obj.setdefault("spec", {})
    causes: list[tuple[str, str]] = []
    if not isinstance(spec, dict):
        raise _invalid("PodGroup", name, [("spec", "Invalid value: spec in body must be of type object")])
    for key in ("minMember", "minSubGroup"):
        v = spec.get(key)
        if v is not None and not _is_int(v):
            causes.append((f"spec.{key}", f"Invalid value: {v!r}: spec.{key} in body must be of type integer"))
    for key in ("queue", "priorityClassName"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            causes.append((f"spec.{key}", f"Invalid value: spec.{key} in body must be of type string"))
    if spec.get("topologyConstraint") is not None and not isinstance(spec["topologyConstraint"], dict):
        causes.append(("spec.topologyConstraint", "Invalid value: spec.topologyConstraint in body must be of type object"))
    sgs = spec.get("subGroups")
    if sgs is not None and not isinstance(sgs, list):
        causes.append(("spec.subGroups", "Invalid value: spec.subGroups in body must be of type array"))
    for i, g in enumerate(sgs if isinstance(sgs, list) else []):
        where = f"spec.subGroups[{i}]"
        if not isinstance(g, dict):
            causes.append((where, "Invalid value: must be of type object"))
            continue
        if not isinstance(g.get("name"), str) or not g["name"]:
            causes.append((f"{where}.name", "Required value"))
        if g.get("parent") is not None and not isinstance(g["parent"], str):
            causes.append((f"{where}.parent", "Invalid value: must be of type string"))
        for key in ("minMember", "minSubGroup"):
            if g.get(key) is not None and not _is_int(g[key]):
                causes.append((f"{where}.{key}", "Invalid value: must be of type integer"))
        if g.get("topologyConstraint") is not None and not isinstance(g["topologyConstraint"], dict):
            causes.append((f"{where}.topologyConstraint", "Invalid value: must be of type object"))
    if causes:
        raise _invalid("PodGroup", name, causes)


def _validate_device_class(obj: dict, old: dict | None) -> None:
    name = obj["metadata"]["name"]
    spec = obj.setdefault("spec", {})
    causes: list[tuple[str, str]] = []
    if not isinstance(spec, dict):
        raise _invalid("DeviceClass", name, [("spec", "Invalid value: must be an object")])
    sels = spec.get("selectors") or []
    if not isinstance(sels, list) or len(sels) > 32:
        causes.append(("spec.selectors", "Invalid value: must be a list of at most 32 selectors"))
    else:
        for i, sel in enumerate(sels):
            expr = _deep(sel, "cel.expression") if isinstance(sel, dict) else None
            if not isinstance(expr, str) or not expr.strip():
                causes.append((f"spec.selectors[{i}].cel.expression", "Required value"))
    ern = spec.get("extendedResourceName")
    if ern is not None and (not isinstance(ern, str) or not ern):
        causes.append(("spec.extendedResourceName", "Invalid value: must be a resource name"))
    if causes:
        raise _invalid("DeviceClass", name, causes)


def _validate_resource_slice(obj: dict, old: dict | None) -> None:
    name = obj["metadata"]["name"]
    spec = obj.get("spec")
    causes: list[tuple[str, str]] = []
    if not isinstance(spec, dict):
        raise _invalid("ResourceSlice", name, [("spec.driver", "Required value")])
    driver = spec.get("driver")
    if not isinstance(driver, str) or not _DNS1123_SUBDOMAIN.match(driver) or len(driver) > 63:
        causes.append(("spec.driver", "Required value: a DNS subdomain of at most 63 characters"))
    pool = spec.get("pool")
    if not isinstance(pool, dict) or not isinstance(pool.get("name"), str) or not pool["name"]:
        causes.append(("spec.pool.name", "Required value"))
    else:
        if not _is_int(pool.get("generation")) or pool["generation"] < 0:
            causes.append(("spec.pool.generation", "Invalid value: must be greater than or equal to 0"))
        if not _is_int(pool.get("resourceSliceCount")) or pool["resourceSliceCount"] < 1:
            causes.append(("spec.pool.resourceSliceCount", "Invalid value: must be greater than zero"))
    where = [k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k) not in (None, "", False)]
    if len(where) != 1:
        causes.append(("spec", "Invalid value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
                               "`perDeviceNodeSelection` is required"))
    devices = spec.get("devices") or []
    if not isinstance(devices, list) or len(devices) > 128:
        causes.append(("spec.devices", "Too many: must have at most 128 items"))
    else:
        seen: set[str] = set()
        for i, d in enumerate(devices):
            dn = d.get("name") if isinstance(d, dict) else None
            if not isinstance(dn, str) or not _DNS1123_LABEL.match(dn) or len(dn) > 63:
                causes.append((f"spec.devices[{i}].name", "Invalid value: must be a DNS label"))
            elif dn in seen:
                causes.append((f"spec.devices[{i}].name", f"Duplicate value: {dn!r}"))
            else:
                seen.add(dn)
    if old is not None and _deep(old, "spec.driver") != driver:
        causes.append(("spec.driver", "Invalid value: field is immutable"))
    if causes:
        raise _invalid("ResourceSlice", name, causes)


def _validate_resource_claim(obj: dict, old: dict | None) -> None:
    """Defaults (allocationMode ExactCount, count 1) and validation of a claim's spec; the spec is
    immutable once created."""
    name = obj["metadata"]["name"]
    spec = obj.get("spec")
    causes: list[tuple[str, str]] = []
    if not isinstance(spec, dict):
        raise _invalid("ResourceClaim", name, [("spec", "Required value")])
    requests = _deep(spec, "devices.requests")
    if requests is None:
        requests = []
    if not isinstance(requests, list) or len(requests) > 32:
        causes.append(("spec.devices.requests", "Too many: must have at most 32 items"))
        requests = []
    seen: set[str] = set()
    for i, r in enumerate(requests):
        where = f"spec.devices.requests[{i}]"
        rn = r.get("name") if isinstance(r, dict) else None
        if not isinstance(rn, str) or not _DNS1123_LABEL.match(rn):
            causes.append((f"{where}.name", "Invalid value: must be a DNS label"))
            continue
        if rn in seen:
            causes.append((f"{where}.name", f"Duplicate value: {rn!r}"))
        seen.add(rn)
        ex = r.get("exactly")
        if not isinstance(ex, dict):
            causes.append((f"{where}.exactly", "Required value: exactly one of `exactly` or `firstAvailable` is required"))
            continue
        if not isinstance(ex.get("deviceClassName"), str) or not ex["deviceClassName"]:
            causes.append((f"{where}.exactly.deviceClassName", "Required value"))
        mode = ex.setdefault("allocationMode", "ExactCount")
        if mode == "ExactCount":
            n = ex.setdefault("count", 1)
            if not _is_int(n) or n < 1:
                causes.append((f"{where}.exactly.count", f"Invalid value: {n!r}: must be greater than zero"))
        elif mode != "All":
            causes.append((f"{where}.exactly.allocationMode", f'Unsupported value: {mode!r}: supported values: "All", "ExactCount"'))
    if old is not None and old.get("spec") != spec:
        causes.append(("spec", "Invalid value: field is immutable"))
    if causes:
        raise _invalid("ResourceClaim", name, causes)


def _validate_claim_status(new: dict, old: dict) -> None:
    """Status rules of a ResourceClaim: ``allocation`` is set once (cleared only when nothing reserves
    the claim), its results name the claim's requests; ``reservedFor`` needs an allocation, at most 256
    unique consumers."""
    name = new["metadata"]["name"]
    st = new.get("status") or {}
    ost = old.get("status") or {}
    causes: list[tuple[str, str]] = []
    alloc, oalloc = st.get("allocation"), ost.get("allocation")
    if oalloc and alloc and alloc != oalloc:
        causes.append(("status.allocation", "Invalid value: field is immutable"))
    requests = {r.get("name") for r in _deep(new, "spec.devices.requests", []) or [] if isinstance(r, dict)}
    if alloc:
        results = _deep(alloc, "devices.results", [])
        if not isinstance(results, list):
            causes.append(("status.allocation.devices.results", "Invalid value: must be a list"))
            results = []
        for i, res in enumerate(results):
            where = f"status.allocation.devices.results[{i}]"
            if not isinstance(res, dict):
                causes.append((where, "Invalid value: must be an object"))
                continue
            if res.get("request") not in requests:
                causes.append((f"{where}.request", f"Invalid value: {res.get('request')!r}: must be the name of a request "
                                                  "in the claim"))
            for key in ("driver", "pool", "device"):
                if not isinstance(res.get(key), str) or not res[key]:
                    causes.append((f"{where}.{key}", "Required value"))
    reserved = st.get("reservedFor") or []
    if not isinstance(reserved, list) or len(reserved) > 256:
        causes.append(("status.reservedFor", "Too many: must have at most 256 items"))
        reserved = []
    uids: set[str] = set()
    for i, ref in enumerate(reserved):
        if not isinstance(ref, dict) or not ref.get("resource") or not ref.get("name") or not ref.get("uid"):
            causes.append((f"status.reservedFor[{i}]", "Required value: resource, name and uid"))
            continue
        if ref["uid"] in uids:
            causes.append((f"status.reservedFor[{i}].uid", f"Duplicate value: {ref['uid']!r}"))
        uids.add(ref["uid"])
    if reserved and not alloc:
        causes.append(("status.reservedFor", "Forbidden: may not be specified when `allocated` is not set"))
    if causes:
        raise _invalid("ResourceClaim", name, causes)


_VALIDATORS: dict[str, Callable[[dict, dict | None], None]] = {
    "podgroups": _validate_pod_group, "deviceclasses": _validate_device_class,
    "resourceslices": _validate_resource_slice, "resourceclaims": _validate_resource_claim,
}


def _check_pod_update(old: dict, new: dict) -> None:
    """Pod spec is immutable apart from images, activeDeadlineSeconds, added tolerations, removed gates."""
    name = old["metadata"]["name"]
    o, n = copy.deepcopy(old.get("spec") or {}), copy.deepcopy(new.get("spec") or {})
    if not isinstance(n, dict):
        raise _invalid("Pod", name, [("spec", "Invalid value: must be an object")])
    for spec in (o, n):
        for key in _MUTABLE_POD_SPEC:
            spec.pop(key, None)
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            if isinstance(c, dict):
                c.pop("image", None)
    if o != n:
        raise _invalid(
            "Pod", name,
            [("spec", "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
              "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to "
              "existing tolerations), `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
              "previously negative)")],
        )
    old_gates = {g.get("name") for g in _deep(old, "spec.schedulingGates", []) or []}
    new_gates = {g.get("name") for g in _deep(new, "spec.schedulingGates", []) or []}
    if new_gates - old_gates:
        raise _invalid("Pod", name, [("spec.schedulingGates", "Forbidden: only deletion is allowed, but found new scheduling gate")])
    old_tol = _deep(old, "spec.tolerations", []) or []
    new_tol = _deep(new, "spec.tolerations", []) or []
    if any(t not in new_tol for t in old_tol):
        raise _invalid("Pod", name, [("spec.tolerations", "Forbidden: existing toleration can not be modified except its tolerationSeconds")])
    if _deep(old, "spec.terminationGracePeriodSeconds") != _deep(new, "spec.terminationGracePeriodSeconds"):
        raise _invalid("Pod", name, [("spec.terminationGracePeriodSeconds", "Forbidden: pod updates may not change this field")])


def _validate_event(ev: dict, res: _Resource, now: float, *, update: bool = False) -> None:
    name = ev["metadata"].get("name", "")
    causes = []
    inv = ev.get("involvedObject")
    if res.group:  # events.k8s.io/v1 is strict about the new fields
        if not ev.get("eventTime"):
            causes.append(("eventTime", "Required value"))
        if not ev.get("reportingComponent"):
            causes.append(("reportingController", "Required value"))
        if not ev.get("reportingInstance"):
            causes.append(("reportingInstance", "Required value"))
        if not ev.get("action"):
            causes.append(("action", "Required value"))
        if not ev.get("reason"):
            causes.append(("reason", "Required value"))
        if ev.get("type") not in ("Normal", "Warning"):
            causes.append(("type", f"Unsupported value: {ev.get('type')!r}: supported values: \"Normal\", \"Warning\""))
        if len(ev.get("message") or "") > 1024:
            causes.append(("note", "Too long: may not be longer than 1024"))
    if not isinstance(inv, dict):
        causes.append(("regarding" if res.group else "involvedObject", "Required value"))
    elif inv.get("namespace") and inv["namespace"] != ev["metadata"].get("namespace"):
        causes.append(("involvedObject.namespace", "Invalid value: does not match event.namespace"))
    if causes:
        raise _invalid("Event", name, causes)
    if not update:
        if not ev.get("eventTime") and not ev.get("firstTimestamp"):
            ev["firstTimestamp"] = _rfc3339(now)
            ev["lastTimestamp"] = _rfc3339(now)
        if not ev.get("eventTime"):
            ev.setdefault("count", 1)
        ev.setdefault("reportingComponent", "")
        ev.setdefault("reportingInstance", "")
        ev.setdefault("source", {})


# --------------------------------------------------------------------------------------------------
# Table output (what kubectl asks for with Accept: application/json;as=Table;g=meta.k8s.io;v=v1)
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m queues_app.kube.emulator", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8765, help="TCP port on 127.0.0.1 (0 = any free port)")
    parser.add_argument("--kubeconfig", help="write a kubeconfig for the emulator to this path")
    parser.add_argument("--context", default="kai-emulator", help="context name in the kubeconfig")
    parser.add_argument("--nodes", type=int, default=0, help="register this many GPU nodes (node-1 ... node-N)")
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--pod-gc-seconds", type=float, default=40.0, help="orphaned-pod GC delay (kube default 40)")
    parser.add_argument("--kubelet-start-seconds", type=float, default=1.0, help="delay before a bound pod runs")
    args = parser.parse_args(argv)
    if args.nodes < 0 or args.gpus_per_node < 0:
        parser.error("--nodes and --gpus-per-node must be >= 0")
    em = KubeEmulator(pod_gc_seconds=args.pod_gc_seconds, kubelet_start_seconds=args.kubelet_start_seconds)
    em.start(port=args.port)
    for i in range(1, args.nodes + 1):
        em.add_node(f"node-{i}", gpus=args.gpus_per_node)
    if args.kubeconfig:
        em.write_kubeconfig(args.kubeconfig, context=args.context)
    em.run_realtime()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"kube emulator listening on {em.url} ({args.nodes} nodes x {args.gpus_per_node} GPUs)"
          + (f"; kubeconfig {args.kubeconfig}" if args.kubeconfig else ""), flush=True)
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        em.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
