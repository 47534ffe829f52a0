"""Engine input paths as the API's field names: ``tasks[2].gpuMemory`` -> ``tasks[2].gpu_memory_mib``.

Why a module of its own: the engine reports problems by scenario path; every door (API, services,
admin) and the cycle's quarantine report them by the field the caller wrote.  Both the contract
checks (``contract``) and the quarantine (``engine_io.load_quarantined``) use this one mapping.
Pure functions; imports nothing first-party.
"""
from __future__ import annotations

import re
from typing import Mapping


_JOB_FIELDS = {"minAvailable": "min_available", "minSubGroups": "min_sub_groups", "stalenessGracePeriod": "staleness_grace_period",
               "preemptionDelay": "preemption_delay", "createdMinutesAgo": "created_at",
               "startedMinutesAgo": "started_at", "staleFor": "stale_since"}
_TASK_FIELDS = {"gpuMemory": "gpu_memory_mib", "cpu": "cpu_millis", "memory": "memory_bytes",
                "gpuGroups": "gpu_groups", "nodeSelector": "node_selector", "subGroup": "sub_group"}
_SUB_GROUP_FIELDS = {"minAvailable": "min_available", "minSubGroups": "min_sub_groups",
                     "topology.required": "topology_required", "topology.preferred": "topology_preferred"}
_SUB_GROUP_PATH = re.compile(r"^subGroups(\[\d+\])?(?:\.(.*))?$")
_QUEUE_FIELDS = {"overQuotaWeight": "over_quota_weight", "reclaimMinRuntime": "reclaim_min_runtime",
                 "preemptMinRuntime": "preempt_min_runtime", "createdMinutesAgo": "created_at"}
_NODE_FIELDS = {"gpuMemory": "gpu_memory_mib", "cpu": "cpu_millis", "memory": "memory_bytes",
                "reservedByOthers.gpu": "reserved_gpus", "reservedByOthers.cpu": "reserved_cpu_millis",
                "reservedByOthers.memory": "reserved_memory_bytes"}
_TASK_PATH = re.compile(r"^(tasks\[\d+\]|task)(?:\.([A-Za-z]+))?(.*)$")


def job_field(path: str, *, workload_selector: Mapping[str, str] | None = None) -> str:
    """An engine path inside a job (``tasks[2].gpuMemory``) as the API's field (``tasks[2].gpu_memory_mib``;
    ``subGroups[1].minAvailable`` -> ``sub_groups[1].min_available``, ``tasks[0].claims[0].deviceClass``
    -> ``tasks[0].claims[0].device_class``).

    A node-selector key that only the workload's own selector sets is reported there
    (``node_selector.<key>``), since that is where the caller wrote it."""
    m = _TASK_PATH.match(path)
    if m:
        head, fld, rest = m.group(1), m.group(2), m.group(3)
        if fld is None:
            return head + rest
        if fld == "nodeSelector" and workload_selector and rest.startswith(".") and rest[1:] in workload_selector:
            return "node_selector" + rest
        if fld == "claims":
            rest = re.sub(r"\.deviceClass$", ".device_class", rest)
        return f"{head}.{_TASK_FIELDS.get(fld, fld)}{rest}"
    sg = _SUB_GROUP_PATH.match(path)
    if sg:
        tail = sg.group(2)
        return "sub_groups" + (sg.group(1) or "") + ("." + _SUB_GROUP_FIELDS.get(tail, tail) if tail else "")
    if path.startswith("topology."):
        return "topology_" + path.split(".", 1)[1]
    head, dot, rest = path.partition(".")
    return _JOB_FIELDS.get(head, head) + dot + rest if head else "workload"


def queue_field(path: str, *, prefix: str = "quotas.") -> str:
    """``resources.memory.quota`` -> ``quotas.memory.quota`` (``prefix`` "" for one resource's own
    fields: ``quota``); other queue paths by their model field names."""
    parts = path.split(".")
    if parts[0] == "resources" and len(parts) >= 2:
        res = parts[1]
        rest = [_QUEUE_FIELDS.get(p, p) for p in parts[2:]]
        if not prefix:
            return ".".join(rest) or res
        return prefix + ".".join([res] + rest)
    return _QUEUE_FIELDS.get(parts[0], parts[0]) + ("." + ".".join(parts[1:]) if len(parts) > 1 else "")


def node_field(path: str) -> str:
    for engine_name, field_name in _NODE_FIELDS.items():
        if path == engine_name or path.startswith(engine_name + "."):
            return field_name + path[len(engine_name):]
    return path or "node"
