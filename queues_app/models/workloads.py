"""Workloads (gangs of tasks, the scenario's "jobs"), their subgroups and their tasks (pods)."""
from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from queues_app import constants
from queues_app.choices import TASK_STATES_ON_NODE, TaskState, WorkloadStatus
from queues_app.models.validators import (
    name_validator,
    validate_claims,
    validate_device_indices,
    validate_duration_bounds,
    validate_finite,
    validate_gpu_groups,
    validate_label_map,
)

#: The one message for a taken name (the caller's own workload: names are per tenant).
DUPLICATE_NAME_MESSAGE = "You already have a workload with this name in this queue."


class Workload(models.Model):
    """A gang of tasks submitted to one leaf queue.

    ``min_available`` is the gang size (all-or-nothing below it).  ``stale_since`` is when the
    gang fell below ``min_available`` (the scenario's ``staleFor`` = now - stale_since).
    A workload with subgroups (:class:`SubGroup`, KAI's hierarchical PodGroups) is a tree: its leaf
    subgroups have their own ``min_available``, ``min_sub_groups`` says how many of its top-level
    subgroups must be satisfied (null: all), and ``min_available`` holds the fewest tasks that
    satisfy the tree (derived by the engine's rules, for display).
    ``version`` is bumped on every write; the cycle applies decisions only to the version it
    read.
    """

    queue = models.ForeignKey("queues_app.Queue", on_delete=models.PROTECT, related_name="workloads")
    name = models.CharField(max_length=constants.MAX_NAME_LENGTH, validators=[name_validator])
    tenant = models.ForeignKey("queues_app.Tenant", null=True, blank=True, on_delete=models.PROTECT,
                               related_name="workloads", help_text="Empty for operator submissions.")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="workloads")
    priority = models.IntegerField(
        default=50, validators=[MinValueValidator(-constants.MAX_PRIORITY), MaxValueValidator(constants.MAX_PRIORITY)],
        help_text="50 train, 75 interactive-preemptible, 100 build, 125 inference.",
    )
    preemptible = models.BooleanField(default=True)
    min_available = models.PositiveIntegerField(
        default=1, validators=[MaxValueValidator(constants.MAX_TASKS_PER_WORKLOAD)]
    )
    min_sub_groups = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(constants.MAX_SUBGROUPS_PER_WORKLOAD)],
        help_text="With subgroups: how many top-level subgroups must be satisfied (empty: all).")
    topology_required = models.CharField(max_length=constants.MAX_LABEL_LENGTH, blank=True, default="",
                                         help_text="Node label key: all tasks inside one domain of it.")
    topology_preferred = models.CharField(max_length=constants.MAX_LABEL_LENGTH, blank=True, default="")
    node_selector = models.JSONField(default=dict, blank=True, validators=[validate_label_map],
                                     help_text="Label equality applied to every task.")
    preemption_delay = models.DurationField(null=True, blank=True, validators=[validate_duration_bounds])
    staleness_grace_period = models.DurationField(null=True, blank=True, validators=[validate_duration_bounds],
                                                  help_text="Per-workload override; negative = never evict.")
    stale_since = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=WorkloadStatus.choices, default=WorkloadStatus.PENDING,
                              db_index=True)
    status_message = models.CharField(max_length=1000, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    version = models.PositiveBigIntegerField(editable=False, default=1)

    class Meta:
        ordering = ("created_at", "name")
        constraints = [
            # Names are unique per tenant and queue: a tenant can neither learn nor squat another
            # tenant's names. Workloads with no tenant (operators, Kubernetes) per queue.
            models.UniqueConstraint(fields=("queue", "tenant", "name"), condition=Q(tenant__isnull=False),
                                    name="workload_unique_name_per_tenant_queue",
                                    violation_error_message=DUPLICATE_NAME_MESSAGE),
            models.UniqueConstraint(fields=("queue", "name"), condition=Q(tenant__isnull=True),
                                    name="workload_unique_name_per_queue_no_tenant",
                                    violation_error_message=DUPLICATE_NAME_MESSAGE),
            models.CheckConstraint(condition=Q(status__in=WorkloadStatus.values), name="workload_status_valid"),
            models.CheckConstraint(
                condition=Q(priority__gte=-constants.MAX_PRIORITY) & Q(priority__lte=constants.MAX_PRIORITY),
                name="workload_priority_bounded",
            ),
            models.CheckConstraint(
                condition=Q(min_available__gte=0) & Q(min_available__lte=constants.MAX_TASKS_PER_WORKLOAD),
                name="workload_min_available_bounded",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        super().clean()
        if self.queue_id is not None and self.queue.children.exists():
            raise ValidationError({"queue": f"Queue {self.queue.name!r} has child queues; only leaf queues take "
                                            "workloads."})


class SubGroup(models.Model):
    """One subgroup of a workload's tree (KAI hierarchical PodGroup, scenario ``subGroups``).

    A leaf (no children) holds tasks and sets ``min_available`` (0 allowed: all its tasks are
    opportunistic); a mid-level subgroup sets ``min_sub_groups`` (null: all its children). Its
    topology applies to every task under it (one domain of that level inside its parent's).
    ``index`` keeps the declaration order.
    """

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="sub_groups")
    name = models.CharField(max_length=constants.MAX_NAME_LENGTH, validators=[name_validator])
    index = models.PositiveIntegerField(default=0)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    min_available = models.PositiveIntegerField(
        null=True, blank=True, validators=[MaxValueValidator(constants.MAX_TASKS_PER_WORKLOAD)],
        help_text="Leaf subgroups: tasks that must be placed together (0: none).")
    min_sub_groups = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(constants.MAX_SUBGROUPS_PER_WORKLOAD)],
        help_text="Mid-level subgroups: children that must be satisfied (empty: all).")
    topology_required = models.CharField(max_length=constants.MAX_LABEL_LENGTH, blank=True, default="")
    topology_preferred = models.CharField(max_length=constants.MAX_LABEL_LENGTH, blank=True, default="")

    class Meta:
        ordering = ("workload_id", "index")
        constraints = [
            models.UniqueConstraint(fields=("workload", "name"), name="subgroup_unique_name_per_workload"),
            models.CheckConstraint(condition=Q(min_available__isnull=True) | Q(min_sub_groups__isnull=True),
                                   name="subgroup_min_available_or_min_sub_groups"),
        ]

    def __str__(self) -> str:
        return self.name


