"""Test-only builder: a scenario-shaped dict (or a golden YAML file) -> Snapshot.

Used by the state / ordering / allocate tests so they do not depend on the scenario loader
(written separately); it accepts the subset of the scenario format those tests need and
converts quantities with :mod:`scheduler_engine.units`. It validates nothing: the loader does.
"""
from __future__ import annotations

import math

import numpy as np
import yaml

from scheduler_engine.snapshot import Config, Jobs, Nodes, Queues, Snapshot, Tasks, TaskState
from scheduler_engine.units import parse_cpu, parse_duration, parse_gpu, parse_memory

_RES = ("gpu", "cpu", "memory")


def _res(d: dict | None) -> list[float]:
    d = d or {}
    return [parse_gpu(d.get("gpu", 0) or 0), parse_cpu(d.get("cpu", 0) or 0), parse_memory(d.get("memory", 0) or 0)]


def _qval(r: str, v) -> float:
    if v is None:
        return 0.0
    if isinstance(v, (int, float)) and v == -1:
        return -1.0
    return {"gpu": parse_gpu, "cpu": parse_cpu, "memory": parse_memory}[r](v)


def build(sc: dict) -> Snapshot:
    cfg_in = sc.get("config") or {}
    cfg = Config()
    if "actions" in cfg_in:
        cfg.actions = tuple(cfg_in["actions"])
    if "placement" in cfg_in:
        cfg.placement = {"gpu": "binpack", "cpu": "binpack", **cfg_in["placement"]}
    cfg.k_value = float(cfg_in.get("kValue", 0.0))
    nodes_in = sc.get("nodes") or []
    nodes = Nodes(
        names=[n["name"] for n in nodes_in],
        capacity=np.array([[float(n.get("gpus", 0)), parse_cpu(n.get("cpu", 0)), parse_memory(n.get("memory", 0))]
                           for n in nodes_in], dtype=float).reshape(-1, 3),
        reserved=np.array([_res(n.get("reservedByOthers")) for n in nodes_in], dtype=float).reshape(-1, 3),
        gpus=np.array([int(n.get("gpus", 0)) for n in nodes_in], dtype=np.int64),
        gpu_memory=np.array([float(n.get("gpuMemory", 0) or 0) for n in nodes_in]),
        labels=[dict(n.get("labels") or {}) for n in nodes_in],
        unschedulable=np.array([bool(n.get("unschedulable", False)) for n in nodes_in], dtype=bool),
        ready=np.array([bool(n.get("ready", True)) for n in nodes_in], dtype=bool),
    )
    qs = sc.get("queues") or []
    qidx = {q["name"]: i for i, q in enumerate(qs)}

    def qarr(key):
        out = []
        for q in qs:
            res = q.get("resources") or {}
            row = []
            for r in _RES:
                v = (res.get(r) or {}).get(key, 0)
                if key == "overQuotaWeight":
                    v = 1.0 if v is None or v == -1 else float(v)
                    row.append(v)
                else:
                    row.append(_qval(r, v))
            out.append(row)
        return np.array(out, dtype=float).reshape(-1, 3)

    def dur(v):
        return math.nan if v is None else parse_duration(v)

    queues = Queues(
        names=[q["name"] for q in qs],
        parent=np.array([qidx[q["parent"]] if q.get("parent") else -1 for q in qs], dtype=np.int64),
        priority=np.array([int(q.get("priority", 100)) for q in qs], dtype=np.int64),
        created_minutes_ago=np.array([float(q.get("createdMinutesAgo", 0)) for q in qs]),
        deserved=qarr("quota"), weight=qarr("overQuotaWeight"), limit=qarr("limit"),
        reclaim_min_runtime=np.array([dur(q.get("reclaimMinRuntime")) for q in qs]),
        preempt_min_runtime=np.array([dur(q.get("preemptMinRuntime")) for q in qs]),
    )
    nidx = nodes.index
    jobs_in = sc.get("jobs") or []
    t_names, t_job, t_req, t_mem, t_state, t_prio, t_node, t_groups, t_sel = [], [], [], [], [], [], [], [], []
    starts, counts = [], []
    for ji, j in enumerate(jobs_in):
        tasks = j.get("tasks")
        if tasks is None:
            tasks = [dict(j["task"]) for _ in range(int(j.get("replicas", 1)))]
        starts.append(len(t_names))
        counts.append(len(tasks))
        for k, t in enumerate(tasks):
            t_names.append(t.get("name") or f"{j['name']}-{k}")
            t_job.append(ji)
            t_req.append([parse_gpu(t.get("gpu", 0) or 0), parse_cpu(t.get("cpu", 0) or 0),
                          parse_memory(t.get("memory", 0) or 0)])
            t_mem.append(float(t.get("gpuMemory") or 0))
            t_state.append(int(TaskState.parse(t.get("state", "Pending"))))
            p = t.get("priority")
            t_prio.append(math.nan if p is None else float(p))
            t_node.append(nidx[t["node"]] if t.get("node") else -1)
            t_groups.append(list(t.get("gpuGroups") or []))
            t_sel.append(dict(t.get("nodeSelector") or {}))
    jobs = Jobs(
        names=[j["name"] for j in jobs_in],
        queue=np.array([qidx[j["queue"]] for j in jobs_in], dtype=np.int64),
        priority=np.array([int(j.get("priority", 50)) for j in jobs_in], dtype=np.int64),
        preemptible=np.array([bool(j.get("preemptible", int(j.get("priority", 50)) < 100)) for j in jobs_in], dtype=bool),
        min_available=np.array([int(j["minAvailable"]) if j.get("minAvailable") is not None else c
                                for j, c in zip(jobs_in, counts)], dtype=np.int64),
        created_minutes_ago=np.array([float(j.get("createdMinutesAgo", 0)) for j in jobs_in]),
        started_minutes_ago=np.array([float(j["startedMinutesAgo"]) if j.get("startedMinutesAgo") is not None
                                      else math.nan for j in jobs_in]),
        stale_for=np.array([dur(j.get("staleFor")) for j in jobs_in]),
        staleness_grace_period=np.array([dur(j.get("stalenessGracePeriod")) for j in jobs_in]),
        preemption_delay=np.array([dur(j.get("preemptionDelay")) for j in jobs_in]),
        topology_required=[(j.get("topology") or {}).get("required") for j in jobs_in],
        topology_preferred=[(j.get("topology") or {}).get("preferred") for j in jobs_in],
        task_start=np.array(starts, dtype=np.int64), task_count=np.array(counts, dtype=np.int64),
    )
    tasks = Tasks(
        names=t_names, job=np.array(t_job, dtype=np.int64), request=np.array(t_req, dtype=float).reshape(-1, 3),
        gpu_memory=np.array(t_mem, dtype=float), state=np.array(t_state, dtype=np.int8),
        priority=np.array(t_prio, dtype=float), node=np.array(t_node, dtype=np.int64),
        gpu_groups=t_groups, node_selector=t_sel,
    )
    usage = np.zeros((len(qs), 3))
    for qn, u in (sc.get("usage") or {}).items():
        for r, v in u.items():
            usage[qidx[qn], _RES.index(r)] = float(v)
    return Snapshot(name=sc.get("name", ""), config=cfg, nodes=nodes, queues=queues, jobs=jobs, tasks=tasks,
                    usage=usage, expect=sc.get("expect"), source=sc)


def load_yaml(path) -> Snapshot:
    with open(path) as fh:
        return build(yaml.safe_load(fh))


def simple(nodes, queues, jobs, **config) -> Snapshot:
    """Compact builder: ``nodes`` list of dicts, ``queues`` list of dicts (resources shorthand
    ``gpu=(quota, weight, limit)``), ``jobs`` list of dicts."""
    qs = []
    for q in queues:
        q = dict(q)
        res = {}
        for r in _RES:
            spec = q.pop(r, (-1, 1, -1))
            res[r] = {"quota": spec[0], "overQuotaWeight": spec[1], "limit": spec[2]}
        q["resources"] = res
        qs.append(q)
    return build({"config": config, "nodes": nodes, "queues": qs, "jobs": jobs})
