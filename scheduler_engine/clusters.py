"""The generated clusters of ``bench`` and ``kernels.warm``: :func:`generate` (a realistic cluster,
deterministic for a seed) and :func:`with_features` (subgroup trees and a DRA device pool on top).

Why a module of their own: ``bench`` loads the kernels through ``kernels.warm`` before its timed
cycles, and the warm-up cycles run on these clusters; with the generator inside ``bench`` the two
modules imported each other. ``bench`` re-exports both functions (``bench.generate`` is how tests,
scripts and the README reach them). The cluster's shape is described in ``bench``'s docstring.
"""
from __future__ import annotations

import math
from datetime import datetime, timezone

import numpy as np

from .snapshot import ACTION_NAMES, CPU, GPU, MEM, NRES, Config, Jobs, Nodes, Queues, Snapshot, TaskState, Tasks

__all__ = ["generate", "with_features", "queue_tree_sizes", "DRA_GPU_CLASS", "DRA_CHANNEL_CLASS"]


GI = 1024.0 ** 3
_NODE_TYPES = (  # (gpu memory MiB, cores, memory bytes, weight)
    (81920.0, 192, 2048 * GI, 0.4),
    (49152.0, 128, 1024 * GI, 0.3),
    (40960.0, 96, 1024 * GI, 0.3),
)
CPU_PER_GPU = 8000.0  # millicores requested per GPU
MEM_PER_GPU = 64 * GI


