"""Project-level periodic tasks.  Tasks are thin: they call one service."""
from __future__ import annotations

from celery import shared_task


@shared_task(name="kaiplatform.tasks.heartbeat", ignore_result=True)
def heartbeat() -> int:
    """Record that a worker (and beat) are alive; the admin and tests read the row."""
    import socket

    # imported here: Celery may import this module before Django's apps are ready
    from queues_app.services.system import heartbeat_record

    return heartbeat_record(source=f"celery@{socket.gethostname()}").pk
