"""The dispatcher's requests to the Kubernetes API, one function per call, each returning a
:class:`Reply` instead of raising.

Why a reply object: every outcome of a request (2xx, 404, 409, 429, 5xx, a timeout, a dropped
connection) has a defined consequence in ``queues_app.kube.outbox``; classifying
them here keeps the service free of client exception types and keeps this module free of
database code.  Every call goes through the official ``kubernetes`` client with
``_preload_content=False`` (the raw JSON is returned as a dict; it also avoids the client's
known deserialisation failure on Binding responses) and a request timeout.

Real API server behaviour relied on (documented upstream):

* ``POST pods/{name}/binding`` with ``metadata.uid`` = the pod's uid: 201 on success; 409
  Conflict when the pod is already assigned to a node, is being deleted, or its uid differs
  (a recreated pod of the same name); 404 when the pod does not exist.  The API server does
  not check that the target node exists, hence :func:`read_node` before a bind.
* ``POST pods/{name}/eviction`` (policy/v1) with a uid precondition: 201 (the pod is being
  deleted with the given grace period); 404 pod gone; 409 uid precondition failed; 429 the
  eviction would violate a PodDisruptionBudget (retry later).
* ``POST events``: 201; 409 AlreadyExists if the same event name was already created (a retry
  of a request that succeeded but whose reply was lost).
* ``PATCH pods/{name}/status`` (strategic merge patch): 200 with the pod; 409 Conflict when the
  patch's ``metadata.resourceVersion`` is not the pod's current one; 404 when the pod is gone.
"""
from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

