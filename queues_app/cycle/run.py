"""The scheduling cycle: lease -> snapshot -> engine -> apply (reliability.md 2.1, design B).

:func:`cycle_run` is the one entry point (the Celery task, ``manage.py run_cycle``, tests and
the benchmark all call it).  Every call records exactly one ``SchedulingCycle`` row --
``applied``, ``skipped`` (another cycle holds the lease), ``aborted`` (the fencing check
failed: another cycle applied since this one's snapshot, or its lease was taken over) or
``failed`` (engine error, refused decision set, database error) -- so ``skipped + aborted +
failed + applied = triggers`` can be checked from the table.  A process killed mid-cycle
writes nothing at all (all of a cycle's writes are in its apply transaction).

Safety does not depend on the lease: the apply transaction locks the ``SchedulerState`` row,
commits only if the generation is still the one the snapshot saw and the lease is still ours,
checks row versions (see ``cycle_apply``), and the database triggers refuse over-commitment.
The lease only keeps extra triggers cheap: a skipped trigger costs two small queries.

Dead holders do not block for the whole TTL: the lease names the holder's host, process id
and (PostgreSQL) database backend pid; a trigger that finds the backend gone (the process died
and PostgreSQL closed its session) or, on the same host, the process gone takes over at once.
"""
from __future__ import annotations

import gc
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from queues_app.choices import CycleStatus, PendingCategory, TaskState
from queues_app.cycle import apply as cycle_apply, engine_io, replay as cycle_replay
from queues_app.cycle.cluster import cycle_confirmations, fold_into_input
from queues_app.cycle.config import CycleConfig, cycle_config
from queues_app.cycle.faults import fault_point
from queues_app.errors import ApplicationError
from queues_app.models import SchedulerState, SchedulingCycle, SchedulingEvent, Task, Workload

logger = logging.getLogger("queues_app.cycle")

__all__ = ["CycleOutcome", "cycle_run", "cycle_record_skipped", "lease_acquire", "lease_release"]


@dataclass
class CycleOutcome:
    status: str
    cycle_id: int | None = None
    generation: int | None = None
    bound: int = 0
    pipelined: int = 0
    evicted: int = 0
    confirmed: int = 0
    dropped: int = 0
    events: int = 0
    quarantined: int = 0
    reason: str = ""
    phase_durations: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# ----------------------------------------------------------------------------- lease


def _holder_id() -> str:
    backend = ""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            backend = str(cur.fetchone()[0])
    return f"{socket.gethostname()}:{os.getpid()}:{backend}:{uuid.uuid4().hex[:12]}"


def _holder_dead(holder: str) -> bool:
    """Whether the process named by a lease is certainly gone (then its lease is worthless)."""
    parts = holder.split(":")
    if len(parts) != 4:
        return False
    host, pid, backend, _token = parts
    if connection.vendor == "postgresql" and backend.isdigit():
        with connection.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [int(backend)])
            if cur.fetchone() is None:
                return True
    if host == socket.gethostname() and pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
    return False


def lease_acquire(*, holder: str, ttl: float, now: datetime | None = None) -> tuple[bool, str]:
    """Take the cycle lease with one conditional UPDATE (free, expired, or held by a dead
    process).  Returns ``(acquired, reason)``; the reason explains a refusal."""
    now = now or timezone.now()
    expires = now + timedelta(seconds=ttl)
    SchedulerState.objects.get_or_create(id=1)
    free = Q(lease_holder="") | Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now)
    if SchedulerState.objects.filter(Q(id=1) & free).update(lease_holder=holder, lease_expires_at=expires,
                                                            updated_at=now):
        return True, ""
    row = SchedulerState.objects.filter(id=1).values("lease_holder", "lease_expires_at").first() or {}
    other = row.get("lease_holder") or ""
    if other and _holder_dead(other):
        if SchedulerState.objects.filter(id=1, lease_holder=other).update(lease_holder=holder, lease_expires_at=expires,
                                                                          updated_at=now):
            logger.warning("cycle lease of dead holder %s taken over by %s", other, holder)
            return True, ""
    return False, f"lease held by {other or '?'} until {row.get('lease_expires_at')}"


def lease_release(*, holder: str) -> None:
    SchedulerState.objects.filter(id=1, lease_holder=holder).update(lease_holder="", lease_expires_at=None)


# ----------------------------------------------------------------------------- planner statistics

