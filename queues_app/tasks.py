"""Celery tasks of queues_app.  Thin: each takes ids / names and calls one service.

``scheduling_cycle`` is triggered by beat every ``KAI_CYCLE_SECONDS`` (entry in
kaiplatform/celery.py, with ``expires`` of one interval so triggers queued during a broker
outage are revoked instead of run in a burst) and by ``POST /api/v1/cycles/trigger``.  No
autoretry: a failed cycle is recorded and the next trigger runs a fresh one; retrying the same
trigger would only count it twice.  Triggers revoked as expired are recorded as skipped
cycles, so every trigger that reached a worker is accounted for in ``SchedulingCycle``.
"""
from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import task_revoked

from queues_app.cycle.config import cycle_config
from queues_app.cycle.run import cycle_record_skipped, cycle_run
from queues_app.kube.autoscale import kube_scale_adjust as adjust
from queues_app.kube.outbox import KUBE_DISPATCH_TASK, kube_dispatch_due

logger = logging.getLogger("queues_app.tasks")

CYCLE_TASK = "queues_app.tasks.scheduling_cycle"
_cfg = cycle_config()


@shared_task(name=CYCLE_TASK, ignore_result=True, soft_time_limit=_cfg.soft_time_limit,
             time_limit=_cfg.time_limit, acks_late=False)
def scheduling_cycle(trigger: str = "beat") -> dict:
    """One scheduling cycle (single-flight: extra concurrent triggers are skipped)."""
    outcome = cycle_run(trigger=str(trigger)[:64])
    return {"status": outcome.status, "cycle": outcome.cycle_id, "generation": outcome.generation}


@task_revoked.connect
def _record_expired_trigger(sender=None, request=None, terminated=None, signum=None, expired=None, **_kw):
    """A cycle trigger the worker dropped because its ``expires`` passed: count it as skipped."""
    name = getattr(sender, "name", None) or getattr(request, "task", None)
    if name != CYCLE_TASK:
        return
    try:
        kwargs = getattr(request, "kwargs", None) or {}
        trigger = str(kwargs.get("trigger", "beat"))
        cycle_record_skipped(trigger=trigger, reason="expired before a worker ran it" if expired else "revoked")
    except Exception:  # noqa: BLE001 - accounting must never crash the worker
        logger.exception("could not record a revoked cycle trigger")


def request_cycle(*, trigger: str = "api") -> bool:
    """Best-effort: ask for a cycle now (after the caller's transaction commits).  Broker
    errors are logged and swallowed -- beat runs the cycle anyway (reliability.md 2.4)."""
    from django.db import transaction

    def send() -> None:
        try:
            scheduling_cycle.apply_async(kwargs={"trigger": trigger[:64]}, expires=_cfg.interval)
        except Exception:  # noqa: BLE001
            logger.warning("could not enqueue a scheduling cycle (broker down?); beat will run it", exc_info=True)

    transaction.on_commit(send)
    return True




@shared_task(name=KUBE_DISPATCH_TASK, ignore_result=True, acks_late=False)
def kube_dispatch(limit: int = 500) -> dict:
    """Carry out due Kubernetes outbox rows (binds, evictions, events); kubernetes mode only.

    Triggered by beat every ``KAI_KUBE_DISPATCH_SECONDS`` and after each cycle that wrote rows.
    Single-flight through a database lease; no autoretry (each row has its own backoff)."""
    from django.conf import settings

    if getattr(settings, "KAI_CLUSTER_MODE", "embedded") != "kubernetes":
        return {"status": "off"}

    report = kube_dispatch_due(limit=int(limit))
    return {"status": report.status, "done": report.done, "failed": report.failed, "retried": report.retried}


KUBE_SCALE_ADJUST_TASK = "queues_app.tasks.kube_scale_adjust"


@shared_task(name=KUBE_SCALE_ADJUST_TASK, ignore_result=True, acks_late=False)
def kube_scale_adjust() -> dict:
    """Reconcile the utility pods that show GPU-sharing demand to cluster autoscalers (kubernetes
    mode with ``KAI_AUTOSCALE_ENABLED``; beat entry ``kube-scale-adjust``).  Single-flight through
    a database lease; no autoretry (the next beat reconciles again)."""
    report = adjust()
    return {"status": report.status, "wanted": report.wanted, "created": len(report.created),
            "deleted": len(report.deleted), "errors": len(report.errors)}
