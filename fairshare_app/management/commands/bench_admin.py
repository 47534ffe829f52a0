"""``manage.py bench_admin``: build a large cluster database and time every admin page.

The operators' console must stay usable on a big installation (issue 19: no admin page over
1 s at 2,000 nodes and 50,000 workloads).  This command:

1. builds such a database (``--nodes``, ``--workloads``; refuses a database that has nodes or
   workloads unless ``--reset``, or reuses one with ``--reuse``): nodes in racks (a few not
   ready or cordoned), a two-level queue tree with quotas (some children over their parent),
   tenants, workloads Running (placed within node capacity), Pending and finished, their tasks,
   queue statuses, 100 recorded cycles with replay blobs, the pending workloads' events of the
   last cycles, a week of usage history (raw minutes for a day, hours before) and budgets.
   Rows are written in bulk (a benchmark fixture, not a product write path), consistent with
   the invariants the cycle keeps;
2. requests every admin page through Django's test client as a superuser: the dashboard and
   its JSON, each registered model's changelist, its change page (the busiest object), its add
   page, plus common filters and searches, the fair-share charts and the what-if page
   (``--repeat`` times after one warm-up);
3. prints one line per page (median and max wall seconds, median CPU seconds of this process,
   queries, size) and exits 1 if a median is over ``--limit`` seconds (default 1).

Numbers depend on the machine (2 shared cores here): the CPU seconds column is this process
only (the PostgreSQL server's own work is in the wall time).  ``--json FILE`` keeps the report.

It lives in fairshare_app because it fills both apps' tables: fairshare_app depends on queues_app,
never the reverse.
"""
from __future__ import annotations

import json
import os
import random
import statistics
import time
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.db.models import Count
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from fairshare_app.models import AccountingInterval, GpuBudget, NormalizedUsage, QueueIntervalStat, UsageRecord
from fairshare_app.services.budgets import budget_create
from queues_app.cycle.rollup import allocation_by_queue
from queues_app.models import (
    Node,
    Queue,
    QueueStatus,
    QuotaChange,
    SchedulingCycle,
    SchedulingEvent,
    Task,
    Tenant,
    Workload,
)
from queues_app.services.queues import queue_create
from queues_app.services.tenants import tenant_create

GIB = 2**30
GPUS_PER_NODE = 8
NODES_PER_RACK = 32


