"""Helpers of the fair-share services."""
from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models

from queues_app.errors import ApplicationError


def validate(instance: models.Model, *, message: str) -> None:
    """``full_clean()`` with errors re-raised as the project's one service error type."""
    try:
        instance.full_clean()
    except ValidationError as exc:
        raise ApplicationError.from_validation_error(exc, message) from exc
