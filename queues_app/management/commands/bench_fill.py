"""``manage.py bench_fill``: end-to-end fill benchmark through the database and the real cycle.

Creates ``--nodes`` nodes x ``--gpus`` GPUs and ``--workloads`` one-GPU workloads (through the
services, as the API does), then runs real cycles (lease, snapshot, engine, apply; embedded
cluster confirmations) until every task is Running, and reports:

* ``fill_seconds``: first cycle start -> every workload Running (the issue's goal: < 10 s);
* per-cycle durations and phases;
* ``explanation_seconds`` / ``explanation_cycles``: one extra workload submitted to the full
  cluster -> its first Pending explanation (SchedulingEvent); goal: one cycle.

Meant for an empty benchmark database (PostgreSQL for meaningful numbers); refuses to touch a
database that has nodes or workloads unless ``--reset`` (which deletes them).
"""
from __future__ import annotations

import json
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from queues_app.choices import CycleStatus, TaskState
from queues_app.models import Node, Queue, SchedulingEvent, Task, Workload
from queues_app.cycle.run import cycle_run
from queues_app.services.nodes import node_upsert
from queues_app.services.queues import queue_create
from queues_app.services.workloads import workload_submit

GiB = 1024**3


class Command(BaseCommand):
    help = "Fill N nodes x G GPUs with one-GPU workloads through the database and the real cycle; report times."

    def add_arguments(self, parser):
        parser.add_argument("--nodes", type=int, default=500)
        parser.add_argument("--gpus", type=int, default=8)
        parser.add_argument("--workloads", type=int, default=4000)
        parser.add_argument("--queues", type=int, default=4)
        parser.add_argument("--max-cycles", type=int, default=20)
        parser.add_argument("--reset", action="store_true", help="delete existing nodes, queues and workloads first")

    def handle(self, *args, nodes: int, gpus: int, workloads: int, queues: int, max_cycles: int, reset: bool,
               **options):
        for name, value, hi in (("--nodes", nodes, 100000), ("--gpus", gpus, 1024), ("--workloads", workloads, 10**6),
                                ("--queues", queues, 1000), ("--max-cycles", max_cycles, 1000)):
            if not 1 <= value <= hi:
                raise CommandError(f"{name} must be between 1 and {hi}")
        if Node.objects.exists() or Workload.objects.exists():
            if not reset:
                raise CommandError("the database has nodes or workloads; use an empty benchmark database or --reset")
            Task.objects.all().delete()
            Workload.objects.all().delete()
            Node.objects.all().delete()
            for q in Queue.objects.order_by("-depth"):
                q.delete()
        out: dict = {"database": connection.vendor, "nodes": nodes, "gpus_per_node": gpus, "workloads": workloads}

        t = time.perf_counter()
        for i in range(nodes):
            node_upsert(name=f"bench-{i:05d}", gpus=gpus, gpu_memory_mib=81920, cpu_millis=128000,
                        memory_bytes=1024 * GiB, labels={"rack": f"r{i // 32}"})
        share = nodes * gpus / queues
        root = queue_create(name="bench-root", quotas={"gpu": {"quota": nodes * gpus}})
        leaves = [queue_create(name=f"bench-q{k}", parent=root, quotas={"gpu": {"quota": share}})
                  for k in range(queues)]
        out["setup_seconds"] = round(time.perf_counter() - t, 3)

        t = time.perf_counter()
        for i in range(workloads):
            workload_submit(queue=leaves[i % queues], name=f"job-{i:06d}", replicas=1,
                            task={"gpu": 1, "cpu_millis": 4000, "memory_bytes": 16 * GiB})
        out["submit_seconds"] = round(time.perf_counter() - t, 3)

        cycles = []
        t0 = time.perf_counter()
        for _ in range(max_cycles):
            tc = time.perf_counter()
            outcome = cycle_run(trigger="bench")
            cycles.append({"status": outcome.status, "seconds": round(time.perf_counter() - tc, 3),
                           "bound": outcome.bound, "confirmed": outcome.confirmed,
                           "phases": {k: v for k, v in outcome.phase_durations.items() if k != "engine"}})
            if outcome.status != CycleStatus.APPLIED:
                raise CommandError(f"cycle {outcome.status}: {outcome.reason}")
            if not Task.objects.exclude(state=TaskState.RUNNING).exists():
                break
        out["fill_seconds"] = round(time.perf_counter() - t0, 3)
        out["fill_cycles"] = len(cycles)
        out["running_tasks"] = Task.objects.filter(state=TaskState.RUNNING).count()
        out["cycles"] = cycles

        t = time.perf_counter()
        extra = workload_submit(queue=leaves[0], name="job-extra", replicas=1,
                                task={"gpu": 1, "cpu_millis": 4000, "memory_bytes": 16 * GiB})
        n = 0
        while not SchedulingEvent.objects.filter(workload=extra).exists() and n < max_cycles:
            cycle_run(trigger="bench")
            n += 1
        out["explanation_seconds"] = round(time.perf_counter() - t, 3)
        out["explanation_cycles"] = n
        ev = SchedulingEvent.objects.filter(workload=extra).values("reason", "message").first()
        out["explanation"] = ev
        self.stdout.write(json.dumps(out, indent=2, default=str))
