"""Workload writes: submit (all tasks Pending), import with observed state, cancel, and the API's
idempotent submission (``workload_submit_idempotent``: one workload per Idempotency-Key)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Callable, Iterable, Mapping, Sequence

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from queues_app import constants
from queues_app.choices import TASK_STATES_TERMINAL, TaskState, WorkloadStatus
from queues_app.cycle import contract
from queues_app.errors import ApplicationError
from queues_app.models import IdempotencyKey, Node, Queue, SubGroup, Task, Tenant, Workload
from queues_app.models.workloads import DUPLICATE_NAME_MESSAGE
from queues_app.services.common import ID_CHUNK, ItemErrors, bound_request_locks, bounded_int, id_chunks, validate
from queues_app.services.devices import claims_gpu_count, gpu_classes

#: Keys of one task spec accepted by workload_submit.
TASK_SPEC_KEYS = ("name", "gpu", "gpu_memory_mib", "cpu_millis", "memory_bytes", "priority", "node_selector",
                  "sub_group", "claims")
#: Extra keys accepted by workload_import (observed state, e.g. from a scenario file).
TASK_STATE_KEYS = ("state", "node", "gpu_groups", "devices")
#: Keys of one subgroup spec (``sub_groups``; scenario ``subGroups``).
SUB_GROUP_KEYS = ("name", "parent", "min_available", "min_sub_groups", "topology_required", "topology_preferred")


def _task_from_spec(spec: Mapping[str, Any], *, index: int, where: str, workload_name: str, allow_state: bool,
                    nodes: Mapping[str, Node]) -> tuple[Task, dict[str, list[str]]]:
    """One task spec as a validated (unsaved) Task; errors keyed ``<where>.<field>`` (``where`` is
    ``tasks[3]``, or ``task`` for the template every replica copies)."""
    allowed = TASK_SPEC_KEYS + (TASK_STATE_KEYS if allow_state else ())
    errors: dict[str, list[str]] = {}
    unknown = sorted(set(spec) - set(allowed))
    if unknown:
        errors[where] = [f"Unknown field(s): {', '.join(unknown)}."]
        return Task(), errors
    values = {k: spec[k] for k in TASK_SPEC_KEYS if k in spec and spec[k] is not None and k != "sub_group"}
    if isinstance(values.get("gpu"), float):
        values["gpu"] = Decimal(repr(values["gpu"]))
    for k in ("gpu", "cpu_millis", "memory_bytes", "gpu_memory_mib", "priority"):
        if isinstance(values.get(k), bool):
            errors[f"{where}.{k}"] = ["Must be a number."]
        elif k != "gpu" and isinstance(values.get(k), float) and not values[k].is_integer():
            # IntegerField.to_python would truncate 1.5 to 1 silently.
            errors[f"{where}.{k}"] = ["Must be a whole number."]
    values.setdefault("name", f"{workload_name}-{index}")
    task = Task(index=index, **values)
    if allow_state:
        task.state = spec.get("state") or TaskState.PENDING
        node_name = spec.get("node")
        if node_name:
            task.node = nodes.get(node_name)
            if task.node is None:
                errors[f"{where}.node"] = [f"Unknown node {node_name!r}."]
        task.gpu_groups = list(spec.get("gpu_groups") or [])
        task.devices = spec.get("devices") or {}
    try:
        # ``node`` is a row the caller fetched by name (or None with an error above): no query to
        # check that it exists, per distinct task of a 90,000-workload import
        task.full_clean(exclude=["workload", "node"], validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        for k, msgs in exc.message_dict.items():
            errors.setdefault(f"{where}.{k}", []).extend(msgs)  # after "Unknown node", not instead
    return task, errors


#: Rows per INSERT statement: bounded, so no statement carries an unbounded payload or holds
#: its locks for long; a 10,000-task gang is five statements.
INSERT_BATCH = 2000
#: (column, PostgreSQL type) of the task rows submit inserts; created/updated are one value.
_TASK_COLUMNS = (("workload_id", "bigint"), ("name", "varchar"), ("index", "integer"), ("gpu", "numeric"),
                 ("gpu_memory_mib", "bigint"), ("cpu_millis", "bigint"), ("memory_bytes", "bigint"),
                 ("priority", "integer"), ("node_selector", "jsonb"), ("state", "varchar"), ("node_id", "bigint"),
                 ("gpu_groups", "jsonb"), ("sub_group_id", "bigint"), ("claims", "jsonb"), ("devices", "jsonb"),
                 ("dra_gpus", "integer"))


def _insert_tasks(rows: list[tuple], *, now: datetime) -> None:
    """Insert task rows (tuples in ``_TASK_COLUMNS`` order) set-based, INSERT_BATCH at a time.

    PostgreSQL: ``INSERT ... SELECT * FROM unnest(%s::bigint[], %s::varchar[], ...)``, one
    array per column, so a batch is one statement with a dozen parameters (no per-row
    placeholders for the driver to parse).  SQLite: ``executemany`` of one prepared INSERT.
    """
    if not rows:
        return
    qn = connection.ops.quote_name
    table = qn(Task._meta.db_table)
    names = [c for c, _ in _TASK_COLUMNS]
    cols = ", ".join(qn(c) for c in names + ["created_at", "updated_at", "version"])
    stamp = connection.ops.adapt_datetimefield_value(now)
    with connection.cursor() as cursor:
        for i in range(0, len(rows), INSERT_BATCH):
            chunk = rows[i:i + INSERT_BATCH]
            if connection.vendor == "postgresql":
                arrays = ", ".join(f"%s::{t}[]" for _, t in _TASK_COLUMNS)
                cursor.execute(f"INSERT INTO {table} ({cols}) SELECT u.*, %s, %s, 1 FROM unnest({arrays}) AS u",
                               [stamp, stamp, *([list(col) for col in zip(*chunk)])])
            else:
                marks = ", ".join(["%s"] * (len(names) + 3))
                cursor.executemany(f"INSERT INTO {table} ({cols}) VALUES ({marks})",
                                   [(*row, stamp, stamp, 1) for row in chunk])


def _row(workload_id: int, t: Task, *, name: str, index: int, sub_group: SubGroup | None = None,
         dra_gpus: int = 0) -> tuple:
    return (workload_id, name, index, t.gpu, t.gpu_memory_mib, t.cpu_millis, t.memory_bytes, t.priority,
            json.dumps(t.node_selector or {}), t.state, t.node_id, json.dumps(list(t.gpu_groups or [])),
            sub_group.pk if sub_group is not None else None, json.dumps(list(t.claims or [])),
            json.dumps(dict(t.devices or {})), dra_gpus)


def _spec_key(spec: Mapping[str, Any]) -> str:
    """Task specs that differ only in their name validate alike (a list of 10,000 copies of one
    spec is validated once)."""
    return json.dumps({k: v for k, v in spec.items() if k != "name"}, sort_keys=True, default=repr)


@dataclass
class _Prepared:
    """A workload validated against the engine's rules, ready to store (nothing written yet)."""
    workload: Workload
    # (validated task, its name, its index) per task; specs that differ only in name share one Task
    built: list[tuple[Task, str, int]]
    tree: list[dict[str, Any]]
    leaf_of: dict[int, Any]  # the leaf subgroup each task names, by task index


