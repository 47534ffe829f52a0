"""The engine boundary: the ONE Django module that imports ``scheduler_engine``.

Two directions, nothing else:

* DB -> engine.  :func:`build_engine_input` reads the live state with a fixed number of SQL queries
  (one per table, whatever the number of rows) into a scenario-format dict -- the engine's
  documented input, so what the cycle schedules can be exported as a file and replayed with
  ``python -m scheduler_engine cycle FILE`` -- plus an :class:`EngineIndex` mapping snapshot rows
  back to database ids and row versions; :func:`load_quarantined` loads it into a ``Snapshot``,
  leaving out (by database id, with reasons) what the engine refuses.
* engine -> DB.  :func:`engine_decisions` turns the engine's ``CycleResult`` (dicts keyed by
  scenario names) into :class:`EngineDecisions`: frozen dataclasses keyed by database ids, with
  numeric resources read from the snapshot's arrays (cpu millicores, memory bytes, gpu devices,
  gpu memory MiB), which ``apply`` checks and writes without parsing anything again.

State mapping DB -> scenario: ``Binding`` exports as ``Running`` (the bind was issued, the node is
taken) and ``Pipelined`` as ``Pending`` without a node, exactly the rewrite the format defines
between rounds.  Workloads are exported while active, or while a task still holds node resources
(e.g. a cancelled workload whose pods are terminating).  The row -> scenario conversions
(``node_scenario``, ``task_scenario`` ...) are also what the contract checks at every door use
(``contract``), so a door accepts exactly what the engine will be given.

The other tools on the cycle's path reach the engine through thin pass-throughs here and keep their
own logic in their modules: ``contract`` (input checks), ``dryrun``, ``whatif``
(:func:`preview_edits`), ``replay`` (:func:`run_engine`), ``scenario`` (import),
``rollup.sub_group_status`` (:func:`subgroup_tree_status`) and fairshare_app's usage windows.
The engine's cycle, actions and simulator are imported where they run: they load the numba
kernels (~0.4 s), which a web process that only checks input never needs.

May import: ``scheduler_engine``, queues_app models, choices, errors, ``cycle.fields`` and
``cycle.usage``; nothing else of the cycle (the cycle modules import this one).
"""
from __future__ import annotations

import importlib
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np
from django.conf import settings
from django.db.models import Exists, OuterRef, Q, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from queues_app.choices import TASK_STATES_HOLDING, WORKLOAD_STATUSES_ACTIVE, PendingCategory, Resource, TaskState
from queues_app.cycle import usage as usage_provider
from queues_app.cycle.fields import job_field, node_field, queue_field
from queues_app.models import DeviceClass, Node, Queue, QueueResource, SubGroup, Task, Workload
from scheduler_engine import loader as engine_loader, units as engine_units, usage as engine_usage
from scheduler_engine.budget import summary_text as budget_text
from scheduler_engine.collector import cyclic_gc_paused
from scheduler_engine.result import build_result
from scheduler_engine.snapshot import CPU, GPU, MEM, Snapshot, TaskState as EngineTaskState
from scheduler_engine.state import CycleState
from scheduler_engine.subgroups import tree_status as subgroup_tree_status

__all__ = [
    "CPU",
    "cyclic_gc_paused",
    "GPU",
    "MEM",
    "EngineTaskState",
    "Snapshot",
    "ScenarioError",
    "EngineIndex",
    "EngineInput",
    "EngineDecisions",
    "JobDecision",
    "TaskDecision",
    "NodeFigures",
    "EngineEvent",
    "Quarantine",
    "build_engine_input",
    "build_scenario_dict",
    "build_snapshot",
    "build_snapshot_with_index",
    "load_quarantined",
    "snapshot_from_dict",
    "load_scenario_file",
    "run_engine",
    "budget_text",
    "run_actions",
    "engine_decisions",
    "preview_edits",
    "check_job",
    "validate_queue",
    "validate_node",
    "engine_label_key_problem",
    "subgroup_tree_status",
    "usage_period_reset",
    "usage_window_start",
]

ScenarioError = engine_loader.ScenarioError
DEFAULT_SCENARIO_NAME = "kaiplatform live state"


# ----------------------------------------------------------------------------- index


@dataclass
class EngineIndex:
    """Scenario names -> database ids, and database ids -> row versions at snapshot time.

    Use :meth:`aligned` to get id arrays in snapshot order (``ids.task[t]`` is the Task id
    of snapshot task ``t``).
    """

    node_id: dict[str, int] = field(default_factory=dict)
    queue_id: dict[str, int] = field(default_factory=dict)
    workload_id: dict[str, int] = field(default_factory=dict)
    task_id: dict[str, int] = field(default_factory=dict)
    node_version: dict[int, int] = field(default_factory=dict)
    queue_version: dict[int, int] = field(default_factory=dict)
    workload_version: dict[int, int] = field(default_factory=dict)
    task_version: dict[int, int] = field(default_factory=dict)
    #: DB state of each exported task (so the cycle knows a "Pending" input was Pipelined).
    task_db_state: dict[int, str] = field(default_factory=dict)

    def aligned(self, snapshot: Snapshot) -> "AlignedIds":
        return AlignedIds(
            node=np.array([self.node_id[n] for n in snapshot.nodes.names], dtype=np.int64),
            queue=np.array([self.queue_id[n] for n in snapshot.queues.names], dtype=np.int64),
            workload=np.array([self.workload_id[n] for n in snapshot.jobs.names], dtype=np.int64),
            task=np.array([self.task_id[n] for n in snapshot.tasks.names], dtype=np.int64),
        )


@dataclass
class AlignedIds:
    node: np.ndarray
    queue: np.ndarray
    workload: np.ndarray
    task: np.ndarray


