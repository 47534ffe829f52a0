"""Scenario -> database: record a scenario file's nodes, queue tree and jobs through the services.

Used by ``manage.py import_scenario``, the tests and the "DB expresses every scenario" check.  The
other direction (database -> scenario) is the engine input itself (``engine_io.build_scenario_dict``,
``manage.py export_scenario``).  Engine types come through ``engine_io``, the one module that
imports the engine.
"""
from __future__ import annotations

import math
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Mapping

from django.db import transaction
from django.utils import timezone

from queues_app.choices import Resource
from queues_app.cycle.engine_io import CPU, GPU, MEM, EngineTaskState, Snapshot, snapshot_from_dict
from queues_app.models import Queue
from queues_app.services.devices import device_class_upsert
from queues_app.services.nodes import nodes_import
from queues_app.services.queues import queues_import
from queues_app.services.workloads import workloads_import

def _dec(x: float) -> Decimal:
    """A float as the Decimal it prints as (``0.1`` -> ``Decimal("0.1")``, not its binary expansion)."""
    return Decimal(repr(float(x)))


def _queue_value(x: float, res: str) -> Decimal:
    """Engine units -> QueueResource units (cpu millicores -> cores); -1 stays -1."""
    if x == -1:
        return Decimal(-1)
    return _dec(x / 1000.0) if res == "cpu" else _dec(x)


def _opt_td(seconds: float) -> timedelta | None:
    return None if math.isnan(seconds) else timedelta(seconds=float(seconds))


@transaction.atomic
def import_scenario(data: Mapping[str, Any] | Snapshot, *, now: datetime | None = None) -> Snapshot:
    """Record a scenario's nodes, queue tree and jobs (with their task states) in the database.

    Goes through the services, so everything is validated like any other write (nodes, queues
    and jobs through the set-based ``nodes_import`` / ``queues_import`` / ``workloads_import``: a
    few statements for the whole file); an ApplicationError means the database cannot hold that
    scenario (none of it is written).
    Timestamps are set relative to ``now`` (default: the scenario's ``config.now``, else the
    current time), so exporting with the same ``now`` gives the same ages back.  ``config``,
    ``usage`` and ``expect`` are not stored (they are not database state).
    """
    snap = data if isinstance(data, Snapshot) else snapshot_from_dict(data, source="import")
    now = now or snap.config.now or timezone.now()
    dcs = snap.device_classes
    classes = list(dcs.names)
    for c, cname in enumerate(classes):
        device_class_upsert(name=cname, counts_as="gpu" if dcs.counts_as_gpu[c] else "")
    nd = snap.nodes
    nodes_import(nodes=[
        dict(name=name, gpus=int(nd.gpus[i]), gpu_memory_mib=int(nd.gpu_memory[i]), cpu_millis=int(nd.capacity[i, CPU]),
             memory_bytes=int(nd.capacity[i, MEM]), labels=dict(nd.labels[i]), unschedulable=bool(nd.unschedulable[i]),
             ready=bool(nd.ready[i]), reserved_gpus=_dec(nd.reserved[i, GPU]),
             reserved_cpu_millis=int(nd.reserved[i, CPU]), reserved_memory_bytes=int(nd.reserved[i, MEM]),
             **({"devices": {classes[c]: int(nd.devices[i, c]) for c in range(len(classes)) if nd.devices[i, c]}}
                if classes else {}))
        for i, name in enumerate(nd.names)], label="nodes")
    qs = snap.queues
    made = queues_import(queues=[dict(
        name=qs.names[q], parent=qs.names[int(qs.parent[q])] if qs.parent[q] >= 0 else None,
        priority=int(qs.priority[q]), created_at=now - timedelta(minutes=float(qs.created_minutes_ago[q])),
        reclaim_min_runtime=_opt_td(qs.reclaim_min_runtime[q]), preempt_min_runtime=_opt_td(qs.preempt_min_runtime[q]),
        quotas={res: {"quota": _queue_value(qs.deserved[q, k], res), "over_quota_weight": _dec(qs.weight[q, k]),
                      "limit": _queue_value(qs.limit[q, k], res)}
                for k, res in enumerate(Resource.values)},
    ) for q in range(len(qs))], label="queues", source="import")
    created: dict[int, Queue] = dict(enumerate(made))
    js, ts, sg = snap.jobs, snap.tasks, snap.sub_groups
    jobs = []
    for j, name in enumerate(js.names):
        tasks = []
        for t in js.tasks_of(j):
            node = int(ts.node[t])
            tasks.append({
                "name": ts.names[t], "gpu": _dec(ts.request[t, GPU]), "cpu_millis": int(ts.request[t, CPU]),
                "memory_bytes": int(ts.request[t, MEM]),
                "gpu_memory_mib": int(ts.gpu_memory[t]) if ts.gpu_memory[t] else None,
                "priority": None if math.isnan(ts.priority[t]) else int(ts.priority[t]),
                "node_selector": dict(ts.node_selector[t]), "state": EngineTaskState(int(ts.state[t])).label,
                "node": nd.names[node] if node >= 0 else None, "gpu_groups": list(ts.gpu_groups[t]),
            })
            if ts.sub_group[t] >= 0:
                tasks[-1]["sub_group"] = sg.names[int(ts.sub_group[t])]
            if classes and ts.claims[t].any():
                tasks[-1]["claims"] = [{"device_class": classes[c], "count": int(ts.claims[t, c])}
                                       for c in range(len(classes)) if ts.claims[t, c]]
                if ts.devices[t]:
                    tasks[-1]["devices"] = {classes[c]: list(v) for c, v in ts.devices[t].items()}
        started = js.started_minutes_ago[j]
        stale = js.stale_for[j]
        a, c_sg = int(js.sg_start[j]), int(js.sg_count[j])
        tree = None
        if c_sg:
            tree = []
            for g in range(a, a + c_sg):
                par = int(sg.parent[g])
                tree.append({"name": sg.names[g], "parent": sg.names[par] if par >= 0 else None,
                             "min_available": int(sg.min_available[g]) if sg.min_available[g] >= 0 else None,
                             "min_sub_groups": int(sg.min_sub_groups[g]) if sg.min_sub_groups[g] >= 0 else None,
                             "topology_required": sg.topology_required[g] or "",
                             "topology_preferred": sg.topology_preferred[g] or ""})
        jobs.append(dict(
            queue=created[int(js.queue[j])], name=name, tasks=tasks, priority=int(js.priority[j]),
            preemptible=bool(js.preemptible[j]), min_available=None if c_sg else int(js.min_available[j]),
            sub_groups=tree, min_sub_groups=(int(js.min_sub_groups[j]) if js.min_sub_groups[j] >= 0 else None)
            if c_sg else None,
            created_at=now - timedelta(minutes=float(js.created_minutes_ago[j])),
            started_at=None if math.isnan(started) else now - timedelta(minutes=float(started)),
            stale_since=None if math.isnan(stale) else now - timedelta(seconds=float(stale)),
            topology_required=js.topology_required[j] or "", topology_preferred=js.topology_preferred[j] or "",
            preemption_delay=_opt_td(js.preemption_delay[j]),
            staleness_grace_period=_opt_td(js.staleness_grace_period[j]),
        ))
    workloads_import(workloads=jobs, label="jobs")
    return snap
