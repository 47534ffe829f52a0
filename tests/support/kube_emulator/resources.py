"""The resource kinds the emulator serves: URL names, groups, versions, field-selector fields."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .common import _deep
from .selectors import _event_fields, _events_v1_fields, _node_fields, _pod_fields

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
_BY_KIND = {r.store: r for r in (NODES, PODS, EVENTS, *_WORKLOADS, PDBS, PODGROUPS, *_DRA, NAMESPACES)}
_KIND_TO_STORE = {r.kind: r.store for r in (NODES, PODS, *_WORKLOADS, PDBS, PODGROUPS, *_DRA, NAMESPACES)}
