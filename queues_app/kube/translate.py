"""Pure translation of Kubernetes API objects (JSON dicts, camelCase, as the API server sends
them) into the field values of our rows.

No Django models, no database, no API calls here: the sync services call these, and the unit
tests feed them plain dicts.  Every malformed value raises :class:`ApplicationError` with
``extra`` naming the offending field the way a user would look for it (``pod annotation
gpu-fraction``, ``node allocatable nvidia.com/gpu``), so the event written on the pod tells its
owner exactly what to fix.

Quantities follow the Kubernetes ``resource.Quantity`` grammar: a signed decimal number
followed by a binary-SI suffix (Ki Mi Gi Ti Pi Ei), a decimal-SI suffix (n u m "" k M G T P
E) or a decimal exponent (``e3``, ``E-2``).  cpu and memory are rounded *up* to whole
millicores / bytes, as ``Quantity.MilliValue()`` / ``Value()`` do.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Mapping

from queues_app.errors import ApplicationError
from queues_app.kube.conditions import observed_key

GPU_RESOURCE = "nvidia.com/gpu"
#: Pod annotations (KAI Scheduler names).
ANNOTATION_GPU_FRACTION = "gpu-fraction"
ANNOTATION_GPU_MEMORY = "gpu-memory"
ANNOTATION_POD_GROUP = ("pod-group-name", "kai.scheduler/pod-group")
ANNOTATION_MIN_AVAILABLE = "kai.scheduler/min-available"
#: Taint effects that keep new pods off a node (PreferNoSchedule is only a preference).
BLOCKING_TAINT_EFFECTS = ("NoSchedule", "NoExecute")
#: Owner kinds whose replica count is the gang size, and where the count lives in the spec.
OWNER_REPLICA_FIELD = {"Job": "parallelism", "ReplicaSet": "replicas", "StatefulSet": "replicas",
                       "Deployment": "replicas"}

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal(10**3),
            "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12), "P": Decimal(10**15),
            "E": Decimal(10**18)}
_QUANTITY_RE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE])?$")


def _bad(field_name: str, message: str) -> ApplicationError:
    return ApplicationError("Invalid Kubernetes object.", extra={field_name: [message]})


def parse_quantity(value: Any, *, field_name: str) -> Decimal:
    """A Kubernetes quantity (``"500m"``, ``"4Gi"``, ``"1e3"``, ``2``) as an exact Decimal."""
    if isinstance(value, bool) or value is None:
        raise _bad(field_name, f"{value!r} is not a quantity.")
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise _bad(field_name, f"{value!r} is not a finite quantity.")
        value = repr(value) if isinstance(value, float) else str(value)
    if not isinstance(value, str):
        raise _bad(field_name, f"{value!r} is not a quantity.")
    m = _QUANTITY_RE.match(value.strip())
    if not m or len(value) > 64:
        raise _bad(field_name, f"{value!r} is not a Kubernetes quantity (e.g. 500m, 4Gi, 2).")
    number, suffix = Decimal(m.group(1)), m.group(2) or ""
    try:
        if suffix in _BINARY:
            out = number * _BINARY[suffix]
        elif len(suffix) > 1 and suffix[0] in ("e", "E"):
            exp = int(suffix[1:])
            if abs(exp) > 60:
                raise _bad(field_name, f"{value!r}: exponent out of range.")
            out = number.scaleb(exp)
        else:
            out = number * _DECIMAL[suffix]
    except InvalidOperation:
        raise _bad(field_name, f"{value!r} is not a Kubernetes quantity.") from None
    if out < 0:
        raise _bad(field_name, f"{value!r} is negative.")
    return out


def quantity_millis(value: Any, *, field_name: str) -> int:
    """cpu: whole millicores, rounded up (``Quantity.MilliValue``)."""
    return int((parse_quantity(value, field_name=field_name) * 1000).to_integral_value(rounding="ROUND_CEILING"))


def quantity_units(value: Any, *, field_name: str) -> int:
    """memory bytes / device counts: whole units, rounded up (``Quantity.Value``)."""
    return int(parse_quantity(value, field_name=field_name).to_integral_value(rounding="ROUND_CEILING"))


def _integer(value: Any, *, field_name: str) -> int:
    """Extended resources (nvidia.com/gpu) must be whole numbers in Kubernetes."""
    q = parse_quantity(value, field_name=field_name)
    if q != q.to_integral_value():
        raise _bad(field_name, f"{value!r} must be a whole number.")
    return int(q)


def _mapping(obj: Mapping[str, Any] | None, key: str) -> Mapping[str, Any]:
    value = (obj or {}).get(key)
    return value if isinstance(value, Mapping) else {}


def _str_map(value: Any, *, field_name: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise _bad(field_name, "Must map strings to strings.")
    return dict(value)


# ----------------------------------------------------------------------------- metadata


@dataclass(frozen=True)
class Meta:
    name: str
    namespace: str
    uid: str
    resource_version: str
    labels: dict[str, str]
    annotations: dict[str, str]
    deletion_timestamp: str | None
    owner_references: tuple[Mapping[str, Any], ...]


def meta_of(obj: Mapping[str, Any], *, kind: str) -> Meta:
    md = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(md, Mapping):
        raise _bad(f"{kind} metadata", "Missing.")
    name = md.get("name")
    if not isinstance(name, str) or not name:
        raise _bad(f"{kind} metadata.name", "Missing.")
    uid = md.get("uid")
    if not isinstance(uid, str) or not uid:
        raise _bad(f"{kind} metadata.uid", f"{kind} {name!r} has no uid.")
    owners = md.get("ownerReferences") or ()
    if not isinstance(owners, (list, tuple)):
        raise _bad(f"{kind} metadata.ownerReferences", "Must be a list.")
    return Meta(
        name=name, namespace=str(md.get("namespace") or ""), uid=uid,
        resource_version=str(md.get("resourceVersion") or ""),
        labels=_str_map(md.get("labels"), field_name=f"{kind} metadata.labels"),
        annotations=_str_map(md.get("annotations"), field_name=f"{kind} metadata.annotations"),
        deletion_timestamp=md.get("deletionTimestamp") or None,
        owner_references=tuple(o for o in owners if isinstance(o, Mapping)),
    )


def resource_version_of(obj: Mapping[str, Any]) -> str:
    md = obj.get("metadata") if isinstance(obj, Mapping) else None
    return str((md or {}).get("resourceVersion") or "") if isinstance(md, Mapping) else ""


# ----------------------------------------------------------------------------- nodes


@dataclass(frozen=True)
class NodeInfo:
    name: str
    uid: str
    resource_version: str
    taints: list[dict[str, Any]]
    #: Keyword arguments for ``node_upsert``.
    fields: dict[str, Any]


def node_fields(obj: Mapping[str, Any], *, gpu_memory_label: str, default_gpu_memory_mib: int) -> NodeInfo:
    """A Node object -> Node row fields.

    Capacity is ``status.allocatable`` (what pods may use; capacity minus system reserves).
    ``unschedulable``: ``spec.unschedulable`` (cordon) or any NoSchedule / NoExecute taint.
    ``ready``: the ``Ready`` condition is ``True`` (no condition = the kubelet never reported
    = not ready).  GPU memory per device: the ``gpu_memory_label`` (MiB), else the default.
    """
    meta = meta_of(obj, kind="node")
    spec, status = _mapping(obj, "spec"), _mapping(obj, "status")
    alloc = _mapping(status, "allocatable")
    gpus = _integer(alloc[GPU_RESOURCE], field_name=f"node allocatable {GPU_RESOURCE}") if GPU_RESOURCE in alloc else 0
    cpu = quantity_millis(alloc["cpu"], field_name="node allocatable cpu") if "cpu" in alloc else 0
    mem = quantity_units(alloc["memory"], field_name="node allocatable memory") if "memory" in alloc else 0
    taints_raw = spec.get("taints") or []
    if not isinstance(taints_raw, list):
        raise _bad("node spec.taints", "Must be a list.")
    taints = [dict(t) for t in taints_raw if isinstance(t, Mapping)]
    blocked = any(t.get("effect") in BLOCKING_TAINT_EFFECTS for t in taints)
    conditions = status.get("conditions") or []
    ready = any(isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
                for c in conditions) if isinstance(conditions, list) else False
    gpu_memory = default_gpu_memory_mib
    if gpu_memory_label in meta.labels:
        raw = meta.labels[gpu_memory_label].strip()
        if not raw.isdigit():
            raise _bad(f"node label {gpu_memory_label}", f"{raw!r} must be a whole number of MiB.")
        gpu_memory = int(raw)
    return NodeInfo(
        name=meta.name, uid=meta.uid, resource_version=meta.resource_version, taints=taints,
        fields=dict(gpus=gpus, cpu_millis=cpu, memory_bytes=mem, labels=meta.labels,
                    unschedulable=bool(spec.get("unschedulable")) or blocked, ready=ready,
                    gpu_memory_mib=gpu_memory),
    )


# ----------------------------------------------------------------------------- pods


@dataclass(frozen=True)
class PodStatus:
    """What changes over a pod's life (the rest of a pod is fixed at creation)."""

    node_name: str
    phase: str
    deleting: bool
    deletion_timestamp: str | None
    #: key of the PodScheduled condition (``conditions.observed_key``; '' = none)
    scheduled: str = ""