def _lock_queue(queue: Queue, tenant: Tenant | None) -> Queue:
    """Lock the queue row (queue_create locks a parent the same way, so "add a child" and "submit
    to it" cannot interleave and leave workloads on an inner queue) and check the tenant's grant."""
    locked = Queue.objects.select_for_update().filter(pk=queue.pk).first()
    if locked is None:
        raise ApplicationError("Invalid workload.", extra={"queue": ["The queue does not exist."]})
    if tenant is not None:
        if not tenant.is_active:
            raise ApplicationError("Invalid workload.", extra={"tenant": ["The tenant is inactive."]})
        if not tenant.queues.filter(pk=locked.pk).exists():
            raise ApplicationError("Invalid workload.", extra={"queue": [
                f"Queue {locked.name!r} is not granted to tenant {tenant.name!r}."]})
    return locked


def _node_names(tasks: Any, allow_state: bool) -> set[str]:
    if not allow_state or not isinstance(tasks, (list, tuple)):
        return set()
    return {t.get("node") for t in tasks if isinstance(t, Mapping) and t.get("node")}


def _prepare(
    *,
    queue: Queue,
    name: str,
    tasks: Sequence[Mapping[str, Any]] | None,
    replicas: int | None,
    task: Mapping[str, Any] | None,
    tenant: Tenant | None,
    owner: AbstractBaseUser | None,
    priority: int,
    preemptible: bool | None,
    min_available: int | None,
    allow_state: bool,
    workload_fields: Mapping[str, Any],
    sub_groups: Sequence[Mapping[str, Any]] | None,
    min_sub_groups: int | None,
    nodes: Mapping[str, Node],
    name_taken: bool,
    task_cache: dict[str, tuple[Task, dict[str, list[str]]]] | None = None,
) -> _Prepared:
    """Validate one workload (fields, tasks, the engine's rules) without touching the database:
    the caller has locked ``queue``, checked the tenant's grant, fetched the ``nodes`` the tasks name
    and looked up whether the name is taken, once for one workload or once for a whole import.
    ``task_cache`` shares the validated task specs across the workloads of one import (specs that
    differ only in their name validate alike; the stored rows take name and index per task)."""
    if tasks is not None and (replicas is not None or task is not None):
        raise ApplicationError("Invalid workload.", extra={"tasks": ["Give either tasks, or replicas with a task."]})
    if tasks is None:
        if task is None:
            raise ApplicationError("Invalid workload.", extra={"tasks": ["A workload needs at least one task."]})
        if not isinstance(task, Mapping):
            raise ApplicationError("Invalid workload.", extra={"task": ["Must be an object."]})
        count = bounded_int(1 if replicas is None else replicas, field="replicas", minimum=1,
                            maximum=constants.MAX_TASKS_PER_WORKLOAD)
    else:
        if not isinstance(tasks, (list, tuple)) or not tasks:
            raise ApplicationError("Invalid workload.", extra={"tasks": ["A workload needs at least one task."]})
        if len(tasks) > constants.MAX_TASKS_PER_WORKLOAD:
            raise ApplicationError("Invalid workload.", extra={"tasks": [
                f"At most {constants.MAX_TASKS_PER_WORKLOAD} tasks per workload."]})
        count = len(tasks)

    priority = bounded_int(priority, field="priority", minimum=-constants.MAX_PRIORITY,
                           maximum=constants.MAX_PRIORITY)
    if preemptible is None:
        preemptible = priority < 100
    tree = sub_group_specs(sub_groups, min_available=min_available, min_sub_groups=min_sub_groups)
    if tree:
        min_available = 0  # the engine derives it from the tree (below)
    else:
        if min_available is None:
            min_available = count
        min_available = bounded_int(min_available, field="min_available", minimum=1, maximum=count)

    # Names are per tenant (and queue): only the caller's own workloads can collide, so the
    # answer reveals nothing about other tenants (the constraint decides under a race).
    if isinstance(name, str) and name_taken:
        raise ApplicationError("Invalid workload.", extra={"name": [DUPLICATE_NAME_MESSAGE]})
    workload = Workload(queue=queue, name=name, tenant=tenant, owner=owner, priority=priority,
                        preemptible=bool(preemptible), min_available=min_available,
                        min_sub_groups=min_sub_groups if tree else None, **workload_fields)
    # The queue row is locked by the caller and tenant / owner are the caller's own rows: no
    # existence queries for them. The constraints are the database's (name: checked by the caller;
    # status, priority and min_available are bounded here), saving a savepoint and a query each.
    validate(workload, message="Invalid workload.", exclude=("queue", "tenant", "owner"), constraints=False)

    built: list[tuple[Task, str, int]] = []
    errors: dict[str, list[str]] = {}
    if tasks is None:
        # One template, validated once; the replicas differ only in index and name.
        template, errors = _task_from_spec(task, index=0, where="task", workload_name=name, allow_state=allow_state,
                                           nodes=nodes)
        built = [(template, f"{name}-{i}", i) for i in range(count)]
    else:
        name_field = Task._meta.get_field("name")
        checked = task_cache if task_cache is not None else {}
        for i, spec in enumerate(tasks):
            where = f"tasks[{i}]"
            if not isinstance(spec, Mapping):
                errors[where] = ["Must be an object."]
                continue
            key = _spec_key(spec)
            if key not in checked:
                checked[key] = _task_from_spec({k: v for k, v in spec.items() if k != "name"}, index=i, where="@",
                                               workload_name=name, allow_state=allow_state, nodes=nodes)
            t, errs = checked[key]
            for k, v in errs.items():
                errors[where + k[1:]] = v
            tname = spec.get("name")
            if tname is None:
                tname = f"{name}-{i}"
            else:
                try:
                    tname = name_field.clean(tname, None)
                except ValidationError as exc:
                    errors[f"{where}.name"] = list(exc.messages)
            built.append((t, tname, i))
        names = [n for _, n, _ in built]
        if len(set(names)) != len(names):
            errors["tasks"] = ["Task names must be unique within the workload."]
    if errors:
        raise ApplicationError("Invalid workload.", extra=errors)
    # The engine's own rules on what is about to be stored (one contract; see cycle/contract.py).
    leaf_of = ({i: spec.get("sub_group") for i, spec in enumerate(tasks) if isinstance(spec, Mapping)}
               if tasks is not None else {i: task.get("sub_group") for i in range(count)})
    problems, gang = contract.workload_check(
        queue=queue.name, name=name, priority=priority, preemptible=bool(preemptible),
        min_available=None if tree else min_available, sub_groups=tree or None,
        min_sub_groups=min_sub_groups if tree else None,
        node_selector=workload.node_selector, topology_required=workload.topology_required,
        topology_preferred=workload.topology_preferred, preemption_delay=workload.preemption_delay,
        staleness_grace_period=workload.staleness_grace_period,
        nodes=[nodes[n] for n in _node_names(tasks, allow_state) if n in nodes],
        **({"tasks": [_spec_of(t, tname, leaf_of[i]) for t, tname, i in built]} if tasks is not None
           else {"task": _spec_of(built[0][0], None, leaf_of[0]), "replicas": count}),
    )
    if problems:
        raise ApplicationError("Invalid workload.", extra=problems)
    if tree:
        workload.min_available = gang
    workload.status = _status_of([t.state for t, _, _ in built], workload.min_available)
    return _Prepared(workload=workload, built=built, tree=tree, leaf_of=leaf_of)


