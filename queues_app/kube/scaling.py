"""GPU-sharing demand an autoscaler cannot see, and the utility pods that show it (pure: no database,
no API calls; ``queues_app/kube/autoscale.py`` does the I/O).

Why: a pod that shares a GPU asks for it in an annotation (``gpu-fraction`` / ``gpu-memory``), not
in ``resources``, so the Cluster Autoscaler and Karpenter, which size nodes from resource
requests, never add a GPU node for it.  KAI's answer (``cmd/nodescaleadjuster``,
``pkg/nodescaleadjuster/scale_adjuster/calculator.go``) and ours: sum the fractions requested by
the sharing pods that are unschedulable for capacity (``PodScheduled=False/Unschedulable``, which
our dispatcher writes only for capacity -- pods waiting for their queue never count), count a
GPU-memory request as a configurable fraction (the new node's GPU memory is unknown in advance;
default 0.1 GPU per pod), and keep ``ceil(sum)`` utility pods that each request one whole
``nvidia.com/gpu`` with the original pods' placement constraints.

Unlike KAI, which sums all pods into one count and copies the constraints of whichever pods it
creates utility pods for, the demand is grouped by placement constraints (node selector, node
and pod affinity, tolerations): pods that need a node of a different kind each get their own
``ceil(sum)`` of utility pods, so every kind of node that is short is asked for.  Each fraction is
rounded to hundredths before summing, as KAI does (``gpuFractionDecimalRoundingFactor``), and the
sum is kept in integer hundredths (two 0.5 pods make exactly one GPU).
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Iterable, Mapping

from queues_app.errors import ApplicationError
from queues_app.kube import translate
from queues_app.kube.conditions import CONDITION_TYPE, REASON_UNSCHEDULABLE

#: Labels on every utility pod (the adjuster lists its pods by the first).
LABEL_MANAGED = "kai.scheduler/scale-adjust"
LABEL_GROUP = "kai.scheduler/scale-group"
LABEL_APP = "app.kubernetes.io/name"
APP_NAME = "kai-scale-adjust"
#: Which pods a utility pod stands for (``namespace/name`` list, for people reading the cluster).
ANNOTATION_FOR = "kai.scheduler/scale-for"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
CONTAINER = "reserve"
HUNDREDTHS = 100


@dataclass(frozen=True)
class SharingDemand:
    """One unschedulable GPU-sharing pod: what it adds to its placement group."""

    namespace: str
    name: str
    hundredths: int  # GPU fraction in hundredths (50 = half a GPU)
    cpu_millis: int
    memory_bytes: int
    constraints: dict[str, Any]
    group: str


@dataclass
class Group:
    """Sharing pods with the same placement constraints and the utility pods they need."""

    key: str
    constraints: dict[str, Any]
    hundredths: int = 0
    cpu_millis: int = 0
    memory_bytes: int = 0
    pods: list[str] = field(default_factory=list)

    @property
    def gpus(self) -> int:
        """Utility pods (one whole GPU each) this group needs: ceil of its summed fractions."""
        return -(-self.hundredths // HUNDREDTHS)

    def names(self) -> list[str]:
        return [utility_pod_name(self.key, i) for i in range(self.gpus)]


def _scheduled_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == CONDITION_TYPE:
            return c
    return None


def is_unschedulable(pod: Mapping[str, Any]) -> bool:
    """``PodScheduled`` is ``False`` with reason ``Unschedulable`` (exactly what autoscalers check)."""
    c = _scheduled_condition(pod)
    return bool(c) and c.get("status") == "False" and c.get("reason") == REASON_UNSCHEDULABLE


def _pinned_pod_affinity(terms: Any, namespace: str) -> Any:
    """Pod (anti-)affinity terms select pods in the pod's own namespace unless they name
    namespaces; a utility pod lives elsewhere, so its copies name the original namespace."""
    if not isinstance(terms, list):
        return terms
    out = []
    for term in terms:
        if not isinstance(term, Mapping):
            continue
        t = json.loads(json.dumps(term))
        inner = t.get("podAffinityTerm") if "podAffinityTerm" in t else t
        if isinstance(inner, dict) and not inner.get("namespaces") and inner.get("namespaceSelector") is None:
            inner["namespaces"] = [namespace]
        out.append(t)
    return out


def placement_constraints(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What decides which nodes may run the pod, copied for its utility pods: ``nodeSelector``,
    ``affinity`` (pod affinity terms pinned to the pod's namespace) and ``tolerations`` (the
    not-ready/unreachable tolerations every pod gets from admission are left for admission)."""
    spec = pod.get("spec") or {}
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    out: dict[str, Any] = {}
    if isinstance(spec.get("nodeSelector"), Mapping) and spec["nodeSelector"]:
        out["nodeSelector"] = dict(sorted(spec["nodeSelector"].items()))
    affinity = spec.get("affinity")
    if isinstance(affinity, Mapping):
        aff: dict[str, Any] = {}
        if affinity.get("nodeAffinity"):
            aff["nodeAffinity"] = json.loads(json.dumps(affinity["nodeAffinity"]))
        for kind in ("podAffinity", "podAntiAffinity"):
            block = affinity.get(kind)
            if isinstance(block, Mapping) and block:
                aff[kind] = {k: _pinned_pod_affinity(v, namespace) for k, v in block.items()}
        if aff:
            out["affinity"] = aff
    tolerations = [t for t in spec.get("tolerations") or [] if isinstance(t, Mapping)
                   and t.get("key") not in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")]
    if tolerations:
        out["tolerations"] = sorted((dict(t) for t in tolerations), key=lambda t: json.dumps(t, sort_keys=True))
    return out


def group_key(constraints: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(constraints, sort_keys=True).encode()).hexdigest()[:12]


def utility_pod_name(key: str, index: int) -> str:
    return f"{APP_NAME}-{key}-{index}"


def _hundredths(value: Decimal) -> int:
    """KAI: ``int64(math.Round(fraction * 100))`` (half away from zero)."""
    return int((value * HUNDREDTHS).to_integral_value(rounding="ROUND_HALF_UP"))


def sharing_demand(pod: Mapping[str, Any], *, scheduler_name: str, gpu_memory_fraction: float) -> SharingDemand | None:
    """The demand of one pod, or None if it adds none: not ours, bound, ended, being deleted, not
    GPU-sharing, or not unschedulable for capacity.  A malformed sharing annotation raises
    ``ApplicationError`` naming it (the caller skips the pod and reports it)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if (spec.get("schedulerName") or "default-scheduler") != scheduler_name or spec.get("nodeName"):
        return None
    if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return None
    ann = meta.get("annotations") or {}
    if translate.ANNOTATION_GPU_FRACTION not in ann and translate.ANNOTATION_GPU_MEMORY not in ann:
        return None
    if not is_unschedulable(pod):
        return None
    where = f"pod {meta.get('namespace')}/{meta.get('name')}"
    if translate.ANNOTATION_GPU_FRACTION in ann:
        raw = str(ann[translate.ANNOTATION_GPU_FRACTION]).strip()
        try:
            fraction = Decimal(raw)
        except InvalidOperation:
            fraction = Decimal("NaN")
        if not fraction.is_finite() or not Decimal(0) < fraction <= Decimal(1):
            raise ApplicationError("Invalid GPU sharing request.", extra={
                f"{where} annotation {translate.ANNOTATION_GPU_FRACTION}": [f"{raw!r} must be above 0 and at most 1."]})
    else:
        fraction = Decimal(str(gpu_memory_fraction))
    requests = translate.pod_requests(spec)
    constraints = placement_constraints(pod)
    return SharingDemand(namespace=str(meta.get("namespace") or "default"), name=str(meta.get("name") or ""),
                         hundredths=max(1, _hundredths(fraction)), cpu_millis=int(requests["cpu"]),
                         memory_bytes=int(requests["memory"]), constraints=constraints,
                         group=group_key(constraints))


def demand_groups(demands: Iterable[SharingDemand]) -> dict[str, Group]:
    groups: dict[str, Group] = {}
    for d in demands:
        g = groups.get(d.group)
        if g is None:
            g = groups[d.group] = Group(key=d.group, constraints=d.constraints)
        g.hundredths += d.hundredths
        g.cpu_millis += d.cpu_millis
        g.memory_bytes += d.memory_bytes
        g.pods.append(f"{d.namespace}/{d.name}")
    return groups


def utility_pod(group: Group, index: int, *, namespace: str, image: str, scheduler_name: str) -> dict[str, Any]:
    """One utility pod of ``group``: one whole ``nvidia.com/gpu`` plus its share of the group's cpu
    and memory (so the added node also fits the pods it is for), the group's placement
    constraints, ``karpenter.sh/do-not-disrupt`` (Karpenter must not consolidate the new node away
    before the scheduler places the shared pods on it), scheduled by the default scheduler, no
    service-account token, no grace period (it only holds a place)."""
    n = max(1, group.gpus)
    requests: dict[str, str] = {"nvidia.com/gpu": "1"}
    cpu = math.ceil(group.cpu_millis / n)
    mem = math.ceil(group.memory_bytes / n)
    if cpu:
        requests["cpu"] = f"{cpu}m"
    if mem:
        requests["memory"] = str(mem)
    shown = ",".join(group.pods[:20]) + (f",+{len(group.pods) - 20} more" if len(group.pods) > 20 else "")
    spec: dict[str, Any] = {
        "containers": [{"name": CONTAINER, "image": image, "imagePullPolicy": "IfNotPresent",
                        "resources": {"requests": requests, "limits": {"nvidia.com/gpu": "1"}}}],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    }
    spec.update(json.loads(json.dumps(group.constraints)))
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": utility_pod_name(group.key, index), "namespace": namespace,
            "labels": {LABEL_MANAGED: "true", LABEL_GROUP: group.key, LABEL_APP: APP_NAME},
            "annotations": {DO_NOT_DISRUPT: "true", ANNOTATION_FOR: shown[:2000],
                            "kai.scheduler/scale-gpus": f"{group.hundredths / HUNDREDTHS:g}",
                            "kai.scheduler/scheduler": scheduler_name},
        },
        "spec": spec,
    }


def utility_message(group: Group) -> str:
    return (f"holds a place for one GPU of the {group.hundredths / HUNDREDTHS:g} GPU(s) that {len(group.pods)} "
            f"unschedulable shared-GPU pod(s) need ({group.gpus} utility pod(s) in total)")