@dataclass(frozen=True)
class PodInfo:
    name: str
    namespace: str
    uid: str
    resource_version: str
    scheduler_name: str
    status: PodStatus
    queue: str | None
    #: ``podgroup/<name>``, ``<Kind>/<owner name>`` or ``pod/<name>``.
    group: str
    #: The controller owner reference (kind, name, uid, apiVersion) when the pod has one.
    owner: Mapping[str, Any] | None
    #: Gang size from the annotation (None: ask the owner, else 1).
    min_available: int | None
    priority: int | None
    #: Task fields: gpu (Decimal), gpu_memory_mib, cpu_millis, memory_bytes, node_selector.
    task: dict[str, Any] = field(default_factory=dict)


def pod_status(obj: Mapping[str, Any]) -> PodStatus:
    """Lenient: never raises, so a pod we already track can always follow the cluster."""
    spec, status = _mapping(obj, "spec"), _mapping(obj, "status")
    md = _mapping(obj, "metadata")
    deletion = md.get("deletionTimestamp") or None
    node = spec.get("nodeName")
    return PodStatus(node_name=node if isinstance(node, str) else "", phase=str(status.get("phase") or "Pending"),
                     deleting=deletion is not None, deletion_timestamp=deletion, scheduled=observed_key(obj))


def _container_requests(container: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """Requests of one container; a resource with only a limit is requested at its limit
    (the API server's defaulting, and the only way to ask for extended resources)."""
    res = _mapping(container, "resources")
    requests = dict(_mapping(res, "limits"))
    requests.update(_mapping(res, "requests"))
    name = container.get("name") or "?"
    out = {"cpu": 0, "memory": 0, "gpu": 0}
    if "cpu" in requests:
        out["cpu"] = quantity_millis(requests["cpu"], field_name=f"pod {where} {name} resources cpu")
    if "memory" in requests:
        out["memory"] = quantity_units(requests["memory"], field_name=f"pod {where} {name} resources memory")
    if GPU_RESOURCE in requests:
        out["gpu"] = _integer(requests[GPU_RESOURCE], field_name=f"pod {where} {name} resources {GPU_RESOURCE}")
    return out


def pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """Effective pod requests, as the Kubernetes scheduler computes them: the sum over
    containers and restartable (sidecar) init containers, at least the largest regular init
    container plus the sidecars started before it, plus ``spec.overhead``."""
    keys = ("cpu", "memory", "gpu")
    containers = spec.get("containers") or []
    inits = spec.get("initContainers") or []
    if not isinstance(containers, list) or not isinstance(inits, list):
        raise _bad("pod spec.containers", "Must be a list.")
    total = dict.fromkeys(keys, 0)
    for c in containers:
        if isinstance(c, Mapping):
            r = _container_requests(c, where="container")
            for k in keys:
                total[k] += r[k]
    sidecars = dict.fromkeys(keys, 0)
    init_peak = dict.fromkeys(keys, 0)
    for c in inits:
        if not isinstance(c, Mapping):
            continue
        r = _container_requests(c, where="initContainer")
        if c.get("restartPolicy") == "Always":
            for k in keys:
                sidecars[k] += r[k]
                init_peak[k] = max(init_peak[k], sidecars[k])
        else:
            for k in keys:
                init_peak[k] = max(init_peak[k], r[k] + sidecars[k])
    out = {k: max(total[k] + sidecars[k], init_peak[k]) for k in keys}
    overhead = _mapping(spec, "overhead")
    if "cpu" in overhead:
        out["cpu"] += quantity_millis(overhead["cpu"], field_name="pod spec.overhead cpu")
    if "memory" in overhead:
        out["memory"] += quantity_units(overhead["memory"], field_name="pod spec.overhead memory")
    return out


def controller_owner(owners: tuple[Mapping[str, Any], ...]) -> Mapping[str, Any] | None:
    """The owner reference with ``controller: true`` (at most one per object), else none."""
    for o in owners:
        if o.get("controller") and o.get("kind") and o.get("name"):
            return o
    return None


def _group_name(annotations: Mapping[str, str]) -> str | None:
    for key in ANNOTATION_POD_GROUP:
        value = (annotations.get(key) or "").strip()
        if value:
            return value
    return None


def pod_fields(obj: Mapping[str, Any], *, queue_label: str) -> PodInfo:
    """A Pod object -> what the sync needs to create its task (raises on malformed input)."""
    meta = meta_of(obj, kind="pod")
    spec = _mapping(obj, "spec")
    ann = meta.annotations
    req = pod_requests(spec)
    gpu: Decimal = Decimal(req["gpu"])
    gpu_memory: int | None = None
    if ANNOTATION_GPU_FRACTION in ann:
        if req["gpu"]:
            raise _bad(f"pod annotation {ANNOTATION_GPU_FRACTION}",
                       f"Give either the annotation or a {GPU_RESOURCE} request, not both.")
        raw = ann[ANNOTATION_GPU_FRACTION].strip()
        try:
            gpu = Decimal(raw)
        except InvalidOperation:
            raise _bad(f"pod annotation {ANNOTATION_GPU_FRACTION}", f"{raw!r} is not a number.") from None
        if not gpu.is_finite() or not Decimal(0) < gpu <= Decimal(1):
            raise _bad(f"pod annotation {ANNOTATION_GPU_FRACTION}", f"{raw!r} must be above 0 and at most 1.")
        if gpu.as_tuple().exponent < -4:
            raise _bad(f"pod annotation {ANNOTATION_GPU_FRACTION}", f"{raw!r}: at most 4 decimal places.")
    if ANNOTATION_GPU_MEMORY in ann:
        if req["gpu"] or ANNOTATION_GPU_FRACTION in ann:
            raise _bad(f"pod annotation {ANNOTATION_GPU_MEMORY}",
                       f"Give one of {ANNOTATION_GPU_MEMORY}, {ANNOTATION_GPU_FRACTION} or a {GPU_RESOURCE} request.")
        raw = ann[ANNOTATION_GPU_MEMORY].strip()
        if not raw.isdigit() or int(raw) == 0:
            raise _bad(f"pod annotation {ANNOTATION_GPU_MEMORY}", f"{raw!r} must be a positive whole number of MiB.")
        gpu, gpu_memory = Decimal(0), int(raw)
    min_available = None
    if ANNOTATION_MIN_AVAILABLE in ann:
        raw = ann[ANNOTATION_MIN_AVAILABLE].strip()
        if not raw.isdigit() or int(raw) == 0:
            raise _bad(f"pod annotation {ANNOTATION_MIN_AVAILABLE}", f"{raw!r} must be a positive whole number.")
        min_available = int(raw)
    priority = spec.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise _bad("pod spec.priority", f"{priority!r} must be an integer.")
    group_name = _group_name(ann)
    owner = controller_owner(meta.owner_references)
    if group_name:
        group = f"podgroup/{group_name}"
    elif owner is not None:
        group = f"{owner['kind']}/{owner['name']}"
    else:
        group = f"pod/{meta.name}"
    queue = (meta.labels.get(queue_label) or "").strip() or None
    return PodInfo(
        name=meta.name, namespace=meta.namespace or "default", uid=meta.uid, resource_version=meta.resource_version,
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"), status=pod_status(obj), queue=queue,
        group=group, owner=owner, min_available=min_available, priority=priority,
        task=dict(gpu=gpu, gpu_memory_mib=gpu_memory, cpu_millis=req["cpu"], memory_bytes=req["memory"],
                  node_selector=_str_map(spec.get("nodeSelector"), field_name="pod spec.nodeSelector")),
    )


def owner_replicas(owner_obj: Mapping[str, Any]) -> int | None:
    """The gang size an owner controller asks for: Job ``spec.parallelism`` (default 1),
    ReplicaSet / StatefulSet / Deployment ``spec.replicas`` (default 1); other kinds: None."""
    kind = owner_obj.get("kind")
    key = OWNER_REPLICA_FIELD.get(kind) if isinstance(kind, str) else None
    if key is None:
        return None
    value = _mapping(owner_obj, "spec").get(key)
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(f"{kind.lower()} spec.{key}", f"{value!r} must be a non-negative integer.")
    return max(1, value)


@dataclass(frozen=True)
class OwnerInfo:
    """What the sync resolved about a pod's top controller (the API lookups are not pure, so
    the reflector does them and hands the result to the service)."""

    #: ``<Kind>/<name>`` of the top owner (the workload's group key).
    group: str
    owner_uid: str = ""
    #: The owner's replica count (gang size when the pod has no annotation); None = unknown.
    replicas: int | None = None


# ----------------------------------------------------------------------------- PodGroups (KAI)

#: Pod label naming the leaf subgroup of the pod's PodGroup (KAI hierarchical PodGroups).
LABEL_SUBGROUP = "kai.scheduler/subgroup-name"
_CEL_DRIVER_RE = re.compile(r"""^\s*device\.driver\s*==\s*(?:"([^"]+)"|'([^']+)')\s*$""")


def _opt_int(value: Any, *, field_name: str, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _bad(field_name, f"{value!r} must be a whole number >= {minimum}.")
    return value


def _topology(tc: Any, *, field_name: str) -> tuple[str, str]:
    """``topologyConstraint`` -> (required level, preferred level): KAI names a level of its Topology
    by the node label it groups nodes on, which is what the engine's domains use."""
    if tc is None:
        return "", ""
    if not isinstance(tc, Mapping):
        raise _bad(field_name, "Must be an object.")
    req, pref = tc.get("requiredTopologyLevel") or "", tc.get("preferredTopologyLevel") or ""
    if not isinstance(req, str) or not isinstance(pref, str):
        raise _bad(field_name, "Topology levels must be node label keys (strings).")
    return req, pref


@dataclass(frozen=True)
class PodGroupInfo:
    """A PodGroup (``scheduling.run.ai/v2alpha2``) as workload fields: the gang of a job whose pods
    carry its name in the ``pod-group-name`` annotation."""

    name: str
    namespace: str
    uid: str
    resource_version: str
    min_member: int | None
    min_sub_groups: int | None
    topology_required: str
    topology_preferred: str
    #: ``workload_submit``-style subgroup specs (name, parent, min_available / min_sub_groups,
    #: topology), in spec order
    sub_groups: list[dict[str, Any]] = field(default_factory=list)


def pod_group_fields(obj: Mapping[str, Any]) -> PodGroupInfo:
    """A PodGroup -> its gang: ``minMember`` (flat gang), or ``subGroups`` with ``minSubGroup`` (a
    tree: leaves with ``minMember``, mid-level subgroups with ``minSubGroup``, each with its
    ``topologyConstraint``). The tree's own rules are the engine's (checked when it is stored)."""
    meta = meta_of(obj, kind="podgroup")
    spec = _mapping(obj, "spec")
    min_member = _opt_int(spec.get("minMember"), field_name="podgroup spec.minMember", minimum=0)
    min_sub = _opt_int(spec.get("minSubGroup"), field_name="podgroup spec.minSubGroup", minimum=1)
    req, pref = _topology(spec.get("topologyConstraint"), field_name="podgroup spec.topologyConstraint")
    raw = spec.get("subGroups") or []
    if not isinstance(raw, list):
        raise _bad("podgroup spec.subGroups", "Must be a list.")
    parents = {g.get("parent") for g in raw if isinstance(g, Mapping) and g.get("parent")}
    groups = []
    for i, g in enumerate(raw):
        where = f"podgroup spec.subGroups[{i}]"
        if not isinstance(g, Mapping) or not isinstance(g.get("name"), str) or not g["name"]:
            raise _bad(f"{where}.name", "Required.")
        sreq, spref = _topology(g.get("topologyConstraint"), field_name=f"{where}.topologyConstraint")
        mm = _opt_int(g.get("minMember"), field_name=f"{where}.minMember", minimum=0)
        ms = _opt_int(g.get("minSubGroup"), field_name=f"{where}.minSubGroup", minimum=1)
        entry: dict[str, Any] = {"name": g["name"], "parent": g.get("parent") or None,
                                 "topology_required": sreq, "topology_preferred": spref}
        if g["name"] in parents:
            entry["min_sub_groups"] = ms
            if mm is not None:
                entry["min_available"] = mm  # refused by the engine's rules with its field named
        else:
            entry["min_available"] = mm if mm is not None else 0  # KAI: a leaf without minMember needs none
            if ms is not None:
                entry["min_sub_groups"] = ms
        groups.append(entry)
    return PodGroupInfo(name=meta.name, namespace=meta.namespace or "default", uid=meta.uid,
                        resource_version=meta.resource_version, min_member=min_member,
                        min_sub_groups=min_sub if groups else None, topology_required=req,
                        topology_preferred=pref, sub_groups=groups)


# ----------------------------------------------------------------------------- dynamic resource allocation

#: KAI's ``IsGPUDeviceClass``-style extended resource for GPUs.
GPU_EXTENDED_RESOURCE = GPU_RESOURCE


@dataclass(frozen=True)
class DeviceClassInfo:
    name: str
    #: the DRA driver whose devices it selects (a ``device.driver == "..."`` selector; else its name)
    driver: str
    counts_as: str  # "gpu" when its extended resource name is nvidia.com/gpu, else "" (decided by name)


def device_class_fields(obj: Mapping[str, Any]) -> DeviceClassInfo:
    meta = meta_of(obj, kind="deviceclass")
    spec = _mapping(obj, "spec")
    driver = meta.name
    for sel in spec.get("selectors") or []:
        expr = (_mapping(sel, "cel").get("expression") if isinstance(sel, Mapping) else None) or ""
        m = _CEL_DRIVER_RE.match(expr) if isinstance(expr, str) else None
        if m:
            driver = m.group(1) or m.group(2)
            break
    counts_as = "gpu" if spec.get("extendedResourceName") == GPU_EXTENDED_RESOURCE else ""
    return DeviceClassInfo(name=meta.name, driver=driver, counts_as=counts_as)


@dataclass(frozen=True)
class ResourceSliceInfo:
    name: str
    uid: str
    node_name: str  # "" for slices not tied to one node (nodeSelector / allNodes): not used
    driver: str
    pool: str
    devices: tuple[str, ...]


def resource_slice_fields(obj: Mapping[str, Any]) -> ResourceSliceInfo:
    meta = meta_of(obj, kind="resourceslice")
    spec = _mapping(obj, "spec")
    node = spec.get("nodeName") or ""
    names = tuple(str(d.get("name")) for d in spec.get("devices") or [] if isinstance(d, Mapping) and d.get("name"))
    return ResourceSliceInfo(name=meta.name, uid=meta.uid, node_name=node if isinstance(node, str) else "",
                             driver=str(spec.get("driver") or ""), pool=str(_mapping(spec, "pool").get("name") or ""),
                             devices=names)


@dataclass(frozen=True)
class ResourceClaimInfo:
    name: str
    namespace: str
    uid: str
    resource_version: str
    #: (request name, device class, count) of every ``exactly`` request; "All" counts as one device
    #: (KAI's bookkeeping of ``countGPUDevicesFromClaim``)
    requests: tuple[tuple[str, str, int], ...]
    #: (request, driver, pool, device) of its allocation (empty: not allocated)
    allocation: tuple[tuple[str, str, str, str], ...]
    reserved_for: tuple[str, ...]  # pod uids


def resource_claim_fields(obj: Mapping[str, Any]) -> ResourceClaimInfo:
    meta = meta_of(obj, kind="resourceclaim")
    reqs = []
    for i, r in enumerate(_mapping(_mapping(obj, "spec"), "devices").get("requests") or []):
        if not isinstance(r, Mapping):
            continue
        ex = _mapping(r, "exactly")
        if not ex:  # firstAvailable: the first alternative (prioritized lists are not scheduled here)
            alts = r.get("firstAvailable") or []
            ex = alts[0] if alts and isinstance(alts[0], Mapping) else {}
        cls = ex.get("deviceClassName")
        if not isinstance(cls, str) or not cls:
            raise _bad(f"resourceclaim spec.devices.requests[{i}].exactly.deviceClassName", "Required.")
        count = ex.get("count", 1) if ex.get("allocationMode", "ExactCount") == "ExactCount" else 1
        reqs.append((str(r.get("name") or f"request-{i}"), cls,
                     _opt_int(count, field_name=f"resourceclaim spec.devices.requests[{i}].exactly.count", minimum=1)))
    status = _mapping(obj, "status")
    results = _mapping(_mapping(status, "allocation"), "devices").get("results") or []
    alloc = tuple((str(x.get("request") or ""), str(x.get("driver") or ""), str(x.get("pool") or ""),
                   str(x.get("device") or "")) for x in results if isinstance(x, Mapping))
    reserved = tuple(str(x.get("uid") or "") for x in status.get("reservedFor") or [] if isinstance(x, Mapping))
    return ResourceClaimInfo(name=meta.name, namespace=meta.namespace or "default", uid=meta.uid,
                             resource_version=meta.resource_version, requests=tuple(reqs), allocation=alloc,
                             reserved_for=reserved)


def pod_claim_refs(obj: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A pod's ResourceClaims: (name in the pod, ResourceClaim object name) for each
    ``spec.resourceClaims`` entry (a template's claim is named in ``status.resourceClaimStatuses``;
    until then its object name is '')."""
    spec, status = _mapping(obj, "spec"), _mapping(obj, "status")
    made = {s.get("name"): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []
            if isinstance(s, Mapping)}
    out = []
    for rc in spec.get("resourceClaims") or []:
        if not isinstance(rc, Mapping) or not rc.get("name"):
            continue
        out.append((str(rc["name"]), str(rc.get("resourceClaimName") or made.get(rc["name"]) or "")))
    return out
