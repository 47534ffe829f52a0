"""Small operational writes."""
from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from queues_app.models import Heartbeat

HEARTBEAT_RETENTION = timedelta(days=1)


@transaction.atomic
def heartbeat_record(*, source: str) -> Heartbeat:
    """Write one heartbeat row and prune rows older than a day, so the table stays small."""
    now = timezone.now()
    Heartbeat.objects.filter(created_at__lt=now - HEARTBEAT_RETENTION).delete()
    return Heartbeat.objects.create(source=source[:200], created_at=now)
