"""Choice sets shared by models, services, the API and the engine boundary."""
from __future__ import annotations

from django.db import models


class Resource(models.TextChoices):
    """The three scheduled resources, in the engine's column order (GPU, CPU, MEM)."""

    GPU = "gpu", "GPU (devices)"
    CPU = "cpu", "CPU (cores)"
    MEMORY = "memory", "Memory (bytes)"


class TaskState(models.TextChoices):
    """Pod states; labels equal the scenario format's status strings."""

    PENDING = "Pending"
    RUNNING = "Running"
    RELEASING = "Releasing"
    STUCK_RELEASING = "StuckInReleasing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    BINDING = "Binding"
    PIPELINED = "Pipelined"


#: States in which a task occupies (or is about to occupy) a node: the node FK is required.
TASK_STATES_ON_NODE = (
    TaskState.RUNNING,
    TaskState.RELEASING,
    TaskState.STUCK_RELEASING,
    TaskState.BINDING,
    TaskState.PIPELINED,
)
#: States that may keep the node they ran on, for history only.
TASK_STATES_TERMINAL = (TaskState.SUCCEEDED, TaskState.FAILED)
#: States in which a task holds node resources right now.
TASK_STATES_HOLDING = (TaskState.RUNNING, TaskState.RELEASING, TaskState.STUCK_RELEASING, TaskState.BINDING)


class WorkloadStatus(models.TextChoices):
    """``Binding``: the scheduler placed the gang and issued its binds, but fewer than
    ``min_available`` tasks are confirmed Running yet (the embedded cluster confirms at the
    next cycle, Kubernetes when the pods are observed on their nodes)."""

    PENDING = "Pending"
    BINDING = "Binding"
    RUNNING = "Running"
    RELEASING = "Releasing"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


WORKLOAD_STATUSES_ACTIVE = (WorkloadStatus.PENDING, WorkloadStatus.BINDING, WorkloadStatus.RUNNING,
                            WorkloadStatus.RELEASING)
#: Statuses of a workload that holds (or is being given) its resources.
WORKLOAD_STATUSES_STARTED = (WorkloadStatus.BINDING, WorkloadStatus.RUNNING)


class PendingCategory(models.TextChoices):
    """Why a workload waits (``SchedulingEvent.category``): the engine's categories
    (``scheduler_engine.result.PENDING_CATEGORIES``) plus ``invalid`` for a workload the cycle
    could not give to the engine (a broken queue tree, a workload on a queue with children).
    Only ``capacity`` can be fixed by adding nodes (what cluster autoscaling acts on)."""

    CAPACITY = "capacity", "capacity (no node has room; more nodes would help)"
    QUOTA = "quota", "quota (non-preemptible work over the queue's deserved quota)"
    LIMIT = "limit", "limit (the queue's limit)"
    GANG = "gang", "gang (waiting for the gang's pods)"
    INVALID = "invalid", "invalid (not schedulable as configured)"


class CycleStatus(models.TextChoices):
    RUNNING = "running"
    APPLIED = "applied"
    SKIPPED = "skipped"
    ABORTED = "aborted"
    FAILED = "failed"


class QuotaField(models.TextChoices):
    QUOTA = "quota"
    OVER_QUOTA_WEIGHT = "over_quota_weight"
    LIMIT = "limit"
