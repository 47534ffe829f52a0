"""Turn an engine result into database writes, check it, and apply it in one transaction.

Three steps, each with its own reason:

1. :func:`build_plan` takes the engine's decisions by database id (``engine_io.EngineDecisions``:
   typed, numeric, mapped once at the boundary) and computes one :class:`TaskWrite` per task that
   changes.  It
   also *validates* the decision set against the snapshot the engine saw: a placement on a
   task that was not pending, on an unknown / cordoned / not-ready node, or one that leaves a
   node or a shared device over-committed is an engine bug, so the whole cycle is refused
   (:class:`DecisionSetRefused`) and nothing is written (reliability.md T-R3).
2. :func:`apply_plan` runs in one short transaction: it locks the fencing row
   (``SchedulerState``), then the rows the decisions depend on (workloads, tasks, nodes,
   queues, in that order -- the order ``workload_cancel`` uses), and drops only the decisions
   whose inputs changed since the snapshot (a task cancelled, a node edited, a quota edited).
   Dropping only frees capacity, so it is always safe; a dropped decision drags along what
   depends on it (the rest of its gang, the evictions and pipelined placements sharing its
   node) until nothing else changes.
3. The database triggers of migration 0004 refuse any statement that still over-commits a
   node's GPU devices -- the last line if both checks above were wrong.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Mapping

from django.db import connection
from django.db.models import Count

from queues_app.choices import WORKLOAD_STATUSES_STARTED, PendingCategory, TaskState, WorkloadStatus
from queues_app.cycle.cluster import Confirmations
from queues_app.cycle.engine_io import INVALID_PREFIX, EngineDecisions, EngineEvent, NodeFigures, TaskDecision
from queues_app.cycle.rollup import allocation_by_queue, roll_up, workload_status_of
from queues_app.errors import ApplicationError
from queues_app.models import Node, Queue, QueueStatus, SchedulingCycle, SchedulingEvent, Task, Workload

EPS = 1e-6
#: States in which a task holds its node's resources (invariant I1).
HOLDING = (TaskState.RUNNING, TaskState.BINDING, TaskState.RELEASING, TaskState.STUCK_RELEASING)
PLACE_STATES = (TaskState.BINDING, TaskState.PIPELINED)
HOLDING_OR_PIPELINED = frozenset(HOLDING + (TaskState.PIPELINED,))
CHUNK = 900
#: Rows per UPDATE / SELECT ... FOR UPDATE statement of the apply on PostgreSQL (array parameters):
#: bounded, so no statement carries an unbounded payload.
UPDATE_BATCH = 5000


class DecisionSetRefused(ApplicationError):
    """The engine returned decisions that cannot be right; nothing of the cycle is written."""


# ----------------------------------------------------------------------------- plan


@dataclass
class Target:
    state: str
    node_id: int | None
    groups: list[str]
    #: claimed devices held on the node (dynamic resource allocation): {device class: [index, ...]}
    devices: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class TaskWrite:
    """One task's change.  ``confirm`` is what the cluster confirmed (always applied while the
    row is unchanged); ``decision`` is what the engine decided on top of it (may be dropped)."""

    task_id: int
    workload_id: int
    version: int
    db_state: str
    db_node_id: int | None
    confirm: Target | None = None
    decision: Target | None = None
    kind: str = ""  # bind | pipeline | evict | unpipeline | "" (confirmation only)

    @property
    def final(self) -> Target | None:
        return self.decision or self.confirm

    @property
    def decision_node(self) -> int | None:
        """The node a decision depends on: the target of a placement, the current node of an eviction."""
        if self.kind in ("bind", "pipeline"):
            return self.decision.node_id if self.decision else None
        if self.kind == "evict":
            return self.db_node_id
        return None


@dataclass
class Plan:
    writes: dict[int, TaskWrite]
    #: every exported task id -> its workload id (whole gangs, for statuses)
    task_workload: dict[int, int]
    workload_tasks: dict[int, list[int]]
    #: final state of every exported task if every write applies
    final_state: dict[int, str]
    task_gpu: dict[int, float]
    workload_name: dict[int, str]
    workload_queue: dict[int, int]
    queue_ancestors: dict[int, set[int]]
    events: tuple[EngineEvent, ...]
    queue_fair_share: dict[int, dict[str, float]]
    node_ids: set[int]
    counts: dict[str, int] = field(default_factory=dict)


def build_plan(*, decided: EngineDecisions, index: Any, conf: Confirmations,
               confirm_only: Iterable[Mapping[str, Any]] = ()) -> Plan:
    """Map the engine's decisions to task writes and validate the decision set (see module doc).

    ``decided``: the engine's result by database id (``engine_io.engine_decisions``), numbers
    included, so nothing is parsed here.  ``confirm_only``: jobs the engine did not see
    (quarantined): their tasks get the cluster's confirmations (a bind that took effect, a pod
    that is gone) and nothing else."""
    node_id = decided.node_id
    nodes = decided.nodes
    queue_ancestors: dict[int, set[int]] = {}
    for qid in decided.queue_parent:
        chain, cur, seen = set(), qid, 0
        while cur is not None and seen < 1000:
            chain.add(cur)
            cur, seen = decided.queue_parent.get(cur), seen + 1
        queue_ancestors[qid] = chain

    errors: list[str] = []
    writes: dict[int, TaskWrite] = {}
    task_workload: dict[int, int] = {}
    workload_tasks: dict[int, list[int]] = defaultdict(list)
    final_state: dict[int, str] = {}
    task_gpu: dict[int, float] = {}
    workload_name: dict[int, str] = {}
    workload_queue: dict[int, int] = {}
    # per node: list of (task, final state, groups)
    on_node: dict[str, list[tuple[TaskDecision, str, tuple[str, ...]]]] = defaultdict(list)
    placed_nodes: set[str] = set()
    # per workload: (task, node) of its Pipelined tasks if everything applies
    pipelined_on: dict[int, list[tuple[str, str]]] = defaultdict(list)

    node_name = {v: k for k, v in node_id.items()}
    pipelined_node: dict[int, int] = getattr(index, "pipelined_node", {}) or {}
    released_node: dict[int, str] = getattr(index, "released_node", {}) or {}
    task_version, task_db_state = index.task_version, index.task_db_state
    for job in decided.jobs:
        wid = job.workload_id
        workload_name[wid] = job.name
        workload_queue[wid] = job.queue_id
        for task in job.tasks:
            tname = task.name
            tid = task.task_id
            task_workload[tid] = wid
            workload_tasks[wid].append(tid)
            task_gpu[tid] = task.gpu
            db_state = task_db_state[tid]
            base_state = task.given_state  # exported state, after cluster confirmations
            base_node = task.given_node
            db_node_id = pipelined_node.get(tid) if db_state == TaskState.PIPELINED else node_id.get(base_node)
            if tid in conf.released:
                db_node_id = node_id.get(released_node.get(tid))
            status = task.status
            e_node = task.node
            e_groups = task.groups
            held = task.held_devices

            confirm: Target | None = None
            if tid in conf.bound:
                confirm = Target(TaskState.RUNNING, node_id.get(base_node), list(task.given_groups), dict(held))
            elif tid in conf.released:
                confirm = Target(conf.released[tid], None, [])

            decision: Target | None = None
            kind = ""
            # final (state, node name, groups) if everything applies, for the capacity check
            fin = (db_state, node_name.get(db_node_id) if db_node_id is not None else None, e_groups)
            if confirm is not None:
                fin = (confirm.state, base_node if confirm.state == TaskState.RUNNING else None, e_groups)
            # A consolidation move: the engine pipelines a running task on another node -- or on
            # another GPU of its own node (a shared-GPU task) -- or undoes the move for a later
            # victim, leaving it Pending. One task row cannot be in both places, so a move is
            # applied as the eviction of the task from its own node; once the release is
            # confirmed the task is Pending and a later cycle places it.
            moved = base_state == TaskState.RUNNING and (
                (status == TaskState.PENDING and db_state != TaskState.PIPELINED)
                or status == TaskState.PIPELINED)
            if status == TaskState.RELEASING or moved:
                if base_state == TaskState.RUNNING:
                    kind = "evict"
                    groups = task.given_groups
                    decision = Target(TaskState.RELEASING, node_id.get(base_node), list(groups), dict(held))
                    fin = (TaskState.RELEASING, base_node, groups if moved else e_groups)
                elif base_state not in (TaskState.RELEASING, TaskState.STUCK_RELEASING):
                    errors.append(f"task {tname} is {base_state} in the snapshot; the engine cannot evict it")
            elif status in PLACE_STATES:
                if base_state != TaskState.PENDING:
                    errors.append(f"task {tname} is {base_state} in the snapshot; the engine cannot place it ({status})")
                elif e_node not in nodes:
                    errors.append(f"task {tname} placed on unknown node {e_node!r}")
                else:
                    if not nodes[e_node].schedulable:
                        errors.append(f"task {tname} placed on node {e_node} that is cordoned or not ready")
                    placed_nodes.add(e_node)
                    fin = (status, e_node, e_groups)
                    if not (db_state == status == TaskState.PIPELINED and db_node_id == node_id[e_node]):
                        kind = "bind" if status == TaskState.BINDING else "pipeline"
                        decision = Target(status, node_id[e_node], list(e_groups), dict(task.devices))
            elif status == TaskState.PENDING and db_state == TaskState.PIPELINED:
                kind = "unpipeline"
                decision = Target(TaskState.PENDING, None, [])
                fin = (TaskState.PENDING, None, ())
            elif status != base_state:
                errors.append(f"task {tname}: the engine turned {base_state} into {status}")

            if confirm is not None or decision is not None:
                writes[tid] = TaskWrite(task_id=tid, workload_id=wid, version=task_version[tid],
                                        db_state=db_state, db_node_id=db_node_id,
                                        confirm=confirm, decision=decision, kind=kind)
            final_state[tid] = fin[0]
            if fin[1] is not None and fin[0] in HOLDING_OR_PIPELINED:
                on_node[fin[1]].append((task, fin[0], fin[2]))
            if fin[0] == TaskState.PIPELINED and fin[1] is not None:
                pipelined_on[wid].append((tname, fin[1]))

    for job in confirm_only:
        wid = index.workload_id[job["name"]]
        workload_name[wid] = job["name"]
        for task in job.get("tasks", ()):
            tid = index.task_id.get(task.get("name"))
            if tid is None:
                continue
            task_workload[tid] = wid
            workload_tasks[wid].append(tid)
            db_state = task_db_state[tid]
            confirm = None
            if tid in conf.bound:
                confirm = Target(TaskState.RUNNING, node_id.get(task.get("node")),
                                 [str(g) for g in (task.get("gpuGroups") or ())])
            elif tid in conf.released:
                confirm = Target(conf.released[tid], None, [])
            final_state[tid] = confirm.state if confirm else db_state
            if confirm is not None:
                db_node_id = node_id.get(task.get("node"))
                if tid in conf.released:
                    db_node_id = node_id.get(released_node.get(tid))
                writes[tid] = TaskWrite(task_id=tid, workload_id=wid, version=task_version[tid],
                                        db_state=db_state, db_node_id=db_node_id, confirm=confirm)

    for nname in sorted(placed_nodes):
        errors.extend(_node_problems(nodes[nname], on_node.get(nname, [])))
    errors.extend(_pipelined_problems(pipelined_on, on_node, workload_name))
    if errors:
        shown = "; ".join(errors[:10]) + (f"; and {len(errors) - 10} more" if len(errors) > 10 else "")
        raise DecisionSetRefused("The engine's decision set is inconsistent; nothing was applied.",
                                 extra={"decisions": [shown]})

    node_ids = {w.decision_node for w in writes.values() if w.decision_node is not None}
    node_ids |= {w.db_node_id for w in writes.values() if w.db_node_id is not None}
    return Plan(writes=writes, task_workload=task_workload, workload_tasks=dict(workload_tasks),
                final_state=final_state, task_gpu=task_gpu, workload_name=workload_name,
                workload_queue=workload_queue, queue_ancestors=queue_ancestors, events=decided.events,
                queue_fair_share={q: dict(v) for q, v in decided.fair_share.items()}, node_ids=node_ids)


def _pipelined_problems(pipelined_on: Mapping[int, list[tuple[str, str]]],
                        on_node: Mapping[str, list[tuple[TaskDecision, str, tuple[str, ...]]]],
                        workload_name: Mapping[int, str]) -> list[str]:
    """A task is Pipelined only onto resources that are releasing (issue #18; the engine's own
    ``scheduler_engine.invariants``): a workload with Pipelined tasks has one of them on a node
    where a task is Releasing once the decisions apply (a moved task is applied as its eviction,
    so it is Releasing on the node it ran on). KAI pipelines a gang as a whole, hence per workload."""
    releasing = {n for n, lst in on_node.items() if any(st == TaskState.RELEASING for _t, st, _g in lst)}
    out = []
    for wid, placed in pipelined_on.items():
        if not any(n in releasing for _t, n in placed):
            nodes = ", ".join(sorted({n for _t, n in placed}))
            out.append(f"workload {workload_name.get(wid, wid)} pipelined on {nodes} where nothing is releasing")
    return out


def _node_problems(node: NodeFigures, tasks: list[tuple[TaskDecision, str, tuple[str, ...]]]) -> list[str]:
    """Over-commitment of one node after the decisions (whole devices, shared devices, cpu, memory).

    Binding/Running/Releasing must fit next to each other; a Pipelined task must fit once the
    Releasing tasks are gone.
    """
    name = node.name
    gpus = node.gpus
    dev_mem = node.gpu_memory
    cap = {"gpu": node.free_gpu, "cpu": node.free_cpu, "memory": node.free_memory}
    problems = []
    for label, include in (("now", {*HOLDING}), ("after releases", {TaskState.RUNNING, TaskState.BINDING,
                                                                    TaskState.STUCK_RELEASING, TaskState.PIPELINED})):
        used = {"gpu": 0.0, "cpu": 0.0, "memory": 0.0}
        whole = 0.0
        shared: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for t, s, groups in tasks:
            if s not in include:
                continue
            g = t.gpu
            gm = t.gpu_memory
            used["cpu"] += t.cpu
            used["memory"] += t.memory
            if g >= 1:
                whole += g
                used["gpu"] += g
            elif g > 0 or gm > 0:
                key = groups[0] if groups else f"?{id(t)}"
                frac = g if g > 0 else (gm / dev_mem if dev_mem > 0 else 0.0)
                shared[key][0] += frac
                shared[key][1] += gm
        used["gpu"] += float(len(shared)) if shared else 0.0
        if whole + len(shared) > gpus + EPS:
            problems.append(f"node {name} over-committed {label}: {whole:g} whole + {len(shared)} shared GPU devices "
                            f"> {gpus:g}")
        for res in ("cpu", "memory"):
            if used[res] > cap[res] + EPS and used[res] > 0:
                problems.append(f"node {name} over-committed {label} in {res}: {used[res]:g} > {cap[res]:g}")
        for key, (frac, mem) in shared.items():
            if frac > 1 + EPS:
                problems.append(f"shared GPU {key} on node {name} over-committed {label}: fractions sum to {frac:g}")
            if dev_mem > 0 and mem > dev_mem + EPS:
                problems.append(f"shared GPU {key} on node {name} over-committed {label}: {mem:g} MiB > {dev_mem:g}")
    return problems


# ----------------------------------------------------------------------------- drops


@dataclass
class Versions:
    task: dict[int, tuple[int, str]]
    workload: dict[int, int]
    node: dict[int, int]
    queue: dict[int, int]


def _chunks(ids: Iterable[int]) -> Iterable[list[int]]:
    ids = sorted(set(ids))
    for i in range(0, len(ids), CHUNK):
        yield ids[i:i + CHUNK]


def _lock_rows(model, ids: Iterable[int], columns: tuple[str, ...]) -> list[tuple]:
    """``SELECT id, columns FROM table WHERE id IN ids ORDER BY id FOR UPDATE``, set-based.

    PostgreSQL: ``id = ANY(%s)`` with one array parameter per UPDATE_BATCH ids (ordered, so
    every locker takes row locks in the same order).  SQLite: the ORM in chunks
    (``select_for_update`` is a no-op there; BEGIN IMMEDIATE already serializes writers)."""
    ids = sorted(set(ids))
    if not ids:
        return []
    if connection.vendor != "postgresql":
        out: list[tuple] = []
        for chunk in _chunks(ids):
            out.extend(model.objects.filter(id__in=chunk).order_by("id").values_list("id", *columns))
        return out
    table = model._meta.db_table
    cols = ", ".join(("id", *columns))
    out = []
    with connection.cursor() as cur:
        for i in range(0, len(ids), UPDATE_BATCH):
            cur.execute(f"SELECT {cols} FROM {table} WHERE id = ANY(%s::bigint[]) ORDER BY id FOR UPDATE",
                        [ids[i:i + UPDATE_BATCH]])
            out.extend(cur.fetchall())
    return out


def lock_and_read_versions(plan: Plan) -> Versions:
    """Lock what the decisions depend on (workloads, tasks, nodes, queues -- fixed order) and
    read the current versions."""
    wv = {wid: ver for wid, ver in _lock_rows(Workload, {w.workload_id for w in plan.writes.values()}, ("version",))}
    tv = {tid: (ver, st) for tid, ver, st in _lock_rows(Task, plan.writes, ("version", "state"))}
    nv = {nid: ver for nid, ver in _lock_rows(Node, plan.node_ids, ("version",))}
    # FOR NO KEY UPDATE: a quota edit (FOR UPDATE) still waits for the apply, but inserting a row
    # that references a queue (a submit's workload, the accounting's usage rows: FOR KEY SHARE)
    # does not -- with FOR UPDATE the accounting and the apply deadlocked under load.
    qv = dict(Queue.objects.select_for_update(no_key=True).order_by("id").values_list("id", "version"))
    return Versions(task=tv, workload=wv, node=nv, queue=qv)


def compute_drops(plan: Plan, index: Any, versions: Versions) -> dict[int, str]:
    """Decisions to drop (task id -> reason) and writes to skip entirely (reason starts with '!').

    Seeds: a task row whose version or state changed (the whole write is skipped); a workload
    whose version changed (cancelled, edited: its decisions are dropped); a node whose version
    changed or that is gone; a queue on the workload's path whose version changed (quota
    edit).  Closure: a dropped placement drops the rest of its gang's placements; a dropped
    pipelined placement drops the evictions on its node (the victims it needed); a dropped
    eviction drops the rest of that victim gang's evictions and every pipelined placement on
    its node (they counted on its resources); a skipped release confirmation drops every
    placement on its node (the engine counted those resources as free).  Binding placements
    on free resources do not depend on each other: dropping one only frees capacity.
    """
    drops: dict[int, str] = {}
    changed_queues = {q for q, v in index.queue_version.items() if versions.queue.get(q) != v}
    changed_nodes = {n for n in plan.node_ids if versions.node.get(n) != index.node_version.get(n)}
    by_node: dict[int, list[int]] = defaultdict(list)
    by_workload: dict[tuple[int, str], list[int]] = defaultdict(list)
    for tid, w in plan.writes.items():
        if w.kind in ("bind", "pipeline", "evict"):
            by_node[w.decision_node].append(tid)
            by_workload[(w.workload_id, "place" if w.kind != "evict" else "evict")].append(tid)

    frontier: list[int] = []
    for tid, w in plan.writes.items():
        current = versions.task.get(tid)
        if current is None or current[0] != w.version or current[1] != w.db_state:
            drops[tid] = "!task changed since the snapshot"
            frontier.append(tid)
            continue
        if w.kind in ("bind", "pipeline", "evict", "unpipeline"):
            reason = None
            if versions.workload.get(w.workload_id) != index.workload_version.get(w.workload_id):
                reason = "workload changed since the snapshot"
            elif w.kind != "unpipeline" and plan.queue_ancestors.get(plan.workload_queue.get(w.workload_id), set()) \
                    & changed_queues:
                reason = "queue quota or settings changed since the snapshot"
            elif w.kind != "unpipeline" and w.decision_node in changed_nodes:
                reason = "node changed since the snapshot"
            if reason:
                drops[tid] = reason
                frontier.append(tid)
    # release confirmations on changed nodes are still facts; decisions on those nodes are not
    for n in changed_nodes:
        for tid in by_node.get(n, ()):
            if tid not in drops:
                drops[tid] = "node changed since the snapshot"
                frontier.append(tid)

    def drop(other: int, why: str) -> None:
        if other not in drops:
            drops[other] = why
            frontier.append(other)

    seen: set[tuple] = set()
    while frontier:
        tid = frontier.pop()
        w = plan.writes[tid]
        todo: list[tuple] = []
        if w.kind in ("bind", "pipeline"):
            todo.append(("gang-place", w.workload_id))
        if w.kind == "pipeline":
            todo.append(("evictions-on", w.decision_node))
        if w.kind == "evict":
            todo.append(("gang-evict", w.workload_id))
            todo.append(("pipelines-on", w.decision_node))
        if drops[tid].startswith("!") and w.confirm is not None and w.db_node_id is not None \
                and w.confirm.state != TaskState.RUNNING:
            todo.append(("placements-on", w.db_node_id))
        for key in todo:
            if key in seen:
                continue
            seen.add(key)
            what, ref = key
            if what == "gang-place":
                for o in by_workload.get((ref, "place"), ()):
                    drop(o, "another decision of the same gang was dropped")
            elif what == "gang-evict":
                for o in by_workload.get((ref, "evict"), ()):
                    drop(o, "another eviction of the same gang was dropped")
            else:
                kinds = {"evictions-on": ("evict",), "pipelines-on": ("pipeline",),
                         "placements-on": ("bind", "pipeline")}[what]
                for o in by_node.get(ref, ()):
                    if plan.writes[o].kind in kinds:
                        drop(o, "a decision it depends on (same node) was dropped")
    return drops


# ----------------------------------------------------------------------------- writes


@dataclass
class ApplyCounts:
    bound: int = 0
    pipelined: int = 0
    evicted: int = 0
    confirmed: int = 0
    dropped: int = 0
    task_writes: int = 0


def _bulk_set(table: str, columns: list[tuple[str, str]], rows: list[tuple], *, now: datetime,
              constants: Mapping[str, Any] | None = None) -> int:
    """Set columns of many rows by id, set-based, UPDATE_BATCH rows per statement.

    PostgreSQL: ``UPDATE table SET col = v.col, ... FROM unnest(%s::bigint[], %s::type[], ...)
    AS v(id, col, ...) WHERE table.id = v.id`` -- one array per column, so a batch is one
    statement with a handful of parameters (no per-row placeholders for the driver to parse, no
    per-row CASE).  SQLite: ``UPDATE ... FROM (VALUES ...)`` in chunks within its parameter
    limit.  ``columns`` are ``(name, postgres type)``; the first value of every row is the id;
    ``constants`` are columns set to one value for every row (e.g. the target state).
    """
    if not rows:
        return 0
    pg = connection.vendor == "postgresql"
    names = ["id"] + [c for c, _ in columns]
    types = ["bigint"] + [t for _, t in columns]
    fixed = dict(constants or {})
    assign = ", ".join([f"{c} = v.{c}" for c, _ in columns] + [f"{c} = %s" for c in fixed])
    stamp = connection.ops.adapt_datetimefield_value(now)
    done = 0
    with connection.cursor() as cur:
        if pg:
            arrays = ", ".join(f"%s::{t}[]" for t in types)
            sql = (f"UPDATE {table} SET {assign}, updated_at = %s FROM unnest({arrays}) AS v({', '.join(names)}) "
                   f"WHERE {table}.id = v.id")
            for i in range(0, len(rows), UPDATE_BATCH):
                chunk = rows[i:i + UPDATE_BATCH]
                cur.execute(sql, [*fixed.values(), stamp, *[list(col) for col in zip(*chunk)]])
                done += cur.rowcount
        else:
            select = ", ".join(f"column{i + 1} AS {names[i]}" for i in range(len(names)))
            per = max(1, 900 // len(names))
            for i in range(0, len(rows), per):
                chunk = rows[i:i + per]
                marks = ", ".join("(" + ", ".join(["%s"] * len(names)) + ")" for _ in chunk)
                sql = (f"UPDATE {table} SET {assign}, updated_at = %s FROM (SELECT {select} FROM (VALUES {marks}) "
                       f"AS vv) AS v WHERE {table}.id = v.id")
                cur.execute(sql, [*fixed.values(), stamp] + [x for row in chunk for x in row])
                done += cur.rowcount
    if done != len(rows):
        raise ApplicationError("Apply failed.", extra={table: [f"{len(rows) - done} row(s) vanished during apply"]})
    return done


TASK_COLUMNS = [("node_id", "bigint"), ("gpu_groups", "jsonb"), ("devices", "jsonb"), ("version", "bigint")]


def _write_task_rows(rows: list[tuple[str, int, int | None, list[str], dict, int]], *, now: datetime) -> None:
    """``(state, id, node_id, gpu_groups, devices, version)`` rows: one UPDATE per target state (in
    bounded batches), the state a constant of the statement."""
    by_state: dict[str, list[tuple]] = defaultdict(list)
    for state, tid, node, groups, devices, version in rows:
        by_state[state].append((tid, node, json.dumps(list(groups)), json.dumps(dict(devices)), version))
    for state in sorted(by_state):
        _bulk_set("queues_app_task", TASK_COLUMNS, by_state[state], now=now, constants={"state": str(state)})


def write_tasks(plan: Plan, drops: Mapping[int, str], *, now: datetime, mid_apply=None) -> tuple[ApplyCounts, dict[int, str]]:
    """Write the surviving task changes: first those that free resources (releases,
    un-pipelining), then the rest, so every statement leaves the nodes within capacity (the
    guard triggers check after each statement on PostgreSQL and after each row on SQLite)."""
    counts = ApplyCounts()
    freeing: list[tuple] = []
    adding: list[tuple] = []
    moved = 0
    final: dict[int, str] = dict(plan.final_state)
    for tid, w in plan.writes.items():
        reason = drops.get(tid)
        if reason is not None and reason.startswith("!"):
            final[tid] = w.db_state
            counts.dropped += 1 if w.decision is not None else 0
            continue
        target = w.confirm if reason is not None else w.final
        if reason is not None and w.decision is not None:
            counts.dropped += 1
        if target is None:
            final[tid] = w.db_state
            continue
        final[tid] = target.state
        row = (target.state, tid, target.node_id, target.groups,
               target.devices if target.node_id is not None else {}, w.version + 1)
        if target is w.decision:
            if w.kind == "bind":
                counts.bound += 1
            elif w.kind == "pipeline":
                counts.pipelined += 1
            elif w.kind == "evict":
                counts.evicted += 1
        if w.confirm is not None:
            counts.confirmed += 1
        neutral = w.db_state in HOLDING and target.state in HOLDING and target.node_id == w.db_node_id
        if target.state not in HOLDING and target.state not in PLACE_STATES or neutral:
            freeing.append(row)
            continue
        if w.db_state in HOLDING and w.db_node_id is not None and target.node_id != w.db_node_id:
            # a move (a released task placed again elsewhere in the same cycle): leave the old
            # node in the freeing statement first, or a task arriving there earlier in the adding
            # statement would find it still held (SQLite's guard checks every row)
            freeing.append((TaskState.PENDING, tid, None, [], {}, w.version + 1))
            moved += 1
        adding.append(row)
    _write_task_rows(freeing, now=now)
    if mid_apply is not None:
        mid_apply()
    _write_task_rows(adding, now=now)
    counts.task_writes = len(freeing) + len(adding) - moved
    return counts, final


def write_workloads(plan: Plan, final: Mapping[int, str], *, now: datetime) -> int:
    """Status, started_at and stale_since of every workload with a task write."""
    wids = {w.workload_id for w in plan.writes.values()}
    if not wids:
        return 0
    # plain rows, not model instances: a fill cycle reads 16,000 workloads here
    rows = []
    for chunk in _chunks(wids):
        rows.extend(Workload.objects.filter(id__in=chunk).values_list(
            "id", "status", "started_at", "stale_since", "min_available", "version"))
    adapt = connection.ops.adapt_datetimefield_value
    changed = []
    running = (TaskState.RUNNING, TaskState.BINDING)
    for wid, current, was_started, was_stale, min_available, version in rows:
        states = [final[t] for t in plan.workload_tasks.get(wid, ())]
        status = workload_status_of(states, current, min_available)
        active = sum(1 for s in states if s in running)
        started_at = was_started or (now if active else None)
        stale_since = was_stale
        if active == 0 or active >= min_available:
            stale_since = None
        elif stale_since is None and was_started is not None:
            stale_since = now
        if (status, started_at, stale_since) != (current, was_started, was_stale):
            changed.append((wid, status, adapt(started_at), adapt(stale_since), version + 1))
    _bulk_set("queues_app_workload",
              [("status", "varchar"), ("started_at", "timestamptz"), ("stale_since", "timestamptz"),
               ("version", "bigint")], changed, now=now)
    return len(changed)


def write_queue_status(plan: Plan, *, cycle: SchedulingCycle, now: datetime) -> None:
    """Allocation from the tasks as now written (so I5 holds by construction, also when some
    decisions were dropped); fair share from the engine; workload counts.  Units: gpu devices,
    cpu cores, memory bytes."""
    parents = dict(Queue.objects.values_list("id", "parent_id"))
    alloc = allocation_by_queue(parents)
    counts: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for qid, status, n in Workload.objects.filter(
            status__in=(WorkloadStatus.PENDING, *WORKLOAD_STATUSES_STARTED)).values_list("queue_id", "status").annotate(
            n=Count("id")).values_list("queue_id", "status", "n"):
        vec = [float(n), 0.0] if status == WorkloadStatus.PENDING else [0.0, float(n)]
        roll_up(counts, parents, qid, vec)
    rows = []
    for qid in parents:
        a = alloc.get(qid, [0.0, 0.0, 0.0])
        fs = plan.queue_fair_share.get(qid, {})
        c = counts.get(qid, [0.0, 0.0])
        rows.append(QueueStatus(
            queue_id=qid, cycle=cycle, allocated_gpu=round(a[0], 6), allocated_cpu=round(a[1], 6),
            allocated_memory=a[2], fair_share_gpu=_finite(fs.get("gpu")), fair_share_cpu=_finite(fs.get("cpu")),
            fair_share_memory=_finite(fs.get("memory")), pending_workloads=int(c[0]), running_workloads=int(c[1]),
            updated_at=now,
        ))
    QueueStatus.objects.bulk_create(
        rows, update_conflicts=True, unique_fields=["queue"],
        update_fields=["cycle", "allocated_gpu", "allocated_cpu", "allocated_memory", "fair_share_gpu",
                       "fair_share_cpu", "fair_share_memory", "pending_workloads", "running_workloads", "updated_at"],
        batch_size=500,
    )


def _finite(x: Any) -> float:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return 0.0
    return f if math.isfinite(f) else 0.0


#: (column, PostgreSQL type) of the event rows the cycle inserts; created_at is one value.
_EVENT_COLUMNS = (("cycle_id", "bigint"), ("workload_id", "bigint"), ("task_id", "bigint"), ("reason", "varchar"),
                  ("message", "text"), ("category", "varchar"))


def _insert_events(rows: list[tuple], *, now: datetime) -> int:
    """Insert event rows (tuples in ``_EVENT_COLUMNS`` order), UPDATE_BATCH per statement.

    A contended 10,000-node cycle explains ~43,000 pending jobs: as ``bulk_create`` (1,000 rows of
    seven placeholders per statement) the driver spent seconds building the statements. PostgreSQL:
    ``INSERT ... SELECT * FROM unnest(%s::bigint[], ...)``, one array per column, rows in order;
    SQLite: ``executemany`` of one prepared INSERT."""
    if not rows:
        return 0
    qn = connection.ops.quote_name
    table = qn(SchedulingEvent._meta.db_table)
    cols = ", ".join(qn(c) for c, _ in _EVENT_COLUMNS) + ", " + qn("created_at")
    stamp = connection.ops.adapt_datetimefield_value(now)
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            arrays = ", ".join(f"%s::{t}[]" for _, t in _EVENT_COLUMNS)
            names = [f"c{i}" for i in range(len(_EVENT_COLUMNS))]
            # ORDER BY the ordinality: ids follow the engine's event order (the API lists by -id)
            sql = (f"INSERT INTO {table} ({cols}) SELECT {', '.join(names)}, %s FROM unnest({arrays}) "
                   f"WITH ORDINALITY AS u({', '.join(names)}, n) ORDER BY n")
            for i in range(0, len(rows), UPDATE_BATCH):
                cur.execute(sql, [stamp, *[list(col) for col in zip(*rows[i:i + UPDATE_BATCH])]])
        else:
            marks = ", ".join(["%s"] * (len(_EVENT_COLUMNS) + 1))
            cur.executemany(f"INSERT INTO {table} ({cols}) VALUES ({marks})", [(*row, stamp) for row in rows])
    return len(rows)


def write_events(plan: Plan, index: Any, drops: Mapping[int, str], *, cycle: SchedulingCycle, now: datetime) -> int:
    """The engine's explanations, plus one event per workload that lost decisions."""
    rows = [(cycle.pk, ev.workload_id, ev.task_id, ev.reason[:64], ev.text, _category(ev.category))
            for ev in plan.events]
    dropped_by_workload: dict[int, list[str]] = defaultdict(list)
    for tid, reason in drops.items():
        w = plan.writes[tid]
        if w.decision is not None:
            dropped_by_workload[w.workload_id].append(reason.lstrip("!"))
    for wid, reasons in dropped_by_workload.items():
        rows.append((cycle.pk, wid, None, "DecisionDropped",
                     f"{len(reasons)} decision(s) not applied: {sorted(set(reasons))[0]}; the next cycle decides again",
                     ""))
    return _insert_events(rows, now=now)


