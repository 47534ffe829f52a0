"""Models of queues_app, split by entity and re-exported here.

May import: Django, ``queues_app.choices`` / ``constants`` and each other; nothing that reads or
writes rows (services, selectors, the cycle).
"""
from queues_app.models.api import IdempotencyKey
from queues_app.models.cycles import Heartbeat, SchedulerState, SchedulingCycle, SchedulingEvent
from queues_app.models.devices import DeviceClass
from queues_app.models.kube import (
    KubeAutoscaleState,
    KubeLease,
    KubeNode,
    KubeOutbox,
    KubeOutboxKind,
    KubeOutboxStatus,
    KubePod,
    KubePodGroup,
    KubeResourceClaim,
    KubeResourceSlice,
    KubeSyncCursor,
    KubeWorkloadRef,
)
from queues_app.models.nodes import Node
from queues_app.models.queues import Queue, QueueResource, QueueStatus, QuotaChange
from queues_app.models.tenants import Tenant
from queues_app.models.workloads import SubGroup, Task, Workload

__all__ = [
    "DeviceClass",
    "Heartbeat",
    "IdempotencyKey",
    "KubeAutoscaleState",
    "KubeLease",
    "KubeNode",
    "KubeOutbox",
    "KubeOutboxKind",
    "KubeOutboxStatus",
    "KubePod",
    "KubePodGroup",
    "KubeResourceClaim",
    "KubeResourceSlice",
    "KubeSyncCursor",
    "KubeWorkloadRef",
    "Node",
    "Queue",
    "QueueResource",
    "QueueStatus",
    "QuotaChange",
    "SchedulerState",
    "SchedulingCycle",
    "SchedulingEvent",
    "SubGroup",
    "Task",
    "Tenant",
    "Workload",
]
