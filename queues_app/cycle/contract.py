"""The engine contract at every door: one row in scenario form, checked by the engine's own rules.

Services, the API serializers, the admin forms and the Kubernetes reflector call these before they
store anything, so what a door accepts is exactly what the engine will be given (the rows go
through the same conversion as the cycle's export, ``engine_io.node_scenario`` / ``task_scenario``
...).  The verdict is ``{api field: [reasons]}`` (paths mapped by ``fields``), empty when accepted.

May import: ``engine_io`` (the engine's checks and the row conversion), ``fields``, models, choices.
"""
from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any, Mapping

from queues_app.choices import TaskState
from queues_app.cycle.engine_io import (
    check_job,
    device_classes_scenario,
    engine_label_key_problem,
    node_scenario,
    queue_resource_scenario,
    seconds_or_none,
    sub_group_scenario,
    task_scenario,
    validate_node,
    validate_queue,
)
from queues_app.cycle.fields import job_field, node_field, queue_field

__all__ = ["label_key_problem", "node_problems", "queue_problems", "workload_check", "workload_problems"]


def _extra(problems: list[tuple[str, str]], mapper) -> dict[str, list[str]]:
    extra: dict[str, list[str]] = {}
    for path, msg in problems:
        extra.setdefault(mapper(path), []).append(msg)
    return extra


def workload_problems(**kwargs: Any) -> dict[str, list[str]]:
    """The engine's verdict on one workload as services take it: ``{api field: [reasons]}``, empty
    when the engine accepts it (arguments: :func:`workload_check`)."""
    return workload_check(**kwargs)[0]


def workload_check(*, queue: str, name: str, tasks: list[Mapping[str, Any]] | None = None,
                   task: Mapping[str, Any] | None = None, replicas: int | None = None, priority: int = 50,
                   preemptible: bool | None = None, min_available: int | None = None,
                   node_selector: Mapping[str, str] | None = None, topology_required: str = "",
                   topology_preferred: str = "", preemption_delay: timedelta | None = None,
                   staleness_grace_period: timedelta | None = None,
                   sub_groups: list[Mapping[str, Any]] | None = None, min_sub_groups: int | None = None,
                   nodes: Any = ()) -> tuple[dict[str, list[str]], int]:
    """The engine's verdict on one workload as services take it (``tasks`` specs, or ``replicas``
    copies of one ``task``): ``({api field: [reasons]}, gang size)``; no reasons when the engine
    accepts it.  The gang size is the engine's: ``min_available`` (default all tasks), or with
    ``sub_groups`` the fewest tasks that satisfy the tree (scenario-format "SubGroups").

    Task specs may carry ``sub_group`` and ``claims`` (``[{device_class, count}]``, checked against
    the DeviceClass rows), and ``state`` / ``node`` / ``gpu_groups`` / ``devices`` (imports);
    ``nodes`` are the nodes such a task may name (names, or Node objects / node rows when tasks
    pin their ``devices``).  ``min_available`` None: not checked (a Kubernetes gang whose pods
    are still arriving)."""
    selector = dict(node_selector or {})

    def one(spec: Mapping[str, Any]) -> dict[str, Any]:
        out = task_scenario(spec, selector=selector)
        for k, engine_key in (("state", "state"), ("node", "node"), ("gpu_groups", "gpuGroups"),
                              ("devices", "devices")):
            if spec.get(k) not in (None, "", [], {}):
                out[engine_key] = spec[k]
        # the states the cycle exports them as (build_engine_input): a bind issued holds its node
        if out.get("state") == TaskState.BINDING:
            out["state"] = str(TaskState.RUNNING)
        elif out.get("state") == TaskState.PIPELINED:
            out["state"] = str(TaskState.PENDING)
            out.pop("node", None)
            out.pop("gpuGroups", None)
        return out

    job: dict[str, Any] = {"name": name, "queue": queue, "priority": priority,
                           "stalenessGracePeriod": seconds_or_none(staleness_grace_period),
                           "preemptionDelay": seconds_or_none(preemption_delay)}
    if preemptible is not None:
        job["preemptible"] = bool(preemptible)
    if min_available is not None:
        job["minAvailable"] = min_available
    if topology_required or topology_preferred:
        job["topology"] = {"required": topology_required or None, "preferred": topology_preferred or None}
    if sub_groups:
        job["subGroups"] = [sub_group_scenario(g) if isinstance(g, Mapping) else g for g in sub_groups]
    if min_sub_groups is not None:
        job["minSubGroups"] = min_sub_groups
    specs = list(tasks) if tasks is not None else [task or {}]
    if tasks is not None:
        job["tasks"] = [one(t) for t in tasks]
    else:
        job["replicas"] = 1 if replicas is None else replicas
        job["task"] = one(task or {})
        job["task"].pop("name", None)
    claims = any(isinstance(t, Mapping) and t.get("claims") for t in specs)
    classes = device_classes_scenario() if claims else None
    node_rows = [n if isinstance(n, str) else _node_ref(n) for n in nodes]
    problems, gang = check_job(job, nodes=node_rows, device_classes=classes)
    return _extra(problems, lambda p: job_field(p, workload_selector=selector)), gang


def _node_ref(n: Any) -> dict[str, Any]:
    """A node a task names, as much as a job's check needs (its name and devices)."""
    get = n.get if isinstance(n, Mapping) else lambda k, d=None: getattr(n, k, d)
    row: dict[str, Any] = {"name": get("name")}
    devices = get("devices")
    if devices:
        row["devices"] = devices
    return row


def queue_problems(*, name: str, priority: int = 100, quotas: Mapping[str, Mapping[str, Any]] | None = None,
                   reclaim_min_runtime: timedelta | None = None, preempt_min_runtime: timedelta | None = None,
                   prefix: str = "quotas.") -> dict[str, list[str]]:
    """The engine's verdict on one queue's own fields; ``quotas`` in QueueResource units and
    names (``{"memory": {"quota": .., "over_quota_weight": .., "limit": ..}}``, missing = the
    default).  Keys: ``quotas.memory.quota`` (``prefix`` "": ``quota``, for one resource)."""
    resources = {}
    for res, vals in (quotas or {}).items():
        row = {"quota": Decimal(0), "over_quota_weight": Decimal(1), "limit": Decimal(-1), **dict(vals)}
        resources[res] = queue_resource_scenario(row)
    queue = {"name": name, "priority": priority, "resources": resources,
             "reclaimMinRuntime": seconds_or_none(reclaim_min_runtime), "preemptMinRuntime": seconds_or_none(preempt_min_runtime)}
    return _extra(validate_queue(queue), lambda p: queue_field(p, prefix=prefix))


def node_problems(fields: Mapping[str, Any]) -> dict[str, list[str]]:
    """The engine's verdict on one node (Node field names and units; ``devices`` against the
    DeviceClass rows)."""
    node = node_scenario(fields)
    classes = device_classes_scenario() if node.get("devices") else None
    return _extra(validate_node(node, device_classes=classes), node_field)


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a Kubernetes label key (the engine's rule), or None."""
    return engine_label_key_problem(key)
