"""Dry run of a submission (tenant API ``?dry_run=1``): would this workload run now?

The candidate is stored through the services in a transaction that is always rolled back, the
engine input is read inside it, and the engine runs on it outside the transaction: nothing is
stored, no lock is held while the engine computes.  Its own module because it is a tool on the
cycle's path (like ``whatif``), not part of the engine boundary.

May import: ``engine_io`` (input, quarantine, the engine run), choices, errors.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction

from queues_app.choices import TaskState
from queues_app.cycle.engine_io import EngineInput, build_engine_input, load_quarantined, run_actions
from queues_app.errors import ApplicationError

__all__ = ["dry_run_workload"]


class _DryRunRollback(Exception):
    """Raised inside the dry-run transaction so everything the candidate wrote is undone."""


def dry_run_workload(*, submit: Any, now: datetime | None = None) -> dict[str, Any]:
    """Would a workload run now?  One engine cycle on the live state plus the candidate.

    ``submit`` is a zero-argument callable that stores the candidate through
    ``services.workload_submit`` (so it is validated exactly like a real submission and
    raises ``ApplicationError`` the same way).  It runs in a transaction that is always rolled
    back, after reading the engine input; the engine then runs outside the transaction, so no
    lock is held while it computes and nothing at all is stored.

    Returns ``{"placed", "status", "tasks": [{name, status, node}], "events": [...], "waiting_for",
    "queue": {"fairShare", "allocated"}, "skipped_actions"}`` where ``status`` is the
    candidate's engine status: ``Binding`` = would start this cycle, ``Pipelined`` = would
    start once victims release their resources, ``Pending`` = blocked (the events say why).
    Actions named in the config whose module is not available are skipped and listed.
    """
    holder: dict[str, Any] = {}
    try:
        with transaction.atomic():
            workload = submit()
            holder["workload_id"] = workload.pk
            holder["queue"] = workload.queue.name
            holder["input"] = build_engine_input(now=now)
            raise _DryRunRollback
    except _DryRunRollback:
        pass
    engine_input: EngineInput = holder["input"]
    wid = holder["workload_id"]
    job_name = next((n for n, w in engine_input.index.workload_id.items() if w == wid), None)
    if job_name is None:  # left out of the input (e.g. its queue's tree is broken)
        why = engine_input.excluded_workloads.get(wid, "it would not be scheduled")
        raise ApplicationError("The workload would not be scheduled.", extra={"queue": [why]})
    # A bad row elsewhere in the live state is quarantined here as in the cycle, never a 500.
    snapshot, quarantine = load_quarantined(engine_input.data, engine_input.index, source="dry-run")
    if wid in quarantine.workloads:
        raise ApplicationError("The scheduling engine refuses this workload.",
                               extra={"workload": [quarantine.workloads[wid]]})
    result, skipped = run_actions(snapshot)
    job = result.jobs[job_name]
    tasks = [{"name": t["name"].split("/", 1)[-1], "status": t["status"], "node": t["node"]} for t in job["tasks"]]
    placed = bool(tasks) and all(t["status"] in (TaskState.BINDING, TaskState.RUNNING) for t in tasks)
    events = [{k: v for k, v in e.items() if k in ("reason", "message", "task")}
              for e in result.events if e.get("job") == job_name]
    return {
        "placed": placed,
        "status": job["status"],
        "tasks": tasks,
        "events": events,
        "waiting_for": result.pending_categories().get(job_name),
        "queue": result.queues.get(holder["queue"], {}),
        "skipped_actions": skipped,
    }