def _task_rows(prepared: Sequence[_Prepared], groups: Sequence[Mapping[str, SubGroup]]) -> list[tuple]:
    """The task rows of stored workloads (``groups``: each one's subgroups by name)."""
    distinct = list({id(t): t for p in prepared for t, _, _ in p.built}.values())  # replicas share a Task
    gpu = _gpu_classes_for(distinct)
    dra = {id(t): claims_gpu_count(t.claims, gpu) if t.claims else 0 for t in distinct}
    return [_row(p.workload.pk, t, name=tname, index=i,
                 sub_group=by_name.get(p.leaf_of[i]) if p.leaf_of[i] else None, dra_gpus=dra[id(t)])
            for p, by_name in zip(prepared, groups) for t, tname, i in p.built]


def _create(*, queue: Queue, name: str, tenant: Tenant | None, allow_state: bool,
            tasks: Sequence[Mapping[str, Any]] | None, **fields: Any) -> Workload:
    bound_request_locks()
    locked = _lock_queue(queue, tenant)
    names = _node_names(tasks, allow_state)
    nodes = {n.name: n for n in Node.objects.filter(name__in=names)} if names else {}
    taken = isinstance(name, str) and Workload.objects.filter(queue=locked, tenant=tenant, name=name).exists()
    prepared = _prepare(queue=locked, name=name, tenant=tenant, allow_state=allow_state, tasks=tasks, nodes=nodes,
                        name_taken=taken, **fields)
    _save_workload(prepared.workload)
    groups = create_sub_groups(prepared.workload, prepared.tree)
    _insert_tasks(_task_rows([prepared], [groups]), now=timezone.now())
    return prepared.workload