#: Tables the snapshot and the apply read and write; their statistics decide every plan.
STATISTICS_TABLES = ("queues_app_task", "queues_app_workload", "queues_app_node", "queues_app_queue",
                     "queues_app_queueresource")
#: A table is re-analysed when more rows changed since its last ANALYZE than this many plus a
#: fraction of its live rows (autovacuum's own trigger is 50 + 10 %, but only every minute).
STATISTICS_MIN_CHANGES = 1000
STATISTICS_FRACTION = 0.2


def refresh_statistics() -> list[str]:
    """ANALYZE the cycle's tables whose statistics are stale (PostgreSQL); returns their names.

    Why: statistics taken while a table was small make PostgreSQL plan the snapshot's and the
    apply's joins as nested loops.  Right after a tenant submitted a 10,000-task gang into a
    small table, the next cycle's snapshot took 37 s and its apply 57 s (``UPDATE ... FROM
    unnest(...)`` scanned the whole task table once per row) -- autovacuum re-analyses only
    after up to a minute.  One query finds stale tables; ANALYZE samples at most 30,000 rows
    (~0.1 s for 10,000 tasks) and is skipped if it would wait for a lock.
    """
    if connection.vendor != "postgresql":
        return []
    done: list[str] = []
    with connection.cursor() as cur:
        cur.execute("SELECT relname FROM pg_stat_user_tables WHERE relname = ANY(%s) "
                    "AND n_mod_since_analyze > %s + %s * n_live_tup ORDER BY relname",
                    [list(STATISTICS_TABLES), STATISTICS_MIN_CHANGES, STATISTICS_FRACTION])
        stale = [row[0] for row in cur.fetchall()]
    for table in stale:
        try:
            with transaction.atomic(), connection.cursor() as cur:
                cur.execute("SET LOCAL lock_timeout = '500ms'")
                cur.execute(f"ANALYZE {connection.ops.quote_name(table)}")
            done.append(table)
        except DatabaseError:  # a concurrent VACUUM / ANALYZE holds the table: it is being done
            logger.info("cycle: ANALYZE %s skipped (table busy)", table)
    return done


# ----------------------------------------------------------------------------- records


def cycle_record_skipped(*, trigger: str, reason: str, started_at: datetime | None = None) -> SchedulingCycle:
    """One row for a trigger that did no work (lease held, or the broker expired it)."""
    now = timezone.now()
    return SchedulingCycle.objects.create(status=CycleStatus.SKIPPED, trigger=trigger[:64],
                                          started_at=started_at or now, finished_at=now, error=reason[:2000])


def _record_failed(*, trigger: str, started_at: datetime, holder: str, error: str, status: str,
                   phases: dict[str, Any]) -> SchedulingCycle | None:
    try:
        with transaction.atomic():
            row = SchedulingCycle.objects.create(status=status, trigger=trigger[:64], started_at=started_at,
                                                 finished_at=timezone.now(), error=error[:4000],
                                                 phase_durations=phases)
            lease_release(holder=holder)
        return row
    except DatabaseError:  # the database itself is the problem; the lease expires on its own
        logger.exception("could not record the failed cycle")
        return None


# ----------------------------------------------------------------------------- snapshot


@dataclass
class Snap:
    generation: int
    data: dict[str, Any]
    index: Any
    task_workload: dict[int, int]
    workload_status: dict[int, str]
    now: datetime
    excluded: dict[int, str] = field(default_factory=dict)  # workload id -> why it is not in the snapshot
    excluded_categories: dict[int, str] = field(default_factory=dict)  # workload id -> PendingCategory


