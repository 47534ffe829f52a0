"""Builders shared by the cycle tests (cluster, queues, workloads) and a canonical DB dump."""
from __future__ import annotations

from queues_app.models import QueueStatus, SchedulerState, SchedulingCycle, Task, Workload
from queues_app.services.nodes import node_upsert
from queues_app.services.queues import queue_create
from queues_app.services.workloads import workload_submit

GiB = 1024**3


def make_cluster(*, nodes: int = 2, gpus: int = 4, prefix: str = "n") -> list:
    return [node_upsert(name=f"{prefix}{i}", gpus=gpus, gpu_memory_mib=81920, cpu_millis=64000,
                        memory_bytes=512 * GiB)[0] for i in range(nodes)]


def make_queues(quotas: dict[str, float] | None = None) -> dict:
    quotas = quotas or {"qa": 4, "qb": 4}
    root = queue_create(name="root", quotas={"gpu": {"quota": sum(quotas.values())}})
    out = {"root": root}
    for name, q in quotas.items():
        out[name] = queue_create(name=name, parent=root, quotas={"gpu": {"quota": q}})
    return out


def submit(queue, name: str, *, gpu: float = 1, replicas: int = 1, priority: int = 50, **kw):
    return workload_submit(queue=queue, name=name, replicas=replicas,
                           task={"gpu": gpu, "cpu_millis": 1000, "memory_bytes": GiB}, priority=priority, **kw)


def states(workload) -> list[str]:
    return list(Task.objects.filter(workload=workload).order_by("index").values_list("state", flat=True))


def dump() -> dict:
    """What a cycle writes, by name (ids and timestamps excluded): equal dumps = equal state."""
    return {
        "tasks": sorted((t["workload__name"], t["name"], t["state"], t["node__name"], tuple(t["gpu_groups"] or ()))
                        for t in Task.objects.values("workload__name", "name", "state", "node__name", "gpu_groups")),
        "workloads": sorted(Workload.objects.values_list("name", "status")),
        "queue_status": sorted(QueueStatus.objects.values_list(
            "queue__name", "allocated_gpu", "allocated_cpu", "allocated_memory", "fair_share_gpu",
            "pending_workloads", "running_workloads")),
        "generation": SchedulerState.objects.filter(id=1).values_list("generation", flat=True).first(),
        "applied": SchedulingCycle.objects.filter(status="applied").count(),
    }
