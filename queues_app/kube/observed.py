"""Observed cluster state -> rows: the ONE place where what the Kubernetes API server says
changes nodes, workloads and tasks (kubernetes mode, issue #7).

Both the sync loop (``queues_app/kube/reflector.py``, list + watch) and the dispatcher's read-back
after a bind or eviction call these services, so the database converges to the cluster
whichever of them sees a change first.  Rules:

* **The cluster wins.**  A pod bound to a node is on that node, whoever bound it (our bind,
  another binder, or ``spec.nodeName`` set at creation): its task is Running there.  A pod
  with a deletion timestamp is Releasing (it still holds its node until it is gone); a pod in
  phase Succeeded / Failed ends its task so.  Only a pod that is *gone* frees its resources:
  :func:`kube_pod_gone` deletes the task row.
* **Membership is fixed at creation.**  A pod's workload (its group: pod-group annotation, else
  the top controller owner, else the pod itself), queue and requests are read once, when its
  task is created; later events only move the task through its states.  So a pod observed by
  the dispatcher (who knows nothing about owners) lands in the same workload.
* **Idempotent.**  The same event twice changes nothing (no version bumps, no second event).
* **Bad input never crashes the caller and never writes half a pod.**  A pod that cannot be
  translated, or names a missing / unknown / non-leaf queue, gets a SchedulingEvent and a
  Kubernetes Event (an outbox row the dispatcher writes on the pod) and no rows.
* **Node removal leaks nothing.**  Tasks on a deleted node lose it: binds in flight return to
  Pending, pods that ran there end Failed (their pods are deleted by the cluster's pod GC and
  recreated by their controllers as new tasks).

Workload statuses follow their pods: a kube workload that ended Succeeded / Failed reopens when
its controller creates a new pod (a Job retrying), unlike embedded workloads whose final
statuses are final.  Cancelled stays Cancelled; pods arriving for it start Failed.
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import socket
import uuid
from datetime import datetime, timedelta
from typing import Any, Mapping

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from queues_app import constants
from queues_app.choices import TASK_STATES_TERMINAL, TaskState, WorkloadStatus
from queues_app.cycle import contract
from queues_app.cycle.cluster import cluster_confirm_bound, refresh_workload_statuses, restate_queue_allocation
from queues_app.errors import ApplicationError
from queues_app.kube import observed_dra, translate
from queues_app.models import (
    KubeLease,
    KubeNode,
    KubeOutbox,
    KubeOutboxKind,
    KubePod,
    KubeSyncCursor,
    KubeWorkloadRef,
    Node,
    Queue,
    SchedulingEvent,
    Task,
    Workload,
)
from queues_app.services.common import validate
from queues_app.services.nodes import NODE_FIELDS, node_delete, node_upsert

logger = logging.getLogger(__name__)

RESOURCES = ("nodes", "pods", *observed_dra.DRA_RESOURCES)
#: SchedulingEvent / Kubernetes Event reasons written here.
REASON_INVALID_QUEUE = "InvalidQueue"
REASON_INVALID_POD = "InvalidPod"
REASON_INVALID_NODE = "InvalidNode"
REASON_NODE_GONE = "NodeGone"
REASON_QUEUE_MISMATCH = "QueueMismatch"

_RELEASING = (TaskState.RELEASING, TaskState.STUCK_RELEASING)
_ON_NODE_HELD = (TaskState.RUNNING, TaskState.RELEASING, TaskState.STUCK_RELEASING)
_NAME_BAD_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


class PodRejected(ApplicationError):
    """A pod we will not make a task of; ``reason`` is the event reason written on it."""

    def __init__(self, message: str, *, reason: str, extra: Mapping[str, list[str] | str] | None = None) -> None:
        super().__init__(message, extra=extra)
        self.reason = reason


# ----------------------------------------------------------------------------- helpers


def _clip_name(raw: str, *, max_length: int) -> str:
    """A name our validator accepts (letters, digits, '-', '_', '.'), unique per input: too long
    or rewritten names get a short digest of the original appended."""
    clean = _NAME_BAD_CHARS.sub("-", raw).strip("-_.") or "x"
    if clean == raw and len(raw) <= max_length:
        return raw
    digest = hashlib.sha1(raw.encode()).hexdigest()[:8]
    return f"{clean[:max_length - 9].rstrip('-_.')}-{digest}"


def _workload_name(namespace: str, group: str) -> str:
    kind, _, name = group.partition("/")
    return _clip_name(f"{namespace}.{kind.lower()}-{name}", max_length=constants.MAX_NAME_LENGTH)


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return parse_datetime(value)
    except ValueError:
        return None


def _pod_event(*, namespace: str, name: str, uid: str, reason: str, message: str,
               workload: Workload | None = None, task: Task | None = None, warning: bool = True) -> bool:
    """A SchedulingEvent plus a Kubernetes Event on the pod (an outbox row), once per pod and
    message: observing the same pod again writes nothing.  Returns whether it was written."""
    payload = {"reason": reason, "message": message[:1000], "type": "Warning" if warning else "Normal"}
    dup = KubeOutbox.objects.filter(kind=KubeOutboxKind.EVENT, namespace=namespace, pod_name=name, pod_uid=uid,
                                    payload__reason=reason, payload__message=payload["message"])
    if dup.exists():
        return False
    SchedulingEvent.objects.create(workload=workload, task=task, reason=reason, message=message)
    KubeOutbox.objects.create(kind=KubeOutboxKind.EVENT, task=task, namespace=namespace, pod_name=name,
                              pod_uid=uid, payload=payload)
    return True


def _resolve_queue(info: translate.PodInfo) -> Queue:
    label = settings.KAI_KUBE_QUEUE_LABEL
    where = f"Pod {info.namespace}/{info.name}"
    if not info.queue:
        raise PodRejected(f"{where} has no {label} label; it is not scheduled until the label names a leaf queue.",
                          reason=REASON_INVALID_QUEUE, extra={f"pod label {label}": ["Missing."]})
    queue = Queue.objects.filter(name=info.queue).first()
    if queue is None:
        raise PodRejected(f"{where}: label {label}={info.queue!r} names no queue.",
                          reason=REASON_INVALID_QUEUE, extra={f"pod label {label}": [f"Unknown queue {info.queue!r}."]})
    if queue.children.exists():
        raise PodRejected(f"{where}: label {label}={info.queue!r} names a queue with child queues; only leaf queues "
                          "take workloads.", reason=REASON_INVALID_QUEUE,
                          extra={f"pod label {label}": [f"Queue {info.queue!r} is not a leaf."]})
    return queue


def _lock_workload(workload_id: int) -> None:
    # Workloads before tasks: the lock order of the cycle apply and cycle_cluster.
    list(Workload.objects.select_for_update().filter(id=workload_id).values_list("id", flat=True))


def _target(task_state: str, task_node_id: int | None, status: translate.PodStatus,
            node: Node | None) -> tuple[str, Node | None, bool] | None:
    """Where the cluster says this task is: ``(state, node, keep_node)`` or None to leave it.

    ``keep_node`` means "the node is unchanged" (gpu groups stay)."""
    if status.phase in (TaskState.SUCCEEDED, TaskState.FAILED):
        if task_state == status.phase and (node is None or task_node_id in (None, node.id)):
            return None
        return status.phase, node, node is not None and task_node_id == node.id
    if task_state in TASK_STATES_TERMINAL:
        return None  # never resurrected (e.g. failed when its node was deleted)
    if status.node_name:
        if node is None:  # bound to a node we do not know (yet, or any more)
            return (TaskState.FAILED if status.deleting else TaskState.PENDING), None, False
        if task_node_id == node.id and task_state in _ON_NODE_HELD:
            if status.deleting and task_state == TaskState.RUNNING:
                return TaskState.RELEASING, node, True
            return None
        return (TaskState.RELEASING if status.deleting else TaskState.RUNNING), node, task_node_id == node.id
    if status.deleting:
        return TaskState.FAILED, None, False  # deleted before it was ever bound: nothing to release
    if task_state == TaskState.RUNNING:
        return TaskState.PENDING, None, False  # the cluster says it is not bound
    return None  # Pending, Binding / Pipelined in flight, Releasing until the pod is gone


def _follow(task: Task, status: translate.PodStatus, *, now: datetime) -> bool:
    """Move ``task`` (locked) to where the cluster says it is.  Returns whether it changed."""
    node = Node.objects.filter(name=status.node_name).first() if status.node_name else None
    if (task.state == TaskState.BINDING and node is not None and task.node_id == node.id
            and status.phase not in (TaskState.SUCCEEDED, TaskState.FAILED)):
        cluster_confirm_bound(task_ids=[task.id])
        task.refresh_from_db()
    target = _target(task.state, task.node_id, status, node)
    if target is None:
        return False
    state, new_node, keep_node = target
    task.state, task.node = state, new_node
    if not keep_node:
        task.gpu_groups = []
    task.version += 1
    task.updated_at = now
    Task.objects.filter(pk=task.pk).update(state=task.state, node=task.node, gpu_groups=task.gpu_groups,
                                           version=task.version, updated_at=now)
    return True


def _older(rv: str, than: str) -> bool:
    """Whether resourceVersion ``rv`` is before ``than``.  resourceVersions are opaque to clients
    in general; the API server's are etcd revisions (decimal integers, increasing), so two
    decimal values are compared and anything else counts as not older."""
    return rv.isdigit() and than.isdigit() and int(rv) < int(than)


def _kpod_status(kpod: KubePod) -> translate.PodStatus:
    return translate.PodStatus(node_name=kpod.node_name, phase=kpod.phase or "Pending",
                               deleting=kpod.deletion_timestamp is not None,
                               deletion_timestamp=kpod.deletion_timestamp.isoformat() if kpod.deletion_timestamp
                               else None, scheduled=kpod.pod_scheduled)


# ----------------------------------------------------------------------------- pods


def _create_pod(obj: Mapping[str, Any], *, owner: translate.OwnerInfo | None, now: datetime) -> Task:
    info = translate.pod_fields(obj, queue_label=settings.KAI_KUBE_QUEUE_LABEL)
    queue = _resolve_queue(info)
    group = info.group
    if owner is not None and not group.startswith("podgroup/"):
        group = owner.group
    ref = KubeWorkloadRef.objects.select_related("workload", "workload__queue").filter(
        namespace=info.namespace, group=group).first()
    if ref is not None:
        workload = ref.workload
        _lock_workload(workload.id)
        if workload.queue_id != queue.id:
            _pod_event(namespace=info.namespace, name=info.name, uid=info.uid, reason=REASON_QUEUE_MISMATCH,
                       workload=workload,
                       message=f"Pod {info.namespace}/{info.name} names queue {queue.name!r} but its group {group} "
                               f"is workload {workload.name!r} on queue {workload.queue.name!r}; it joins the "
                               f"workload.")
    else:
        priority = info.priority if info.priority is not None else 50
        priority = max(-constants.MAX_PRIORITY, min(constants.MAX_PRIORITY, priority))
        gang = info.min_available or (owner.replicas if owner is not None else None) or 1
        name = _workload_name(info.namespace, group)
        if Workload.objects.filter(queue=queue, name=name).exists():
            name = _clip_name(f"{name}-{hashlib.sha1(group.encode()).hexdigest()[:6]}",
                              max_length=constants.MAX_NAME_LENGTH)
        workload = Workload(queue=queue, name=name, priority=priority, preemptible=priority < 100,
                            min_available=min(gang, constants.MAX_TASKS_PER_WORKLOAD), created_at=now,
                            status_message=f"Kubernetes {info.namespace}/{group}")
        validate(workload, message=f"Invalid workload for pod {info.namespace}/{info.name}.")
        workload.save()
        KubeWorkloadRef.objects.create(workload=workload, namespace=info.namespace, group=group,
                                       owner_uid=(owner.owner_uid if owner else "") or
                                       str((info.owner or {}).get("uid") or ""))
    top = Task.objects.filter(workload=workload).aggregate(m=Max("index"))["m"]
    index = 0 if top is None else top + 1
    task = Task(workload=workload, name=_clip_name(info.name, max_length=constants.MAX_NAME_LENGTH + 12),
                index=index, state=TaskState.PENDING, created_at=now, **info.task)
    if workload.status == WorkloadStatus.CANCELLED:
        task.state = TaskState.FAILED
    validate(task, message=f"Invalid pod {info.namespace}/{info.name}.")
    # The engine's own rules on the translated pod (one contract; a pod the cycle would refuse is
    # refused here, with an event on the pod, instead of being quarantined every cycle).
    problems = contract.workload_problems(
        queue=workload.queue.name, name=workload.name, priority=workload.priority, min_available=None,
        tasks=[{**info.task, "name": task.name}])
    if problems:
        raise ApplicationError(f"Invalid pod {info.namespace}/{info.name}.",
                               extra={f"pod {k.replace('tasks[0].', '', 1)}": v for k, v in problems.items()})
    task.save()
    md = obj.get("metadata") or {}
    kpod = KubePod.objects.create(task=task, uid=info.uid, namespace=info.namespace, name=info.name,
                                  resource_version=info.resource_version, node_name=info.status.node_name,
                                  phase=info.status.phase,
                                  deletion_timestamp=_parse_time(info.status.deletion_timestamp),
                                  pod_scheduled=info.status.scheduled[:120], observed_at=now,
                                  sub_group_name=str((md.get("labels") or {}).get(translate.LABEL_SUBGROUP) or ""),
                                  claims=[list(c) for c in translate.pod_claim_refs(obj)])
    observed_dra.on_pod_created(task, kpod)  # its claims; its leaf of the PodGroup's tree
    _follow(task, info.status, now=now)
    if kpod.claims:
        observed_dra.sync_task_claims([kpod])  # the devices its allocated claims hold on its node
    refresh_workload_statuses([workload.id], now=now, observed=True)
    return task


def _update_pod(kpod: KubePod, obj: Mapping[str, Any], *, now: datetime) -> Task:
    rv = translate.resource_version_of(obj)
    status = translate.pod_status(obj)
    task = kpod.task
    if _older(rv, kpod.resource_version):
        return task  # a stale copy (a watch event behind the dispatcher's read-back): ignore
    if not status.node_name and kpod.node_name:
        # spec.nodeName cannot be unset once set (the API refuses it): a copy without it is older
        status = translate.PodStatus(node_name=kpod.node_name, phase=status.phase, deleting=status.deleting,
                                     deletion_timestamp=status.deletion_timestamp, scheduled=status.scheduled)
    known = _kpod_status(kpod)
    claims = [list(c) for c in translate.pod_claim_refs(obj)] or list(kpod.claims or [])
    if rv == kpod.resource_version and (status.node_name, status.phase, status.deleting, status.scheduled) == (
            known.node_name, known.phase, known.deleting, known.scheduled) and claims == list(kpod.claims or []):
        return task
    _lock_workload(task.workload_id)
    task = Task.objects.select_for_update().get(pk=task.pk)
    KubePod.objects.filter(pk=kpod.pk).update(
        resource_version=rv, node_name=status.node_name, phase=status.phase,
        deletion_timestamp=_parse_time(status.deletion_timestamp), pod_scheduled=status.scheduled[:120],
        observed_at=now, claims=claims)
    kpod.claims = claims
    if _follow(task, status, now=now):
        refresh_workload_statuses([task.workload_id], now=now, observed=True)
    if kpod.claims:
        observed_dra.sync_task_claims([kpod])  # a template's claim got its name, or its allocation changed
    return task


def _pod_gone(kpod: KubePod) -> None:
    task = Task.objects.select_related("workload").get(pk=kpod.task_id)
    _lock_workload(task.workload_id)
    task = Task.objects.select_for_update().select_related("workload").get(pk=task.pk)
    workload_id, queue_id, now = task.workload_id, task.workload.queue_id, timezone.now()
    task.delete()  # cascades to the KubePod row
    if not Task.objects.filter(workload_id=workload_id).exists():
        Workload.objects.filter(id=workload_id).delete()
    else:
        refresh_workload_statuses([workload_id], now=now, observed=True)
    restate_queue_allocation(queue_ids=[queue_id], now=now)


@transaction.atomic
def kube_pod_observed(*, obj: Mapping[str, Any], owner: translate.OwnerInfo | None = None) -> Task | None:
    """A pod as the API server returned it (JSON dict): create or move its task.

    Returns the task, or None for a pod that is not ours (another ``schedulerName``) or was
    rejected (an event says why).  ``owner`` is the top controller the caller resolved through
    the API (group key and replica count); without it a new pod is grouped by its direct
    controller and the gang size comes from the annotation, else 1.  A pod already known
    keeps its workload whatever ``owner`` says.
    """
    now = timezone.now()
    md = obj.get("metadata") if isinstance(obj, Mapping) else None
    md = md if isinstance(md, Mapping) else {}
    spec = obj.get("spec") if isinstance(obj, Mapping) and isinstance(obj.get("spec"), Mapping) else {}
    uid, namespace, name = str(md.get("uid") or ""), str(md.get("namespace") or "default"), str(md.get("name") or "")
    if (spec.get("schedulerName") or "default-scheduler") != settings.KAI_SCHEDULER_NAME:
        return None
    kpod = KubePod.objects.select_related("task").filter(uid=uid).first() if uid else None
    if kpod is not None:
        return _update_pod(kpod, obj, now=now)
    for stale in KubePod.objects.filter(namespace=namespace, name=name).exclude(uid=uid):
        _pod_gone(stale)  # the same name with a new uid: we missed the old pod's deletion
    try:
        with transaction.atomic():
            return _create_pod(obj, owner=owner, now=now)
    except PodRejected as exc:
        reason, message = exc.reason, exc.message
    except ApplicationError as exc:
        reason, message = REASON_INVALID_POD, f"Pod {namespace}/{name} cannot be scheduled: {exc}"
    logger.warning("kube sync: %s: %s", reason, message)
    if name:
        _pod_event(namespace=namespace, name=name, uid=uid, reason=reason, message=message)
    return None


@transaction.atomic
def kube_pod_gone(*, uid: str | None = None, namespace: str | None = None, name: str | None = None) -> None:
    """The pod no longer exists: its task row is deleted (its resources are free only now), and
    its workload with it when no task is left.  Unknown pods are a no-op.  With a ``uid`` only
    that pod is meant (a recreated pod of the same name is left alone)."""
    if uid:
        rows = KubePod.objects.filter(uid=uid)
    elif namespace and name:
        rows = KubePod.objects.filter(namespace=namespace, name=name)
    else:
        raise ApplicationError("Invalid pod.", extra={"uid": ["Give the uid, or the namespace and the name."]})
    for kpod in list(rows):
        _pod_gone(kpod)


# ----------------------------------------------------------------------------- nodes


def _node_changes(node: Node | None, fields: Mapping[str, Any]) -> dict[str, Any]:
    if node is None:
        return dict(fields)
    return {k: v for k, v in fields.items() if k in NODE_FIELDS and getattr(node, k) != v}


@transaction.atomic
def kube_node_observed(*, obj: Mapping[str, Any]) -> Node:
    """A Node object: create or update the node row (only what changed, so the kubelet's
    periodic status writes do not bump the node version), then adopt pods bound to it before
    it was known.  Capacity below what bound tasks hold is refused (ApplicationError) like any
    node write: the row keeps its last good capacity."""
    now = timezone.now()
    info = translate.node_fields(obj, gpu_memory_label=settings.KAI_KUBE_GPU_MEMORY_LABEL,
                                 default_gpu_memory_mib=settings.KAI_KUBE_DEFAULT_GPU_MEMORY_MIB)
    node = Node.objects.filter(name=info.name).first()
    changes = _node_changes(node, info.fields)
    if changes:
        node, _ = node_upsert(name=info.name, **changes)
    kn = KubeNode.objects.filter(node=node).first()
    if kn is None:
        KubeNode.objects.filter(uid=info.uid).delete()
        KubeNode.objects.create(node=node, uid=info.uid, resource_version=info.resource_version, taints=info.taints,
                                observed_at=now)
    elif (kn.uid, kn.resource_version, kn.taints) != (info.uid, info.resource_version, info.taints):
        KubeNode.objects.filter(pk=kn.pk).update(uid=info.uid, resource_version=info.resource_version,
                                                 taints=info.taints, observed_at=now)
    waiting = (KubePod.objects.select_related("task").filter(node_name=info.name)
               .exclude(task__node=node).exclude(task__state__in=TASK_STATES_TERMINAL))
    touched = set()
    for kpod in waiting:
        _lock_workload(kpod.task.workload_id)
        task = Task.objects.select_for_update().get(pk=kpod.task_id)
        if _follow(task, _kpod_status(kpod), now=now):
            touched.add(task.workload_id)
    refresh_workload_statuses(touched, now=now, observed=True)
    return node


@transaction.atomic
def kube_node_gone(*, name: str) -> None:
    """The node was deleted: its tasks lose it (binds in flight -> Pending, pods that ran there ->
    Failed, finished tasks forget it), then the row goes.  No GPU stays held by a node that
    does not exist.  Unknown names are a no-op."""
    node = Node.objects.select_for_update().filter(name=name).first()
    if node is None:
        return
    now = timezone.now()
    wids = sorted(set(Task.objects.filter(node=node).values_list("workload_id", flat=True)))
    list(Workload.objects.select_for_update().filter(id__in=wids).order_by("id").values_list("id", flat=True))
    tasks = list(Task.objects.select_for_update().filter(node=node).order_by("id"))
    for t in tasks:
        was = t.state
        if t.state in (TaskState.BINDING, TaskState.PIPELINED):
            t.state = TaskState.PENDING
        elif t.state in _ON_NODE_HELD:
            t.state = TaskState.FAILED
        t.node, t.gpu_groups, t.version, t.updated_at = None, [], t.version + 1, now
        if was not in TASK_STATES_TERMINAL:
            SchedulingEvent.objects.create(workload_id=t.workload_id, task=t, reason=REASON_NODE_GONE,
                                           message=f"Node {name} was deleted: task {t.name} ({was}) is now {t.state}.")
    Task.objects.bulk_update(tasks, ["state", "node", "gpu_groups", "version", "updated_at"])
    refresh_workload_statuses(wids, now=now, observed=True)
    node_delete(node=node)


# ----------------------------------------------------------------------------- relist, cursor


def _record_invalid_node(obj: Mapping[str, Any], exc: ApplicationError) -> None:
    md = obj.get("metadata") if isinstance(obj, Mapping) else None
    node_name = (md or {}).get("name", "?") if isinstance(md, Mapping) else "?"
    message = f"Node {node_name} not synced: {exc}"
    logger.warning("kube sync: %s", message)
    if not SchedulingEvent.objects.filter(reason=REASON_INVALID_NODE, message=message).exists():
        SchedulingEvent.objects.create(reason=REASON_INVALID_NODE, message=message)


def kube_node_observed_safe(*, obj: Mapping[str, Any]) -> Node | None:
    """:func:`kube_node_observed` for loops: a refused node is logged and recorded as an
    InvalidNode event (once per message) instead of raised; nothing of it is written."""
    try:
        return kube_node_observed(obj=obj)
    except ApplicationError as exc:
        with transaction.atomic():
            _record_invalid_node(obj, exc)
        return None


@transaction.atomic
def kube_cursor_save(*, resource: str, resource_version: str) -> KubeSyncCursor:
    """Where the watch of ``resource`` is now (a watch event or bookmark was processed)."""
    if resource not in RESOURCES:
        raise ApplicationError("Invalid cursor.", extra={"resource": [f"One of {', '.join(RESOURCES)}."]})
    now = timezone.now()
    cursor, created = KubeSyncCursor.objects.get_or_create(
        resource=resource, defaults={"resource_version": resource_version, "last_event_at": now})
    if not created:
        KubeSyncCursor.objects.filter(pk=cursor.pk).update(resource_version=resource_version, last_event_at=now)
        cursor.resource_version, cursor.last_event_at = resource_version, now
    return cursor


@transaction.atomic
def kube_relist(*, resource: str, objs: list[Mapping[str, Any]], resource_version: str,
                owners: Mapping[str, translate.OwnerInfo] | None = None) -> None:
    """A full list of ``resource`` at ``resource_version``: rows of objects no longer listed are
    removed (deleted while we were not watching), every listed object is upserted (a bad one
    is skipped with its event), and the cursor is stored with the relist counted.

    ``owners`` maps pod uid -> resolved top owner (see :func:`kube_pod_observed`)."""
    if resource not in RESOURCES:
        raise ApplicationError("Invalid relist.", extra={"resource": [f"One of {', '.join(RESOURCES)}."]})
    owners = owners or {}
    if resource == "nodes":
        listed = {str(((o.get("metadata") or {}).get("name")) or "") for o in objs}
        for kn in KubeNode.objects.select_related("node").exclude(node__name__in=listed):
            kube_node_gone(name=kn.node.name)
        for obj in objs:
            kube_node_observed_safe(obj=obj)
    else:
        listed = {str(((o.get("metadata") or {}).get("uid")) or "") for o in objs}
        for kpod in KubePod.objects.exclude(uid__in=listed) if len(listed) < 900 else \
                [k for k in KubePod.objects.all() if k.uid not in listed]:
            _pod_gone(kpod)
        for obj in objs:
            uid = str(((obj.get("metadata") or {}).get("uid")) or "")
            kube_pod_observed(obj=obj, owner=owners.get(uid))
    now = timezone.now()
    cursor, _ = KubeSyncCursor.objects.get_or_create(resource=resource)
    KubeSyncCursor.objects.filter(pk=cursor.pk).update(resource_version=resource_version, relists=cursor.relists + 1,
                                                       last_relist_at=now, last_event_at=now)


# ----------------------------------------------------------------------------- leader lease


def kube_lease_holder() -> str:
    """A lease holder id unique to this process and call (host:pid:random)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@transaction.atomic
def kube_lease_acquire(*, name: str, holder: str, ttl_seconds: float, now: datetime | None = None) -> bool:
    """Take or renew the named lease with one conditional UPDATE: it is free, expired, or ours.
    Returns whether ``holder`` holds it now (until ``now + ttl_seconds``)."""
    if not holder:
        raise ApplicationError("Invalid lease.", extra={"holder": ["Required."]})
    now = now or timezone.now()
    KubeLease.objects.get_or_create(name=name)
    free = Q(holder="") | Q(holder=holder) | Q(expires_at__isnull=True) | Q(expires_at__lte=now)
    return bool(KubeLease.objects.filter(Q(name=name) & free).update(
        holder=holder, expires_at=now + timedelta(seconds=float(ttl_seconds)), renewed_at=now))


@transaction.atomic
def kube_lease_release(*, name: str, holder: str) -> None:
    """Give the lease up (a clean shutdown lets the next replica take over at once)."""
    KubeLease.objects.filter(name=name, holder=holder).update(holder="", expires_at=None)
