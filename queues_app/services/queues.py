"""Queue tree writes: create, update (incl. re-parent), quota edits with audit, delete.

Every tree mutation runs under the ``queue_tree`` advisory lock (PostgreSQL) or SQLite's
write lock (BEGIN IMMEDIATE), and re-reads the rows it validates *after* taking the lock,
so two concurrent re-parents (A under B, B under A) cannot both pass the cycle check.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any, Mapping, Sequence

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import CharField, F, OuterRef, Subquery, Value
from django.db.models.functions import Cast, Concat, LPad
from django.utils import timezone

from queues_app import constants
from queues_app.cycle import contract
from queues_app.choices import QuotaField, Resource
from queues_app.errors import ApplicationError
from queues_app.models import Queue, QueueResource, QuotaChange, Tenant, Workload
from queues_app.services.common import ID_CHUNK, ItemErrors, advisory_xact_lock, id_chunks, model_update, validate

#: Rows per INSERT of a bulk queue import.
INSERT_BATCH = 2000

_UNSET: Any = object()
QUOTA_FIELDS = (QuotaField.QUOTA.value, QuotaField.OVER_QUOTA_WEIGHT.value, QuotaField.LIMIT.value)
QUEUE_UPDATE_FIELDS = ("name", "description", "parent", "priority", "reclaim_min_runtime", "preempt_min_runtime")
DEFAULT_QUOTA = {"quota": Decimal(0), "over_quota_weight": Decimal(1), "limit": constants.UNLIMITED}


def _path_for(queue: Queue, parent: Queue | None) -> tuple[str, int]:
    segment = f"{queue.pk:0{Queue.PATH_SEGMENT_WIDTH}d}."
    if parent is None:
        return segment, 1
    return parent.path + segment, parent.depth + 1


def to_decimal(value: Any, *, field: str) -> Decimal:
    """Numbers (int, float, Decimal, numeric string) to Decimal; anything else is a field error.

    NaN / infinity convert fine here and are rejected by the model validators with the field's
    name, so every path reports them the same way.
    """
    if isinstance(value, bool) or value is None:
        raise ApplicationError("Invalid quota.", extra={field: ["Must be a number."]})
    if isinstance(value, Decimal):
        return value
    try:
        if isinstance(value, str):
            return Decimal(value.strip())
        if isinstance(value, float):
            return Decimal(repr(value))  # repr: 0.1 -> Decimal("0.1"), not its binary expansion
        return Decimal(value)
    except (InvalidOperation, TypeError, ValueError):
        raise ApplicationError("Invalid quota.", extra={field: ["Must be a number."]}) from None


def _actor_name(actor: AbstractBaseUser | None) -> str:
    return actor.get_username() if actor is not None else ""


def _check_engine(queue: Queue, rows: list[QueueResource] | None = None, *, prefix: str = "quotas.") -> None:
    """The engine's rules for the queue's own fields and the given resource rows (one contract,
    see cycle/contract.py): e.g. a memory quota the engine cannot represent is refused here, not by
    every scheduling cycle after it."""
    problems = contract.queue_problems(
        name=queue.name, priority=queue.priority, reclaim_min_runtime=queue.reclaim_min_runtime,
        preempt_min_runtime=queue.preempt_min_runtime, prefix=prefix,
        quotas={r.resource: {f: getattr(r, f) for f in QUOTA_FIELDS} for r in rows or ()})
    if problems:
        raise ApplicationError("Invalid quota." if rows else "Invalid queue.", extra=problems)


def _build_resources(queue: Queue, quotas: Mapping[str, Mapping[str, Any]] | None) -> list[QueueResource]:
    """Three QueueResource rows (defaults + given values), validated; errors name
    ``quotas.<resource>.<field>``."""
    if quotas is not None and not isinstance(quotas, Mapping):
        raise ApplicationError("Invalid quota.", extra={"quotas": ["Must be an object keyed by resource."]})
    quotas = dict(quotas or {})
    unknown = sorted(set(quotas) - set(Resource.values))
    if unknown:
        raise ApplicationError("Invalid quota.", extra={"quotas": [f"Unknown resource(s): {', '.join(unknown)}; "
                                                                   f"use {', '.join(Resource.values)}."]})
    rows, errors = [], {}
    for resource in Resource.values:
        given = quotas.get(resource) or {}
        if not isinstance(given, Mapping):
            errors[f"quotas.{resource}"] = ["Must be an object with quota, over_quota_weight and/or limit."]
            continue
        given = dict(given)
        bad = sorted(set(given) - set(QUOTA_FIELDS))
        if bad:
            errors[f"quotas.{resource}"] = [f"Unknown field(s): {', '.join(bad)}."]
            continue
        values = {k: to_decimal(given[k], field=f"quotas.{resource}.{k}") if k in given else v
                  for k, v in DEFAULT_QUOTA.items()}
        row = QueueResource(queue=queue, resource=resource, **values)
        try:
            row.full_clean(exclude=["queue"], validate_unique=False, validate_constraints=False)
        except ValidationError as exc:
            for k, msgs in exc.message_dict.items():
                errors[f"quotas.{resource}.{k}"] = msgs
        rows.append(row)
    if errors:
        raise ApplicationError("Invalid quota.", extra=errors)
    return rows


@transaction.atomic
def queue_create(
    *,
    name: str,
    parent: Queue | None = None,
    priority: int = 100,
    description: str = "",
    reclaim_min_runtime: timedelta | None = None,
    preempt_min_runtime: timedelta | None = None,
    quotas: Mapping[str, Mapping[str, Any]] | None = None,
    created_at: datetime | None = None,
    actor: AbstractBaseUser | None = None,
    source: str = "service",
) -> Queue:
    """Create a queue with its three resource rows (missing values: quota 0, weight 1,
    limit -1) and an audit row per initial value."""
    advisory_xact_lock("queue_tree")
    if parent is not None:
        # Lock the parent so a concurrent workload_submit on it waits (and then sees a child).
        parent = Queue.objects.select_for_update().filter(pk=parent.pk).first()
        if parent is None:
            raise ApplicationError("Invalid queue.", extra={"parent": ["The parent queue does not exist."]})
    queue = Queue(
        name=name, parent=parent, priority=priority, description=description,
        reclaim_min_runtime=reclaim_min_runtime, preempt_min_runtime=preempt_min_runtime,
        created_at=created_at or timezone.now(),
    )
    validate(queue, message="Invalid queue.", exclude=["path", "depth"])
    rows = _build_resources(queue, quotas)
    _check_engine(queue, rows)
    queue.save()
    queue.path, queue.depth = _path_for(queue, parent)
    queue.save(update_fields=["path", "depth"])
    for row in rows:
        row.queue = queue
    QueueResource.objects.bulk_create(rows)
    QuotaChange.objects.bulk_create([
        QuotaChange(queue=queue, queue_name=queue.name, resource=row.resource, field=f, old_value=None,
                    new_value=getattr(row, f), changed_by=actor, changed_by_name=_actor_name(actor), source=source)
        for row in rows for f in QUOTA_FIELDS
    ])
    return queue


#: Keys of one item of :func:`queues_import` (``parent``: the name of another item, or None).
QUEUE_IMPORT_KEYS = ("name", "parent", "priority", "description", "reclaim_min_runtime", "preempt_min_runtime",
                     "quotas", "created_at")


@transaction.atomic
def queues_import(*, queues: Sequence[Mapping[str, Any]], label: str = "queues", actor: AbstractBaseUser | None = None,
                  source: str = "import") -> list[Queue]:
    """Create a forest of new queues (scenario import), all or nothing, in a few statements.

    Each item is ``{name, parent?, priority?, description?, reclaim_min_runtime?,
    preempt_min_runtime?, quotas?, created_at?}`` checked by :func:`queue_create`'s rules (fields,
    quotas, the engine's queue rules); ``parent`` names another item of the same import, so the
    tree's own checks (unknown parent, cycles, depth) are made on the items, and a new parent has
    no workloads or tenant grants. Rows go in a tree level at a time: one batched INSERT of the
    level's queues, one UPDATE setting their ``path`` from their parents' (``depth`` is the level),
    then the resource rows and the audit rows in batched INSERTs. Errors name the item:
    ``<label>[i].quotas.gpu.quota``. Returns the queues in item order."""
    advisory_xact_lock("queue_tree")
    items = list(queues)
    errors = ItemErrors(label)
    index: dict[str, int] = {}
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            errors[f"{label}[{i}]"] = ["Must be an object."]
            continue
        unknown = sorted(set(item) - set(QUEUE_IMPORT_KEYS))
        if unknown:
            errors[f"{label}[{i}]"] = [f"Unknown field(s): {', '.join(unknown)}."]
        name = item.get("name")
        if isinstance(name, str) and name in index:
            errors[f"{label}[{i}].name"] = [f"Queue {name!r} appears twice."]
        elif isinstance(name, str):
            index[name] = i
    if errors:
        raise ApplicationError("Invalid queues.", extra=errors)
    # The tree: parents among the items, no cycle, bounded depth.
    level: dict[int, int] = {}
    max_depth = settings.KAI_MAX_QUEUE_DEPTH
    for i, item in enumerate(items):
        chain, current = [], i
        while current not in level:
            if current in chain:
                errors[f"{label}[{i}].parent"] = ["The parents form a cycle."]
                break
            chain.append(current)
            parent = items[current].get("parent")
            if parent is None:
                level[current] = 0
                break
            if parent not in index:
                errors[f"{label}[{current}].parent"] = [f"Unknown parent queue {parent!r} (not in this import)."]
                break
            current = index[parent]
        if f"{label}[{i}].parent" in errors or any(f"{label}[{c}].parent" in errors for c in chain):
            continue
        for c in reversed(chain):  # from the top: each one level below its parent
            if c not in level:
                level[c] = level[index[items[c]["parent"]]] + 1
        if level[i] + 1 > max_depth:
            errors[f"{label}[{i}].parent"] = [f"The tree would be {level[i] + 1} levels deep; at most {max_depth} "
                                              "allowed."]
    if errors:
        raise ApplicationError("Invalid queues.", extra=errors)
    names = sorted(index)
    for at in range(0, len(names), ID_CHUNK):
        for name in Queue.objects.filter(name__in=names[at:at + ID_CHUNK]).values_list("name", flat=True):
            errors[f"{label}[{index[name]}].name"] = ["Queue with this Name already exists."]

    made: list[Queue] = []
    resources: list[list[QueueResource]] = []
    for i, item in enumerate(items):
        queue = Queue(name=item.get("name"), priority=item.get("priority", 100),
                      description=item.get("description", ""), reclaim_min_runtime=item.get("reclaim_min_runtime"),
                      preempt_min_runtime=item.get("preempt_min_runtime"),
                      created_at=item.get("created_at") or timezone.now(), depth=level[i] + 1)
        try:
            # the name's uniqueness was read above for all items; the constraints restate the fields'
            # bounds (priority) or hold by construction (depth >= 1, parent set below)
            validate(queue, message="Invalid queue.", exclude=["path", "depth", "parent"], unique=False,
                     constraints=False)
            rows = _build_resources(queue, item.get("quotas"))
            _check_engine(queue, rows)
        except ApplicationError as exc:
            if not errors.add(i, exc):
                break
            continue
        made.append(queue)
        resources.append(rows)
    if errors:
        raise ApplicationError("Invalid queues.", extra=errors)

    for depth in range(max(level.values(), default=-1) + 1):
        batch = [q for i, q in enumerate(made) if level[i] == depth]
        for q in batch:
            parent = items[index[q.name]].get("parent")
            q.parent = made[index[parent]] if parent is not None else None
        Queue.objects.bulk_create(batch, batch_size=INSERT_BATCH)
        segment = LPad(Cast("id", CharField()), Queue.PATH_SEGMENT_WIDTH, Value("0"))
        above = Subquery(Queue.objects.filter(pk=OuterRef("parent_id")).values("path")[:1])
        path = Concat(above, segment, Value("."), output_field=CharField()) if depth else \
            Concat(segment, Value("."), output_field=CharField())
        for chunk in id_chunks([q.pk for q in batch], ID_CHUNK):
            Queue.objects.filter(pk__in=chunk).update(path=path)
        for q in batch:  # the same value on the returned objects (_path_for's format)
            q.path, q.depth = _path_for(q, q.parent)
    for queue, rows in zip(made, resources):
        for row in rows:
            row.queue = queue
    QueueResource.objects.bulk_create([r for rows in resources for r in rows], batch_size=INSERT_BATCH)
    QuotaChange.objects.bulk_create([
        QuotaChange(queue=queue, queue_name=queue.name, resource=row.resource, field=f, old_value=None,
                    new_value=getattr(row, f), changed_by=actor, changed_by_name=_actor_name(actor), source=source)
        for queue, rows in zip(made, resources) for row in rows for f in QUOTA_FIELDS], batch_size=INSERT_BATCH)
    return made


@transaction.atomic
def queue_update(*, queue: Queue, data: Mapping[str, Any], actor: AbstractBaseUser | None = None) -> Queue:
    """Update name, description, parent, priority and min-runtimes (quotas: queue_set_quota).

    A new parent is validated under the tree lock against the current tree: no cycle, depth
    within KAI_MAX_QUEUE_DEPTH counting the moved subtree, no workloads on the new parent.
    Paths of the whole moved subtree are rewritten in the same transaction.
    """
    unknown = sorted(set(data) - set(QUEUE_UPDATE_FIELDS))
    if unknown:
        raise ApplicationError("Invalid queue.", extra={k: ["This field cannot be updated here."] for k in unknown})
    advisory_xact_lock("queue_tree")
    fresh = Queue.objects.select_for_update().filter(pk=queue.pk).first()
    if fresh is None:
        raise ApplicationError("Invalid queue.", extra={"queue": ["The queue no longer exists."]})
    old_parent_id = fresh.parent_id
    fresh, changed = model_update(instance=fresh, fields=QUEUE_UPDATE_FIELDS, data=dict(data), message="Invalid queue.",
                                  check=_check_engine)
    if changed and fresh.parent_id != old_parent_id:
        parent = Queue.objects.select_for_update().get(pk=fresh.parent_id) if fresh.parent_id else None
        old_prefix = fresh.path
        fresh.path, fresh.depth = _path_for(fresh, parent)
        fresh.save(update_fields=["path", "depth"])
        descendants = list(Queue.objects.filter(path__startswith=old_prefix).exclude(pk=fresh.pk))
        for d in descendants:
            d.path = fresh.path + d.path[len(old_prefix):]
            d.depth = d.path.count(".")
        Queue.objects.bulk_update(descendants, ["path", "depth"])
    return fresh


@transaction.atomic
def queue_set_quota(
    *,
    queue: Queue,
    resource: str,
    quota: Any = _UNSET,
    over_quota_weight: Any = _UNSET,
    limit: Any = _UNSET,
    actor: AbstractBaseUser | None = None,
    source: str = "service",
) -> QueueResource:
    """Change one resource's quota / weight / limit; each changed value gets an audit row
    (who, when, old -> new) in the same transaction, and the queue's version is bumped so a
    cycle holding an older snapshot drops its new decisions for this queue."""
    if resource not in Resource.values:
        raise ApplicationError("Invalid quota.", extra={"resource": [f"Use one of {', '.join(Resource.values)}."]})
    given = {k: v for k, v in (("quota", quota), ("over_quota_weight", over_quota_weight), ("limit", limit))
             if v is not _UNSET}
    values = {k: to_decimal(v, field=k) for k, v in given.items()}
    row = QueueResource.objects.select_for_update().filter(queue_id=queue.pk, resource=resource).first()
    if row is None:
        if not Queue.objects.filter(pk=queue.pk).exists():
            raise ApplicationError("Invalid quota.", extra={"queue": ["The queue no longer exists."]})
        row = QueueResource(queue_id=queue.pk, resource=resource, **DEFAULT_QUOTA)
        old = {k: None for k in QUOTA_FIELDS}
    else:
        old = {k: getattr(row, k) for k in QUOTA_FIELDS}
    for k, v in values.items():
        setattr(row, k, v)
    validate(row, message="Invalid quota.")
    fresh = Queue.objects.filter(pk=queue.pk).first() or queue
    _check_engine(fresh, [row], prefix="")
    changed = [k for k in QUOTA_FIELDS if old[k] is None or old[k] != getattr(row, k)]
    if not changed:
        return row
    row.save()
    queue_name = Queue.objects.filter(pk=queue.pk).values_list("name", flat=True).first() or ""
    QuotaChange.objects.bulk_create([
        QuotaChange(queue_id=queue.pk, queue_name=queue_name, resource=resource, field=k, old_value=old[k],
                    new_value=getattr(row, k), changed_by=actor, changed_by_name=_actor_name(actor), source=source)
        for k in changed
    ])
    Queue.objects.filter(pk=queue.pk).update(version=F("version") + 1, updated_at=timezone.now())
    return row


@transaction.atomic
def queue_delete(*, queue: Queue, actor: AbstractBaseUser | None = None) -> None:
    """Delete a queue that has no children, no workloads and no tenant grants.

    Refusing (instead of cascading) keeps the tree a forest without orphans (I4) and never
    deletes a tenant's work as a side effect.
    """
    advisory_xact_lock("queue_tree")
    fresh = Queue.objects.select_for_update().filter(pk=queue.pk).first()
    if fresh is None:
        return
    errors: dict[str, list[str]] = {}
    children = list(Queue.objects.filter(parent_id=fresh.pk).values_list("name", flat=True)[:5])
    if children:
        errors["children"] = [f"Queue has child queues ({', '.join(children)}); delete or move them first."]
    n_workloads = Workload.objects.filter(queue_id=fresh.pk).count()
    if n_workloads:
        errors["workloads"] = [f"Queue has {n_workloads} workload(s); delete them first."]
    grants = list(Tenant.objects.filter(queues=fresh).values_list("name", flat=True)[:5])
    if grants:
        errors["tenants"] = [f"Queue is granted to tenant(s) {', '.join(grants)}; revoke the grants first."]
    if errors:
        raise ApplicationError(f"Queue {fresh.name!r} cannot be deleted.", extra=errors)
    # The history outlives the queue (FK SET_NULL): record the last values, new = None.
    QuotaChange.objects.bulk_create([
        QuotaChange(queue=fresh, queue_name=fresh.name, resource=row.resource, field=k, old_value=getattr(row, k),
                    new_value=None, changed_by=actor, changed_by_name=_actor_name(actor), source="delete")
        for row in QueueResource.objects.filter(queue_id=fresh.pk) for k in QUOTA_FIELDS
    ])
    fresh.delete()


@transaction.atomic
def queue_set_quotas(*, queue, quotas: dict[str, dict[str, Any]], actor: AbstractBaseUser | None = None,
                     source: str = "api") -> None:
    """Several ``queue_set_quota`` calls as one all-or-nothing edit (a PATCH of gpu and cpu
    either lands completely, with its audit rows, or not at all).  Errors are keyed
    ``<resource>.<field>``, the path in the request body ``{"gpu": {"limit": ...}}``."""
    errors: dict[str, list[str]] = {}
    for resource, values in quotas.items():
        try:
            with transaction.atomic():
                queue_set_quota(queue=queue, resource=resource, actor=actor, source=source, **values)
        except ApplicationError as exc:
            for k, v in exc.extra.items():
                errors[f"{resource}.{k}"] = v
    if errors:
        raise ApplicationError("Invalid quota.", extra=errors)
