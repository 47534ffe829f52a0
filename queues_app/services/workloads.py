"""Workload writes: submit (all tasks Pending), import with observed state, cancel."""
from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Iterable, Mapping, Sequence

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from queues_app import constants
from queues_app.choices import TASK_STATES_TERMINAL, TaskState, WorkloadStatus
from queues_app.errors import ApplicationError
from queues_app.models import Node, Queue, Task, Tenant, Workload
from queues_app.services.common import bounded_int, validate

#: Keys of one task spec accepted by workload_submit.
TASK_SPEC_KEYS = ("name", "gpu", "gpu_memory_mib", "cpu_millis", "memory_bytes", "priority", "node_selector")
#: Extra keys accepted by workload_import (observed state, e.g. from a scenario file).
TASK_STATE_KEYS = ("state", "node", "gpu_groups")


def _task_from_spec(spec: Mapping[str, Any], *, index: int, workload_name: str, allow_state: bool,
                    nodes: Mapping[str, Node]) -> tuple[Task, dict[str, list[str]]]:
    allowed = TASK_SPEC_KEYS + (TASK_STATE_KEYS if allow_state else ())
    errors: dict[str, list[str]] = {}
    unknown = sorted(set(spec) - set(allowed))
    if unknown:
        errors[f"tasks[{index}]"] = [f"Unknown field(s): {', '.join(unknown)}."]
        return Task(), errors
    values = {k: spec[k] for k in TASK_SPEC_KEYS if k in spec and spec[k] is not None}
    if isinstance(values.get("gpu"), float):
        values["gpu"] = Decimal(repr(values["gpu"]))
    for k in ("gpu", "cpu_millis", "memory_bytes", "gpu_memory_mib", "priority"):
        if isinstance(values.get(k), bool):
            errors[f"tasks[{index}].{k}"] = ["Must be a number."]
        elif k != "gpu" and isinstance(values.get(k), float) and not values[k].is_integer():
            # IntegerField.to_python would truncate 1.5 to 1 silently.
            errors[f"tasks[{index}].{k}"] = ["Must be a whole number."]
    values.setdefault("name", f"{workload_name}-{index}")
    task = Task(index=index, **values)
    if allow_state:
        task.state = spec.get("state") or TaskState.PENDING
        node_name = spec.get("node")
        if node_name:
            task.node = nodes.get(node_name)
            if task.node is None:
                errors[f"tasks[{index}].node"] = [f"Unknown node {node_name!r}."]
        task.gpu_groups = list(spec.get("gpu_groups") or [])
    try:
        task.full_clean(exclude=["workload"], validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        for k, msgs in exc.message_dict.items():
            errors[f"tasks[{index}].{k}"] = msgs
    return task, errors


def _create(
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
) -> Workload:
    # Lock the queue row: queue_create locks a parent the same way, so "add a child" and
    # "submit to it" cannot interleave and leave workloads on an inner queue.
    locked = Queue.objects.select_for_update().filter(pk=queue.pk).first()
    if locked is None:
        raise ApplicationError("Invalid workload.", extra={"queue": ["The queue does not exist."]})
    if tenant is not None:
        if not tenant.is_active:
            raise ApplicationError("Invalid workload.", extra={"tenant": ["The tenant is inactive."]})
        if not tenant.queues.filter(pk=locked.pk).exists():
            raise ApplicationError("Invalid workload.", extra={"queue": [
                f"Queue {locked.name!r} is not granted to tenant {tenant.name!r}."]})

    if tasks is not None and (replicas is not None or task is not None):
        raise ApplicationError("Invalid workload.", extra={"tasks": ["Give either tasks, or replicas with a task."]})
    if tasks is None:
        if task is None:
            raise ApplicationError("Invalid workload.", extra={"tasks": ["A workload needs at least one task."]})
        n = bounded_int(1 if replicas is None else replicas, field="replicas", minimum=1,
                        maximum=constants.MAX_TASKS_PER_WORKLOAD)
        tasks = [dict(task) for _ in range(n)]
    if not isinstance(tasks, (list, tuple)) or not tasks:
        raise ApplicationError("Invalid workload.", extra={"tasks": ["A workload needs at least one task."]})
    if len(tasks) > constants.MAX_TASKS_PER_WORKLOAD:
        raise ApplicationError("Invalid workload.", extra={"tasks": [
            f"At most {constants.MAX_TASKS_PER_WORKLOAD} tasks per workload."]})

    priority = bounded_int(priority, field="priority", minimum=-constants.MAX_PRIORITY,
                           maximum=constants.MAX_PRIORITY)
    if preemptible is None:
        preemptible = priority < 100
    if min_available is None:
        min_available = len(tasks)
    min_available = bounded_int(min_available, field="min_available", minimum=1, maximum=len(tasks))

    workload = Workload(queue=locked, name=name, tenant=tenant, owner=owner, priority=priority,
                        preemptible=bool(preemptible), min_available=min_available, **workload_fields)
    validate(workload, message="Invalid workload.")

    node_names = {t.get("node") for t in tasks if isinstance(t, Mapping) and t.get("node")} if allow_state else set()
    nodes = {n.name: n for n in Node.objects.filter(name__in=node_names)} if node_names else {}
    built, errors = [], {}
    for i, spec in enumerate(tasks):
        if not isinstance(spec, Mapping):
            errors[f"tasks[{i}]"] = ["Must be an object."]
            continue
        t, errs = _task_from_spec(spec, index=i, workload_name=name, allow_state=allow_state, nodes=nodes)
        errors.update(errs)
        built.append(t)
    names = [t.name for t in built]
    if len(set(names)) != len(names):
        errors["tasks"] = ["Task names must be unique within the workload."]
    if errors:
        raise ApplicationError("Invalid workload.", extra=errors)

    workload.status = _status_of([t.state for t in built], workload.min_available)
    workload.save()
    for t in built:
        t.workload = workload
    Task.objects.bulk_create(built)
    return workload


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
) -> Workload:
    """Submit a workload; all its tasks start Pending.

    ``tasks`` is a list of specs ``{name?, gpu, gpu_memory_mib?, cpu_millis, memory_bytes,
    priority?, node_selector?}`` (engine units: gpu devices, MiB, millicores, bytes), or give
    ``replicas`` copies of one ``task``.  ``preemptible`` defaults to ``priority < 100`` and
    ``min_available`` to the number of tasks.  With a ``tenant`` the queue must be granted to
    it.  Errors name the field, e.g. ``tasks[2].gpu``.
    """
    return _create(
        queue=queue, name=name, tasks=tasks, replicas=replicas, task=task, tenant=tenant, owner=owner,
        priority=priority, preemptible=preemptible, min_available=min_available, allow_state=False,
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
) -> Workload:
    """Record a workload with its *observed* state (task ``state``, ``node`` name,
    ``gpu_groups``): scenario import, the demo data and tests.  Not for tenant submissions."""
    return _create(
        queue=queue, name=name, tasks=tasks, replicas=None, task=None, tenant=tenant, owner=None,
        priority=priority, preemptible=preemptible, min_available=min_available, allow_state=True,
        workload_fields=dict(
            topology_required=topology_required or "", topology_preferred=topology_preferred or "",
            node_selector=dict(node_selector or {}), preemption_delay=preemption_delay,
            staleness_grace_period=staleness_grace_period, created_at=created_at or timezone.now(),
            started_at=started_at, stale_since=stale_since,
        ),
    )


