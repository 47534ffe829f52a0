"""Tenants: who may submit to which leaf queues."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from queues_app import constants
from queues_app.models.validators import name_validator


class Tenant(models.Model):
    """A team or project.  Members act for the tenant through the API; ``queues`` are the
    leaf queues it may submit to.  Every selector takes a tenant first (None = operator)."""

    name = models.CharField(max_length=constants.MAX_NAME_LENGTH, unique=True, validators=[name_validator])
    display_name = models.CharField(max_length=200, blank=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="tenants", blank=True)
    queues = models.ManyToManyField("queues_app.Queue", related_name="tenants", blank=True,
                                    help_text="Leaf queues this tenant may submit to.")
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name
