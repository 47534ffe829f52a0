"""Cluster nodes as the scheduler sees them."""
from __future__ import annotations

from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from queues_app import constants
from queues_app.models.validators import name_validator, validate_device_counts, validate_finite, validate_label_map


class Node(models.Model):
    """One node: allocatable capacity, labels (topology domains) and schedulability.

    Capacity is stored in the engine's internal units (cpu millicores, memory bytes) so the
    snapshot builder converts nothing.  ``reserved_*`` is what pods of other schedulers use.
    ``version`` is bumped on every write (reliability.md 2.1, safety step 2).
    """

    name = models.CharField(max_length=253, unique=True, validators=[name_validator])
    gpus = models.PositiveIntegerField(default=0, validators=[MaxValueValidator(constants.MAX_NODE_GPUS)],
                                       help_text="Whole GPU devices.")
    gpu_memory_mib = models.PositiveBigIntegerField(
        default=0, validators=[MaxValueValidator(constants.MAX_GPU_MEMORY_MIB)],
        help_text="Memory per GPU device in MiB (0 = unknown).",
    )
    cpu_millis = models.PositiveBigIntegerField(default=0, validators=[MaxValueValidator(constants.MAX_NODE_CPU_MILLIS)])
    memory_bytes = models.PositiveBigIntegerField(
        default=0, validators=[MaxValueValidator(constants.MAX_NODE_MEMORY_BYTES)]
    )
    labels = models.JSONField(default=dict, blank=True, validators=[validate_label_map])
    devices = models.JSONField(default=dict, blank=True, validators=[validate_device_counts],
                               help_text="DRA devices offered: {device class name: count} (e.g. from ResourceSlices).")
    dra_gpus = models.PositiveIntegerField(
        default=0, validators=[MaxValueValidator(constants.MAX_NODE_DEVICES)], editable=False,
        help_text="Devices of classes that count as GPUs (derived from devices; in GPU capacity).")
    unschedulable = models.BooleanField(default=False)
    ready = models.BooleanField(default=True, help_text="A node that is not ready adds nothing to capacity.")
    reserved_gpus = models.DecimalField(
        max_digits=12, decimal_places=4, default=Decimal(0),
        validators=[validate_finite, MinValueValidator(Decimal(0)), MaxValueValidator(Decimal(constants.MAX_NODE_GPUS))],
    )
    reserved_cpu_millis = models.PositiveBigIntegerField(
        default=0, validators=[MaxValueValidator(constants.MAX_NODE_CPU_MILLIS)]
    )
    reserved_memory_bytes = models.PositiveBigIntegerField(
        default=0, validators=[MaxValueValidator(constants.MAX_NODE_MEMORY_BYTES)]
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    version = models.PositiveBigIntegerField(editable=False, default=1)

    class Meta:
        ordering = ("name",)
        constraints = [
            models.CheckConstraint(
                condition=Q(gpus__gte=0) & Q(gpus__lte=constants.MAX_NODE_GPUS)
                & Q(gpu_memory_mib__gte=0) & Q(gpu_memory_mib__lte=constants.MAX_GPU_MEMORY_MIB)
                & Q(cpu_millis__gte=0) & Q(cpu_millis__lte=constants.MAX_NODE_CPU_MILLIS)
                & Q(memory_bytes__gte=0) & Q(memory_bytes__lte=constants.MAX_NODE_MEMORY_BYTES),
                name="node_capacity_bounded",
            ),
            models.CheckConstraint(
                condition=Q(reserved_gpus__gte=0) & Q(reserved_gpus__lte=constants.MAX_NODE_GPUS)
                & Q(reserved_cpu_millis__gte=0) & Q(reserved_memory_bytes__gte=0),
                name="node_reserved_nonnegative",
            ),
        ]

    def __str__(self) -> str:
        return self.name
