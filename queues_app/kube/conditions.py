"""The ``PodScheduled`` condition we want on a pod the cycle left waiting (pure: no database, no API).

Why it matters: cluster autoscalers decide from this condition alone.  The Kubernetes Cluster
Autoscaler and Karpenter add nodes only for pods whose ``PodScheduled`` condition is ``False``
with reason ``Unschedulable`` (the reason kube-scheduler writes, ``v1.PodReasonUnschedulable``);
any other reason is left alone.  So:

* a pod waiting for **capacity** (no node has room: the engine's ``capacity`` category) gets
  ``False`` / ``Unschedulable`` with the engine's explanation as message, as KAI's status updater
  writes it (``markTaskUnschedulable``) -- an autoscaler may add a node for it;
* a pod waiting for its **queue** gets ``False`` with KAI's own unschedulable reasons
  (``OverLimit``, ``NonPreemptibleOverQuota``, ``pkg/apis/scheduling/v2alpha2``): more nodes
  would not let it start, and autoscalers ignore these reasons;
* a gang still **waiting for its pods** gets ``WaitingForPods``; a workload the cycle could not
  schedule as configured (``invalid``: a queue with child queues, a broken tree) ``NotScheduled``;
* a pod **pipelined** onto resources that victims are releasing gets ``Pipelined`` (it will be
  bound once they are gone; buying a node for it would be a waste);
* once a pod is **bound**, the API server itself sets ``PodScheduled=True`` (the Binding
  subresource does), which clears whatever we wrote.

A condition is compared by its key ``<status>:<reason>:<digest of the message>`` (what
``KubePod.pod_scheduled`` stores as observed), so an unchanged condition is never written again.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Mapping

CONDITION_TYPE = "PodScheduled"
#: ``v1.PodReasonUnschedulable``: the only reason autoscalers act on.
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_PIPELINED = "Pipelined"
#: PendingCategory value -> condition reason.
REASON_BY_CATEGORY = {
    "capacity": REASON_UNSCHEDULABLE,
    "quota": "NonPreemptibleOverQuota",
    "limit": "OverLimit",
    "gang": "WaitingForPods",
    "invalid": "NotScheduled",
}
#: Reasons this control plane writes (a condition with another reason was written by someone else).
OUR_REASONS = frozenset(REASON_BY_CATEGORY.values()) | {REASON_PIPELINED}
#: Longest message written into a condition (the engine's explanations are far shorter; a cap
#: keeps a pathological one from bloating the pod object).
MAX_MESSAGE = 1024


def _digest(message: str) -> str:
    return hashlib.sha256(message.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Condition:
    status: str  # "True" | "False"
    reason: str
    message: str

    @property
    def key(self) -> str:
        return condition_key(self.status, self.reason, self.message)

    def as_payload(self) -> dict[str, str]:
        return {"status": self.status, "reason": self.reason, "message": self.message, "key": self.key}


def condition_key(status: str, reason: str, message: str) -> str:
    """What identifies a condition for "is it already there?" (length-bounded for the DB)."""
    return f"{status}:{reason[:80]}:{_digest(message or '')}"


def _clip(message: str) -> str:
    message = " ".join(str(message or "").split())
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 1] + "\u2026"


def waiting(category: str, message: str) -> Condition:
    """The condition of a pod the cycle left Pending for ``category`` (a PendingCategory value)."""
    reason = REASON_BY_CATEGORY.get(category, REASON_BY_CATEGORY["invalid"])
    return Condition("False", reason, _clip(message))


def pipelined(message: str) -> Condition:
    return Condition("False", REASON_PIPELINED, _clip(message))


def observed_key(pod: Mapping[str, Any] | None) -> str:
    """The key of a pod object's PodScheduled condition ('' when it has none).  Lenient: a
    malformed status never raises (the sync must always be able to follow a pod)."""
    status = (pod or {}).get("status") if isinstance(pod, Mapping) else None
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conditions, list):
        return ""
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") == CONDITION_TYPE:
            return condition_key(str(c.get("status") or ""), str(c.get("reason") or ""), str(c.get("message") or ""))
    return ""


def key_status(key: str) -> str:
    return key.split(":", 1)[0] if key else ""


def key_reason(key: str) -> str:
    parts = key.split(":", 2)
    return parts[1] if len(parts) > 1 else ""
