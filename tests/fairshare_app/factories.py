"""Test data for fairshare_app: nodes, queues and running workloads created through the
queues_app services (workload_import records an observed Running state), plus budgets."""
from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import factory

from fairshare_app.models import GpuBudget
from fairshare_app.services.budgets import budget_create
from queues_app.models import Workload
from queues_app.services.nodes import node_upsert
from queues_app.services.queues import queue_create
from queues_app.services.workloads import workload_import

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=dt_timezone.utc)  # a Tuesday, on every grid


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def gpu_node(name: str = "node0", gpus: int = 8) -> object:
    return node_upsert(name=name, gpus=gpus, gpu_memory_mib=81920, cpu_millis=64_000, memory_bytes=512 * 2**30)[0]


def leaf_queue(name: str, parent=None, *, gpu_quota: float = 0, weight: float = 1, limit: float = -1):
    return queue_create(name=name, parent=parent, quotas={
        "gpu": {"quota": gpu_quota, "over_quota_weight": weight, "limit": limit},
        "cpu": {"quota": -1, "over_quota_weight": 1, "limit": -1},
        "memory": {"quota": -1, "over_quota_weight": 1, "limit": -1}})


def running(queue, *, name: str, gpus: int, node: str = "node0", started_at: datetime, tenant=None, owner=None,
            cpu_millis: int = 0, memory_bytes: int = 0, replicas: int = 1) -> Workload:
    wl = workload_import(queue=queue, name=name, tenant=tenant, started_at=started_at, created_at=started_at,
                         tasks=[{"gpu": gpus, "cpu_millis": cpu_millis, "memory_bytes": memory_bytes,
                                 "state": "Running", "node": node} for _ in range(replicas)])
    Workload.objects.filter(pk=wl.pk).update(status="Running", owner=owner)
    wl.refresh_from_db()
    return wl


def finish(workload: Workload, *, at: datetime, state: str = "Succeeded") -> None:
    workload.tasks.update(state=state)
    Workload.objects.filter(pk=workload.pk).update(status=state, finished_at=at)


class GpuBudgetFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuBudget

    gpu_hours = 100
    period = "MONTHLY"
    policy = "deprioritize"

    @classmethod
    def _create(cls, model_class, *args, **kwargs):
        return budget_create(**kwargs)
