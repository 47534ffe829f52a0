"""State the tenant API keeps for itself: Idempotency-Key records."""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class IdempotencyKey(models.Model):
    """One ``Idempotency-Key`` a client sent with a create, and what it created.

    ``scope`` is who owns the key space (``tenant:<id>`` for tenant members, ``user:<id>`` for
    operators), so two tenants may use the same key without seeing each other's results.
    ``fingerprint`` (SHA-256 of the canonical request body) detects a key reused for a
    different request, which is refused instead of silently returning the wrong workload.
    The unique constraint is what makes concurrent retries safe: the second INSERT waits for
    the first transaction and then fails, and the loser returns the winner's workload.
    """

    scope = models.CharField(max_length=64)
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    workload = models.ForeignKey("queues_app.Workload", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=("scope", "key"), name="idempotencykey_unique_per_scope")]

    def __str__(self) -> str:
        return f"{self.scope}:{self.key}"
