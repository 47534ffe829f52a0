"""Small operational writes: heartbeats, and asking for a scheduling cycle (enqueued by name, so
nothing under services imports ``tasks``)."""
from __future__ import annotations

from datetime import timedelta

from celery import current_app
from django.contrib.auth.models import AbstractBaseUser
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


#: The scheduling cycle task (issue #4).  Enqueued by name so the API does not import it.
CYCLE_TASK_NAME = "queues_app.tasks.scheduling_cycle"


def cycle_trigger(*, actor: AbstractBaseUser | None = None, task_name: str = CYCLE_TASK_NAME) -> str:
    """Ask for a scheduling cycle now.  Enqueued after commit (never before the caller's
    writes are visible); the cycle itself is single-flight, so extra triggers are skipped."""
    who = actor.get_username() if actor is not None else ""
    transaction.on_commit(lambda: current_app.send_task(task_name, kwargs={"trigger": f"api:{who}"[:64]}))
    return task_name