class Command(BaseCommand):
    help = "Build a 2,000-node / 50,000-workload database and time every admin page (none may take > 1 s)."

    def add_arguments(self, parser):
        parser.add_argument("--nodes", type=int, default=2000)
        parser.add_argument("--workloads", type=int, default=50000)
        parser.add_argument("--departments", type=int, default=10)
        parser.add_argument("--teams", type=int, default=10, help="leaf queues per department")
        parser.add_argument("--repeat", type=int, default=3, help="timed requests per page (after one warm-up)")
        parser.add_argument("--limit", type=float, default=1.0, help="seconds a page may take (median)")
        parser.add_argument("--reset", action="store_true", help="delete the existing cluster data first")
        parser.add_argument("--reuse", action="store_true", help="time the pages of the database as it is")
        parser.add_argument("--seed", type=int, default=19)
        parser.add_argument("--json", dest="json_path", default="", help="also write the report to this file")

    def handle(self, *args, nodes: int, workloads: int, departments: int, teams: int, repeat: int, limit: float,
               reset: bool, reuse: bool, seed: int, json_path: str, **options):
        for name, value, lo, hi in (("--nodes", nodes, 1, 100000), ("--workloads", workloads, 1, 10**6),
                                    ("--departments", departments, 1, 100), ("--teams", teams, 1, 100),
                                    ("--repeat", repeat, 1, 100)):
            if not lo <= value <= hi:
                raise CommandError(f"{name} must be between {lo} and {hi}")
        report: dict[str, Any] = {"database": connection.vendor, "build": {}}
        if not reuse:
            if Node.objects.exists() or Workload.objects.exists():
                if not reset:
                    raise CommandError("the database has nodes or workloads: use an empty benchmark database, "
                                       "--reset (deletes them) or --reuse (times it as it is)")
                self._reset()
            report["build"] = Builder(seed=seed, out=self.stdout).build(
                nodes=nodes, workloads=workloads, departments=departments, teams=teams)
        report["rows"] = _row_counts()
        self.stdout.write("rows: " + ", ".join(f"{k} {v:,}" for k, v in report["rows"].items()))
        pages = time_pages(repeat=repeat, out=self.stdout)
        report["pages"] = pages
        slow = [p for p in pages if p["status"] == 200 and p["median_s"] > limit]
        broken = [p for p in pages if p["status"] != 200]
        report["limit_s"] = limit
        report["slowest"] = max(pages, key=lambda p: p["median_s"]) if pages else None
        self.stdout.write(f"\n{len(pages)} pages; slowest {report['slowest']['page']} "
                          f"{report['slowest']['median_s']:.3f} s (median of {repeat}); "
                          f"{len(slow)} over {limit:g} s; {len(broken)} not 200")
        if json_path:
            with open(json_path, "w", encoding="utf-8") as fh:
                json.dump(report, fh, indent=1, default=str)
        if slow or broken:
            raise CommandError("pages over the limit or failing: " + ", ".join(p["page"] for p in slow + broken))

    def _reset(self) -> None:
        with transaction.atomic():
            for model in (SchedulingEvent, SchedulingCycle, Task, Workload, QueueStatus, QuotaChange, GpuBudget,
                          NormalizedUsage, AccountingInterval, Node):
                model.objects.all().delete()
            Tenant.objects.all().delete()
            for q in Queue.objects.order_by("-depth"):
                q.delete()


def _analyze() -> None:
    """Planner statistics for the freshly loaded tables (autovacuum would get there within a
    minute on a live database; without them PostgreSQL picks nested loops over 200k events)."""
    with connection.cursor() as cur:
        cur.execute("ANALYZE")  # PostgreSQL and SQLite alike


def _row_counts() -> dict[str, int]:
    return {m.__name__: m.objects.count() for m in (Node, Queue, Workload, Task, SchedulingEvent, SchedulingCycle,
                                                     QuotaChange, AccountingInterval, UsageRecord,
                                                     QueueIntervalStat)}


# ----------------------------------------------------------------------------- the database


