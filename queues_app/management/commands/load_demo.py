"""``manage.py load_demo``: an idempotent demo cluster.

16 nodes x 8 GPUs in two racks / zones, a DRA-only pool of 4 GB200-style nodes (4 DRA GPUs and
one IMEX channel each, no classic GPUs), a two-level queue tree with quotas, three tenants with
member users (API tokens created when DRF's token app is installed), a mix of running and
pending workloads -- among them a disaggregated-serving workload with a subgroup tree and a job
claiming DRA devices -- and, only on the embedded default database outside production, a
superuser ``admin`` / ``admin``.  Running it twice changes nothing the second time.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.apps import apps
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from queues_app.models import Queue, Tenant, Workload
from queues_app.services.devices import device_class_upsert
from queues_app.services import (
    node_upsert,
    queue_create,
    queue_set_quota,
    tenant_create,
    tenant_grant_queue,
    tenant_set_members,
    workload_import,
    workload_submit,
)

GIB = 2**30
NODES = [
    {
        "name": f"dgx-{rack}-{i:02d}",
        "gpus": 8, "gpu_memory_mib": 81920, "cpu_millis": 128_000, "memory_bytes": 1024 * GIB,
        "labels": {"topology.kubernetes.io/zone": zone, "kai.scheduler/rack": rack,
                   "nvidia.com/gpu.product": "H100-80GB"},
    }
    for rack, zone in (("rack-1", "zone-a"), ("rack-2", "zone-b"))
    for i in range(1, 9)
]
# dynamic resource allocation: device classes, and a DRA-only pool (devices, no classic GPUs)
DEVICE_CLASSES = [("gpu.nvidia.com", "gpu", "NVIDIA GPUs through the DRA driver"),
                  ("compute-domain.nvidia.com", "", "IMEX channels of a multi-node NVLink domain")]
DRA_NODES = [
    {
        "name": f"gb200-{i:02d}", "gpus": 0, "cpu_millis": 144_000, "memory_bytes": 960 * GIB,
        "labels": {"topology.kubernetes.io/zone": "zone-c", "kai.scheduler/rack": "rack-3",
                   "nvidia.com/gpu.product": "GB200"},
        "devices": {"gpu.nvidia.com": 4, "compute-domain.nvidia.com": 1},
    }
    for i in range(1, 5)
]
# name, parent, priority, {resource: (quota, over_quota_weight, limit)}
QUEUES = [
    ("research", None, 100, {"gpu": (64, 1, -1), "cpu": (-1, 1, -1), "memory": (-1, 1, -1)}),
    ("production", None, 200, {"gpu": (64, 2, -1), "cpu": (-1, 1, -1), "memory": (-1, 1, -1)}),
    ("vision", "research", 100, {"gpu": (32, 1, 96), "cpu": (-1, 1, -1), "memory": (-1, 1, -1)}),
    ("nlp", "research", 100, {"gpu": (32, 1, 96), "cpu": (-1, 1, -1), "memory": (-1, 1, -1)}),
    ("inference", "production", 150, {"gpu": (48, 1, -1), "cpu": (-1, 1, -1), "memory": (-1, 1, -1)}),
    ("batch", "production", 100, {"gpu": (16, 2, 64), "cpu": (-1, 1, -1), "memory": (-1, 1, -1)}),
]
# tenant, display name, members, granted leaf queues
TENANTS = [
    ("team-vision", "Computer vision", ["alice", "bob"], ["vision"]),
    ("team-nlp", "Language models", ["carol"], ["nlp", "batch"]),
    ("team-serving", "Model serving", ["dave"], ["inference", "batch"]),
]
DEMO_PASSWORD = "demo-password"  # noqa: S105 - demo accounts on a local embedded install


def _task(gpu: float, cpu: int = 8000, mem_gib: int = 64) -> dict[str, Any]:
    return {"gpu": gpu, "cpu_millis": cpu, "memory_bytes": mem_gib * GIB}


# name, tenant, queue, priority, tasks, running node names (None = pending), topology
WORKLOADS = [
    ("resnet-train", "team-vision", "vision", 50, [_task(8)] * 2, ["dgx-rack-1-01", "dgx-rack-1-02"], "kai.scheduler/rack"),
    ("vit-sweep", "team-vision", "vision", 50, [_task(1)] * 4, ["dgx-rack-1-03"] * 4, None),
    ("detr-finetune", "team-vision", "vision", 75, [_task(4)], None, None),
    ("llm-pretrain", "team-nlp", "nlp", 50, [_task(8)] * 4,
     ["dgx-rack-2-01", "dgx-rack-2-02", "dgx-rack-2-03", "dgx-rack-2-04"], "kai.scheduler/rack"),
    ("tokenizer-eval", "team-nlp", "batch", 50, [_task(0.5, 2000, 16)], None, None),
    ("chat-serving", "team-serving", "inference", 125, [_task(2)] * 3,
     ["dgx-rack-1-05", "dgx-rack-1-05", "dgx-rack-1-06"], None),
    ("embed-serving", "team-serving", "inference", 125, [_task(1)] * 2, None, None),
    ("nightly-build", "team-serving", "batch", 100, [_task(1, 16000, 32)], None, None),
    ("llm-sft-big", "team-nlp", "nlp", 50, [_task(8)] * 8, None, "kai.scheduler/rack"),
]


# Pending workloads using KAI's newer features: a hierarchical gang (disaggregated serving: decode
# leader + workers in one rack, prefill anywhere; scenario-format "SubGroups") and a job whose tasks
# claim DRA GPUs and an IMEX channel ("Devices").  (Their 8 GPUs in inference and 8 DRA GPUs in batch
# leave the busy demo of the browser tests as without them: batch's sweep stops at batch's limit.)
FEATURE_WORKLOADS = [
    dict(name="disagg-serve", tenant="team-serving", queue="inference", priority=125,
         sub_groups=[{"name": "decode", "topology_required": "kai.scheduler/rack"},
                     {"name": "decode-leader", "parent": "decode", "min_available": 1},
                     {"name": "decode-workers", "parent": "decode", "min_available": 2},
                     {"name": "prefill", "min_available": 2}],
         tasks=([{**_task(2), "sub_group": "decode-leader"}] + [{**_task(2), "sub_group": "decode-workers"}] * 2
                + [{**_task(1), "sub_group": "prefill"}] * 2)),
    dict(name="imex-train", tenant="team-nlp", queue="batch", priority=50,
         tasks=[{**_task(0), "claims": [{"device_class": "gpu.nvidia.com", "count": 4},
                                        {"device_class": "compute-domain.nvidia.com", "count": 1}]}] * 2),
]


class Command(BaseCommand):
    help = "Load an idempotent demo cluster, queue tree, tenants, users and workloads."

    def handle(self, *args, **options):
        with transaction.atomic():
            summary = self.load()
        for line in summary:
            self.stdout.write(line)

    def load(self) -> list[str]:
        out: list[str] = []
        for dc_name, counts_as, description in DEVICE_CLASSES:
            device_class_upsert(name=dc_name, counts_as=counts_as, description=description)
        for spec in NODES + DRA_NODES:
            node_upsert(**spec)
        out.append(f"nodes: {len(NODES)} x 8 GPUs in 2 racks / zones; {len(DRA_NODES)} DRA-only nodes "
                   f"(4 gpu.nvidia.com devices + 1 IMEX channel each)")

        queues: dict[str, Queue] = {q.name: q for q in Queue.objects.all()}
        for name, parent, priority, res in QUEUES:
            quotas = {r: {"quota": q, "over_quota_weight": w, "limit": lim} for r, (q, w, lim) in res.items()}
            if name not in queues:
                queues[name] = queue_create(name=name, parent=queues.get(parent) if parent else None,
                                            priority=priority, quotas=quotas, source="demo")
            else:
                for r, values in quotas.items():
                    queue_set_quota(queue=queues[name], resource=r, source="demo", **values)
        out.append("queues: " + ", ".join(f"{n}{' < ' + p if p else ''}" for n, p, _, _ in QUEUES))

        user_model = get_user_model()
        tenants: dict[str, Tenant] = {}
        token_model = apps.get_model("authtoken", "Token") if apps.is_installed("rest_framework.authtoken") else None
        for name, display, members, granted in TENANTS:
            users = []
            for username in members:
                user, created = user_model.objects.get_or_create(username=username,
                                                                 defaults={"email": f"{username}@example.org"})
                if created:
                    user.set_password(DEMO_PASSWORD)
                    user.save(update_fields=["password"])
                if token_model is not None:
                    token, _ = token_model.objects.get_or_create(user=user)
                    out.append(f"user {username} (tenant {name}): password {DEMO_PASSWORD!r}, API token {token.key}")
                else:
                    out.append(f"user {username} (tenant {name}): password {DEMO_PASSWORD!r}")
                users.append(user)
            tenant = Tenant.objects.filter(name=name).first()
            if tenant is None:
                tenant = tenant_create(name=name, display_name=display)
            tenant_set_members(tenant=tenant, members=users)
            for qname in granted:
                tenant_grant_queue(tenant=tenant, queue=queues[qname])
            tenants[name] = tenant

        now = timezone.now()
        created = 0
        for i, (name, tenant, queue, priority, tasks, nodes, topology) in enumerate(WORKLOADS):
            if Workload.objects.filter(queue=queues[queue], name=name).exists():
                continue
            common = dict(queue=queues[queue], name=name, tenant=tenants[tenant], priority=priority,
                          topology_required=topology or "")
            if nodes:
                started = now - timedelta(minutes=30 + 10 * i)
                workload_import(
                    **common, created_at=started - timedelta(minutes=2), started_at=started,
                    tasks=[{**t, "state": "Running", "node": n} for t, n in zip(tasks, nodes)],
                )
            else:
                workload_submit(**common, tasks=[dict(t) for t in tasks])
            created += 1
        for spec in FEATURE_WORKLOADS:
            spec = dict(spec)
            tenant = tenants[spec.pop("tenant")]
            queue = queues[spec.pop("queue")]
            if Workload.objects.filter(queue=queue, name=spec["name"]).exists():
                continue
            workload_submit(queue=queue, tenant=tenant, **spec)
            created += 1
        out.append(f"workloads: {len(WORKLOADS) + len(FEATURE_WORKLOADS)} ({created} created now; "
                   f"disagg-serve has subgroups, imex-train claims DRA devices)")

        if settings.EMBEDDED_DATABASE and not settings.PRODUCTION:
            admin_user, made = user_model.objects.get_or_create(
                username="admin", defaults={"is_staff": True, "is_superuser": True, "email": "admin@example.org"})
            if made:
                admin_user.set_password("admin")
                admin_user.save(update_fields=["password"])
            out.append("admin: username 'admin', password 'admin' (embedded default only)")
        else:
            out.append("admin: not created (not the embedded default); use `manage.py createsuperuser`")
        return out