def _spec_of(t: Task, name: str | None, sub_group: Any = None) -> dict[str, Any]:
    spec = {"name": name, "gpu": t.gpu, "gpu_memory_mib": t.gpu_memory_mib, "cpu_millis": t.cpu_millis,
            "memory_bytes": t.memory_bytes, "priority": t.priority, "node_selector": t.node_selector,
            "sub_group": sub_group, "claims": t.claims}
    if t.state != TaskState.PENDING or t.node_id is not None or t.gpu_groups or t.devices:
        spec.update(state=t.state, node=t.node.name if t.node_id else None, gpu_groups=list(t.gpu_groups or []),
                    devices=dict(t.devices or {}))
    return spec


def _save_workload(workload: Workload) -> None:
    """Insert the workload; a name taken meanwhile by a concurrent submit (the unique constraint,
    not the earlier check, decides) is the same field error as a name taken before."""
    try:
        with transaction.atomic():
            workload.save()
    except IntegrityError as exc:
        text = str(exc)
        if "workload_unique_name" not in text and "queues_app_workload.name" not in text:
            raise
        raise ApplicationError("Invalid workload.", extra={"name": [DUPLICATE_NAME_MESSAGE]}) from None


def sub_group_specs(sub_groups: Sequence[Mapping[str, Any]] | None, *, min_available: int | None,
                    min_sub_groups: int | None) -> list[dict[str, Any]]:
    """The ``sub_groups`` of a submission as plain dicts (names, parents, thresholds, topology);
    the tree's rules are the engine's (``contract.workload_check`` in :func:`_create`)."""
    if sub_groups is None or (isinstance(sub_groups, (list, tuple)) and not sub_groups):
        if min_sub_groups is not None:
            raise ApplicationError("Invalid workload.", extra={"min_sub_groups": [
                "Only a workload with sub_groups sets min_sub_groups."]})
        return []
    if not isinstance(sub_groups, (list, tuple)):
        raise ApplicationError("Invalid workload.", extra={"sub_groups": ["Must be a list of subgroups."]})
    if len(sub_groups) > constants.MAX_SUBGROUPS_PER_WORKLOAD:
        raise ApplicationError("Invalid workload.", extra={"sub_groups": [
            f"At most {constants.MAX_SUBGROUPS_PER_WORKLOAD} subgroups."]})
    if min_available is not None:
        raise ApplicationError("Invalid workload.", extra={"min_available": [
            "A workload with sub_groups has no min_available: its leaf subgroups set min_available and "
            "min_sub_groups says how many top-level subgroups must be satisfied."]})
    out, errors = [], {}
    for i, g in enumerate(sub_groups):
        if not isinstance(g, Mapping):
            errors[f"sub_groups[{i}]"] = ["Must be an object."]
            continue
        unknown = sorted(set(g) - set(SUB_GROUP_KEYS))
        if unknown:
            errors[f"sub_groups[{i}]"] = [f"Unknown field(s): {', '.join(unknown)}."]
            continue
        row = SubGroup(name=g.get("name") or "", index=i, min_available=g.get("min_available"),
                       min_sub_groups=g.get("min_sub_groups"),
                       topology_required=g.get("topology_required") or "",
                       topology_preferred=g.get("topology_preferred") or "")
        try:
            row.full_clean(exclude=["workload", "parent"], validate_unique=False, validate_constraints=False)
        except ValidationError as exc:
            for k, msgs in exc.message_dict.items():
                errors[f"sub_groups[{i}].{k}"] = msgs
            continue
        out.append({"name": row.name, "parent": g.get("parent") or None, "min_available": row.min_available,
                    "min_sub_groups": row.min_sub_groups, "topology_required": row.topology_required,
                    "topology_preferred": row.topology_preferred})
    if errors:
        raise ApplicationError("Invalid workload.", extra=errors)
    return out


def check_tree_and_claims(*, queue: str, tree: list[dict[str, Any]], min_sub_groups: int | None,
                          tasks: list[Task], leaf_names: list[Any], nodes: Mapping[str, Node]) -> int:
    """A new tree for an existing workload's tasks (Kubernetes: a PodGroup's subGroups changed),
    checked by the engine's rules (``contract.workload_check``, the one entry every door uses);
    errors name the field.  Returns the gang size the engine derives."""
    problems, gang = contract.workload_check(
        queue=queue, name="workload", sub_groups=tree or None, min_sub_groups=min_sub_groups if tree else None,
        tasks=[_spec_of(t, t.name, leaf) for t, leaf in zip(tasks, leaf_names)], nodes=list(nodes.values()))
    if problems:
        raise ApplicationError("Invalid workload.", extra=problems)
    return gang


