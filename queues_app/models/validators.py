"""Field validators shared by the models (run by ``full_clean()`` in services and admin forms)."""
from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator

from queues_app import constants

name_validator = RegexValidator(
    constants.NAME_REGEX,
    "Use letters, digits, '-', '_' or '.', starting and ending with a letter or digit.",
    code="invalid_name",
)


def validate_finite(value: Any) -> None:
    """Reject NaN and infinities, which compare false with every bound and slip through."""
    if value is None:
        return
    try:
        finite = Decimal(value).is_finite() if isinstance(value, Decimal) else math.isfinite(float(value))
    except (TypeError, ValueError, ArithmeticError):
        finite = False
    if not finite:
        raise ValidationError("Must be a finite number.", code="not_finite")


def validate_unlimited_or_nonnegative(value: Decimal | None) -> None:
    """Quota / limit / weight: a finite number >= 0, or exactly -1."""
    if value is None:
        return
    validate_finite(value)
    if value < 0 and value != constants.UNLIMITED:
        raise ValidationError("Must be >= 0, or -1 for unlimited / unset; no other negative value.", code="negative")


def validate_label_map(value: Any) -> None:
    """A flat {str: str} map of Kubernetes-style labels (also used for node selectors)."""
    if not isinstance(value, dict):
        raise ValidationError("Must be an object mapping label keys to string values.", code="invalid_labels")
    if len(value) > constants.MAX_LABELS:
        raise ValidationError(f"At most {constants.MAX_LABELS} labels.", code="too_many_labels")
    for key, val in value.items():
        if not isinstance(key, str) or not key or len(key) > constants.MAX_LABEL_LENGTH:
            raise ValidationError(f"Label key {key!r} must be a non-empty string of at most "
                                  f"{constants.MAX_LABEL_LENGTH} characters.", code="invalid_label_key")
        if not isinstance(val, str) or len(val) > 63:
            raise ValidationError(f"Label {key!r} must have a string value of at most 63 characters.",
                                  code="invalid_label_value")


def validate_gpu_groups(value: Any) -> None:
    if not isinstance(value, list) or not all(isinstance(g, str) and 0 < len(g) <= 128 for g in value):
        raise ValidationError("Must be a list of GPU group names (strings).", code="invalid_gpu_groups")
    if len(value) > constants.MAX_NODE_GPUS:
        raise ValidationError("Too many GPU groups.", code="too_many_gpu_groups")


def validate_duration_bounds(value: Any) -> None:
    if value is None:
        return
    if abs(value.total_seconds()) > constants.MAX_DURATION_SECONDS:
        raise ValidationError("Duration is too long (at most ten years).", code="too_long")


def validate_device_counts(value: Any) -> None:
    """A node's ``devices``: {device class name: whole number of devices >= 0}."""
    if not isinstance(value, dict):
        raise ValidationError("Must be an object mapping device class names to device counts.",
                              code="invalid_devices")
    if len(value) > constants.MAX_DEVICE_CLASSES:
        raise ValidationError(f"At most {constants.MAX_DEVICE_CLASSES} device classes.", code="too_many_classes")
    for key, val in value.items():
        if not isinstance(key, str) or not key:
            raise ValidationError(f"Device class {key!r} must be a non-empty string.", code="invalid_device_class")
        if isinstance(val, bool) or not isinstance(val, int) or not 0 <= val <= constants.MAX_NODE_DEVICES:
            raise ValidationError(f"Devices of {key!r} must be a whole number between 0 and "
                                  f"{constants.MAX_NODE_DEVICES}, got {val!r}.", code="invalid_device_count")


def validate_claims(value: Any) -> None:
    """A task's ``claims``: [{"device_class": name, "count": whole number >= 1}]."""
    if not isinstance(value, list):
        raise ValidationError("Must be a list of {device_class, count} claims.", code="invalid_claims")
    if len(value) > constants.MAX_DEVICE_CLASSES:
        raise ValidationError(f"At most {constants.MAX_DEVICE_CLASSES} claims.", code="too_many_claims")
    for i, c in enumerate(value):
        if not isinstance(c, dict) or set(c) - {"device_class", "count"} or not isinstance(c.get("device_class"), str):
            raise ValidationError(f"Claim {i} must be an object {{device_class, count}}.", code="invalid_claim")
        n = c.get("count", 1)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= constants.MAX_NODE_DEVICES:
            raise ValidationError(f"Claim {i}: count must be a whole number between 1 and "
                                  f"{constants.MAX_NODE_DEVICES}, got {n!r}.", code="invalid_claim_count")


def validate_device_indices(value: Any) -> None:
    """Devices a task holds on its node: {device class name: [device index, ...]}."""
    if not isinstance(value, dict):
        raise ValidationError("Must be an object mapping device class names to device index lists.",
                              code="invalid_device_indices")
    for key, val in value.items():
        if not isinstance(key, str) or not isinstance(val, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and 0 <= d < constants.MAX_NODE_DEVICES for d in val):
            raise ValidationError(f"Devices of {key!r} must be a list of device indices.",
                                  code="invalid_device_indices")
