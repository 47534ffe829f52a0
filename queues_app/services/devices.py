"""Device classes of dynamic resource allocation, nodes' devices and tasks' claims.

The GPU-counting fields derived from them (``Node.dra_gpus``, ``Task.dra_gpus``) are written here
and only here, so queue allocation, fair-share usage and capacity (which sum ``gpu + dra_gpus``)
always agree with what the engine counts as GPUs (a class that ``counts_as`` gpu, or whose name
contains "gpu").
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from django.db import transaction
from django.db.models import Q

from queues_app.errors import ApplicationError
from queues_app.models import DeviceClass, Node, Task
from queues_app.services.common import model_update, validate


def gpu_classes(names: Iterable[str] | None = None) -> set[str]:
    """Names of the device classes (all, or among ``names``) that count as GPUs."""
    qs = DeviceClass.objects.all() if names is None else DeviceClass.objects.filter(name__in=list(names))
    return {c.name for c in qs.only("name", "counts_as") if c.counts_as_gpu}


def claims_gpu_count(claims: Iterable[Mapping[str, Any]], gpu: set[str]) -> int:
    """Devices of GPU classes among a task's claims."""
    return sum(int(c.get("count", 1)) for c in claims or () if c.get("device_class") in gpu)


def devices_gpu_count(devices: Mapping[str, int], gpu: set[str]) -> int:
    """Devices of GPU classes a node offers."""
    return sum(int(n) for cls, n in (devices or {}).items() if cls in gpu)


@transaction.atomic
def device_class_upsert(*, name: str, counts_as: str = "", description: str = "") -> tuple[DeviceClass, bool]:
    """Create or update a device class (what the Kubernetes sync and the admin call). Changing
    whether it counts as gpu re-derives the GPU counts of the nodes and tasks that use it."""
    dc = DeviceClass.objects.select_for_update().filter(name=name).first()
    created = dc is None
    if created:
        dc = DeviceClass(name=name, counts_as=counts_as or "", description=description or "")
        validate(dc, message="Invalid device class.")
        dc.save()
        was_gpu = False
    else:
        was_gpu = dc.counts_as_gpu
        dc, _ = model_update(instance=dc, fields=("counts_as", "description"),
                             data={"counts_as": counts_as or "", "description": description or ""},
                             message="Invalid device class.")
    if dc.counts_as_gpu != was_gpu or created:
        rederive_gpu_counts(classes=[dc.name])
    return dc, created


@transaction.atomic
def device_class_delete(*, device_class: DeviceClass) -> None:
    """Delete a class no node offers and no task claims (they would become invalid input)."""
    name = device_class.name
    nodes = [n for n, d in Node.objects.exclude(devices={}).values_list("name", "devices") if (d or {}).get(name)]
    tasks = sum(1 for c in Task.objects.exclude(claims=[]).values_list("claims", flat=True)
                if any(x.get("device_class") == name for x in c or ()))
    problems = []
    if nodes:
        problems.append(f"{len(nodes)} node(s) offer it ({', '.join(nodes[:5])}{'...' if len(nodes) > 5 else ''}).")
    if tasks:
        problems.append(f"{tasks} task(s) claim it.")
    if problems:
        raise ApplicationError(f"Device class {name!r} cannot be deleted.", extra={"device_class": problems})
    DeviceClass.objects.filter(pk=device_class.pk).delete()


def rederive_gpu_counts(*, classes: Iterable[str] | None = None) -> None:
    """Recompute ``dra_gpus`` of the nodes offering / tasks claiming ``classes`` (all when None)."""
    wanted = None if classes is None else set(classes)
    gpu = gpu_classes()
    nodes = []
    for n in Node.objects.exclude(devices={}).only("id", "devices", "dra_gpus"):
        if wanted is not None and not wanted & set(n.devices or {}):
            continue
        count = devices_gpu_count(n.devices, gpu)
        if count != n.dra_gpus:
            n.dra_gpus = count
            nodes.append(n)
    Node.objects.bulk_update(nodes, ["dra_gpus"], batch_size=500)
    tasks = []
    for t in Task.objects.exclude(claims=[]).only("id", "claims", "dra_gpus"):
        if wanted is not None and not wanted & {c.get("device_class") for c in t.claims or ()}:
            continue
        count = claims_gpu_count(t.claims, gpu)
        if count != t.dra_gpus:
            t.dra_gpus = count
            tasks.append(t)
    Task.objects.bulk_update(tasks, ["dra_gpus"], batch_size=500)


def claimed_task_filter() -> Q:
    """Tasks that claim devices."""
    return ~Q(claims=[])