class Builder:
    """Writes a consistent large cluster in bulk; ``build`` returns seconds per stage."""

    def __init__(self, *, seed: int, out) -> None:
        self.rng = random.Random(seed)
        self.out = out
        self.now = timezone.now()

    def _stage(self, timings: dict[str, float], name: str, fn, *args) -> Any:
        t = time.perf_counter()
        with transaction.atomic():
            result = fn(*args)
        timings[name] = round(time.perf_counter() - t, 2)
        self.out.write(f"built {name} in {timings[name]:.1f} s")
        return result

    def build(self, *, nodes: int, workloads: int, departments: int, teams: int) -> dict[str, float]:
        timings: dict[str, float] = {}
        node_rows = self._stage(timings, "nodes", self.nodes, nodes)
        leaves, queues = self._stage(timings, "queues, tenants, budgets", self.queues, departments, teams)
        self._stage(timings, "workloads and tasks", self.workloads, workloads, node_rows, leaves)
        self._stage(timings, "queue statuses", self.statuses, queues)
        self._stage(timings, "cycles and events", self.cycles_and_events, len(node_rows), workloads)
        self._stage(timings, "usage history", self.usage, queues, leaves)
        t = time.perf_counter()
        _analyze()
        timings["analyze"] = round(time.perf_counter() - t, 2)
        return timings

    def nodes(self, n: int) -> list:
        rows = []
        for i in range(n):
            rack = i // NODES_PER_RACK
            rows.append(Node(
                name=f"gpu-r{rack:03d}-n{i % NODES_PER_RACK:02d}", gpus=GPUS_PER_NODE, gpu_memory_mib=81920,
                cpu_millis=128_000, memory_bytes=1024 * GIB,
                labels={"kai.scheduler/rack": f"rack-{rack:03d}", "topology.kubernetes.io/zone": f"zone-{rack % 4}",
                        "nvidia.com/gpu.product": "H100-80GB"},
                ready=self.rng.random() > 0.01, unschedulable=self.rng.random() < 0.01))
        Node.objects.bulk_create(rows, batch_size=1000)
        return list(Node.objects.order_by("id").values_list("id", "ready", "unschedulable"))

    def queues(self, departments: int, teams: int) -> tuple[list, list]:
        user_model = get_user_model()
        if not user_model.objects.filter(username="bench-admin").exists():
            user_model.objects.create_superuser("bench-admin", "bench@example.org", None)
        unlimited = {"quota": -1, "over_quota_weight": 1, "limit": -1}
        leaves, all_queues = [], []
        for d in range(departments):
            dept = queue_create(name=f"dept-{d:02d}", priority=100 + 10 * (d % 3), source="bench", quotas={
                "gpu": {"quota": 1200, "over_quota_weight": 1 + d % 3, "limit": -1},
                "cpu": unlimited, "memory": unlimited})
            all_queues.append(dept)
            for t in range(teams):
                # the first team of every third department asks for more than its share: a warning
                quota = 400 if (d % 3 == 0 and t == 0) else 100 + 10 * (t % 5)
                leaf = queue_create(name=f"dept-{d:02d}-team-{t:02d}", parent=dept, source="bench", quotas={
                    "gpu": {"quota": quota, "over_quota_weight": 1, "limit": 600 if t % 4 == 0 else -1},
                    "cpu": unlimited, "memory": {"quota": -1, "over_quota_weight": 1, "limit": 64 * 1024 * GIB}})
                leaves.append(leaf)
                all_queues.append(leaf)
            tenant_create(name=f"tenant-{d:02d}", display_name=f"Department {d}",
                          queues=[q for q in leaves if q.parent_id == dept.pk])
            budget_create(queue=dept, gpu_hours=200_000, period="MONTHLY", policy="report_only")
        return leaves, all_queues

    def workloads(self, n: int, node_rows: list, leaves: list) -> None:
        """~45% finished, the rest Running while the GPUs last (first fit), then Pending."""
        free = {pk: GPUS_PER_NODE for pk, ready, cordoned in node_rows if ready and not cordoned}
        order = list(free)
        cursor = 0
        tenants = dict((q.pk, q.tenants.values_list("id", flat=True).first()) for q in leaves)
        wl_rows, plans = [], []
        for i in range(n):
            leaf = leaves[i % len(leaves)]
            shape = self.rng.choice(((1, 1), (1, 2), (2, 1), (4, 1), (1, 8), (2, 8), (8, 1)))  # tasks x GPUs
            created = self.now - timedelta(minutes=self.rng.randint(1, 7 * 24 * 60))
            roll = self.rng.random()
            if roll < 0.45:
                status = self.rng.choice(("Succeeded", "Succeeded", "Failed", "Cancelled"))
            else:
                status = "Running"
            placement = None
            if status == "Running":
                placement = []
                need = [shape[1]] * shape[0]
                start = cursor
                for g in need:
                    while cursor < len(order) and free[order[cursor]] < g:
                        cursor += 1
                    if cursor >= len(order):
                        break
                    placement.append(order[cursor])
                    free[order[cursor]] -= g
                if len(placement) < len(need):  # the cluster is full: this one waits
                    for node_id, g in zip(placement, need):
                        free[node_id] += g
                    cursor = start
                    placement, status = None, "Pending"
            started = created + timedelta(minutes=1) if status != "Pending" and status != "Cancelled" else None
            finished = (started or created) + timedelta(minutes=30) if status in ("Succeeded", "Failed", "Cancelled") \
                else None
            wl_rows.append(Workload(
                queue_id=leaf.pk, name=f"job-{i:06d}", tenant_id=tenants[leaf.pk],
                priority=self.rng.choice((50, 50, 75, 100, 125)),
                preemptible=True, min_available=shape[0], status=status, created_at=created, started_at=started,
                finished_at=finished, stale_since=None))
            plans.append((shape, status, placement))
        Workload.objects.bulk_create(wl_rows, batch_size=2000)
        ids = list(Workload.objects.order_by("id").values_list("id", "name"))
        by_name = dict((name, pk) for pk, name in ids)
        tasks = []
        for w, (shape, status, placement) in zip(wl_rows, plans):
            wid = w.pk or by_name[w.name]
            for k in range(shape[0]):
                if status == "Running":
                    state, node = "Running", placement[k]
                elif status == "Pending":
                    state, node = "Pending", None
                elif status == "Cancelled":
                    state, node = "Failed", None
                else:
                    state, node = status, self.rng.choice(order) if order else None
                tasks.append(Task(workload_id=wid, name=f"{w.name}-{k}", index=k, gpu=Decimal(shape[1]),
                                  cpu_millis=8000 * shape[1], memory_bytes=64 * GIB * shape[1], state=state,
                                  node_id=node, gpu_groups=[]))
                if len(tasks) >= 5000:
                    Task.objects.bulk_create(tasks)
                    tasks = []
        Task.objects.bulk_create(tasks)

    def statuses(self, queues: list) -> None:
        parents = dict(Queue.objects.values_list("id", "parent_id"))
        alloc = allocation_by_queue(parents)
        counts: dict[int, list[int]] = {}
        for qid, status, n in Workload.objects.filter(status__in=("Pending", "Running")).values_list(
                "queue_id", "status").annotate(n=Count("id")).values_list("queue_id", "status", "n"):
            cur = qid
            while cur is not None:
                c = counts.setdefault(cur, [0, 0])
                c[0 if status == "Pending" else 1] += n
                cur = parents.get(cur)
        QueueStatus.objects.bulk_create([QueueStatus(
            queue_id=q.pk, allocated_gpu=alloc.get(q.pk, [0, 0, 0])[0], allocated_cpu=alloc.get(q.pk, [0, 0, 0])[1],
            allocated_memory=alloc.get(q.pk, [0, 0, 0])[2],
            fair_share_gpu=alloc.get(q.pk, [0, 0, 0])[0] * 1.1, fair_share_cpu=alloc.get(q.pk, [0, 0, 0])[1],
            fair_share_memory=alloc.get(q.pk, [0, 0, 0])[2], pending_workloads=counts.get(q.pk, [0, 0])[0],
            running_workloads=counts.get(q.pk, [0, 0])[1], updated_at=self.now) for q in queues])

    def cycles_and_events(self, nodes: int, workloads: int) -> None:
        """100 applied cycles a few seconds apart, each with replay blobs (what a real cycle keeps),
        and the pending workloads' three reasons in each of the last three cycles."""
        blob = os.urandom(256 * 1024)  # incompressible: the size a large cycle's compressed record has
        cycles = []
        for k in range(100):
            start = self.now - timedelta(seconds=5 * (100 - k))
            cycles.append(SchedulingCycle(
                generation=k + 1, status="applied", trigger="beat", started_at=start,
                finished_at=start + timedelta(seconds=2.5), nodes_count=nodes, queues_count=110,
                workloads_count=workloads, tasks_count=workloads * 2, bound_count=self.rng.randint(0, 40),
                pipelined_count=self.rng.randint(0, 5), evicted_count=self.rng.randint(0, 3),
                phase_durations={"snapshot": 0.4, "compute": 1.6, "apply": 0.5}, scenario_gz=blob, decisions_gz=blob))
        SchedulingCycle.objects.bulk_create(cycles)
        last = list(SchedulingCycle.objects.order_by("-started_at").values_list("id", "started_at")[:3])
        pending = list(Workload.objects.filter(status="Pending").values_list("id", "queue__name", "name"))
        events = []
        for cycle_id, at in last:
            for wid, qname, name in pending:
                events.append(SchedulingEvent(cycle_id=cycle_id, workload_id=wid, reason="Unschedulable", created_at=at,
                                              message="no node has room for the job's tasks (gpu=8, cpu=64, "
                                                      "memory=549755813888 free together on 0 candidate nodes)"))
                events.append(SchedulingEvent(cycle_id=cycle_id, workload_id=wid, reason="NotReclaiming", created_at=at,
                                              message=f"queue {qname} is at its fair share for gpu"))
                events.append(SchedulingEvent(cycle_id=cycle_id, workload_id=wid, reason="NotPreempting", created_at=at,
                                              message=f"preemption failed for job {name}: no eligible victims"))
                if len(events) >= 6000:
                    SchedulingEvent.objects.bulk_create(events)
                    events = []
        SchedulingEvent.objects.bulk_create(events)

    def usage(self, queues: list, leaves: list) -> None:
        """A day of one-minute accounting intervals and six days of hourly ones before it, one
        usage record per leaf queue and interval, one chart stat per queue and interval."""
        minute, hour = timedelta(minutes=1), timedelta(hours=1)
        end = self.now.replace(second=0, microsecond=0)
        bounds = [(end - timedelta(days=7) + k * hour, end - timedelta(days=7) + (k + 1) * hour) for k in range(144)]
        bounds += [(end - timedelta(days=1) + k * minute, end - timedelta(days=1) + (k + 1) * minute)
                   for k in range(1440)]
        intervals = [AccountingInterval(start=s, end=e, resolution=int((e - s).total_seconds()),
                                        covered_seconds=(e - s).total_seconds(), mid_epoch=(s + (e - s) / 2).timestamp(),
                                        samples=1, capacity_gpu=16000 * (e - s).total_seconds(), recorded_at=e)
                     for s, e in bounds]
        AccountingInterval.objects.bulk_create(intervals, batch_size=2000)
        ids = list(AccountingInterval.objects.order_by("start").values_list("id", "covered_seconds"))
        records, stats = [], []
        for iid, cov in ids:
            for leaf in leaves:
                held = 100 + 40 * self.rng.random()
                records.append(UsageRecord(interval_id=iid, queue_id=leaf.pk, queue_name=leaf.name, gpu=held * cov,
                                           cpu=held * 8 * cov, memory=held * 64 * GIB * cov))
            for q in queues:
                stats.append(QueueIntervalStat(interval_id=iid, queue_id=q.pk, queue_name=q.name,
                                               fair_share_gpu=120.0, usage_gpu=0.01))
            if len(records) >= 10000:
                UsageRecord.objects.bulk_create(records)
                QueueIntervalStat.objects.bulk_create(stats)
                records, stats = [], []
        UsageRecord.objects.bulk_create(records)
        QueueIntervalStat.objects.bulk_create(stats)


