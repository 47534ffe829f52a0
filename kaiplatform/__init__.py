"""kaiplatform Django project: settings, URLs, the Celery app and beat schedule, health checks.

Importing it loads the Celery app so ``shared_task`` binds to it.  ``settings``, ``env`` and
``celery`` import nothing of the apps (they load before any app); ``urls``, ``admin``, ``health``
and ``tasks`` may import the apps' views and services, the Celery schedule names tasks by string.
"""
from kaiplatform.celery import app as celery_app

__all__ = ("celery_app",)
