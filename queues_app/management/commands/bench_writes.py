"""``manage.py bench_writes``: the cost of the big writes, measured on the real database.

One gang of ``--tasks`` tasks (default 10,000, the API's maximum) on ``--nodes`` x 8-GPU nodes,
through the services and the real cycle:

* ``submit``: ``workload_submit`` of the gang as ``replicas`` of one task, and again as an
  explicit ``tasks`` list (target: <= 2 s on PostgreSQL);
* ``cycle_bind`` / ``cycle_confirm``: the cycle that binds the whole gang and the next one that
  confirms it Running (the "next cycle after a 10,000-task submit"), with their phases.
  ANALYZE runs once before anything is created, so the gang lands in tables whose statistics
  say "empty": the case where PostgreSQL plans nested loops (the cycle re-analyses stale
  tables first, phase ``statistics``);
* ``cancel_running`` / ``cancel_pending``: ``workload_cancel`` of the running gang and of a pending
  one (target: <= 1 s on PostgreSQL), then the cycle that confirms the releases.

Each figure is wall seconds and this process's CPU seconds (the database's own CPU is not in
it); the machine's load average is printed, since a shared machine changes wall times.  Meant for
an empty benchmark database (refuses one with nodes or workloads unless ``--reset``).
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from queues_app.models import Node, Queue, SchedulingCycle, SchedulingEvent, Task, Workload
from queues_app.cycle.run import cycle_run
from queues_app.services.nodes import node_upsert
from queues_app.services.queues import queue_create
from queues_app.services.workloads import workload_cancel, workload_submit

TARGETS = {"submit_replicas": 2.0, "submit_tasks_list": 2.0, "cancel_running": 1.0, "cancel_pending": 1.0}


def _timed(fn: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, {"wall_s": round(time.perf_counter() - w0, 3), "cpu_s": round(time.process_time() - c0, 3)}


class Command(BaseCommand):
    help = "Time submit, cycle and cancel of one large gang on the real database (benchmark, not a test)."

    def add_arguments(self, parser):
        parser.add_argument("--tasks", type=int, default=10_000)
        parser.add_argument("--nodes", type=int, default=1300)
        parser.add_argument("--reset", action="store_true", help="delete existing nodes, queues and workloads first")

    def handle(self, *args, tasks: int, nodes: int, reset: bool, **options):
        if not 1 <= tasks <= 10_000 or not 1 <= nodes <= 100_000:
            raise CommandError("--tasks must be 1..10000 and --nodes 1..100000")
        if nodes * 8 < tasks:
            raise CommandError("--nodes x 8 GPUs must hold --tasks one-GPU tasks")
        if Node.objects.exists() or Workload.objects.exists():
            if not reset:
                raise CommandError("the database has nodes or workloads; use an empty benchmark database or --reset")
            SchedulingEvent.objects.all().delete()
            Task.objects.all().delete()
            Workload.objects.all().delete()
            Node.objects.all().delete()
            for q in Queue.objects.order_by("-depth"):
                q.delete()
            SchedulingCycle.objects.all().delete()
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("ANALYZE")
        for i in range(nodes):
            node_upsert(name=f"bench-{i:05d}", gpus=8, cpu_millis=128_000, memory_bytes=2**40)
        queue = queue_create(name="bench", quotas={"gpu": {"quota": -1}})
        out: dict[str, Any] = {"database": connection.vendor, "tasks": tasks, "nodes": nodes,
                               "load_average_before": [round(x, 2) for x in os.getloadavg()]}
        gang, out["submit_replicas"] = _timed(lambda: workload_submit(
            queue=queue, name="gang", replicas=tasks, task={"gpu": 1, "cpu_millis": 1000, "memory_bytes": 2**30}))
        listed, out["submit_tasks_list"] = _timed(lambda: workload_submit(
            queue=queue, name="listed", tasks=[{"gpu": 1, "cpu_millis": 1000, "memory_bytes": 2**30}] * tasks))
        _, out["cancel_pending"] = _timed(lambda: workload_cancel(workload=listed))
        # The cycle runs in a worker, not in the web process that took the submits: a new
        # session, which sees the table statistics the submits' session has reported.
        connection.close()
        for label in ("cycle_bind", "cycle_confirm"):
            result, timing = _timed(lambda: cycle_run(trigger="bench_writes"))
            out[label] = {**timing, "status": result.status, "bound": result.bound, "confirmed": result.confirmed,
                          "phases": {k: v for k, v in result.phase_durations.items() if k != "engine"}}
        running = Task.objects.filter(workload=gang, state="Running").count()
        _, out["cancel_running"] = _timed(lambda: workload_cancel(workload=gang))
        out["cancel_running"]["tasks_running_before"] = running
        result, timing = _timed(lambda: cycle_run(trigger="bench_writes"))
        out["cycle_release"] = {**timing, "status": result.status, "confirmed": result.confirmed,
                                "phases": {k: v for k, v in result.phase_durations.items() if k != "engine"}}
        out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        out["within_targets"] = {k: out[k]["wall_s"] <= v for k, v in TARGETS.items()}
        self.stdout.write(json.dumps(out, indent=2))