def queue_tree_sizes(q: int) -> tuple[int, int, int]:
    """(departments, projects, leaves) of a 3-level tree of ``q`` queues (q >= 3)."""
    if q < 3:
        raise ValueError("queues: a 3-level tree needs at least 3 queues")
    top = max(1, int(round(q ** (1 / 3))))
    mid = max(top, int(round(q ** (2 / 3))) - top)
    if top + mid >= q:
        top, mid = 1, max(1, (q - 1) // 2)
    return top, mid, q - top - mid


def _queues(rng: np.random.Generator, q: int, total_gpus: float) -> Queues:
    top, mid, leaves = queue_tree_sizes(q)
    names, parent = [], []
    for d in range(top):
        names.append(f"dept-{d}")
        parent.append(-1)
    for p in range(mid):
        names.append(f"proj-{p}")
        parent.append(p % top)
    for leaf in range(leaves):
        names.append(f"team-{leaf}")
        parent.append(top + leaf % mid)
    parent_a = np.array(parent, dtype=np.int64)
    deserved = np.full((q, NRES), -1.0)
    share = rng.gamma(2.0, 1.0, leaves)
    leaf_quota = np.floor(share / share.sum() * total_gpus * 0.9)
    deserved[top + mid:, GPU] = leaf_quota
    # parents deserve the sum of their children (bottom-up: projects, then departments)
    deserved[top:top + mid, GPU] = 0.0
    np.add.at(deserved[:, GPU], parent_a[top + mid:], leaf_quota)
    deserved[:top, GPU] = 0.0
    np.add.at(deserved[:, GPU], parent_a[top:top + mid], deserved[top:top + mid, GPU])
    weight = np.ones((q, NRES))
    weight[:, GPU] = rng.integers(1, 5, q)
    limit = np.full((q, NRES), -1.0)
    capped = top + mid + np.flatnonzero(rng.random(leaves) < 0.1)
    limit[capped, GPU] = np.maximum(2.0 * deserved[capped, GPU], 8.0)
    priority = np.full(q, 100, dtype=np.int64)
    priority[top + mid + np.flatnonzero(rng.random(leaves) < 0.05)] = 200
    return Queues(
        names=names, parent=parent_a, priority=priority,
        created_minutes_ago=rng.integers(100, 100000, q).astype(float),
        deserved=deserved, weight=weight, limit=limit,
        reclaim_min_runtime=np.full(q, np.nan), preempt_min_runtime=np.full(q, np.nan),
    )


def _nodes(rng: np.random.Generator, n: int) -> Nodes:
    kinds = rng.choice(len(_NODE_TYPES), size=n, p=[t[3] for t in _NODE_TYPES])
    cap = np.zeros((n, NRES))
    cap[:, GPU] = 8
    cap[:, CPU] = [_NODE_TYPES[k][1] * 1000.0 for k in kinds]
    cap[:, MEM] = [_NODE_TYPES[k][2] for k in kinds]
    return Nodes(
        names=[f"node-{i:05d}" for i in range(n)], capacity=cap, reserved=np.zeros((n, NRES)),
        gpus=np.full(n, 8, dtype=np.int64), gpu_memory=np.array([_NODE_TYPES[k][0] for k in kinds]),
        labels=[{"kai.scheduler/rack": f"r{i // 16}", "topology.kubernetes.io/zone": f"z{i // 256}"}
                for i in range(n)],
        unschedulable=np.zeros(n, dtype=bool), ready=rng.random(n) >= 0.01,
    )


class _Builder:
    def __init__(self) -> None:
        self.j_names: list[str] = []
        self.j_queue: list[int] = []
        self.j_prio: list[int] = []
        self.j_min: list[int] = []
        self.j_created: list[float] = []
        self.j_started: list[float] = []
        self.j_count: list[int] = []
        self.t_names: list[str] = []
        self.t_job: list[int] = []
        self.t_req: list[tuple[float, float, float]] = []
        self.t_gm: list[float] = []
        self.t_state: list[int] = []
        self.t_node: list[int] = []
        self.t_groups: list[list[str]] = []

    def job(self, name, queue, prio, created, started, tasks, min_available=None) -> None:
        j = len(self.j_names)
        self.j_names.append(name)
        self.j_queue.append(queue)
        self.j_prio.append(prio)
        self.j_created.append(created)
        self.j_started.append(started)
        self.j_count.append(len(tasks))
        self.j_min.append(len(tasks) if min_available is None else min_available)
        for k, (req, gm, state, node, groups) in enumerate(tasks):
            self.t_names.append(f"{name}-{k}")
            self.t_job.append(j)
            self.t_req.append(req)
            self.t_gm.append(gm)
            self.t_state.append(state)
            self.t_node.append(node)
            self.t_groups.append(groups)


def _req(gpu: float) -> tuple[float, float, float]:
    g = max(gpu, 0.25)
    return (gpu, max(1000.0, CPU_PER_GPU * g), max(4 * GI, MEM_PER_GPU * g))


_PRIOS = np.array([50, 75, 100, 125])
_PRIO_P = np.array([0.7, 0.1, 0.1, 0.1])


def generate(*, nodes: int, jobs: int, queues: int, seed: int = 1, shape: str = "mixed",
             fill: float = 0.7) -> Snapshot:
    """A realistic cluster snapshot (module docstring); deterministic for ``seed``."""
    if nodes < 1 or jobs < 0 or not 0.0 <= fill <= 1.0:
        raise ValueError("nodes must be >= 1, jobs >= 0, fill in [0, 1]")
    if shape not in ("mixed", "one-gpu"):
        raise ValueError(f"shape: expected mixed or one-gpu, got {shape!r}")
    rng = np.random.default_rng(seed)
    nd = _nodes(rng, nodes)
    total_gpus = float(nd.gpus[nd.ready].sum())
    qs = _queues(rng, queues, total_gpus)
    top, mid, n_leaves = queue_tree_sizes(queues)
    leaf0 = top + mid
    b = _Builder()
    # ---- running load: every node filled to about `fill` of its GPUs (shared devices at 0.5)
    used_target = rng.binomial(8, fill, nodes)
    leaf_of_run = rng.integers(0, n_leaves, int(used_target.sum()) * 2 + 1)
    r = 0
    _RUN = int(TaskState.RUNNING)
    for n in range(nodes):
        left = int(used_target[n])
        dev = 0
        while left > 0:
            size = int(rng.choice([1, 2, 4, 8], p=[0.4, 0.3, 0.2, 0.1]))
            while size > left:
                size //= 2
            q = leaf0 + int(leaf_of_run[r])
            r += 1
            prio = int(rng.choice(_PRIOS, p=_PRIO_P))
            created = float(rng.integers(10, 5000))
            if size == 1 and rng.random() < 0.2:  # a shared device: two half-GPU tasks
                group = str(dev)
                for half in range(2):
                    b.job(f"run-{len(b.j_names)}", q, prio, created, created / 2,
                          [(_req(0.5), 0.0, _RUN, n, [group])])
            else:
                b.job(f"run-{len(b.j_names)}", q, prio, created, created / 2,
                      [(_req(float(size)), 0.0, _RUN, n, [])])
            dev += size
            left -= size
    # ---- pending jobs
    _PEND = int(TaskState.PENDING)
    kinds = rng.random(jobs)
    leaves = leaf0 + rng.integers(0, n_leaves, jobs)
    prios = rng.choice(_PRIOS, size=jobs, p=_PRIO_P)
    created = rng.integers(0, 1000, jobs).astype(float)
    for i in range(jobs):
        name = f"job-{i:06d}"
        q = int(leaves[i])
        if shape == "one-gpu":
            b.job(name, q, int(prios[i]), float(created[i]), math.nan, [(_req(1.0), 0.0, _PEND, -1, [])])
            continue
        k = kinds[i]
        if k < 0.55:
            g = float(rng.choice([1, 2, 4, 8], p=[0.5, 0.2, 0.15, 0.15]))
            tasks = [(_req(g), 0.0, _PEND, -1, [])]
        elif k < 0.70:
            g = float(rng.choice([0.25, 0.5]))
            tasks = [(_req(g), 0.0, _PEND, -1, [])]
        elif k < 0.75:
            gm = float(rng.choice([10240.0, 20480.0]))
            tasks = [((0.0, 4000.0, 16 * GI), gm, _PEND, -1, [])]
        elif k < 0.95:
            n_t = int(rng.integers(2, 9))
            g = float(rng.choice([1, 2, 4, 8], p=[0.3, 0.2, 0.2, 0.3]))
            tasks = [(_req(g), 0.0, _PEND, -1, []) for _ in range(n_t)]
        else:
            tasks = [((0.0, 4000.0, 16 * GI), 0.0, _PEND, -1, [])]
        b.job(name, q, int(prios[i]), float(created[i]), math.nan, tasks)
    J, T = len(b.j_names), len(b.t_names)
    prio_a = np.array(b.j_prio, dtype=np.int64)
    jb = Jobs(
        names=b.j_names, queue=np.array(b.j_queue, dtype=np.int64), priority=prio_a,
        preemptible=prio_a < 100, min_available=np.array(b.j_min, dtype=np.int64),
        created_minutes_ago=np.array(b.j_created), started_minutes_ago=np.array(b.j_started),
        stale_for=np.full(J, np.nan), staleness_grace_period=np.full(J, np.nan),
        preemption_delay=np.full(J, np.nan), topology_required=[None] * J, topology_preferred=[None] * J,
        task_start=np.concatenate([[0], np.cumsum(b.j_count)[:-1]]).astype(np.int64) if J else np.zeros(0, np.int64),
        task_count=np.array(b.j_count, dtype=np.int64),
    )
    ts = Tasks(
        names=b.t_names, job=np.array(b.t_job, dtype=np.int64), request=np.array(b.t_req, dtype=float).reshape(T, NRES),
        gpu_memory=np.array(b.t_gm), state=np.array(b.t_state, dtype=np.int8), priority=np.full(T, np.nan),
        node=np.array(b.t_node, dtype=np.int64), gpu_groups=b.t_groups, node_selector=[{} for _ in range(T)],
    )
    usage = np.zeros((queues, NRES))
    usage[leaf0:, GPU] = rng.random(n_leaves) * (1.0 / max(n_leaves, 1))
    cfg = Config(actions=ACTION_NAMES, k_value=1.0, now=datetime(2026, 1, 1, tzinfo=timezone.utc))
    return Snapshot(name=f"bench nodes={nodes} jobs={jobs} queues={queues} seed={seed} shape={shape}",
                    config=cfg, nodes=nd, queues=qs, jobs=jb, tasks=ts, usage=usage)


# ---------------------------------------------------------------------------------------- features

DRA_GPU_CLASS = "gpu.nvidia.com"
DRA_CHANNEL_CLASS = "compute-domain.nvidia.com"


def with_features(snap: Snapshot, *, sub_groups: float = 0.0, dra_nodes: float = 0.0, seed: int = 1) -> Snapshot:
    """``snap`` with a share of subgroup jobs and a DRA node pool (module docstring), through the
    scenario format (so the loader checks what is generated). Its random stream is its own: the
    generated base cluster is the one :func:`generate` gives for the seed."""
    if not sub_groups and not dra_nodes:
        return snap
    if not 0.0 <= sub_groups <= 1.0 or not 0.0 <= dra_nodes <= 1.0:
        raise ValueError("sub_groups and dra_nodes are fractions in [0, 1]")
    from .loader import load_dict, snapshot_to_dict

    rng = np.random.default_rng([seed, 21])
    d = snapshot_to_dict(snap)
    if dra_nodes:
        _dra_pool(d, rng, dra_nodes)
    if sub_groups:
        for job in d["jobs"]:
            if all(t["state"] == "Pending" for t in job["tasks"]) and rng.random() < sub_groups:
                _tree_job(job, rng)
    out = load_dict(d, source=snap.name)
    out.name = snap.name + (f" subgroups={sub_groups:g}" if sub_groups else "") + (
        f" dra-nodes={dra_nodes:g}" if dra_nodes else "")
    return out


def _dra_pool(d: dict, rng: np.random.Generator, frac: float) -> None:
    """The last ``frac`` of the nodes (rounded up to whole racks of 16) become DRA-only; tasks running
    there claim devices instead of GPUs (a shared device's first half claims it, the second half keeps
    only its CPU and memory); a matching share of pending whole-GPU jobs claim devices."""
    n = len(d["nodes"])
    k = min(n, int(math.ceil(frac * n / 16.0)) * 16)
    pool = set()
    d["deviceClasses"] = [{"name": DRA_GPU_CLASS, "countsAs": "gpu"}, {"name": DRA_CHANNEL_CLASS}]
    for node in d["nodes"][n - k:]:
        node["gpus"] = 0
        node["devices"] = {DRA_GPU_CLASS: 8, DRA_CHANNEL_CLASS: 1}
        pool.add(node["name"])
    shared_seen: set[tuple[str, str]] = set()
    for job in d["jobs"]:
        tasks = job["tasks"]
        if any(t["node"] in pool for t in tasks):
            for t in tasks:
                g = float(t["gpu"])
                if g >= 1:
                    t["claims"] = [{"deviceClass": DRA_GPU_CLASS, "count": int(g)}]
                elif g > 0:
                    key = (t["node"], (t["gpuGroups"] or ["?"])[0])
                    if key not in shared_seen:
                        shared_seen.add(key)
                        t["claims"] = [{"deviceClass": DRA_GPU_CLASS, "count": 1}]
                t["gpu"] = 0
                t["gpuGroups"] = []
        elif (all(t["state"] == "Pending" for t in tasks)
              and all(float(t["gpu"]) >= 1 and not t.get("gpuMemory") for t in tasks) and rng.random() < frac):
            for t in tasks:
                g = int(float(t["gpu"]))
                t["claims"] = [{"deviceClass": DRA_GPU_CLASS, "count": g}]
                if g == 8:
                    t["claims"].append({"deviceClass": DRA_CHANNEL_CLASS, "count": 1})
                t["gpu"] = 0


_RACK, _ZONE = "kai.scheduler/rack", "topology.kubernetes.io/zone"


def _tree_job(job: dict, rng: np.random.Generator) -> None:
    """Replace a pending job's tasks by a subgroup tree (2 or 3 levels; the job keeps its name,
    queue and priority)."""
    name = job["name"]

    def tasks(group: str, count: int, gpu: int) -> list[dict]:
        return [{"name": f"{name}-{group}-{i}", "subGroup": group, "gpu": gpu, "cpu": str(8 * gpu),
                 "memory": f"{64 * gpu}Gi"} for i in range(count)]

    kind = rng.random()
    groups: list[dict] = []
    ts: list[dict] = []
    if kind < 0.4:  # 2 levels: prefill and decode leaves, decode in one rack
        np_, nd = int(rng.integers(2, 5)), int(rng.integers(2, 5))
        groups = [{"name": "prefill", "minAvailable": np_},
                  {"name": "decode", "minAvailable": max(1, nd - 1), "topology": {"required": _RACK}}]
        ts = tasks("prefill", np_, 1) + tasks("decode", nd, int(rng.choice([1, 2])))
    elif kind < 0.8:  # 3 levels: leader + workers under zone-level decode / prefill
        for part in ("decode", "prefill"):
            nw = int(rng.integers(2, 5))
            groups += [{"name": part, "topology": {"required": _ZONE}},
                       {"name": f"{part}-leader", "parent": part, "minAvailable": 1, "topology": {"required": _RACK}},
                       {"name": f"{part}-workers", "parent": part, "minAvailable": 2, "topology": {"required": _RACK}}]
            ts += tasks(f"{part}-leader", 1, 1) + tasks(f"{part}-workers", nw, 1)
    else:  # replicas: 2 of 3 needed, each replica in one rack
        job["minSubGroups"] = 2
        for r in range(3):
            groups.append({"name": f"replica-{r}", "minAvailable": 2, "topology": {"required": _RACK}})
            ts += tasks(f"replica-{r}", 2, 1)
    job.pop("minAvailable", None)
    job["subGroups"] = groups
    job["tasks"] = ts


# ---------------------------------------------------------------------------------------- timing
