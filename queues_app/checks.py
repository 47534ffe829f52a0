"""Django system checks of queues_app: the scheduling cycle's settings.

A limit relation that cannot hold (engine budget >= soft time limit, soft >= hard, hard >= lease TTL,
lease >= broker visibility timeout) makes cycles fail in ways that only show up under load: a cycle
abandoned at the soft limit with nothing applied, two workers running cycles at once.  Refusing at
start (``manage.py check``, ``migrate``, ``runserver``, and the worker / beat start in
kaiplatform/celery.py) names the setting while the operator is still looking at the deploy.
"""
from __future__ import annotations

from django.core.checks import Error, register

from queues_app.cycle.config import cycle_config_problems

#: Tag of the cycle settings check (``manage.py check --tag kai_cycle``).
CYCLE_TAG = "kai_cycle"


@register(CYCLE_TAG)
def check_cycle_settings(app_configs=None, **kwargs) -> list[Error]:
    return [Error(f"Scheduling cycle settings: {problem}.",
                  hint="Set KAI_CYCLE_ENGINE_BUDGET < KAI_CYCLE_SOFT_TIME_LIMIT < KAI_CYCLE_TIME_LIMIT < "
                       "KAI_CYCLE_LEASE_SECONDS < the broker's visibility_timeout (Helm: config.cycle*).",
                  id="queues_app.E002")
            for problem in cycle_config_problems()]
