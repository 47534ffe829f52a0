"""Prometheus ``/metrics``: the scheduler's state, read from the database at scrape time.

The cycle runs in Celery worker processes and the scrape hits a web process, so in-process
counters would only ever show the web process's (empty) view.  Instead a custom collector
reads what the cycle recorded -- ``SchedulingCycle`` rows, ``QueueStatus`` -- with a fixed
number of queries (five, whatever the cluster size) into a fresh registry per scrape:

======================================  ===============================================
kai_cycle_phase_seconds{phase}          phase durations of the latest applied cycle
kai_cycle_duration_seconds              histogram over the applied cycles still recorded
kai_cycles_total{status}                cycle records by status (applied, skipped, ...)
kai_cycle_decisions{kind}               bound / pipelined / evicted in the latest cycle
kai_cycle_decisions_total{kind}         the same summed over the recorded cycles
kai_cycle_generation                    fencing generation of the latest applied cycle
kai_cycle_last_applied_timestamp        unix time the latest cycle finished applying
kai_queue_pending_workloads{queue}      pending workloads per queue (subtree)
kai_queue_running_workloads{queue}
kai_queue_allocated{queue,resource}     allocation per resource (gpu devices, cpu cores,
kai_queue_fair_share{queue,resource}    memory bytes), as the latest cycle wrote it
======================================  ===============================================
"""
from __future__ import annotations

from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from queues_app.choices import CycleStatus
from queues_app.models import QueueStatus, SchedulingCycle

BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
RESOURCES = ("gpu", "cpu", "memory")


class SchedulerCollector:
    """Yields the metric families above; one instance per scrape."""

    def collect(self):
        latest = (SchedulingCycle.objects.filter(status=CycleStatus.APPLIED).order_by("-generation")
                  .values("generation", "phase_durations", "bound_count", "pipelined_count", "evicted_count",
                          "apply_finished_at").first())
        phases = GaugeMetricFamily("kai_cycle_phase_seconds", "Phase durations of the latest applied cycle.",
                                   labels=["phase"])
        decisions = GaugeMetricFamily("kai_cycle_decisions", "Decisions of the latest applied cycle.", labels=["kind"])
        generation = GaugeMetricFamily("kai_cycle_generation", "Fencing generation of the latest applied cycle.")
        last = GaugeMetricFamily("kai_cycle_last_applied_timestamp", "Unix time the latest cycle finished applying.")
        if latest:
            for phase, seconds in sorted((latest["phase_durations"] or {}).items()):
                if isinstance(seconds, (int, float)):
                    phases.add_metric([phase], float(seconds))
            for kind in ("bound", "pipelined", "evicted"):
                decisions.add_metric([kind], float(latest[f"{kind}_count"]))
            generation.add_metric([], float(latest["generation"] or 0))
            if latest["apply_finished_at"]:
                last.add_metric([], latest["apply_finished_at"].timestamp())
        yield phases
        yield decisions
        yield generation
        yield last

        totals = CounterMetricFamily("kai_cycles", "Scheduling cycle records by outcome.", labels=["status"])
        by_status = dict(SchedulingCycle.objects.values_list("status").annotate(n=Count("id")).values_list("status",
                                                                                                           "n"))
        for status in CycleStatus.values:
            if status != CycleStatus.RUNNING:
                totals.add_metric([status], float(by_status.get(status, 0)))
        yield totals

        sums = SchedulingCycle.objects.filter(status=CycleStatus.APPLIED).aggregate(
            bound=Sum("bound_count"), pipelined=Sum("pipelined_count"), evicted=Sum("evicted_count"))
        dtotal = CounterMetricFamily("kai_cycle_decisions", "Decisions summed over the recorded cycles.",
                                     labels=["kind"])
        for kind in ("bound", "pipelined", "evicted"):
            dtotal.add_metric([kind], float(sums[kind] or 0))
        yield dtotal

        durations = [d.get("total") for d in SchedulingCycle.objects.filter(status=CycleStatus.APPLIED)
                     .order_by("-generation").values_list("phase_durations", flat=True)[:1000]]
        durations = [float(d) for d in durations if isinstance(d, (int, float))]
        buckets, acc = [], 0
        for bound in BUCKETS:
            acc = sum(1 for d in durations if d <= bound)
            buckets.append((str(bound), float(acc)))
        buckets.append(("+Inf", float(len(durations))))
        yield HistogramMetricFamily("kai_cycle_duration_seconds",
                                    "End-to-end duration of the (at most 1000) latest applied cycles.",
                                    buckets=buckets, sum_value=float(sum(durations)))

        pending = GaugeMetricFamily("kai_queue_pending_workloads", "Pending workloads per queue (subtree).",
                                    labels=["queue"])
        running = GaugeMetricFamily("kai_queue_running_workloads", "Running workloads per queue (subtree).",
                                    labels=["queue"])
        alloc = GaugeMetricFamily("kai_queue_allocated", "Allocation per queue and resource (gpu devices, cpu cores, "
                                  "memory bytes).", labels=["queue", "resource"])
        fair = GaugeMetricFamily("kai_queue_fair_share", "Fair share per queue and resource.",
                                 labels=["queue", "resource"])
        for row in QueueStatus.objects.values("queue__name", "pending_workloads", "running_workloads",
                                              *[f"allocated_{r}" for r in RESOURCES],
                                              *[f"fair_share_{r}" for r in RESOURCES]).order_by("queue__name"):
            q = row["queue__name"]
            pending.add_metric([q], float(row["pending_workloads"]))
            running.add_metric([q], float(row["running_workloads"]))
            for r in RESOURCES:
                alloc.add_metric([q, r], float(row[f"allocated_{r}"]))
                fair.add_metric([q, r], float(row[f"fair_share_{r}"]))
        yield pending
        yield running
        yield alloc
        yield fair


def _token() -> str:
    import os

    from django.conf import settings

    return str(getattr(settings, "KAI_METRICS_TOKEN", "") or os.environ.get("KAI_METRICS_TOKEN", "")).strip()


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus text exposition of :class:`SchedulerCollector` (GET only).

    Queue names and sizes are operator information: with ``KAI_METRICS_TOKEN`` set, the
    scraper must send ``Authorization: Bearer <token>`` (compared in constant time).
    """
    import hmac

    if request.method not in ("GET", "HEAD"):
        return HttpResponse(status=405, headers={"Allow": "GET, HEAD"})
    token = _token()
    if token:
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return HttpResponse("authentication required\n", status=401, content_type="text/plain",
                                headers={"WWW-Authenticate": "Bearer"})
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SchedulerCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