# ----------------------------------------------------------------------------- the pages


def _busiest_objects() -> dict[str, Any]:
    """The change page to time per model: the object with the most on it."""
    out: dict[str, Any] = {}
    out["queues_app.queue"] = Queue.objects.filter(parent__isnull=True).order_by("id").first()
    out["queues_app.workload"] = (Workload.objects.filter(status="Pending").annotate(n=Count("events"))
                                  .order_by("-n", "id").first())
    out["queues_app.node"] = Node.objects.annotate(n=Count("tasks")).order_by("-n", "id").first()
    return out


def time_pages(*, repeat: int, out) -> list[dict[str, Any]]:
    user = get_user_model().objects.filter(is_superuser=True).order_by("id").first()
    if user is None:
        user = get_user_model().objects.create_superuser("bench-admin", "bench@example.org", None)
    client = Client(SERVER_NAME="localhost")
    client.force_login(user)
    busiest = _busiest_objects()
    pages: list[tuple[str, str]] = [("dashboard", reverse("admin:index")),
                                    ("dashboard.json", reverse("admin:dashboard_data"))]
    for model, model_admin in sorted(admin.site._registry.items(), key=lambda kv: kv[0]._meta.label):
        opts = model._meta
        label = f"{opts.app_label}.{opts.model_name}"
        try:
            pages.append((f"{label} list", reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")))
        except NoReverseMatch:
            continue
        obj = busiest.get(label)
        pk = obj.pk if obj is not None else model.objects.order_by("pk").values_list("pk", flat=True).first()
        if pk is not None:
            pages.append((f"{label} change", reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[pk])))
        if model_admin.has_add_permission(_Request(user)):
            pages.append((f"{label} add", reverse(f"admin:{opts.app_label}_{opts.model_name}_add")))
    wl = busiest.get("queues_app.workload") or Workload.objects.order_by("id").first()
    leaf = Queue.objects.filter(children__isnull=True).order_by("id").first()
    node = busiest.get("queues_app.node") or Node.objects.first()
    extra = [
        ("workloads pending filter", reverse("admin:queues_app_workload_changelist") + "?status__exact=Pending"),
        ("workloads search", reverse("admin:queues_app_workload_changelist") + "?q=job-0049"),
        ("workloads last page", reverse("admin:queues_app_workload_changelist")
         + f"?p={max(1, -(-Workload.objects.count() // 100))}"),
        ("tasks on a node", reverse("admin:queues_app_task_changelist") + f"?node__id__exact={node.pk if node else 0}"),
        ("events of a workload", reverse("admin:queues_app_schedulingevent_changelist")
         + f"?workload__id__exact={wl.pk if wl else 0}"),
        ("fair-share charts (7 days)", reverse("admin:fairshare_charts")),
        ("what-if page", reverse("admin:queues_app_queue_whatif", args=[leaf.pk]) if leaf else ""),
    ]
    pages += [p for p in extra if p[1]]
    results = []
    out.write(f"\n{'page':44} {'median s':>9} {'max s':>7} {'cpu s':>7} {'queries':>8} {'KiB':>7}  status")
    for name, url in pages:
        first = client.get(url, follow=True)  # warm-up: templates, connections; a singleton's list redirects
        if first.redirect_chain:
            url = first.redirect_chain[-1][0]
        walls, cpus, queries, status, size = [], [], 0, 0, 0
        for _ in range(repeat):
            with CaptureQueriesContext(connection) as ctx:
                c0, w0 = time.process_time(), time.perf_counter()
                resp = client.get(url)
                if hasattr(resp, "render") and not resp.is_rendered:
                    resp.render()
                walls.append(time.perf_counter() - w0)
                cpus.append(time.process_time() - c0)
            queries, status, size = len(ctx.captured_queries), resp.status_code, len(resp.content)
        row = {"page": name, "url": url, "status": status, "median_s": round(statistics.median(walls), 4),
               "max_s": round(max(walls), 4), "cpu_s": round(statistics.median(cpus), 4), "queries": queries,
               "kib": round(size / 1024, 1)}
        results.append(row)
        out.write(f"{name:44} {row['median_s']:9.3f} {row['max_s']:7.3f} {row['cpu_s']:7.3f} {queries:8d} "
                  f"{row['kib']:7.1f}  {status}")
    return results


class _Request:
    """Just enough of a request for ModelAdmin permission checks and get_queryset."""

    def __init__(self, user) -> None:
        self.user = user
        self.GET: dict = {}
        self.META: dict = {}
