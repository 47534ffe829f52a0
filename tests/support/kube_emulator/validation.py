"""Defaulting and validation of objects as the API server and its admission plugins do them."""
from __future__ import annotations

import copy
import re
import uuid
from typing import Any, Callable, TYPE_CHECKING

from .common import (
    _deep, _DEFAULT_TOLERATIONS, _DNS1123_SUBDOMAIN, _invalid, _NATIVE_RESOURCES, _rfc3339, ApiError,
)
from .resources import CRONJOBS, DEPLOYMENTS, JOBS, REPLICASETS, STATEFULSETS
from .selectors import _Requirement

if TYPE_CHECKING:
    from .resources import _Resource

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