def take_snapshot(*, now: datetime) -> Snap:
    """Everything the engine reads, from one consistent view of the database.

    PostgreSQL: a REPEATABLE READ transaction, so the six reads see one instant; SQLite: the
    transaction holds the database lock while reading.
    """
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if connection.vendor == "postgresql" and outermost:
            with connection.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        generation = SchedulerState.objects.values_list("generation", flat=True).get(id=1)
        engine_input = engine_io.build_engine_input(now=now)
        index = engine_input.index
        in_flight = [tid for tid, st in index.task_db_state.items()
                     if st in (TaskState.PIPELINED, TaskState.RELEASING, TaskState.STUCK_RELEASING)]
        node_of: dict[int, int] = {}
        wl_of: dict[int, int] = {}
        for i in range(0, len(in_flight), cycle_apply.CHUNK):
            for tid, nid, wid in Task.objects.filter(id__in=in_flight[i:i + cycle_apply.CHUNK]).values_list(
                    "id", "node_id", "workload_id"):
                node_of[tid], wl_of[tid] = nid, wid
        status = dict(Workload.objects.filter(id__in=set(wl_of.values())).values_list("id", "status")) if wl_of else {}
    node_name = {v: k for k, v in index.node_id.items()}
    index.pipelined_node = {t: n for t, n in node_of.items() if index.task_db_state[t] == TaskState.PIPELINED}
    index.released_node = {t: node_name.get(n) for t, n in node_of.items()
                           if index.task_db_state[t] != TaskState.PIPELINED}
    task_workload = {index.task_id[t["name"]]: index.workload_id[j["name"]]
                     for j in engine_input.data["jobs"] for t in j["tasks"]}
    return Snap(generation=generation, data=engine_input.data, index=index, task_workload=task_workload,
                workload_status=status, now=now, excluded=dict(engine_input.excluded_workloads),
                excluded_categories=dict(engine_input.excluded_categories))


# ----------------------------------------------------------------------------- the cycle


# Python's cyclic collector kept out of the cycle's bulk phases (snapshot + load, plan + apply), with the
# engine's own pause (scheduler_engine.collector, through engine_io). Why: each builds hundreds of
# thousands of dicts, tuples and dataclasses (134,000 tasks at 10,000 nodes) and holds them to the end of
# the cycle, so every few thousand allocations a collection walks all of them again without finding any
# garbage: at 10,000 nodes, 3.8 -> 2.4 s CPU of the snapshot, 2.1 -> 1.6 s of the load and 2.6 -> 1.6 s
# of the plan, same peak memory. The engine's compute keeps the collector (its actions pause it where it
# pays); whatever cyclic garbage these phases leave is collected when the collector resumes (no extra
# collection on exit). The previous state is restored.
_cyclic_gc_paused = partial(engine_io.cyclic_gc_paused, collect_young=False)


def cycle_run(*, trigger: str = "manual", now: datetime | None = None, config: CycleConfig | None = None,
              engine=None) -> CycleOutcome:
    """Run one scheduling cycle; never raises for cycle-level problems (they are recorded).

    ``now`` fixes the engine clock (tests); ``engine`` replaces ``engine_io.run_engine``
    (tests of the apply step with a deliberately wrong engine).
    """
    cfg = config or cycle_config()
    started_at = timezone.now()
    phases: dict[str, Any] = {}
    t0 = time.perf_counter()
    holder = _holder_id()
    acquired, why = lease_acquire(holder=holder, ttl=cfg.lease_seconds, now=started_at)
    phases["lease"] = round(time.perf_counter() - t0, 6)
    if not acquired:
        row = cycle_record_skipped(trigger=trigger, reason=why, started_at=started_at)
        return CycleOutcome(status=CycleStatus.SKIPPED, cycle_id=row.pk, reason=why, phase_durations=phases)
    fault_point("after_lock")
    try:
        t = time.perf_counter()
        if refresh_statistics():
            phases["statistics"] = round(time.perf_counter() - t, 6)
        t = time.perf_counter()
        with _cyclic_gc_paused():
            snap = take_snapshot(now=now or started_at)
        # The engine input (a few hundred thousand dicts and lists at 16,000 tasks) lives until the
        # apply and holds no reference cycles: keep the cyclic collector from walking it again at
        # every full collection of the engine's compute (unfrozen when the cycle ends).
        gc.freeze()
        phases["snapshot"] = round(time.perf_counter() - t, 6)
        fault_point("after_snapshot")

        t = time.perf_counter()
        with _cyclic_gc_paused():
            conf = cycle_confirmations(mode=cfg.cluster_mode, task_db_state=snap.index.task_db_state,
                                       task_workload=snap.task_workload, workload_status=snap.workload_status)
            fold_into_input(snap.data, task_id=snap.index.task_id, job_id=snap.index.workload_id, conf=conf)
            # Rows the engine refuses are quarantined (left out, reported), never a failed cycle.
            snapshot, quarantine = engine_io.load_quarantined(snap.data, snap.index)
        if quarantine:
            logger.warning("cycle: %s", quarantine.summary())
        phases["load"] = round(time.perf_counter() - t, 6)
        t = time.perf_counter()
        budget = max(0.0, cfg.engine_budget - (t - t0))  # counted from the cycle's start
        phases["engine_budget"] = round(budget, 6)
        result = (engine or partial(engine_io.run_engine, time_budget=budget))(snapshot)
        phases["compute"] = round(time.perf_counter() - t, 6)
        budget_note = _budget_note(getattr(result, "budget", None))
        if budget_note:
            logger.warning("cycle: %s", budget_note)
        phases["engine"] = {k: round(float(v), 6) for k, v in (getattr(result, "timings", {}) or {}).items()}
        fault_point("after_compute")

        t = time.perf_counter()
        with _cyclic_gc_paused():
            decided = engine_io.engine_decisions(snapshot=snapshot, data=snap.data, index=snap.index,
                                                 result=result)
            plan = cycle_apply.build_plan(decided=decided, index=snap.index, conf=conf,
                                          confirm_only=quarantine.jobs)
            phases["plan"] = round(time.perf_counter() - t, 6)
            outcome = _apply(plan=plan, snap=snap, holder=holder, trigger=trigger, started_at=started_at,
                             phases=phases, cfg=cfg, t0=t0,
                             replay=cycle_replay.cycle_replay_record(snap.data, result),
                             quarantine=quarantine, note=budget_note)
    except ApplicationError as exc:
        gc.unfreeze()
        logger.error("cycle refused: %s", exc)
        status = CycleStatus.FAILED
        row = _record_failed(trigger=trigger, started_at=started_at, holder=holder, error=str(exc), status=status,
                             phases=phases)
        return CycleOutcome(status=status, cycle_id=row.pk if row else None, reason=str(exc), phase_durations=phases)
    except Exception as exc:  # noqa: BLE001 - any failure is recorded, the next trigger retries
        gc.unfreeze()
        logger.exception("cycle failed")
        row = _record_failed(trigger=trigger, started_at=started_at, holder=holder,
                             error=f"{type(exc).__name__}: {exc}", status=CycleStatus.FAILED, phases=phases)
        return CycleOutcome(status=CycleStatus.FAILED, cycle_id=row.pk if row else None,
                            reason=f"{type(exc).__name__}: {exc}", phase_durations=phases)
    gc.unfreeze()
    fault_point("after_commit")
    return outcome


