"""Node writes.  A node cannot shrink below what tasks bound to it hold (invariant I1)."""
from __future__ import annotations

from decimal import Decimal
from typing import Any, Iterable, Mapping, Sequence

from django.db import transaction
from django.db.models import Count, F, Sum
from django.utils import timezone

from queues_app.choices import TASK_STATES_HOLDING, TaskState
from queues_app.cycle import contract
from queues_app.errors import ApplicationError
from queues_app.models import Node, Task
from queues_app.services.common import ID_CHUNK, ItemErrors, id_chunks, validate
from queues_app.services.devices import devices_gpu_count, gpu_classes

NODE_FIELDS = (
    "gpus", "gpu_memory_mib", "cpu_millis", "memory_bytes", "labels", "unschedulable", "ready",
    "reserved_gpus", "reserved_cpu_millis", "reserved_memory_bytes", "devices",
)


@transaction.atomic
def node_upsert(*, name: str, **fields: Any) -> tuple[Node, bool]:
    """Create or update a node by name (what a cluster sync calls).  Returns (node, created).

    Keyword arguments are the Node fields in NODE_FIELDS; unknown ones are a field error.
    The row is locked while checking that bound tasks still fit, so a concurrent bind (which
    locks the node too) cannot slip in between.
    """
    node = Node.objects.select_for_update().filter(name=name).first()
    created = node is None
    if created:
        node = Node(name=name)
    _set_fields(node, fields)
    _check_node(node, fields, created=created)
    if not created:
        held = Task.objects.filter(node=node, state__in=TASK_STATES_HOLDING).aggregate(gpu=Sum("gpu"))["gpu"] or 0
        if node.gpus < held:
            raise ApplicationError("Invalid node.", extra={"gpus": [
                f"Tasks bound to {name} hold {held} GPUs; capacity cannot drop to {node.gpus}."]})
        node.version += 1
    node.save()
    return node, created


def _set_fields(node: Node, fields: Mapping[str, Any]) -> None:
    """Copy NODE_FIELDS onto ``node``; unknown fields and fractional counts are field errors."""
    unknown = sorted(set(fields) - set(NODE_FIELDS))
    if unknown:
        raise ApplicationError("Invalid node.", extra={k: ["Unknown node field."] for k in unknown})
    bad_floats = [k for k, v in fields.items() if k not in ("reserved_gpus", "labels") and isinstance(v, float)
                  and not v.is_integer()]
    if bad_floats:
        raise ApplicationError("Invalid node.", extra={k: ["Must be a whole number."] for k in bad_floats})
    for k, v in fields.items():
        if k in ("labels", "devices") and v is None:
            v = {}
        if k == "reserved_gpus" and isinstance(v, float):
            v = Decimal(repr(v))
        setattr(node, k, v)


def _check_node(node: Node, fields: Mapping[str, Any], *, created: bool, db_checks: bool = True,
                gpu: set[str] | None = None) -> None:
    """Field validation, the engine's node rules, and the devices (``gpu``: the GPU device classes,
    when the caller looked them up once for many nodes).  ``db_checks=False`` skips the query per
    unique field and per constraint: a bulk import checks the names once, and Node's constraints
    restate its fields' own bounds (PositiveIntegerField, MaxValueValidator), checked here anyway."""
    validate(node, message="Invalid node.", unique=db_checks, constraints=db_checks)
    problems = contract.node_problems({"name": node.name, **{f: getattr(node, f) for f in NODE_FIELDS}})
    if problems:
        raise ApplicationError("Invalid node.", extra=problems)
    if "devices" in fields:
        _check_devices(node, created, gpu=gpu)


@transaction.atomic
def nodes_import(*, nodes: Sequence[Mapping[str, Any]], label: str = "nodes") -> int:
    """Create or update many nodes (scenario import), all or nothing.

    Each item is ``{"name": ..., <NODE_FIELDS>}`` checked by the same rules as :func:`node_upsert`.
    New names are inserted in batched INSERTs (one SELECT of the names already stored, one of the
    device classes); a name already stored goes through :func:`node_upsert`, which locks the row and
    checks that its bound tasks still fit. Errors name the item: ``<label>[i].gpus``. Returns the
    number of nodes created."""
    items = list(nodes)
    names = [item.get("name") if isinstance(item, Mapping) else None for item in items]
    errors = ItemErrors(label)
    seen: set[str] = set()
    for i, name in enumerate(names):
        if not isinstance(items[i], Mapping):
            errors[f"{label}[{i}]"] = ["Must be an object."]
        elif not isinstance(name, str) or not name:
            errors[f"{label}[{i}].name"] = ["A node name is required."]
        elif name in seen:
            errors[f"{label}[{i}].name"] = [f"Node {name!r} appears twice."]
        seen.add(name)
    if errors:
        raise ApplicationError("Invalid nodes.", extra=errors)
    stored: set[str] = set()
    ordered = sorted(seen)
    for at in range(0, len(ordered), ID_CHUNK):
        stored.update(Node.objects.filter(name__in=ordered[at:at + ID_CHUNK]).values_list("name", flat=True))
    classes = {c for item in items for c in (item.get("devices") or {})}
    gpu = gpu_classes(classes) if classes else set()
    new: list[Node] = []
    for i, item in enumerate(items):
        fields = {k: v for k, v in item.items() if k != "name"}
        try:
            if item["name"] in stored:
                node_upsert(name=item["name"], **fields)
                continue
            node = Node(name=item["name"])
            _set_fields(node, fields)
            _check_node(node, fields, created=True, db_checks=False, gpu=gpu)
        except ApplicationError as exc:
            if not errors.add(i, exc):
                break
            continue
        new.append(node)
    if errors:
        raise ApplicationError("Invalid nodes.", extra=errors)
    Node.objects.bulk_create(new, batch_size=2000)
    return len(new)


