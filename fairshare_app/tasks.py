"""Celery tasks of fairshare_app: thin, they call one service each.

``fairshare_app.tasks.account_usage`` is on the beat schedule (kaiplatform/celery.py) every
accounting interval with ``expires``: a trigger queued during an outage is dropped rather than
replayed in a burst -- the next run accounts the missed intervals from timestamps anyway, and
a duplicate is a no-op (see ``usage_account``).
"""
from __future__ import annotations

from celery import shared_task
from fairshare_app.services.accounting import usage_account
from fairshare_app.services.compaction import usage_compact


@shared_task(name="fairshare_app.tasks.account_usage", ignore_result=True)
def account_usage() -> dict:
    result = usage_account()
    compacted = usage_compact()
    return {"status": result.status, "intervals": result.intervals, "compacted": compacted}