@dataclass
class EngineInput:
    """The scenario dict, its index, and what was left out because the database is corrupt
    (e.g. a queue cycle written by raw SQL): the rest is still scheduled, and the cycle can
    report ``excluded_workloads`` as events instead of failing as a whole."""

    data: dict[str, Any]
    index: EngineIndex
    excluded_queues: dict[str, str] = field(default_factory=dict)  # queue name -> reason
    excluded_workloads: dict[int, str] = field(default_factory=dict)  # workload id -> reason
    #: workload id -> PendingCategory of its exclusion (``gang`` for a gang waiting for its pods;
    #: absent = ``invalid``)
    excluded_categories: dict[int, str] = field(default_factory=dict)


def _corrupt_queues(rows: list[dict[str, Any]]) -> dict[int, str]:
    """Queues whose ancestry is broken (a cycle, or a parent that does not exist), and all
    their descendants.  The services never create these; raw SQL can."""
    parent = {q["id"]: q["parent_id"] for q in rows}
    name = {q["id"]: q["name"] for q in rows}
    bad: dict[int, str] = {}
    for qid in parent:
        chain, current = [qid], parent[qid]
        reason = None
        while current is not None:
            if current not in parent:
                reason = f"queue {name[chain[-1]]!r} has a parent that does not exist"
                break
            if current in chain:
                reason = "the queue tree has a cycle through " + " -> ".join(
                    name[c] for c in chain[chain.index(current):] + [current])
                break
            if current in bad:
                reason = bad[current]
                break
            chain.append(current)
            current = parent[current]
        if reason is not None:
            bad[qid] = reason
    return bad


# ----------------------------------------------------------------------------- helpers


def _num(x: Decimal | float | int) -> int | float:
    """Integral values as int (files read ``4``, not ``4.0``); others as float."""
    if isinstance(x, Decimal):
        return int(x) if x == x.to_integral_value() else float(x)
    f = float(x)
    return int(f) if f.is_integer() else f


def seconds_or_none(d: timedelta | None) -> float | None:
    """A duration as the scenario's seconds (None stays None)."""
    return None if d is None else _num(d.total_seconds())



def _minutes_ago(now: datetime, then: datetime | None) -> int | float | None:
    if then is None:
        return None
    return _num(max(0.0, (now - then).total_seconds() / 60.0))