def _apply(*, plan: cycle_apply.Plan, snap: Snap, holder: str, trigger: str, started_at: datetime,
           phases: dict[str, Any], cfg: CycleConfig, t0: float,
           replay: dict[str, bytes] | None = None,
           quarantine: engine_io.Quarantine | None = None, note: str = "") -> CycleOutcome:
    quarantine = quarantine or engine_io.Quarantine()
    t = time.perf_counter()
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("SET LOCAL lock_timeout = %s", [f"{int(cfg.apply_lock_timeout * 1000)}ms"])
        state = SchedulerState.objects.select_for_update().get(id=1)
        if state.generation != snap.generation or state.lease_holder != holder:
            reason = (f"generation {state.generation} != snapshot generation {snap.generation}"
                      if state.generation != snap.generation else f"lease lost to {state.lease_holder or 'nobody'}")
            phases["apply"] = round(time.perf_counter() - t, 6)
            row = SchedulingCycle.objects.create(status=CycleStatus.ABORTED, trigger=trigger[:64],
                                                 started_at=started_at, finished_at=timezone.now(),
                                                 error=reason, phase_durations=phases)
            if state.lease_holder == holder:
                state.lease_holder, state.lease_expires_at = "", None
                state.save(update_fields=["lease_holder", "lease_expires_at"])
            return CycleOutcome(status=CycleStatus.ABORTED, cycle_id=row.pk, reason=reason, phase_durations=phases)
        apply_started = timezone.now()
        generation = state.generation + 1
        cycle = SchedulingCycle.objects.create(
            status=CycleStatus.APPLIED, generation=generation, trigger=trigger[:64], started_at=started_at,
            apply_started_at=apply_started, nodes_count=len(snap.data["nodes"]), queues_count=len(snap.data["queues"]),
            workloads_count=len(snap.data["jobs"]), tasks_count=len(plan.task_workload),
        )
        versions = cycle_apply.lock_and_read_versions(plan)
        drops = cycle_apply.compute_drops(plan, snap.index, versions)
        counts, final = cycle_apply.write_tasks(plan, drops, now=apply_started,
                                                mid_apply=lambda: fault_point("mid_apply"))
        cycle_apply.write_workloads(plan, final, now=apply_started)
        cycle_apply.write_queue_status(plan, cycle=cycle, now=apply_started)
        n_events = cycle_apply.write_events(plan, snap.index, drops, cycle=cycle, now=apply_started)
        n_events += cycle_apply.write_exclusion_events(snap.excluded, cycle=cycle, now=apply_started,
                                                       categories=snap.excluded_categories)
        n_events += cycle_apply.write_exclusion_events(quarantine.workloads, cycle=cycle, now=apply_started,
                                                       reason=engine_io.INVALID_REASON)
        cycle_apply.write_quarantine_messages(quarantine.workloads, now=apply_started)
        if cfg.cluster_mode == "kubernetes":  # the orders to the cluster commit with the decisions (issue #7)
            # imported here: the outbox loads the kubernetes client, which the embedded mode never needs
            from queues_app.kube.outbox import kube_outbox_write

            kube_outbox_write(plan=plan, final=final, drops=drops, index=snap.index, cycle=cycle, now=apply_started,
                              exclusions={wid: (snap.excluded_categories.get(wid, PendingCategory.INVALID), why)
                                          for wid, why in snap.excluded.items()})
        _prune(generation=generation, cfg=cfg)
        state.generation = generation
        state.lease_holder, state.lease_expires_at, state.updated_at = "", None, apply_started
        state.save(update_fields=["generation", "lease_holder", "lease_expires_at", "updated_at"])
        fault_point("before_commit")
        finished = timezone.now()
        phases["apply"] = round(time.perf_counter() - t, 6)
        phases["total"] = round(time.perf_counter() - t0, 6)
        SchedulingCycle.objects.filter(pk=cycle.pk).update(
            apply_finished_at=finished, finished_at=finished, bound_count=counts.bound,
            pipelined_count=counts.pipelined, evicted_count=counts.evicted, phase_durations=phases,
            quarantined_count=len(quarantine.workloads),
            error="\n".join(x for x in (note, _quarantine_note(quarantine)) if x)[:4000], **(replay or {}),
        )
    return CycleOutcome(status=CycleStatus.APPLIED, cycle_id=cycle.pk, generation=generation, bound=counts.bound,
                        pipelined=counts.pipelined, evicted=counts.evicted, confirmed=counts.confirmed,
                        dropped=counts.dropped, events=n_events, phase_durations=phases,
                        quarantined=len(quarantine.workloads),
                        reason="; ".join(x for x in (note, quarantine.summary()) if x))