def create_sub_groups(workload: Workload, tree: list[dict[str, Any]]) -> dict[str, SubGroup]:
    """Insert the tree's rows (parents before children) and return them by name."""
    return _create_sub_group_trees([(workload, tree)])[0]


def _create_sub_group_trees(trees: Sequence[tuple[Workload, list[dict[str, Any]]]]) -> list[dict[str, SubGroup]]:
    """Insert the subgroup rows of several stored workloads, a level of the trees at a time (roots,
    then their children with ``parent`` set, ...): batched INSERTs and no UPDATE; returns each
    workload's rows by name (the tree's rules were checked: names unique, parents exist, acyclic)."""
    out: list[dict[str, SubGroup]] = []
    levels: list[list[SubGroup]] = []
    for workload, tree in trees:
        spec = {g["name"]: g for g in tree}
        by_name: dict[str, SubGroup] = {}

        def row(name: str) -> tuple[SubGroup, int]:
            # (the row, its depth), parents made first
            if name in by_name:
                return by_name[name], depth[name]
            g = spec[name]
            parent, level = (None, -1) if not g["parent"] else row(g["parent"])
            by_name[name] = SubGroup(
                workload=workload, name=name, index=index[name], parent=parent, min_available=g["min_available"],
                min_sub_groups=g["min_sub_groups"], topology_required=g["topology_required"],
                topology_preferred=g["topology_preferred"])
            depth[name] = level + 1
            while len(levels) <= level + 1:
                levels.append([])
            levels[level + 1].append(by_name[name])
            return by_name[name], level + 1

        index = {g["name"]: i for i, g in enumerate(tree)}
        depth: dict[str, int] = {}
        for g in tree:
            row(g["name"])
        out.append(by_name)
    for rows in levels:
        for r in rows:
            if r.parent is not None:
                r.parent_id = r.parent.pk  # the parent's level is stored: it has its pk now
        SubGroup.objects.bulk_create(rows, batch_size=INSERT_BATCH)
    return out


def _gpu_classes_for(tasks: Iterable[Task]) -> set[str]:
    names = {c.get("device_class") for t in tasks for c in (t.claims or ())}
    return gpu_classes(names) if names else set()


def _status_of(states: Iterable[str], min_available: int = 1) -> str:
    states = list(states)
    if TaskState.BINDING in states and states.count(TaskState.RUNNING) < max(1, min_available):
        return WorkloadStatus.BINDING
    states = set(states)
    if states <= {TaskState.PENDING, TaskState.PIPELINED}:
        return WorkloadStatus.PENDING
    if states <= {TaskState.SUCCEEDED}:
        return WorkloadStatus.SUCCEEDED
    if states <= set(TASK_STATES_TERMINAL):
        return WorkloadStatus.FAILED
    if states & {TaskState.RUNNING, TaskState.BINDING}:
        return WorkloadStatus.RUNNING
    if states & {TaskState.RELEASING, TaskState.STUCK_RELEASING}:
        return WorkloadStatus.RELEASING
    return WorkloadStatus.PENDING


@transaction.atomic
def workload_submit(
    *,
    queue: Queue,
    name: str,
    tasks: Sequence[Mapping[str, Any]] | None = None,
    replicas: int | None = None,
    task: Mapping[str, Any] | None = None,
    tenant: Tenant | None = None,
    owner: AbstractBaseUser | None = None,
    priority: int = 50,
    preemptible: bool | None = None,
    min_available: int | None = None,
    topology_required: str = "",
    topology_preferred: str = "",
    node_selector: Mapping[str, str] | None = None,
    preemption_delay: timedelta | None = None,
    staleness_grace_period: timedelta | None = None,
    sub_groups: Sequence[Mapping[str, Any]] | None = None,
    min_sub_groups: int | None = None,
) -> Workload:
    """Submit a workload; all its tasks start Pending.

    ``tasks`` is a list of specs ``{name?, gpu, gpu_memory_mib?, cpu_millis, memory_bytes,
    priority?, node_selector?}`` (engine units: gpu devices, MiB, millicores, bytes), or give
    ``replicas`` copies of one ``task``.  ``preemptible`` defaults to ``priority < 100`` and
    ``min_available`` to the number of tasks.  With a ``tenant`` the queue must be granted to
    it.  Errors name the field, e.g. ``tasks[2].gpu``.

    Hierarchical gangs: ``sub_groups`` (``{name, parent?, min_available? (leaves), min_sub_groups?
    (mid-level), topology_required?, topology_preferred?}``), ``min_sub_groups`` of the workload, and
    every task's ``sub_group`` naming a leaf. Devices: a task's ``claims`` (``[{device_class,
    count}]``). Both are checked by the engine's rules (scenario-format "SubGroups" / "Devices").
    """
    return _create(
        queue=queue, name=name, tasks=tasks, replicas=replicas, task=task, tenant=tenant, owner=owner,
        priority=priority, preemptible=preemptible, min_available=min_available, allow_state=False,
        sub_groups=sub_groups, min_sub_groups=min_sub_groups,
        workload_fields=dict(
            topology_required=topology_required or "", topology_preferred=topology_preferred or "",
            node_selector=dict(node_selector or {}), preemption_delay=preemption_delay,
            staleness_grace_period=staleness_grace_period,
        ),
    )


