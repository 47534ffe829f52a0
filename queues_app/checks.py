"""Django system checks of queues_app: the scheduling cycle's settings.

A limit relation that cannot hold (engine budget >= soft time limit, soft >= hard, hard >= lease TTL,
lease >= broker visibility timeout) makes Celery cycles fail in ways that only show up under load: a
cycle abandoned at the soft limit with nothing applied, two workers running cycles at once.  The
relations are about the worker's task limits, so the worker and beat refuse to start with them
(kaiplatform/celery.py) while ``manage.py check`` / ``migrate`` / ``runserver`` warn
(``queues_app.W002``): a foreground ``manage.py run_cycle`` has no task time limits (the crash-point
tests run it with a 5 s lease on purpose).  A value that cannot be read at all (not a finite number,
negative) is an error everywhere (``queues_app.E001``): the Celery task module cannot even be imported.
"""
from __future__ import annotations

from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ImproperlyConfigured

from queues_app.cycle.config import cycle_config, validate_cycle_config

#: Tag of the cycle settings check (``manage.py check --tag kai_cycle``).
CYCLE_TAG = "kai_cycle"
HINT = ("Set KAI_CYCLE_ENGINE_BUDGET < KAI_CYCLE_SOFT_TIME_LIMIT < KAI_CYCLE_TIME_LIMIT < KAI_CYCLE_LEASE_SECONDS < "
        "the broker's visibility_timeout (Helm: config.cycle*).")


@register(CYCLE_TAG)
def check_cycle_settings(app_configs=None, **kwargs) -> list[CheckMessage]:
    try:
        cfg = cycle_config()
    except ImproperlyConfigured as exc:
        return [Error(f"Scheduling cycle settings: {exc}.", hint=HINT, id="queues_app.E001")]
    return [Warning(f"Scheduling cycle settings: {problem}; a Celery worker or beat refuses to start with them.",
                    hint=HINT, id="queues_app.W002")
            for problem in validate_cycle_config(cfg)]