def _iso(now: datetime) -> str:
    return now.astimezone(dt_timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ").replace(".000000Z", "Z")


def _usage_from_provider() -> dict[str, dict[str, float]]:
    path = getattr(settings, "KAI_USAGE_PROVIDER", None)
    if not path:
        return {}
    module, _, attr = path.rpartition(".")
    return dict(getattr(importlib.import_module(module), attr)() or {})


def _fairshare_inputs(now: datetime) -> dict[str, Any]:
    """The usage provider's part of the engine input (fairshare_app registers itself, issue #6):
    ``{"usage": {queue: {resource: U}}, "config": {"kValue": k}, "queues": {queue: {resource:
    {field: value}}}}`` (accounting history, operator settings, exhausted GPU budgets); empty when
    no provider is registered."""
    return usage_provider.engine_inputs(now=now)


def _unique_names(names: list[str], qualifiers: list[str], ids: list[int] | None = None) -> list[str]:
    """Names unique in the export: a name used twice is qualified ``<qualifier>/<name>``; one still
    used twice (workload names are unique per tenant and queue, so two tenants' workloads in one
    queue may share a name) also gets ``~<id>`` (outside the name characters: the redaction of
    engine messages still finds ``<qualifier>/<name>``)."""
    counts = Counter(names)
    out = [f"{q}/{n}" if counts[n] > 1 else n for n, q in zip(names, qualifiers)]
    if ids is not None:
        again = Counter(out)
        out = [f"{o}~{i}" if again[o] > 1 else o for o, i in zip(out, ids)]
    return out


# ----------------------------------------------------------------------------- rows in scenario form
#
# One conversion of a row (database / service units) into the engine's scenario form, used by the
# export the cycle schedules AND by the checks every door runs: what a door accepted is exactly
# what the engine will be given.


def _as_given(value: Any, kind: type) -> Any:
    """A JSON column's value as the engine should see it: a copy when it has the right shape,
    otherwise the value itself (written by raw SQL), so the engine names the problem instead
    of this conversion crashing or silently reshaping it."""
    if value is None:
        return kind()
    return kind(value) if isinstance(value, kind) else value


def _merge_selectors(workload: Any, task: Any) -> Any:
    """The workload's node selector under the task's own (both label maps); a malformed one is
    passed on as it is, for the engine to refuse."""
    workload, task = _as_given(workload, dict), _as_given(task, dict)
    if not isinstance(workload, dict):
        return workload
    if not isinstance(task, dict):
        return task
    return {**workload, **task}


def node_scenario(n: Mapping[str, Any]) -> dict[str, Any]:
    """A Node row (or node_upsert fields) as a scenario node (``devices``: its DRA devices)."""
    node = {
        "name": n["name"],
        "gpus": int(n["gpus"]),
        "gpuMemory": int(n["gpu_memory_mib"]),
        "cpu": f"{int(n['cpu_millis'])}m",
        "memory": int(n["memory_bytes"]),
        "labels": _as_given(n["labels"], dict),
        "unschedulable": bool(n["unschedulable"]),
        "ready": bool(n["ready"]),
        "reservedByOthers": {
            "gpu": _num(n["reserved_gpus"]),
            "cpu": f"{int(n['reserved_cpu_millis'])}m",
            "memory": int(n["reserved_memory_bytes"]),
        },
    }
    devices = _as_given(n.get("devices"), dict)
    if devices:
        node["devices"] = devices
    return node


def device_classes_scenario() -> list[dict[str, Any]]:
    """The DeviceClass rows as the scenario's ``deviceClasses`` (one query)."""
    return [{"name": c["name"], **({"countsAs": "gpu"} if c["counts_as"] == "gpu" else {})}
            for c in DeviceClass.objects.order_by("name").values("name", "counts_as")]


def queue_resource_scenario(r: Mapping[str, Any]) -> dict[str, Any]:
    """A QueueResource row (quota, over_quota_weight, limit) as a scenario queue resource."""
    return {"quota": _num(r["quota"]), "overQuotaWeight": _num(r["over_quota_weight"]), "limit": _num(r["limit"])}


def task_scenario(t: Mapping[str, Any], *, selector: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Task row / task spec (gpu, gpu_memory_mib, cpu_millis, memory_bytes, priority,
    node_selector, name) as a scenario task; the workload's ``selector`` is merged under the
    task's own, as the cycle exports it."""
    gm = t.get("gpu_memory_mib")
    task: dict[str, Any] = {
        "gpu": _num(t.get("gpu") or 0),
        "gpuMemory": int(gm) if gm else None,
        "cpu": f"{int(t.get('cpu_millis') or 0)}m",
        "memory": int(t.get("memory_bytes") or 0),
        "priority": t.get("priority"),
        "nodeSelector": _merge_selectors(selector, t.get("node_selector")),
    }
    if t.get("name") is not None:
        task["name"] = t["name"]
    sub_group = t.get("sub_group__name", t.get("sub_group"))
    if sub_group is not None:
        task["subGroup"] = sub_group
    claims = t.get("claims")
    if claims:
        task["claims"] = _claims_scenario(claims)
    return task


def _claims_scenario(claims: Any) -> Any:
    """A task's ``claims`` (``[{device_class, count}]``) as the scenario's ``[{deviceClass, count}]``;
    a malformed value is passed on for the engine to name."""
    if not isinstance(claims, list):
        return claims
    return [{"deviceClass": c.get("device_class"), "count": c.get("count", 1)} if isinstance(c, dict) else c
            for c in claims]


def sub_group_scenario(g: Mapping[str, Any]) -> dict[str, Any]:
    """A subgroup spec / SubGroup row (``name``, ``parent`` or ``parent__name``, ``min_available``,
    ``min_sub_groups``, ``topology_*``) as a scenario ``subGroups`` entry."""
    entry: dict[str, Any] = {"name": g.get("name"), "parent": g.get("parent__name", g.get("parent")) or None}
    if g.get("min_available") is not None:
        entry["minAvailable"] = g["min_available"]
    if g.get("min_sub_groups") is not None:
        entry["minSubGroups"] = g["min_sub_groups"]
    if g.get("topology_required") or g.get("topology_preferred"):
        entry["topology"] = {"required": g.get("topology_required") or None,
                             "preferred": g.get("topology_preferred") or None}
    return entry


def _values(queryset: Any, fields: tuple[str, ...], json_fields: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """``queryset.values(*fields, *json_fields)`` with the JSON columns read as text and parsed once
    per distinct text.

    Why: Django's JSONField converter runs ``json.loads`` on every row's value; at 10,000 nodes the
    134,000 exported tasks' four JSON columns took ~1 s of the snapshot's CPU, while they hold a
    handful of distinct values (``{}``, ``[]``, a few selectors).  The parsed values are shared
    between rows, so the rows are read-only: every conversion below copies before it changes one
    (``_as_given``, ``_merge_selectors``, ``_claims_scenario``).  SQL NULL stays ``None`` and a
    JSON ``null`` parses to ``None``, as the converter gives them.
    """
    text = {f"{name}__json_text": Cast(name, TextField()) for name in json_fields}
    parsed: dict[str | None, Any] = {None: None}
    rows = list(queryset.annotate(**text).values_list(*fields, *text))
    n = len(fields)
    names = fields + json_fields
    out = []
    for row in rows:
        values = list(row)
        for i in range(n, len(values)):
            raw = values[i]
            try:
                values[i] = parsed[raw]
            except KeyError:
                values[i] = parsed[raw] = json.loads(raw)
        out.append(dict(zip(names, values)))
    return out


# ----------------------------------------------------------------------------- DB -> scenario


def build_engine_input(
    *,
    now: datetime | None = None,
    config: Mapping[str, Any] | None = None,
    usage: Mapping[str, Mapping[str, float]] | None = None,
    name: str = DEFAULT_SCENARIO_NAME,
    fairshare: bool = True,
) -> EngineInput:
    """Read the scheduling state into a scenario dict and its :class:`EngineIndex`.

    Exactly seven queries (device classes, nodes, queues, queue resources, workloads,
    subgroups, tasks), plus whatever the usage provider runs.  Call it inside a REPEATABLE READ / read-only transaction if all
    five must see one snapshot (PostgreSQL); on SQLite a transaction already gives that.
    ``config`` keys (scenario names) override ``settings.KAI_SCHEDULER_CONFIG``; ``now``
    defaults to the current time; ``usage`` to ``settings.KAI_USAGE_PROVIDER``'s result, else
    fairshare_app's normalised usage.  Unless ``usage`` is given (a caller-controlled what-if)
    or ``fairshare=False``, fairshare_app also supplies ``kValue`` (operator settings; an
    explicit ``config["kValue"]`` wins) when there is usage, and exhausted GPU budgets'
    policies as overrides of queue resources (a few more queries).
    """
    now = now or timezone.now()
    index = EngineIndex()

    device_classes = device_classes_scenario()
    node_devices: dict[str, dict[str, int]] = {}
    nodes = []
    # ordered in Python (not by the database collation): the engine breaks placement ties by node
    # order, so SQLite and PostgreSQL decide the same and a preview that adds nodes orders as a cycle
    # after adding them would (scheduler_engine.simulate.apply_edits sorts the same way)
    for n in sorted(_values(Node.objects.all(), (
        "id", "name", "gpus", "gpu_memory_mib", "cpu_millis", "memory_bytes", "unschedulable", "ready",
        "reserved_gpus", "reserved_cpu_millis", "reserved_memory_bytes", "version"), ("labels", "devices"),
    ), key=lambda n: n["name"]):
        index.node_id[n["name"]] = n["id"]
        index.node_version[n["id"]] = n["version"]
        nodes.append(node_scenario(n))
        if nodes[-1].get("devices") and isinstance(nodes[-1]["devices"], dict):
            node_devices[n["name"]] = nodes[-1]["devices"]

    resources: dict[int, dict[str, dict[str, Any]]] = {}
    for r in QueueResource.objects.values("queue_id", "resource", "quota", "over_quota_weight", "limit"):
        resources.setdefault(r["queue_id"], {})[r["resource"]] = queue_resource_scenario(r)
    default_res = {"quota": 0, "overQuotaWeight": 1, "limit": -1}
    queue_rows = list(Queue.objects.order_by("path", "name").values(
        "id", "name", "parent_id", "priority", "created_at", "reclaim_min_runtime", "preempt_min_runtime", "version",
    ))
    corrupt = _corrupt_queues(queue_rows)
    excluded_queues = {q["name"]: corrupt[q["id"]] for q in queue_rows if q["id"] in corrupt}
    queue_rows = [q for q in queue_rows if q["id"] not in corrupt]
    inner_queues = {q["parent_id"] for q in queue_rows if q["parent_id"] is not None}
    queue_name = {q["id"]: q["name"] for q in queue_rows}
    queues = []
    for q in queue_rows:
        index.queue_id[q["name"]] = q["id"]
        index.queue_version[q["id"]] = q["version"]
        res = resources.get(q["id"], {})
        queues.append({
            "name": q["name"],
            "parent": queue_name.get(q["parent_id"]) if q["parent_id"] is not None else None,
            "priority": int(q["priority"]),
            "createdMinutesAgo": _minutes_ago(now, q["created_at"]),
            "resources": {r: dict(res.get(r, default_res)) for r in Resource.values},
            "reclaimMinRuntime": seconds_or_none(q["reclaim_min_runtime"]),
            "preemptMinRuntime": seconds_or_none(q["preempt_min_runtime"]),
        })

    holding = Task.objects.filter(workload=OuterRef("pk"), state__in=TASK_STATES_HOLDING)
    exported = Workload.objects.filter(Q(status__in=WORKLOAD_STATUSES_ACTIVE) | Q(Exists(holding)))
    wl_rows = _values(exported.order_by("created_at", "name", "id"), (
        "id", "name", "queue__name", "priority", "preemptible", "min_available", "created_at", "started_at",
        "stale_since", "staleness_grace_period", "preemption_delay", "topology_required", "topology_preferred",
        "version", "queue_id", "min_sub_groups"), ("node_selector",))
    excluded_workloads: dict[int, str] = {}
    excluded_categories: dict[int, str] = {}
    for w in wl_rows:
        if w["queue_id"] in corrupt:
            excluded_workloads[w["id"]] = f"not scheduled: {corrupt[w['queue_id']]}"
        elif w["queue_id"] in inner_queues:
            excluded_workloads[w["id"]] = f"not scheduled: queue {w['queue__name']!r} has child queues"
    wl_rows = [w for w in wl_rows if w["id"] not in excluded_workloads]
    job_names = _unique_names([w["name"] for w in wl_rows], [w["queue__name"] for w in wl_rows],
                               [w["id"] for w in wl_rows])
    sub_groups: dict[int, list[dict[str, Any]]] = {}
    for g in SubGroup.objects.filter(workload__in=exported).order_by("workload_id", "index", "id").values(
        "id", "workload_id", "name", "parent__name", "min_available", "min_sub_groups", "topology_required",
        "topology_preferred",
    ):
        sub_groups.setdefault(g["workload_id"], []).append(g)
    task_rows: dict[int, list[dict[str, Any]]] = {}
    for t in _values(Task.objects.filter(workload__in=exported).order_by("workload_id", "index"), (
        "id", "workload_id", "name", "gpu", "gpu_memory_mib", "cpu_millis", "memory_bytes", "priority",
        "state", "node__name", "version", "sub_group__name"), ("node_selector", "gpu_groups", "claims", "devices"),
    ):
        task_rows.setdefault(t["workload_id"], []).append(t)
    # A gang whose pods are still arriving (Kubernetes mode: a pod group of minAvailable 4 with 2
    # pods so far) cannot start, and the engine rightly refuses minAvailable > tasks: wait for the
    # rest instead of failing the cycle.  One that already holds resources and lost pods keeps
    # running with what it has (its controller recreates the missing pods).
    kept = []
    for w in wl_rows:
        have = task_rows.get(w["id"], [])
        if w["id"] in sub_groups:
            why = _sub_groups_waiting(sub_groups[w["id"]], have)
            if why:
                excluded_workloads[w["id"]] = why
                excluded_categories[w["id"]] = PendingCategory.GANG
                continue
            kept.append(w)
            continue
        if len(have) < int(w["min_available"]):
            if not any(t["state"] in TASK_STATES_HOLDING for t in have):
                excluded_workloads[w["id"]] = (f"waiting for pods: gang needs {w['min_available']}, "
                                               f"{len(have)} exist")
                excluded_categories[w["id"]] = PendingCategory.GANG
                continue
            w["min_available"] = len(have)
        kept.append(w)
    if len(kept) != len(wl_rows):
        wl_rows = kept
        job_names = _unique_names([w["name"] for w in wl_rows], [w["queue__name"] for w in wl_rows],
                               [w["id"] for w in wl_rows])

    jobs = []
    all_tasks: list[dict[str, Any]] = []
    task_ids: list[int] = []
    task_owner: list[str] = []
    for w, job_name in zip(wl_rows, job_names):
        index.workload_id[job_name] = w["id"]
        index.workload_version[w["id"]] = w["version"]
        selector = _as_given(w["node_selector"], dict)
        tasks = []
        for t in task_rows.get(w["id"], []):
            state, node, groups = t["state"], t["node__name"], _as_given(t["gpu_groups"], list)
            if state == TaskState.BINDING:
                state = TaskState.RUNNING
            elif state == TaskState.PIPELINED:
                state, node, groups = TaskState.PENDING, None, []
            index.task_version[t["id"]] = t["version"]
            index.task_db_state[t["id"]] = t["state"]
            task = task_scenario(t, selector=selector)
            task.update(state=str(state), node=node, gpuGroups=groups)
            if node and isinstance(t["claims"], list) and t["claims"]:
                pins = _device_pins(t["claims"], t["devices"], node_devices.get(node, {}))
                if pins:
                    task["devices"] = pins
            tasks.append(task)
            all_tasks.append(task)
            task_ids.append(t["id"])
            task_owner.append(job_name)
        stale_for = None
        if w["stale_since"] is not None:
            stale_for = _num(max(0.0, (now - w["stale_since"]).total_seconds()))
        job = {
            "name": job_name,
            "queue": w["queue__name"],
            "priority": int(w["priority"]),
            "preemptible": bool(w["preemptible"]),
            "minAvailable": int(w["min_available"]),
            "createdMinutesAgo": _minutes_ago(now, w["created_at"]),
            "startedMinutesAgo": _minutes_ago(now, w["started_at"]),
            "staleFor": stale_for,
            "stalenessGracePeriod": seconds_or_none(w["staleness_grace_period"]),
            "preemptionDelay": seconds_or_none(w["preemption_delay"]),
            "tasks": tasks,
        }
        if w["topology_required"] or w["topology_preferred"]:
            job["topology"] = {"required": w["topology_required"] or None,
                               "preferred": w["topology_preferred"] or None}
        if w["id"] in sub_groups:
            del job["minAvailable"]
            job["minSubGroups"] = w["min_sub_groups"]
            job["subGroups"] = [sub_group_scenario(g) for g in sub_groups[w["id"]]]
        jobs.append(job)
    # Task names are unique per workload in the DB but global in a scenario.
    unique = _unique_names([t["name"] for t in all_tasks], task_owner)
    for task, tname, tid in zip(all_tasks, unique, task_ids):
        task["name"] = tname
        index.task_id[tname] = tid

    fair = _fairshare_inputs(now) if fairshare and usage is None else {}
    for queue in queues:
        for res, patch in fair.get("queues", {}).get(queue["name"], {}).items():
            queue["resources"][res].update(patch)
    cfg: dict[str, Any] = {**getattr(settings, "KAI_SCHEDULER_CONFIG", {}), **dict(config or {})}
    cfg.setdefault("now", _iso(now))
    data: dict[str, Any] = {"name": name, "config": cfg, "nodes": nodes, "queues": queues, "jobs": jobs}
    if device_classes:
        data["deviceClasses"] = device_classes
    if usage is not None:
        usage_map = dict(usage)
    elif getattr(settings, "KAI_USAGE_PROVIDER", None):
        usage_map = _usage_from_provider()
    else:
        usage_map = dict(fair.get("usage", {}))
    usage_map = {q: dict(v) for q, v in usage_map.items() if q in index.queue_id and v}
    if usage_map:
        data["usage"] = usage_map
        cfg.update({k: v for k, v in fair.get("config", {}).items() if k not in (config or {})})
    return EngineInput(data=data, index=index, excluded_queues=excluded_queues,
                       excluded_workloads=excluded_workloads, excluded_categories=excluded_categories)


def _sub_groups_waiting(groups: list[dict[str, Any]], tasks: list[dict[str, Any]]) -> str:
    """A tree whose leaves have fewer tasks than their ``minAvailable`` (Kubernetes: pods still
    arriving) cannot start: why, or '' when it may be scheduled. One that already holds resources
    keeps running with the pods it has: its leaves' requirements are lowered to what exists."""
    parents = {g["parent__name"] for g in groups if g["parent__name"]}
    count: dict[str, int] = {}
    for t in tasks:
        count[t["sub_group__name"]] = count.get(t["sub_group__name"], 0) + 1
    short = [(g, count.get(g["name"], 0)) for g in groups
             if g["name"] not in parents and int(g["min_available"] or 0) > count.get(g["name"], 0)]
    if not short:
        return ""
    if not any(t["state"] in TASK_STATES_HOLDING for t in tasks):
        g, n = short[0]
        return f"waiting for pods: subgroup {g['name']} needs {g['min_available']}, {n} exist"
    for g, n in short:
        g["min_available"] = n
    return ""


def _device_pins(claims: list[Mapping[str, Any]], held: Mapping[str, Any] | None,
                 offered: Mapping[str, int]) -> dict[str, list[int]] | None:
    """The devices a task on a node holds, as the engine takes them (``devices`` of the scenario):
    only classes it claims, as many indices as it claims, below what the node offers. Anything
    else (a class no longer claimed, a node that shrank) is left out and the engine picks devices."""
    want: dict[str, int] = {}
    try:
        for c in claims or ():
            want[c.get("device_class")] = want.get(c.get("device_class"), 0) + int(c.get("count", 1))
    except (AttributeError, TypeError, ValueError):
        return None  # malformed claims: the engine names them
    if not isinstance(held, dict):
        return None
    out: dict[str, list[int]] = {}
    for cls, idx in held.items():
        if cls not in want or not isinstance(idx, list):
            continue
        cap = offered.get(cls, 0) if isinstance(offered.get(cls, 0), int) else 0
        ok = [int(d) for d in idx if isinstance(d, int) and 0 <= d < cap]
        if len(set(ok)) == want[cls] == len(ok):
            out[cls] = ok
    return out or None


def build_scenario_dict(**kwargs: Any) -> dict[str, Any]:
    """The live state as a scenario dict (see :func:`build_engine_input` for the arguments)."""
    return build_engine_input(**kwargs).data


def build_snapshot_with_index(**kwargs: Any) -> tuple[Snapshot, EngineIndex]:
    engine_input = build_engine_input(**kwargs)
    snapshot = engine_loader.load_dict(engine_input.data, source="database")
    return snapshot, engine_input.index


def build_snapshot(**kwargs: Any) -> Snapshot:
    """``scheduler_engine.loader.load_dict(build_scenario_dict())``: the engine's input type."""
    return build_snapshot_with_index(**kwargs)[0]


# ----------------------------------------------------------------------------- quarantine (issue 16)

#: Event reason and status-message prefix of a workload the engine refuses.
INVALID_REASON = "Invalid"
INVALID_PREFIX = "Invalid: "
MAX_REASON_LENGTH = 900


@dataclass
class Quarantine:
    """What the engine refused of one engine input, by database id, with the reason in the
    caller's field names (``Invalid: tasks[0].gpu: a request above 1 gpu must be whole devices,
    got 1.5``).  ``jobs`` are the removed job dicts (their cluster confirmations still apply)."""

    workloads: dict[int, str] = field(default_factory=dict)
    queues: dict[int, str] = field(default_factory=dict)
    nodes: dict[int, str] = field(default_factory=dict)
    jobs: list[dict[str, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.workloads or self.queues or self.nodes)

    def summary(self) -> str:
        parts = [f"{len(v)} {k}" for k, v in (("workload(s)", self.workloads), ("queue(s)", self.queues),
                                               ("node(s)", self.nodes)) if v]
        return "quarantined " + ", ".join(parts) if parts else ""


def _say(problems: list[tuple[str, str]], mapper) -> str:
    first = "; ".join(f"{mapper(p)}: {m}" if p else m for p, m in problems[:3])
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return (first + more)[:MAX_REASON_LENGTH]


def load_quarantined(data: dict[str, Any], index: EngineIndex, *, source: str = "database") -> tuple[Snapshot,
                                                                                                   Quarantine]:
    """Load an engine input into a Snapshot, leaving out whatever the engine refuses.

    The fast path is one ``load_dict``.  When it raises, ``scheduler_engine.loader.
    partition_scenario`` splits the input row by row: the refused nodes, queues (with their
    subtrees) and jobs (with those on refused queues or nodes) are removed from ``data`` **in
    place** (so the plan and the apply see exactly what the engine saw) and returned by database
    id with their reasons; the rest loads and is scheduled.  Resources that refused jobs still
    hold on a node (Running / Releasing tasks) are added to the node's ``reservedByOthers`` (at
    most its capacity), so nothing is placed on top of them.  Problems no row can be blamed for
    (the operator's ``KAI_SCHEDULER_CONFIG``) still raise ``ScenarioError``.
    """
    try:
        return engine_loader.load_dict(data, source=source), Quarantine()
    except ScenarioError:
        pass
    part = engine_loader.partition_scenario(data)
    if part.problems:
        raise ScenarioError(part.problems, source)
    q = Quarantine()
    nodes, queues, jobs = data.get("nodes") or [], data.get("queues") or [], data.get("jobs") or []
    node_reason: dict[str, str] = {}
    for i, probs in part.refused["nodes"].items():
        name = nodes[i].get("name")
        node_reason[name] = f"node {name!r} is refused: {_say(probs, node_field)}"
        if name in index.node_id:
            q.nodes[index.node_id[name]] = INVALID_PREFIX + _say(probs, node_field)
    own_queue: dict[str, str] = {}
    parent_of = {qq.get("name"): qq.get("parent") for qq in queues}
    for i, probs in part.refused["queues"].items():
        own = [(p, m) for p, m in probs if p != "parent" or "is refused" not in m]
        if own:
            own_queue[queues[i].get("name")] = _say(own, queue_field)

    def queue_reason(name: str) -> str:
        seen, cur = 0, name
        while cur is not None and cur not in own_queue and seen < 1000:
            cur, seen = parent_of.get(cur), seen + 1
        if cur is None or cur not in own_queue:
            return f"queue {name!r} is refused"
        via = f"queue {name!r} is under queue {cur!r}, which" if cur != name else f"queue {name!r}"
        return f"{via} is refused: {own_queue[cur]}"

    for i in part.refused["queues"]:
        name = queues[i].get("name")
        if name in index.queue_id:
            q.queues[index.queue_id[name]] = INVALID_PREFIX + queue_reason(name)
    for i, probs in part.refused["jobs"].items():
        job = jobs[i]
        wid = index.workload_id.get(job.get("name"))
        if wid is None:
            continue
        path, msg = probs[0]
        selector = {}
        if path == "queue" and "is refused" in msg:
            reason = f"queue: {queue_reason(job.get('queue'))}"
        elif path.endswith(".node") and "is refused" in msg and isinstance(job.get("tasks"), list):
            k = int(path[len("tasks["):path.index("]")])
            node = job["tasks"][k].get("node")
            reason = f"{job_field(path)}: {node_reason.get(node, msg)}"
        else:
            reason = _say(probs, lambda p: job_field(p, workload_selector=selector))
        q.workloads[wid] = (INVALID_PREFIX + reason)[:MAX_REASON_LENGTH]
        q.jobs.append(job)
    clean = part.data
    _reserve_held(clean.get("nodes") or [], q.jobs)
    for key in ("nodes", "queues", "jobs", "usage"):
        if key in clean:
            data[key] = clean[key]
    return engine_loader.load_dict(data, source=source), q


def _reserve_held(nodes: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> None:
    """Add what the refused jobs' tasks hold on each node to its ``reservedByOthers`` (whole
    devices, rounded up; at most the node's capacity), as if another scheduler's pods held it."""
    held: dict[str, list[float]] = {}
    for job in jobs:
        for t in job.get("tasks") or ():
            if not isinstance(t, dict) or t.get("state") not in ("Running", "Releasing", "StuckInReleasing"):
                continue
            try:
                gpu = math.ceil(float(t.get("gpu") or 0)) or (1 if t.get("gpuMemory") else 0)
                cpu = engine_units.parse_cpu(t.get("cpu") or 0)
                mem = engine_units.parse_memory(t.get("memory") or 0)
            except (TypeError, ValueError):
                continue
            row = held.setdefault(t.get("node"), [0.0, 0.0, 0.0])
            row[0] += gpu
            row[1] += cpu
            row[2] += mem
    for n in nodes:
        extra = held.get(n.get("name"))
        if not extra:
            continue
        r = dict(n.get("reservedByOthers") or {})
        cap_cpu = engine_units.parse_cpu(n.get("cpu") or 0)
        r["gpu"] = _num(min(float(n.get("gpus") or 0), float(r.get("gpu") or 0) + extra[0]))
        r["cpu"] = f"{int(min(cap_cpu, engine_units.parse_cpu(r.get('cpu') or 0) + extra[1]))}m"
        r["memory"] = int(min(float(n.get("memory") or 0), float(r.get("memory") or 0) + extra[2]))
        n["reservedByOthers"] = r


# ----------------------------------------------------------------------------- the cycle's engine calls (issue #4)


def snapshot_from_dict(data: Mapping[str, Any], *, source: str = "database") -> Snapshot:
    """Load a (possibly rewritten) engine-input dict: the scheduling cycle folds the cluster's
    confirmations into :func:`build_engine_input`'s dict before the engine sees it."""
    return engine_loader.load_dict(dict(data), source=source)


def load_scenario_file(path: str) -> Snapshot:
    """Load and validate one scenario file (YAML, or JSON by its name): the engine's own loader, so
    a file the CLI refuses is refused here with the same problems (:class:`ScenarioError`)."""
    return engine_loader.load_scenario(path)


def preload_engine() -> str:
    """Load (or compile, on a cold cache) every engine kernel now, by running the engine's own
    warm-up cycles on small generated clusters (the Celery worker calls it before forking); returns
    the warm-up's one-line report (kernels compiled / loaded, seconds)."""
    from scheduler_engine.kernels.warm import warm_up

    return warm_up().text()


def run_engine(snapshot: Snapshot, *, time_budget: float | None = None) -> Any:
    """One scheduling cycle of the engine: ``scheduler_engine.cycle.run_cycle(snapshot)``, its
    evicting actions stopped after ``time_budget`` seconds (the result's ``budget`` says where).

    Returns the engine's ``CycleResult`` (plain dicts keyed by scenario names: ``jobs``,
    ``tasks``, ``queues``, ``nodes``, ``events``, ``timings``), which the cycle maps back to
    database ids through the :class:`EngineIndex`.
    """
    from scheduler_engine.cycle import run_cycle

    return run_cycle(snapshot, time_budget=time_budget)


def run_actions(snapshot: Snapshot) -> tuple[Any, list[str]]:
    """The configured actions on ``snapshot`` without the cycle's rounds (the dry run): the engine's
    ``CycleResult`` and the actions named in the config whose module is not available (skipped)."""
    from scheduler_engine.actions import get_action

    state = CycleState(snapshot)
    skipped: list[str] = []
    for action in snapshot.config.actions:
        try:
            run = get_action(action)
        except ImportError:
            skipped.append(action)
            continue
        run(state)
    return build_result(snapshot, state), skipped


# ----------------------------------------------------------------------------- the engine's input rules


def check_job(job: Mapping[str, Any], *, nodes: Any = (), device_classes: Any = None) -> tuple[list[tuple[str, str]], int]:
    """``scheduler_engine.loader.check_job``: one job's problems (engine paths) and its gang size."""
    return engine_loader.check_job(job, nodes=nodes, device_classes=device_classes)


def validate_queue(queue: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``scheduler_engine.loader.validate_queue``: one queue's problems (engine paths)."""
    return engine_loader.validate_queue(queue)


def validate_node(node: Mapping[str, Any], *, device_classes: Any = None) -> list[tuple[str, str]]:
    """``scheduler_engine.loader.validate_node``: one node's problems (engine paths)."""
    return engine_loader.validate_node(node, device_classes=device_classes)


def engine_label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a Kubernetes label key (the engine's rule), or None."""
    return engine_loader.label_key_problem(key)


# ----------------------------------------------------------------------------- engine result -> typed decisions


@dataclass(frozen=True, slots=True)
class TaskDecision:
    """One task: what the engine was given (``given_*``: after the cluster's confirmations) and what
    it decided (``status``, ``node``, ``groups``, ``devices``; a task the result leaves out keeps
    what it was given).  Resources in engine units from the snapshot arrays: ``gpu`` devices
    (fractional = a share of one device), ``gpu_memory`` MiB on one shared device, ``cpu``
    millicores, ``memory`` bytes."""

    name: str
    task_id: int
    given_state: str
    given_node: str | None
    given_groups: tuple[str, ...]
    held_devices: Mapping[str, list[int]]
    status: str
    node: str | None
    groups: tuple[str, ...]
    devices: Mapping[str, list[int]]
    gpu: float
    gpu_memory: float
    cpu: float
    memory: float


@dataclass(frozen=True, slots=True)
class JobDecision:
    """One workload as the engine saw it: its status and its tasks in snapshot order."""

    name: str
    workload_id: int
    queue_id: int
    status: str
    tasks: tuple[TaskDecision, ...]


@dataclass(frozen=True, slots=True)
class NodeFigures:
    """A node the engine saw, numeric: ``gpus`` whole devices, ``gpu_memory`` MiB per device, and
    what is free for this scheduler after other schedulers' pods (``free_gpu``, ``free_cpu``
    millicores, ``free_memory`` bytes); ``schedulable`` = not cordoned and ready."""

    name: str
    node_id: int
    gpus: float
    gpu_memory: float
    free_gpu: float
    free_cpu: float
    free_memory: float
    schedulable: bool


@dataclass(frozen=True, slots=True)
class EngineEvent:
    """An engine explanation by database id (``task`` / ``task_id`` for task events such as a
    victim's ``Reclaimed``; ``workload_id`` None if the job is unknown)."""

    workload_id: int | None
    task: str | None
    task_id: int | None
    reason: str
    message: str
    category: str | None
    victim_of: str | None

    @property
    def text(self) -> str:
        """The message as stored and sent to the cluster (``... (for <preemptor>)``)."""
        return f"{self.message} (for {self.victim_of})" if self.victim_of else self.message


@dataclass(frozen=True, slots=True)
class EngineDecisions:
    """The engine's result for one cycle, by database id: what ``apply`` checks and writes."""

    jobs: tuple[JobDecision, ...]
    nodes: Mapping[str, NodeFigures]
    node_id: Mapping[str, int]
    #: queue id -> parent queue id (None at the top)
    queue_parent: Mapping[int, int | None]
    events: tuple[EngineEvent, ...]
    #: queue id -> {resource: fair share in scenario units}
    fair_share: Mapping[int, Mapping[str, float]]


#: the device pins of a task without DRA claims (nearly all): one shared empty mapping, not 2 dicts per task
_NO_PINS: Mapping[str, list[int]] = MappingProxyType({})


def _pins(value: Any) -> dict[str, list[int]]:
    return {str(c): [int(d) for d in ds] for c, ds in (value or {}).items()}


def engine_decisions(*, snapshot: Snapshot, data: Mapping[str, Any], index: EngineIndex, result: Any) -> EngineDecisions:
    """Map the engine's ``CycleResult`` onto database ids, once, at the boundary.

    ``data`` is the engine input as the engine got it (cluster confirmations folded in, refused
    rows removed): the given state, node, gpuGroups and device pins of each task come from it,
    numbers from ``snapshot`` (loaded from that same dict, same order).  Nothing is validated
    here: ``apply.build_plan`` refuses an inconsistent decision set."""
    nd = snapshot.nodes
    cap, rsv = nd.capacity.tolist(), nd.reserved.tolist()
    gpu_mem, unsched, ready = nd.gpu_memory.tolist(), nd.unschedulable.tolist(), nd.ready.tolist()
    nodes = {}
    for i, name in enumerate(nd.names):
        nodes[name] = NodeFigures(name=name, node_id=index.node_id[name], gpus=float(cap[i][0]),
                                  gpu_memory=float(gpu_mem[i]), free_gpu=cap[i][0] - rsv[i][0],
                                  free_cpu=cap[i][1] - rsv[i][1], free_memory=cap[i][2] - rsv[i][2],
                                  schedulable=bool(not unsched[i] and ready[i]))
    ts = snapshot.tasks
    row_of = {n: i for i, n in enumerate(ts.names)}
    request, task_gpu_mem = ts.request.tolist(), ts.gpu_memory.tolist()
    engine_tasks: dict[str, Mapping[str, Any]] = {}
    for jres in result.jobs.values():
        for entry in jres.get("tasks", ()):
            engine_tasks[entry["name"]] = entry
    jobs = []
    for job in data.get("jobs", ()):
        jname = job["name"]
        tasks = []
        for task in job.get("tasks", ()):
            tname = task["name"]
            r = row_of[tname]
            g, d = task.get("gpuGroups"), task.get("devices")
            groups = tuple(map(str, g)) if g else ()
            held = _pins(d) if d else _NO_PINS
            eng = engine_tasks.get(tname)
            if eng is None:
                status, node, e_groups, e_devices = task["state"], task.get("node"), groups, held
            else:
                status, node = eng["status"], eng.get("node")
                g, d = eng.get("gpuGroups"), eng.get("devices")
                e_groups = tuple(map(str, g)) if g else ()
                e_devices = _pins(d) if d else _NO_PINS
            req = request[r]
            tasks.append(TaskDecision(
                name=tname, task_id=index.task_id[tname], given_state=task["state"], given_node=task.get("node"),
                given_groups=groups, held_devices=held, status=status, node=node, groups=e_groups,
                devices=e_devices, gpu=req[GPU], gpu_memory=task_gpu_mem[r], cpu=req[CPU], memory=req[MEM]))
        jres = result.jobs.get(jname) or {}
        jobs.append(JobDecision(name=jname, workload_id=index.workload_id[jname],
                                queue_id=index.queue_id[job["queue"]], status=str(jres.get("status") or ""),
                                tasks=tuple(tasks)))
    qs = snapshot.queues
    parents = qs.parent.tolist()
    queue_parent = {index.queue_id[q]: (index.queue_id[qs.names[p]] if p >= 0 else None)
                    for q, p in zip(qs.names, parents)}
    events = tuple(EngineEvent(
        workload_id=index.workload_id.get(ev.get("job")),
        task=ev.get("task") or None,
        task_id=index.task_id.get(ev.get("task")) if ev.get("task") else None,
        reason=str(ev.get("reason") or "Event"), message=str(ev.get("message") or ""),
        category=ev.get("category"), victim_of=ev.get("victimOf") or None) for ev in result.events)
    fair = {index.queue_id[q]: dict(v.get("fairShare") or {}) for q, v in result.queues.items()
            if q in index.queue_id}
    return EngineDecisions(jobs=tuple(jobs), nodes=nodes, node_id=dict(index.node_id), queue_parent=queue_parent,
                           events=events, fair_share=fair)


# ----------------------------------------------------------------------------- usage windows (fairshare_app)


def usage_window_start(window_type: str, now: datetime, *, window_size: timedelta | None = None,
                       tumbling_start: datetime | None = None, cron: str | None = None) -> datetime | None:
    """The engine's usage-window start (``scheduler_engine.usage.window_start``: sliding,
    tumbling, cron; exact-boundary rule of spec e.1); ``None`` = an empty window."""
    return engine_usage.window_start(window_type, now, window_size=window_size, tumbling_start=tumbling_start,
                                     cron=cron)


def usage_period_reset(period: str, now: datetime) -> datetime | None:
    """Latest boundary of a Slurm ``PriorityUsageResetPeriod`` (``NONE`` -> None), engine rule."""
    return engine_usage.period_reset(period, now)


def preview_edits(data: Mapping[str, Any], edits: list[dict[str, Any]]) -> dict[str, Any]:
    """The engine's what-if: ``scheduler_engine.simulate.preview_edits`` (two engine runs on the same
    scenario dict, as is and with ``edits``); raises :class:`ScenarioError` for an invalid edit."""
    from scheduler_engine.simulate import preview_edits as engine_preview_edits

    return engine_preview_edits(data, edits)
