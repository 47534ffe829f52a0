"""What-if previews on the live state, answered by the engine's simulator; nothing is stored.

``preview_queue_edit``: one queue edit (quota, over-quota weight, limit, priority) -> fair share
before / after and what the next cycle would reclaim or preempt.  ``preview_scale_up``: N more
nodes of one shape -> what would start.  Both doors (operator API ``api/whatif.py`` and the admin
pages ``admin_whatif.py``) call these.
"""
from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Mapping

from django.utils import timezone

from queues_app.cycle.cluster import cycle_confirmations, fold_into_input
from queues_app.cycle.config import cycle_config
from queues_app.cycle.engine_io import (
    EngineIndex,
    ScenarioError,
    _num,
    build_engine_input,
    load_quarantined,
    preview_edits,
)
from queues_app.cycle.run import take_snapshot
from queues_app.errors import ApplicationError
from queues_app.models import Node
from queues_app.services.common import validate

def _edit_problem_field(path: str) -> str:
    """``queues[3].resources.gpu.quota`` / ``edits[0].resources.gpu.limit`` -> ``gpu.limit``."""
    parts = path.split(".")
    if "resources" in parts:
        return ".".join(parts[parts.index("resources") + 1:]) or "resources"
    return parts[-1].split("[")[0] or "edit"


def preview_queue_edit(*, queue_id: int, priority: int | None = None,
                       resources: Mapping[str, Mapping[str, Any]] | None = None,
                       now: datetime | None = None) -> dict[str, Any]:
    """What-if for one queue edit on the live state; nothing is stored.

    ``resources``: ``{"gpu": {"quota": 4, "over_quota_weight": 2, "limit": -1}, ...}`` in
    QueueResource units (gpu devices, cpu cores, memory bytes; -1 = unlimited / unset). Runs the
    engine twice on the same live snapshot (as is, and with the edit) and returns
    ``scheduler_engine.simulate.preview_edits``' answer (fair share before / after per queue,
    the running workloads the next cycle would reclaim or preempt) plus ``"queue"`` (the edited
    queue's scenario name). An impossible value raises ApplicationError naming the field.
    """
    engine_input = build_engine_input(now=now)
    name = next((n for n, qid in engine_input.index.queue_id.items() if qid == queue_id), None)
    if name is None:
        raise ApplicationError("Unknown queue.", extra={"queue": ["No such queue in the scheduling state."]})
    res_edit: dict[str, dict[str, Any]] = {}
    key_map = {"quota": "quota", "over_quota_weight": "overQuotaWeight", "limit": "limit"}
    for res, vals in (resources or {}).items():
        if res not in ("gpu", "cpu", "memory"):
            raise ApplicationError("Invalid resource.", extra={"resources": [f"unknown resource {res!r}"]})
        out: dict[str, Any] = {}
        for k, v in (vals or {}).items():
            if k not in key_map:
                raise ApplicationError("Invalid field.", extra={f"{res}.{k}": ["unknown field"]})
            if v is None:
                continue
            out[key_map[k]] = _num(v)
        res_edit[res] = out
    edit: dict[str, Any] = {"queue": name, "resources": res_edit}
    if priority is not None:
        edit["priority"] = int(priority)
    _, quarantine = load_quarantined(engine_input.data, engine_input.index, source="what-if")  # as the cycle does
    if queue_id in quarantine.queues:
        raise ApplicationError("The queue is quarantined.", extra={"queue": [quarantine.queues[queue_id]]})
    try:
        answer = preview_edits(engine_input.data, [edit])
    except ScenarioError as exc:
        extra: dict[str, list[str]] = {}
        for path, msg in exc.problems:
            extra.setdefault(_edit_problem_field(path), []).append(msg)
        raise ApplicationError("The edited queue is not valid.", extra=extra) from None
    answer["queue"] = name
    return answer


#: Labels not copied from a node used as the shape of added nodes (they name that one node).
_NODE_IDENTITY_LABELS = ("kubernetes.io/hostname",)
MAX_PREVIEW_NODES = 1000


def _next_cycle_input(now: datetime | None) -> tuple[dict[str, Any], EngineIndex]:
    """The engine input the next scheduling cycle would run on: the cycle's own snapshot plus the
    cluster confirmations it folds in first (embedded mode: Binding -> Running, released tasks
    gone), so a preview answers for exactly that cycle."""
    snap = take_snapshot(now=now or timezone.now())
    conf = cycle_confirmations(mode=cycle_config().cluster_mode, task_db_state=snap.index.task_db_state,
                               task_workload=snap.task_workload, workload_status=snap.workload_status)
    fold_into_input(snap.data, task_id=snap.index.task_id, job_id=snap.index.workload_id, conf=conf)
    return snap.data, snap.index