@transaction.atomic
def workload_import(
    *,
    queue: Queue,
    name: str,
    tasks: Sequence[Mapping[str, Any]],
    tenant: Tenant | None = None,
    priority: int = 50,
    preemptible: bool | None = None,
    min_available: int | None = None,
    created_at: datetime | None = None,
    started_at: datetime | None = None,
    stale_since: datetime | None = None,
    topology_required: str = "",
    topology_preferred: str = "",
    node_selector: Mapping[str, str] | None = None,
    preemption_delay: timedelta | None = None,
    staleness_grace_period: timedelta | None = None,
    sub_groups: Sequence[Mapping[str, Any]] | None = None,
    min_sub_groups: int | None = None,
) -> Workload:
    """Record a workload with its *observed* state (task ``state``, ``node`` name,
    ``gpu_groups``): scenario import, the demo data and tests.  Not for tenant submissions."""
    return _create(
        queue=queue, name=name, tasks=tasks, replicas=None, task=None, tenant=tenant, owner=None,
        priority=priority, preemptible=preemptible, min_available=min_available, allow_state=True,
        sub_groups=sub_groups, min_sub_groups=min_sub_groups,
        workload_fields=dict(
            topology_required=topology_required or "", topology_preferred=topology_preferred or "",
            node_selector=dict(node_selector or {}), preemption_delay=preemption_delay,
            staleness_grace_period=staleness_grace_period, created_at=created_at or timezone.now(),
            started_at=started_at, stale_since=stale_since,
        ),
    )


#: Keyword arguments of :func:`workload_import` an item of :func:`workloads_import` may carry.
IMPORT_KEYS = ("queue", "name", "tasks", "tenant", "priority", "preemptible", "min_available", "created_at",
               "started_at", "stale_since", "topology_required", "topology_preferred", "node_selector",
               "preemption_delay", "staleness_grace_period", "sub_groups", "min_sub_groups")


def _import_fields(item: Mapping[str, Any]) -> dict[str, Any]:
    """``workload_import``'s keyword arguments as ``_prepare`` takes them."""
    return dict(
        name=item.get("name"), tasks=item.get("tasks"), replicas=None, task=None, owner=None,
        priority=item.get("priority", 50), preemptible=item.get("preemptible"),
        min_available=item.get("min_available"), allow_state=True, sub_groups=item.get("sub_groups"),
        min_sub_groups=item.get("min_sub_groups"),
        workload_fields=dict(
            topology_required=item.get("topology_required") or "",
            topology_preferred=item.get("topology_preferred") or "",
            node_selector=dict(item.get("node_selector") or {}), preemption_delay=item.get("preemption_delay"),
            staleness_grace_period=item.get("staleness_grace_period"),
            created_at=item.get("created_at") or timezone.now(), started_at=item.get("started_at"),
            stale_since=item.get("stale_since"),
        ),
    )