def _check_devices(node: Node, created: bool, *, gpu: set[str] | None = None) -> None:
    """Not fewer devices of a class than tasks on the node hold (undeclared classes: the engine's
    rule in node_problems); ``dra_gpus`` derived (see services.devices)."""
    devices = node.devices or {}
    if not created:
        held: dict[str, int] = {}
        for claims in Task.objects.filter(node=node, state__in=TASK_STATES_HOLDING).exclude(claims=[]).values_list(
                "claims", flat=True):
            for c in claims or ():
                held[c.get("device_class")] = held.get(c.get("device_class"), 0) + int(c.get("count", 1))
        for cls, n in sorted(held.items()):
            if int(devices.get(cls, 0)) < n:
                raise ApplicationError("Invalid node.", extra={f"devices.{cls}": [
                    f"Tasks bound to {node.name} hold {n} {cls} devices; the node cannot offer fewer."]})
    node.dra_gpus = devices_gpu_count(devices, gpu_classes(devices) if gpu is None else gpu)


@transaction.atomic
def node_set_schedulable(*, node: Node, schedulable: bool) -> Node:
    """Cordon / uncordon.  Running tasks stay; the scheduler stops placing new ones."""
    node_upsert(name=node.name, unschedulable=not schedulable)
    node.refresh_from_db()
    return node


@transaction.atomic
def nodes_set_schedulable(*, node_ids: Iterable[int], schedulable: bool) -> list[str]:
    """Cordon / uncordon many nodes (the admin's list actions): one UPDATE per 5,000 nodes.

    Only rows whose flag changes are written (and get a new ``version``, which tells the cycle's
    apply its snapshot of them is stale); returns the names of every selected node, sorted.
    """
    names: list[str] = []
    for chunk in id_chunks(node_ids):
        Node.objects.filter(pk__in=chunk, unschedulable=schedulable).update(
            unschedulable=not schedulable, version=F("version") + 1, updated_at=timezone.now())
        names += Node.objects.filter(pk__in=chunk).values_list("name", flat=True)
    return sorted(names)


@transaction.atomic
def nodes_delete(*, node_ids: Iterable[int]) -> int:
    """Delete many nodes, all or nothing: if a task still holds resources on any of them, nothing
    is deleted and the error names those nodes.  Set-based: lock the rows (id order), one grouped
    count of holding tasks, one UPDATE for finished tasks' history, one DELETE -- per 5,000 nodes."""
    chunks = id_chunks(node_ids)
    for chunk in chunks:
        list(Node.objects.select_for_update().filter(pk__in=chunk).order_by("pk").values_list("pk", flat=True))
    busy: list[str] = []
    for chunk in chunks:
        busy += (Task.objects.filter(node_id__in=chunk).exclude(state__in=(TaskState.SUCCEEDED, TaskState.FAILED))
                 .values("node__name").annotate(n=Count("id")).order_by("node__name")
                 .values_list("node__name", "n"))
    if busy:
        shown = ", ".join(f"{name} ({n})" for name, n in busy[:10]) + (
            f" and {len(busy) - 10} more" if len(busy) > 10 else "")
        raise ApplicationError(f"{len(busy)} node(s) cannot be deleted.", extra={"tasks": [
            f"Tasks are bound to {shown}; drain them first."]})
    deleted = 0
    for chunk in chunks:
        Task.objects.filter(node_id__in=chunk).update(node=None)
        deleted += Node.objects.filter(pk__in=chunk).delete()[1].get(Node._meta.label, 0)
    return deleted


@transaction.atomic
def node_delete(*, node: Node) -> None:
    """Delete a node no task holds resources on; finished tasks forget it (history only)."""
    fresh = Node.objects.select_for_update().filter(pk=node.pk).first()
    if fresh is None:
        return
    busy = Task.objects.filter(node=fresh).exclude(state__in=(TaskState.SUCCEEDED, TaskState.FAILED)).count()
    if busy:
        raise ApplicationError(f"Node {fresh.name!r} cannot be deleted.", extra={"tasks": [
            f"{busy} task(s) are bound to it; drain it first."]})
    Task.objects.filter(node=fresh).update(node=None)
    fresh.delete()


def node_fields_from(data: Mapping[str, Any]) -> dict[str, Any]:
    """The subset of ``data`` that node_upsert accepts (for sync code holding extra keys)."""
    return {k: v for k, v in data.items() if k in NODE_FIELDS}
