"""The Celery application.

Configuration comes from Django settings (``CELERY_*``).  The beat schedule is declared here
in code, so every worker started with ``-B`` and every ``celery beat`` process uses the same
schedule; periodic work must be safe to trigger twice (see reliability.md 2.1).
"""
from __future__ import annotations

import logging
import os
import time

from celery import Celery
from celery.signals import beat_init, worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kaiplatform.settings")

logger = logging.getLogger("kaiplatform.celery")

app = Celery("kaiplatform")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Project-level tasks live in kaiplatform/tasks.py (not an installed app); app tasks are
# found in each installed app's tasks.py.
app.conf.imports = ("kaiplatform.tasks",)
app.autodiscover_tasks()


def _beat_schedule() -> dict:
    from django.conf import settings

    period = float(settings.KAI_HEARTBEAT_SECONDS)
    schedule = {
        "heartbeat": {
            "task": "kaiplatform.tasks.heartbeat",
            "schedule": period,
            # A trigger queued during a broker outage is dropped, not replayed in a burst; the
            # margin covers the embedded broker's 1 s polling delay.
            "options": {"expires": max(2 * period, 5.0)},
        },
        # The scheduling cycle (queues_app, issue #4): single-flight, so two beats or `worker -B`
        # on every host only produce skipped triggers.  `expires` = one interval: a trigger older
        # than that is revoked (and counted as skipped), never run in a burst after an outage.
        "scheduling-cycle": {
            "task": "queues_app.tasks.scheduling_cycle",
            "schedule": float(settings.KAI_CYCLE_SECONDS),
            "kwargs": {"trigger": "beat"},
            "options": {"expires": float(settings.KAI_CYCLE_SECONDS)},
        },
        # Usage accounting (fairshare_app): idempotent per interval, so beat may fire more often
        # than the accounting interval and a duplicate or late trigger is a no-op.
        "fairshare-account-usage": {
            "task": "fairshare_app.tasks.account_usage",
            "schedule": float(settings.KAI_ACCOUNTING_SECONDS),
            "options": {"expires": max(2 * float(settings.KAI_ACCOUNTING_SECONDS), 5.0)},
        },
    }
    # Kubernetes cluster mode (issue #7): the outbox dispatcher, single-flight through a database
    # lease, so extra triggers are cheap no-ops; `expires` = two intervals.
    if getattr(settings, "KAI_CLUSTER_MODE", "embedded") == "kubernetes":
        every = float(settings.KAI_KUBE_DISPATCH_SECONDS)
        schedule["kube-dispatch"] = {
            "task": "queues_app.tasks.kube_dispatch",
            "schedule": every,
            "options": {"expires": max(2 * every, 5.0)},
        }
        # Cluster autoscaling (issue #22): the scale adjuster, on its own entry so its period is its
        # own; single-flight through a database lease, `expires` = two periods.
        if getattr(settings, "KAI_AUTOSCALE_ENABLED", False):
            period = float(settings.KAI_AUTOSCALE_SECONDS)
            schedule["kube-scale-adjust"] = {
                "task": "queues_app.tasks.kube_scale_adjust",
                "schedule": period,
                "options": {"expires": max(2 * period, 5.0)},
            }
    return schedule


def _task_routes() -> dict:
    """The dispatcher (and the scale adjuster, which only talks to the API server too) have their
    own queue ("dispatch", the Helm dispatcher role), so slow API calls never delay a scheduling
    cycle; only in kubernetes mode (embedded workers consume the default queue only)."""
    from django.conf import settings

    if getattr(settings, "KAI_CLUSTER_MODE", "embedded") == "kubernetes":
        return {"queues_app.tasks.kube_dispatch": {"queue": "dispatch"},
                "queues_app.tasks.kube_scale_adjust": {"queue": "dispatch"}}
    return {}


app.conf.beat_schedule = _beat_schedule()
app.conf.task_routes = _task_routes()


class CycleSettingsError(SystemExit):
    """Raised at worker / beat start when the cycle's settings cannot work.  A SystemExit, because
    Celery logs and swallows ordinary exceptions raised by signal handlers and would start anyway."""


@worker_init.connect
@beat_init.connect
def _refuse_broken_cycle_settings(**_kwargs) -> None:
    """The relations the ``queues_app.W002`` system check warns about (queues_app/checks.py), enforced
    where they matter: a worker whose engine budget is not below its soft time limit would have every
    contended cycle abandoned with nothing applied; it exits naming the settings instead."""
    from queues_app.cycle.config import cycle_config_problems

    problems = cycle_config_problems()
    if problems:
        raise CycleSettingsError("kaiplatform: refusing to start, the scheduling cycle settings are broken:\n  "
                                 + "\n  ".join(problems))


#: The task whose worker needs the engine (a worker that only dispatches to Kubernetes does not).
CYCLE_TASK = "queues_app.tasks.scheduling_cycle"


def worker_runs_cycles(celery_app: Celery) -> bool:
    """Whether a worker of ``celery_app`` (its ``-Q`` selection applied) consumes the queue the
    scheduling cycle is routed to."""
    queue = celery_app.amqp.router.route({}, CYCLE_TASK)["queue"]
    selected = celery_app.amqp.queues.consume_from
    return not selected or getattr(queue, "name", queue) in selected


@worker_init.connect
def _preload_engine(sender=None, **_kwargs) -> None:
    """Load the engine's kernels in the worker's main process, before its pool forks.

    Why: without it each pool process loads (or, on a cold cache, compiles) them inside its first
    cycle: 0.4-0.5 s of CPU from a warm cache, ~20 s from a cold one, counted against the cycle's
    engine budget and time limits. Forked children inherit the loaded kernels. A worker that does
    not consume the cycle's queue (the Kubernetes dispatcher role) skips it; so does
    ``KAI_WORKER_PRELOAD_ENGINE=0``. A failure here is logged, never fatal: the cycle loads the
    kernels itself as before."""
    from django.conf import settings

    if not getattr(settings, "KAI_WORKER_PRELOAD_ENGINE", True):
        return
    if sender is not None and not worker_runs_cycles(getattr(sender, "app", app)):
        return
    from queues_app.cycle.engine_io import preload_engine

    t0 = time.perf_counter()
    try:
        report = preload_engine()
    except Exception:  # noqa: BLE001 - the cycle still works (and says why) without the preload
        logger.exception("could not preload the engine's kernels; the first cycle loads them")
        return
    logger.info("engine kernels ready in %.1f s (%s)", time.perf_counter() - t0, report)