def _budget_note(budget: dict[str, Any] | None) -> str:
    """For the cycle record: where the engine's time budget ran out ('' if it did not).  The jobs an
    action did not reach carry their own event ("Not tried by reclaim: ...")."""
    if not budget:
        return ""
    text = f"engine time budget of {engine_io.budget_text(budget)}"
    return text + " (raise KAI_CYCLE_ENGINE_BUDGET with the time limits, or lower scenarioSearchBudget)"


def _quarantine_note(quarantine: engine_io.Quarantine) -> str:
    """For the cycle record (``error`` of an applied cycle): what the engine refused, the queues
    and nodes by reason (their workloads carry their own events)."""
    if not quarantine:
        return ""
    lines = [quarantine.summary()]
    lines += [f"queue {qid}: {why}" for qid, why in list(quarantine.queues.items())[:20]]
    lines += [f"node {nid}: {why}" for nid, why in list(quarantine.nodes.items())[:20]]
    return "\n".join(lines)[:4000]


def _prune(*, generation: int, cfg: CycleConfig) -> None:
    """Keep the event table bounded (events of the last N applied cycles) and, every 100
    generations, delete cycle records older than the retention period."""
    cutoff = generation - cfg.event_retention_cycles
    if cutoff > 0:
        old = SchedulingCycle.objects.filter(generation__lte=cutoff, generation__gt=cutoff - 50).values("id")
        SchedulingEvent.objects.filter(cycle_id__in=old).delete()
    if generation % 100 == 0:
        horizon = timezone.now() - timedelta(hours=cfg.cycle_retention_hours)
        SchedulingEvent.objects.filter(cycle__started_at__lt=horizon).delete()
        SchedulingCycle.objects.filter(started_at__lt=horizon).delete()