#: The categories an event row may carry (``TextChoices.values`` builds a new list at every use, and a
#: contended 10,000-node cycle checks ~43,000 events).
_CATEGORIES = frozenset(PendingCategory.values)


def _category(value: Any) -> str:
    """An engine event's category if it is one we know ('' otherwise: never a write error)."""
    return value if isinstance(value, str) and value in _CATEGORIES else ""


def write_exclusion_events(excluded: Mapping[int, str], *, cycle: SchedulingCycle, now: datetime,
                           categories: Mapping[int, str] | None = None, reason: str = "NotScheduled") -> int:
    """Why a workload was left out of the snapshot (a gang still waiting for its pods, a queue
    tree corrupted by raw SQL, a row the engine refuses: ``reason`` Invalid): one event each, so
    "why pending" has an answer; its category is ``categories[wid]`` (``gang``), else ``invalid``."""
    categories = categories or {}
    return _insert_events([(cycle.pk, wid, None, reason, why[:1000],
                            _category(categories.get(wid)) or PendingCategory.INVALID)
                           for wid, why in excluded.items()], now=now)


def write_quarantine_messages(quarantined: Mapping[int, str], *, now: datetime) -> None:
    """``Workload.status_message`` = the quarantine reason (shown by the admin and the API) for
    the workloads the engine refused; cleared on active workloads no longer refused.  Not a
    version bump: nothing a cycle decides on changed."""
    stale = Workload.objects.filter(status__in=(WorkloadStatus.PENDING, WorkloadStatus.RUNNING,
                                                WorkloadStatus.RELEASING),
                                    status_message__startswith=INVALID_PREFIX)
    if quarantined:
        stale = stale.exclude(id__in=list(quarantined))
    stale.update(status_message="")
    if not quarantined:
        return
    current: dict[int, str] = {}
    for chunk in _chunks(quarantined):
        current.update(Workload.objects.filter(id__in=chunk).values_list("id", "status_message"))
    changed = [(wid, msg[:1000]) for wid, msg in quarantined.items() if wid in current and current[wid] != msg[:1000]]
    _bulk_set("queues_app_workload", [("status_message", "varchar")], changed, now=now)


def vendor_is_postgres() -> bool:
    return connection.vendor == "postgresql"