@transaction.atomic
def workloads_import(*, workloads: Sequence[Mapping[str, Any]], label: str = "workloads") -> list[Workload]:
    """Record many workloads with their observed state, all or nothing, in a few statements.

    Each item carries :func:`workload_import`'s keyword arguments and is validated by the same
    rules (``_prepare``: fields, tasks, the engine's contract); the reads a single import makes per
    workload are made once for all of them (the queues locked in id order, tenant grants, names
    taken, the nodes the tasks name) and the writes are batched INSERTs of workloads, subgroups and
    tasks (:data:`INSERT_BATCH` rows per statement). A scenario of 90,000 workloads was ~12
    statements per workload through :func:`workload_import`. Errors name the item:
    ``<label>[i].tasks[0].node`` (the first ``IMPORT_ERRORS_SHOWN`` invalid items)."""
    items = list(workloads)
    errors = ItemErrors(label)
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            errors[f"{label}[{i}]"] = ["Must be an object."]
        elif not isinstance(item.get("queue"), Queue):
            errors[f"{label}[{i}].queue"] = ["A queue is required."]
        elif set(item) - set(IMPORT_KEYS):
            errors[f"{label}[{i}]"] = [f"Unknown field(s): {', '.join(sorted(set(item) - set(IMPORT_KEYS)))}."]
    if errors:
        raise ApplicationError("Invalid workloads.", extra=errors)
    if not items:
        return []
    bound_request_locks()
    queue_ids = sorted({item["queue"].pk for item in items})
    queues: dict[int, Queue] = {}
    for chunk in id_chunks(queue_ids, ID_CHUNK):
        # children prefetched: Workload.clean's leaf check reads them instead of a query per workload
        queues.update((q.pk, q) for q in Queue.objects.select_for_update().filter(pk__in=chunk).order_by("pk")
                      .prefetch_related("children"))
    tenants = {t.pk: t for t in (item.get("tenant") for item in items) if t is not None}
    grants = (set(Tenant.queues.through.objects.filter(tenant_id__in=list(tenants), queue_id__in=queue_ids)
                  .values_list("tenant_id", "queue_id")) if tenants else set())
    names = sorted({item.get("name") for item in items if isinstance(item.get("name"), str)})
    taken: set[tuple[int, int | None, str]] = set()
    for at in range(0, len(names), ID_CHUNK):
        taken.update(Workload.objects.filter(queue_id__in=queue_ids, name__in=names[at:at + ID_CHUNK])
                     .values_list("queue_id", "tenant_id", "name"))
    node_names = sorted(set().union(*(_node_names(item.get("tasks"), True) for item in items)))
    nodes: dict[str, Node] = {}
    for at in range(0, len(node_names), ID_CHUNK):
        nodes.update((n.name, n) for n in Node.objects.filter(name__in=node_names[at:at + ID_CHUNK]))

    prepared: list[_Prepared] = []
    task_cache: dict[str, tuple[Task, dict[str, list[str]]]] = {}
    for i, item in enumerate(items):
        queue, tenant, name = queues.get(item["queue"].pk), item.get("tenant"), item.get("name")
        key = (item["queue"].pk, tenant.pk if tenant is not None else None, name)
        try:
            if queue is None:
                raise ApplicationError("Invalid workload.", extra={"queue": ["The queue does not exist."]})
            if tenant is not None and not tenant.is_active:
                raise ApplicationError("Invalid workload.", extra={"tenant": ["The tenant is inactive."]})
            if tenant is not None and (tenant.pk, queue.pk) not in grants:
                raise ApplicationError("Invalid workload.", extra={"queue": [
                    f"Queue {queue.name!r} is not granted to tenant {tenant.name!r}."]})
            prepared.append(_prepare(queue=queue, tenant=tenant, nodes=nodes, name_taken=key in taken,
                                     task_cache=task_cache, **_import_fields(item)))
        except ApplicationError as exc:
            errors.add(i, exc)  # every item is checked; the first ones are named
            continue
        taken.add(key)  # a second item of the same name in this import is a duplicate too
    if errors:
        raise ApplicationError("Invalid workloads.", extra=errors)

    stored = [p.workload for p in prepared]
    try:
        with transaction.atomic():
            Workload.objects.bulk_create(stored, batch_size=INSERT_BATCH)
    except IntegrityError as exc:
        text = str(exc)
        if "workload_unique_name" not in text and "queues_app_workload.name" not in text:
            raise
        raise ApplicationError("Invalid workloads.", extra={label: [
            f"{DUPLICATE_NAME_MESSAGE} (a workload of the same name was stored meanwhile)"]}) from None
    groups = _create_sub_group_trees([(p.workload, p.tree) for p in prepared])
    try:
        with transaction.atomic():
            _insert_tasks(_task_rows(prepared, groups), now=timezone.now())
    except IntegrityError as exc:
        # the database's capacity guard (tasks bound to a node beyond what it has) names the node
        if "over-committed" not in str(exc):
            raise
        raise ApplicationError("Invalid workloads.", extra={label: [str(exc).strip().splitlines()[0]]}) from None
    return stored


#: Workload ids per statement of a bulk cancel.
CANCEL_CHUNK = ID_CHUNK
_FINISHED = (WorkloadStatus.SUCCEEDED, WorkloadStatus.FAILED)


def _cancel_locked(ids: Sequence[int], *, actor: AbstractBaseUser | None) -> None:
    """Move every task of the (already locked, cancellable) workloads ``ids`` and the workloads
    themselves: Pending / Pipelined -> Failed first (every statement leaves the nodes within
    capacity: the guard triggers), then Running / Binding -> Releasing, then the workload rows --
    three UPDATEs per chunk of :data:`CANCEL_CHUNK` workloads, whatever the gang sizes."""
    now = timezone.now()
    who = f" by {actor.get_username()}" if actor is not None else ""
    message = f"Cancelled{who} at {now:%Y-%m-%d %H:%M:%S}Z."
    for chunk in id_chunks(ids, CANCEL_CHUNK):
        tasks = Task.objects.filter(workload_id__in=chunk)
        tasks.filter(state__in=(TaskState.PENDING, TaskState.PIPELINED)).update(
            state=TaskState.FAILED, node=None, gpu_groups=[], devices={}, version=F("version") + 1, updated_at=now)
        tasks.filter(state__in=(TaskState.RUNNING, TaskState.BINDING)).update(
            state=TaskState.RELEASING, version=F("version") + 1, updated_at=now)
        Workload.objects.filter(pk__in=chunk).update(
            status=WorkloadStatus.CANCELLED, status_message=message, finished_at=now, version=F("version") + 1,
            updated_at=now)