#: HTTP statuses after which the same request may succeed later.
TRANSIENT_STATUSES = frozenset({0, 401, 403, 408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Reply:
    """What one request produced.  ``status`` None = no HTTP answer (timeout, connection
    error): the request may or may not have taken effect."""

    status: int | None
    body: dict[str, Any] | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status <= 299

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def transient(self) -> bool:
        """No answer, throttled, server-side trouble or (possibly temporary) auth trouble."""
        return self.status is None or self.status in TRANSIENT_STATUSES or self.status >= 500

    @property
    def unknown_effect(self) -> bool:
        """The request may have taken effect even though it did not report success."""
        return self.status is None or self.status >= 500

    def describe(self) -> str:
        if self.ok:
            return f"HTTP {self.status}"
        if self.status is None:
            return f"no reply: {self.error}"[:2000]
        return f"HTTP {self.status}: {self.error}"[:2000]


def _message(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "")
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    except (TypeError, ValueError):
        pass
    return str(exc.reason or exc.body or "")


def _call(fn: Callable[..., Any], **kwargs: Any) -> Reply:
    try:
        resp = fn(_preload_content=False, **kwargs)
    except ApiException as exc:
        status = int(exc.status or 0)
        return Reply(status=status if status else None, error=_message(exc) or type(exc).__name__)
    except (urllib3.exceptions.HTTPError, OSError, socket.timeout) as exc:
        return Reply(status=None, error=f"{type(exc).__name__}: {exc}")
    raw = resp.data
    body: dict[str, Any] | None = None
    if raw:
        try:
            parsed = json.loads(raw)
            body = parsed if isinstance(parsed, dict) else None
        except ValueError:
            body = None
    return Reply(status=int(resp.status), body=body)


def read_pod(core: k8s.CoreV1Api, *, namespace: str, name: str, timeout: float) -> Reply:
    return _call(core.read_namespaced_pod, name=name, namespace=namespace, _request_timeout=timeout)


def read_node(core: k8s.CoreV1Api, *, name: str, timeout: float) -> Reply:
    return _call(core.read_node, name=name, _request_timeout=timeout)


def bind_pod(core: k8s.CoreV1Api, *, namespace: str, name: str, uid: str, node: str, timeout: float,
             annotations: dict[str, str] | None = None) -> Reply:
    """``annotations`` are set on the pod by the binding itself (the API server copies a
    Binding's annotations onto the pod it binds): no separate pod patch, no window without them."""
    body = k8s.V1Binding(
        api_version="v1", kind="Binding",
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace, uid=uid or None, annotations=annotations or None),
        target=k8s.V1ObjectReference(api_version="v1", kind="Node", name=node),
    )
    return _call(core.create_namespaced_pod_binding, name=name, namespace=namespace, body=body,
                 _request_timeout=timeout)


def read_claim(core: k8s.CoreV1Api, *, namespace: str, name: str, timeout: float) -> Reply:
    """GET a ResourceClaim (``resource.k8s.io/v1``)."""
    res = k8s.ResourceV1Api(core.api_client)
    return _call(res.read_namespaced_resource_claim, name=name, namespace=namespace, _request_timeout=timeout)


def patch_claim_status(core: k8s.CoreV1Api, *, namespace: str, name: str, resource_version: str,
                       allocation: dict[str, Any] | None, reserved_for: list[dict[str, Any]] | None,
                       timeout: float) -> Reply:
    """PATCH resourceclaims/{name}/status: the claim's ``allocation`` and ``reservedFor``, as the
    scheduler's DRA plugin writes them before a bind (a merge patch; ``None`` clears a field).
    ``metadata.resourceVersion`` makes it conditional (409 if the claim changed since it was read).
    RBAC: ``resourceclaims/status`` patch."""
    res = k8s.ResourceV1Api(core.api_client)
    body = {"metadata": {"resourceVersion": resource_version},
            "status": {"allocation": allocation, "reservedFor": reserved_for}}
    return _call(res.patch_namespaced_resource_claim_status, name=name, namespace=namespace, body=body,
                 _request_timeout=timeout)


def evict_pod(core: k8s.CoreV1Api, *, namespace: str, name: str, uid: str, grace_seconds: int | None,
              timeout: float) -> Reply:
    body = k8s.V1Eviction(
        api_version="policy/v1", kind="Eviction",
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
        delete_options=k8s.V1DeleteOptions(
            grace_period_seconds=grace_seconds,
            preconditions=k8s.V1Preconditions(uid=uid) if uid else None,
        ),
    )
    return _call(core.create_namespaced_pod_eviction, name=name, namespace=namespace, body=body,
                 _request_timeout=timeout)


def post_event(core: k8s.CoreV1Api, *, namespace: str, event_name: str, pod_name: str, pod_uid: str,
               reason: str, message: str, event_type: str, component: str, at: datetime, timeout: float) -> Reply:
    """A core/v1 Event on a pod (what ``kubectl describe pod`` shows).  ``event_name`` is
    derived from the outbox row, so a retry of a lost success answers 409 AlreadyExists."""
    body = k8s.CoreV1Event(
        api_version="v1", kind="Event",
        metadata=k8s.V1ObjectMeta(name=event_name, namespace=namespace),
        involved_object=k8s.V1ObjectReference(api_version="v1", kind="Pod", name=pod_name, namespace=namespace,
                                              uid=pod_uid or None),
        reason=reason[:128], message=message[:1024], type=event_type,
        source=k8s.V1EventSource(component=component),
        reporting_component=component, reporting_instance=socket.gethostname()[:128],
        first_timestamp=at, last_timestamp=at, count=1,
    )
    return _call(core.create_namespaced_event, namespace=namespace, body=body, _request_timeout=timeout)


def patch_pod_scheduled(core: k8s.CoreV1Api, *, namespace: str, name: str, resource_version: str, status: str,
                        reason: str, message: str, transition: bool, at: datetime, timeout: float) -> Reply:
    """PATCH pods/{name}/status: the PodScheduled condition, as kube-scheduler writes it.

    A strategic merge patch (``status.conditions`` merge on ``type``, so the kubelet's other
    conditions stay); ``metadata.resourceVersion`` makes it conditional (409 if the pod changed);
    ``lastTransitionTime`` only when the condition's status changes.  RBAC: ``pods/status``
    patch."""
    cond: dict[str, Any] = {"type": "PodScheduled", "status": status, "reason": reason, "message": message,
                            "lastProbeTime": None}
    if transition:
        cond["lastTransitionTime"] = at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    body: dict[str, Any] = {"status": {"conditions": [cond]}}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    return _call(core.patch_namespaced_pod_status, name=name, namespace=namespace, body=body,
                 _content_type="application/strategic-merge-patch+json", _request_timeout=timeout)


def pod_uid(pod: dict[str, Any] | None) -> str:
    return str(((pod or {}).get("metadata") or {}).get("uid") or "")


def pod_node(pod: dict[str, Any] | None) -> str:
    return str(((pod or {}).get("spec") or {}).get("nodeName") or "")


def pod_terminating(pod: dict[str, Any] | None) -> bool:
    meta = (pod or {}).get("metadata") or {}
    phase = ((pod or {}).get("status") or {}).get("phase")
    return bool(meta.get("deletionTimestamp")) or phase in ("Succeeded", "Failed")