def _scale_up_shape(*, node: Mapping[str, Any] | None, like: str | None, name: str) -> Node:
    """An unsaved Node with the shape of the added nodes, validated like any node write."""
    if (node is None) == (like is None):
        raise ApplicationError("Give the shape of the added nodes.",
                               extra={"like": ["Name an existing node to copy, or give 'node' (not both)."]})
    if like is not None:
        src = Node.objects.filter(name=like).first()
        if src is None:
            raise ApplicationError("Unknown node.", extra={"like": [f"No node named {like!r}."]})
        fields = {"gpus": src.gpus, "gpu_memory_mib": src.gpu_memory_mib, "cpu_millis": src.cpu_millis,
                  "memory_bytes": src.memory_bytes,
                  "labels": {k: v for k, v in (src.labels or {}).items() if k not in _NODE_IDENTITY_LABELS},
                  "devices": dict(src.devices or {})}
    else:
        allowed = ("gpus", "gpu_memory_mib", "cpu_millis", "memory_bytes", "labels", "devices")
        unknown = sorted(set(node) - set(allowed))
        if unknown:
            raise ApplicationError("Invalid node shape.", extra={f"node.{k}": ["Unknown field."] for k in unknown})
        fields = {k: node[k] for k in allowed if k in node and node[k] is not None}
    shape = Node(name=name, **fields)
    try:
        validate(shape, message="Invalid node shape.", exclude=["name"])
    except ApplicationError as exc:
        raise ApplicationError(exc.message, extra={f"node.{k}": v for k, v in exc.extra.items()}) from None
    return shape


def preview_scale_up(*, count: int, node: Mapping[str, Any] | None = None, like: str | None = None,
                     name_prefix: str = "scale-up", now: datetime | None = None) -> dict[str, Any]:
    """What would ``count`` more nodes of one shape do in the next cycle?  Nothing is stored.

    The shape is ``like`` (an existing node's capacity and labels, without its hostname label) or
    ``node`` (Node fields: ``gpus``, ``gpu_memory_mib``, ``cpu_millis``, ``memory_bytes``,
    ``labels``, ``devices``), validated like a node write.  The next cycle's input (:func:`_next_cycle_input`)
    runs through ``scheduler_engine.simulate.preview_edits`` as is and with the nodes
    ``<name_prefix>-1..count`` added, which answers per queue the fair share before / after and
    the allocation, which pending workloads would start (``starts``) and why the others still
    wait (``jobs[...]["waitingAfter"]``: ``capacity`` means more nodes of another shape could
    help).  Added: ``"workloads"`` (job name -> workload id) and ``"node"`` (the shape).
    ``ApplicationError`` names the field of a bad request.
    """
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PREVIEW_NODES:
        raise ApplicationError("Invalid count.", extra={"count": [f"A whole number from 1 to {MAX_PREVIEW_NODES}."]})
    if not isinstance(name_prefix, str) or not name_prefix.strip():
        raise ApplicationError("Invalid name prefix.", extra={"name_prefix": ["Required."]})
    shape = _scale_up_shape(node=node, like=like, name=f"{name_prefix}-1")
    clash = Node.objects.filter(name__in=[f"{name_prefix}-{i}" for i in range(1, count + 1)]).values_list(
        "name", flat=True).first()
    if clash:
        raise ApplicationError("Node names taken.", extra={"name_prefix": [f"Node {clash} exists; choose another."]})
    data, index = _next_cycle_input(now)
    template = {"gpus": int(shape.gpus), "gpuMemory": int(shape.gpu_memory_mib or 0),
                "cpu": f"{int(shape.cpu_millis)}m", "memory": int(shape.memory_bytes),
                "labels": dict(shape.labels or {}), "unschedulable": False, "ready": True,
                "reservedByOthers": {"gpu": 0, "cpu": "0m", "memory": 0}}
    if shape.devices:
        template["devices"] = {cls: int(n) for cls, n in shape.devices.items()}
    edit = {"addNodes": {"count": count, "namePrefix": name_prefix, "node": template}}
    try:
        answer = preview_edits(data, [edit])
    except ScenarioError as exc:
        extra: dict[str, list[str]] = {}
        for path, msg in exc.problems:
            field = re.match(r"nodes\[\d+\]\.(\w+)", path)  # nodes[N].devices.<class> -> node.devices
            extra.setdefault(f"node.{field.group(1)}" if field else path, []).append(msg)
        raise ApplicationError("The added nodes are not valid.", extra=extra) from None
    answer["workloads"] = {j: index.workload_id[j] for j in answer["jobs"] if j in index.workload_id}
    answer["node"] = {"gpus": template["gpus"], "gpu_memory_mib": template["gpuMemory"],
                      "cpu_millis": int(shape.cpu_millis), "memory_bytes": template["memory"],
                      "labels": template["labels"], "devices": dict(shape.devices or {})}
    return answer