@transaction.atomic
def workload_cancel(*, workload: Workload, actor: AbstractBaseUser | None = None) -> Workload:
    """Cancel: Pending / Pipelined tasks end Failed, tasks on nodes become Releasing (the
    cluster side deletes their pods; the resources stay busy until then).  Cancelling a
    cancelled workload is a no-op; a finished one is an error.

    Set-based: the workload row is locked (the lock order of the cycle's apply: workload, then
    tasks), then one UPDATE per target state moves every task at once -- two statements whatever
    the gang size, with the request's bounded lock and statement timeouts.
    """
    bound_request_locks()
    fresh = Workload.objects.select_for_update().filter(pk=workload.pk).first()
    if fresh is None:
        raise ApplicationError("Invalid cancel.", extra={"workload": ["The workload no longer exists."]})
    if fresh.status == WorkloadStatus.CANCELLED:
        return fresh
    if fresh.status in _FINISHED:
        raise ApplicationError("Invalid cancel.", extra={"status": [f"The workload already {fresh.status.lower()}."]})
    _cancel_locked([fresh.pk], actor=actor)
    fresh.refresh_from_db()
    return fresh


@transaction.atomic
def workloads_cancel(*, workload_ids: Iterable[int], actor: AbstractBaseUser | None = None) -> int:
    """Cancel many workloads at once (the admin's "Cancel selected workloads"): all or nothing.

    The workload rows are locked in id order (two bulk cancels never wait for each other in a
    circle), then :func:`_cancel_locked` moves their tasks with three UPDATEs per chunk: the number
    of statements does not grow with the selection's gangs.  Workloads already cancelled (or gone)
    are skipped; if any selected workload already finished, nothing is written and the error names
    them.  Returns how many workloads were cancelled.
    """
    bound_request_locks()
    rows: list[tuple[int, str, str]] = []
    for chunk in id_chunks(workload_ids, CANCEL_CHUNK):
        rows += (Workload.objects.select_for_update().filter(pk__in=chunk).order_by("pk")
                 .values_list("pk", "name", "status"))
    finished = [f"{name} ({status.lower()})" for _, name, status in rows if status in _FINISHED]
    if finished:
        shown = ", ".join(finished[:10]) + (f" and {len(finished) - 10} more" if len(finished) > 10 else "")
        raise ApplicationError("Invalid cancel.", extra={
            "workloads": [f"{len(finished)} selected workload(s) already finished and cannot be cancelled: {shown}."]})
    ids = [pk for pk, _, status in rows if status != WorkloadStatus.CANCELLED]
    _cancel_locked(ids, actor=actor)
    return len(ids)


# ----------------------------------------------------------------------------- idempotent submission (API)
#
# The idempotency record is the API's retry contract: the domain service above stays the one place
# that validates and stores a workload; this wrapper only decides whether to call it.

MAX_IDEMPOTENCY_KEY_LENGTH = 255
IDEMPOTENCY_KEY_FIELD = "Idempotency-Key"
KEY_REUSED_MESSAGE = "This Idempotency-Key was already used for a different request."
KEY_ORPHANED_MESSAGE = "The workload created with this Idempotency-Key no longer exists; use a new key."


class IdempotencyConflict(ApplicationError):
    """A key reused with a different body (the API answers 422, not 400: the body itself is valid)."""


def request_fingerprint(payload: Any) -> str:
    """SHA-256 of the canonical JSON of the validated request (key order does not matter)."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def idempotency_scope(*, tenant_id: int | None, user_id: int | None) -> str:
    return f"tenant:{tenant_id}" if tenant_id is not None else f"user:{user_id}"


def validate_idempotency_key(key: str) -> str:
    key = key.strip()
    if not key or len(key) > MAX_IDEMPOTENCY_KEY_LENGTH or not key.isprintable():
        raise ApplicationError("Invalid Idempotency-Key.", extra={IDEMPOTENCY_KEY_FIELD: [
            f"Must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} printable characters."]})
    return key


@transaction.atomic
def workload_submit_idempotent(
    *,
    key: str,
    scope: str,
    fingerprint: str,
    submit: Callable[[], Workload],
    user: AbstractBaseUser | None = None,
) -> tuple[Workload, bool]:
    """Run ``submit`` (a closure over ``services.workload_submit``) at most once per key.

    Returns ``(workload, created)``; ``created`` is False when the key was seen before with the
    same fingerprint (the first result is returned).  The key row is inserted *before* the
    workload, inside the same transaction: a concurrent request with the same key blocks on
    the unique index until this one commits (PostgreSQL; SQLite serializes writers anyway),
    then sees the row and returns this workload, so two retries never create two workloads.
    If ``submit`` raises, the key row rolls back with everything else and a retry runs anew.
    """
    key = validate_idempotency_key(key)
    existing = IdempotencyKey.objects.select_related("workload").filter(scope=scope, key=key).first()
    if existing is None:
        try:
            with transaction.atomic():
                record = IdempotencyKey.objects.create(scope=scope, key=key, fingerprint=fingerprint, user=user)
        except IntegrityError:
            existing = IdempotencyKey.objects.select_related("workload").get(scope=scope, key=key)
        else:
            workload = submit()
            record.workload = workload
            record.save(update_fields=["workload"])
            return workload, True
    if existing.fingerprint != fingerprint:
        raise IdempotencyConflict("Idempotency-Key conflict.", extra={IDEMPOTENCY_KEY_FIELD: [KEY_REUSED_MESSAGE]})
    if existing.workload is None:
        raise IdempotencyConflict("Idempotency-Key conflict.", extra={IDEMPOTENCY_KEY_FIELD: [KEY_ORPHANED_MESSAGE]})
    return existing.workload, False