class Task(models.Model):
    """One pod of a workload.  Requests are in engine units: gpu devices (fractional = a
    share of one device), gpu memory MiB, cpu millicores, memory bytes."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="tasks")
    name = models.CharField(max_length=constants.MAX_NAME_LENGTH + 12, validators=[name_validator])
    index = models.PositiveIntegerField(validators=[MaxValueValidator(constants.MAX_TASKS_PER_WORKLOAD)])
    gpu = models.DecimalField(
        max_digits=12, decimal_places=4, default=Decimal(0),
        validators=[validate_finite, MinValueValidator(Decimal(0)), MaxValueValidator(constants.MAX_TASK_GPU)],
        help_text="GPU devices; below 1 = a fraction of one shared device.",
    )
    gpu_memory_mib = models.PositiveBigIntegerField(
        null=True, blank=True, validators=[MaxValueValidator(constants.MAX_GPU_MEMORY_MIB)],
        help_text="MiB of one shared device (the alternative way to share a GPU).",
    )
    cpu_millis = models.PositiveBigIntegerField(default=0, validators=[MaxValueValidator(constants.MAX_NODE_CPU_MILLIS)])
    memory_bytes = models.PositiveBigIntegerField(
        default=0, validators=[MaxValueValidator(constants.MAX_NODE_MEMORY_BYTES)]
    )
    priority = models.IntegerField(
        null=True, blank=True,
        validators=[MinValueValidator(-constants.MAX_PRIORITY), MaxValueValidator(constants.MAX_PRIORITY)],
        help_text="Order inside the workload: higher first; elastic workloads shed the lowest first.",
    )
    node_selector = models.JSONField(default=dict, blank=True, validators=[validate_label_map],
                                     help_text="Extra per-task selector, merged over the workload's.")
    state = models.CharField(max_length=20, choices=TaskState.choices, default=TaskState.PENDING, db_index=True)
    node = models.ForeignKey("queues_app.Node", null=True, blank=True, on_delete=models.PROTECT, related_name="tasks")
    gpu_groups = models.JSONField(default=list, blank=True, validators=[validate_gpu_groups])
    sub_group = models.ForeignKey(SubGroup, null=True, blank=True, on_delete=models.CASCADE, related_name="tasks",
                                  help_text="The leaf subgroup of the workload's tree this task belongs to.")
    claims = models.JSONField(default=list, blank=True, validators=[validate_claims],
                              help_text='Devices claimed (ResourceClaims): [{"device_class": ..., "count": N}].')
    devices = models.JSONField(default=dict, blank=True, validators=[validate_device_indices],
                               help_text="Claimed devices held on its node: {device class: [device index, ...]}.")
    dra_gpus = models.PositiveIntegerField(
        default=0, validators=[MaxValueValidator(constants.MAX_NODE_DEVICES)], editable=False,
        help_text="Claimed devices of classes that count as GPUs (derived from claims: quota, fair share and "
                  "usage count them like gpu).")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    version = models.PositiveBigIntegerField(editable=False, default=1)

    class Meta:
        ordering = ("workload_id", "index")
        constraints = [
            models.UniqueConstraint(fields=("workload", "name"), name="task_unique_name_per_workload"),
            models.UniqueConstraint(fields=("workload", "index"), name="task_unique_index_per_workload"),
            models.CheckConstraint(condition=Q(state__in=TaskState.values), name="task_state_valid"),
            models.CheckConstraint(
                condition=Q(gpu__gte=0) & Q(gpu__lte=constants.MAX_TASK_GPU)
                & Q(cpu_millis__gte=0) & Q(cpu_millis__lte=constants.MAX_NODE_CPU_MILLIS)
                & Q(memory_bytes__gte=0) & Q(memory_bytes__lte=constants.MAX_NODE_MEMORY_BYTES)
                & (Q(gpu_memory_mib__isnull=True) | (Q(gpu_memory_mib__gte=0)
                                                     & Q(gpu_memory_mib__lte=constants.MAX_GPU_MEMORY_MIB))),
                name="task_requests_bounded",
            ),
            # Running / Releasing / Binding / Pipelined need a node; Pending must have none;
            # Succeeded / Failed may keep the node they ran on (history only).
            models.CheckConstraint(
                condition=(Q(state__in=TASK_STATES_ON_NODE) & Q(node__isnull=False))
                | (Q(state=TaskState.PENDING) & Q(node__isnull=True))
                | Q(state__in=(TaskState.SUCCEEDED, TaskState.FAILED)),
                name="task_node_matches_state",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        super().clean()
        if self.state in TASK_STATES_ON_NODE and self.node_id is None:
            raise ValidationError({"node": f"A {self.state} task must be on a node."})
        if self.state == TaskState.PENDING and self.node_id is not None:
            raise ValidationError({"node": "A Pending task cannot be on a node."})
