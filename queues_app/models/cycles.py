"""Records of scheduling cycles (written by the cycle, issue #4) and worker heartbeats."""
from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from queues_app.choices import CycleStatus, PendingCategory


class SchedulerState(models.Model):
    """Singleton (id=1) fencing row: the generation of the last applied cycle and a lease.

    The apply step locks this row, compares ``generation`` with the one its snapshot saw and
    increments it (reliability.md 2.1 safety step 1); ``lease_*`` lets a cycle skip cheaply
    while another holds an unexpired lease.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    generation = models.PositiveBigIntegerField(default=0)
    lease_holder = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="schedulerstate_singleton")]

    def __str__(self) -> str:
        return f"generation {self.generation}"


class SchedulingCycle(models.Model):
    """One scheduling cycle: when, how long each phase took, what it decided, how it ended."""

    generation = models.PositiveBigIntegerField(null=True, blank=True, unique=True,
                                                help_text="Set when the cycle applied.")
    status = models.CharField(max_length=16, choices=CycleStatus.choices, default=CycleStatus.RUNNING,
                              db_index=True)
    trigger = models.CharField(max_length=64, blank=True, help_text="beat, manual, api, ...")
    started_at = models.DateTimeField(default=timezone.now, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    nodes_count = models.PositiveIntegerField(default=0)
    queues_count = models.PositiveIntegerField(default=0)
    workloads_count = models.PositiveIntegerField(default=0)
    tasks_count = models.PositiveIntegerField(default=0)
    bound_count = models.PositiveIntegerField(default=0)
    pipelined_count = models.PositiveIntegerField(default=0)
    evicted_count = models.PositiveIntegerField(default=0)
    quarantined_count = models.PositiveIntegerField(
        default=0, help_text="Workloads the engine refused (left Pending with an Invalid event); see error.")
    apply_started_at = models.DateTimeField(null=True, blank=True,
                                            help_text="Inside the apply transaction, after the fencing lock (I8).")
    apply_finished_at = models.DateTimeField(null=True, blank=True)
    phase_durations = models.JSONField(default=dict, blank=True,
                                       help_text="Seconds per phase: snapshot, compute, apply, ...")
    error = models.TextField(blank=True)
    # replay (manage.py replay_cycle): the scenario dict the engine ran and its task decisions,
    # zlib-compressed JSON (queues_app/cycle/replay.py); empty for cycles that did not compute
    scenario_gz = models.BinaryField(null=True, blank=True, editable=False)
    decisions_gz = models.BinaryField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ("-started_at", "-id")
        constraints = [models.CheckConstraint(condition=Q(status__in=CycleStatus.values), name="cycle_status_valid")]

    def __str__(self) -> str:
        return f"cycle {self.pk} ({self.status})"


class SchedulingEvent(models.Model):
    """Why something happened (or did not) to a workload in a cycle, e.g. Unschedulable."""

    cycle = models.ForeignKey(SchedulingCycle, null=True, blank=True, on_delete=models.CASCADE, related_name="events")
    workload = models.ForeignKey("queues_app.Workload", null=True, blank=True, on_delete=models.CASCADE,
                                 related_name="events")
    task = models.ForeignKey("queues_app.Task", null=True, blank=True, on_delete=models.SET_NULL, related_name="events")
    reason = models.CharField(max_length=64, db_index=True)
    message = models.TextField(blank=True)
    category = models.CharField(
        max_length=16, blank=True, default="", choices=PendingCategory.choices,
        help_text="Why the workload waits, machine-readable (Unschedulable / NotScheduled events): only "
                  "'capacity' can be fixed by adding nodes.")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ("-created_at", "-id")

    def __str__(self) -> str:
        return f"{self.reason}: {self.message[:60]}"


class Heartbeat(models.Model):
    """A periodic marker written by ``kaiplatform.tasks.heartbeat``: proves worker + beat run."""

    source = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ("-created_at", "-id")

    def __str__(self) -> str:
        return f"{self.source} @ {self.created_at:%Y-%m-%d %H:%M:%S}"
