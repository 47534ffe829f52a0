"""Device classes of dynamic resource allocation (Kubernetes DeviceClasses).

Nodes offer devices of a class (``Node.devices``: class name -> count, from ResourceSlices in
Kubernetes mode) and tasks claim them (``Task.claims``: ResourceClaims). A class that counts as gpu
(``counts_as = "gpu"``, or, when unset, a name containing "gpu" in any case, as KAI's
``IsGPUDeviceClass`` decides) is also counted in GPU quota, fair share and node GPU capacity.
"""
from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from queues_app import constants

#: A Kubernetes object name (DNS subdomain: lower case, digits, '-' and '.'), as DeviceClasses are.
device_class_name_validator = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    "Use a DNS subdomain: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit "
    "(e.g. gpu.nvidia.com).",
    code="invalid_device_class",
)


class DeviceClass(models.Model):
    name = models.CharField(max_length=253, unique=True, validators=[device_class_name_validator])
    counts_as = models.CharField(
        max_length=8, blank=True, default="", choices=[("gpu", "gpu")],
        help_text='"gpu": a claimed device counts as one GPU in quota, fair share and capacity. Empty: it does '
                  'when the name contains "gpu".',
    )
    description = models.CharField(max_length=200, blank=True, default="")
    driver = models.CharField(max_length=253, blank=True, default="",
                              help_text="Kubernetes: the DRA driver whose devices it selects (empty: its name).")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    version = models.PositiveBigIntegerField(editable=False, default=1)

    class Meta:
        ordering = ("name",)
        verbose_name_plural = "device classes"
        constraints = [
            models.CheckConstraint(condition=Q(counts_as__in=("", "gpu")), name="device_class_counts_as_valid"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def counts_as_gpu(self) -> bool:
        return self.counts_as == "gpu" or (not self.counts_as and "gpu" in self.name.lower())


__all__ = ["DeviceClass", "device_class_name_validator", "constants"]