@transaction.atomic
def workload_cancel(*, workload: Workload, actor: AbstractBaseUser | None = None) -> Workload:
    """Cancel: Pending / Pipelined tasks end Failed, tasks on nodes become Releasing (the
    cluster side deletes their pods; the resources stay busy until then).  Cancelling a
    cancelled workload is a no-op; a finished one is an error."""
    fresh = Workload.objects.select_for_update().filter(pk=workload.pk).first()
    if fresh is None:
        raise ApplicationError("Invalid cancel.", extra={"workload": ["The workload no longer exists."]})
    if fresh.status == WorkloadStatus.CANCELLED:
        return fresh
    if fresh.status in (WorkloadStatus.SUCCEEDED, WorkloadStatus.FAILED):
        raise ApplicationError("Invalid cancel.", extra={"status": [f"The workload already {fresh.status.lower()}."]})
    now = timezone.now()
    tasks = list(Task.objects.select_for_update().filter(workload=fresh))
    for t in tasks:
        if t.state in (TaskState.PENDING, TaskState.PIPELINED):
            t.state, t.node = TaskState.FAILED, None
        elif t.state in (TaskState.RUNNING, TaskState.BINDING):
            t.state = TaskState.RELEASING
        else:
            continue
        t.version += 1
        t.updated_at = now
    Task.objects.bulk_update(tasks, ["state", "node", "version", "updated_at"])
    fresh.status = WorkloadStatus.CANCELLED
    who = f" by {actor.get_username()}" if actor is not None else ""
    fresh.status_message = f"Cancelled{who} at {now:%Y-%m-%d %H:%M:%S}Z."
    fresh.finished_at = now
    fresh.version += 1
    fresh.save(update_fields=["status", "status_message", "finished_at", "version", "updated_at"])
    return fresh
