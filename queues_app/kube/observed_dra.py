"""Observed PodGroups and dynamic resource allocation objects -> rows (kubernetes mode).

The companion of :mod:`queues_app.kube.observed` for KAI's PodGroups (subgroup trees) and
``resource.k8s.io`` objects, with the same rules: the cluster wins, idempotent, bad input becomes an
event and never crashes the loop.

* **DeviceClasses** -> :class:`DeviceClass` rows (the driver their ``device.driver == "..."`` selector
  names; ``extendedResourceName: nvidia.com/gpu`` makes a class count as GPUs, else its name decides).
* **ResourceSlices** -> a node's ``devices``: per class, the devices of the node's slices whose driver
  the class selects. Device *indices* (what the engine places) are positions in (pool, device name)
  order: :func:`node_device_table` is the one mapping between the two, used by the dispatcher too.
* **ResourceClaims** -> the ``claims`` of the tasks whose pods reference them (class and count of
  every request, summed per class) and, once allocated, the ``devices`` those tasks hold.
* **PodGroups** -> the workload of their pods (group ``podgroup/<name>``): its gang size, or its
  subgroup tree (``spec.subGroups``, ``minSubGroup``, ``topologyConstraint``), checked by the engine's
  rules; tasks join the leaf named by their ``kai.scheduler/subgroup-name`` label.
"""
from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

from django.db import transaction
from django.utils import timezone

from queues_app.errors import ApplicationError
from queues_app.kube import translate
from queues_app.models import (
    DeviceClass,
    KubePod,
    KubePodGroup,
    KubeResourceClaim,
    KubeResourceSlice,
    KubeSyncCursor,
    KubeWorkloadRef,
    Node,
    SchedulingEvent,
    Task,
    Workload,
)
from queues_app.services.devices import claims_gpu_count, device_class_delete, device_class_upsert, gpu_classes
from queues_app.services.nodes import node_upsert
from queues_app.services.workloads import check_tree_and_claims, create_sub_groups, sub_group_specs

logger = logging.getLogger(__name__)

DRA_RESOURCES = ("podgroups", "deviceclasses", "resourceslices", "resourceclaims")
REASON_INVALID_POD_GROUP = "InvalidPodGroup"


def _event_once(*, reason: str, message: str, workload: Workload | None = None) -> None:
    if not SchedulingEvent.objects.filter(reason=reason, message=message[:1000]).exists():
        SchedulingEvent.objects.create(workload=workload, reason=reason, message=message[:1000])


# ----------------------------------------------------------------------------- devices on nodes


def node_device_table(node_name: str, *, classes: Mapping[str, str] | None = None) -> dict[str, list[tuple[str, str, str]]]:
    """Per device class: the node's devices as ``(driver, pool, device)`` in index order."""
    if classes is None:
        classes = {c.name: (c.driver or c.name) for c in DeviceClass.objects.all()}
    by_driver: dict[str, list[tuple[str, str, str]]] = {}
    for s in KubeResourceSlice.objects.filter(node_name=node_name):
        for d in s.devices or ():
            by_driver.setdefault(s.driver, []).append((s.driver, s.pool, str(d)))
    out = {}
    for cls, driver in classes.items():
        devs = sorted(by_driver.get(driver, []), key=lambda x: (x[1], x[2]))
        if devs:
            out[cls] = devs
    return out


def _refresh_node_devices(node_names: Iterable[str], *, skip: Iterable[str] = ()) -> None:
    """Set ``Node.devices`` of these nodes (rows known to the sync) from their slices (classes in
    ``skip`` count for nothing: a class being deleted)."""
    skip = set(skip)
    classes = {c.name: (c.driver or c.name) for c in DeviceClass.objects.all() if c.name not in skip}
    for name in sorted(set(n for n in node_names if n)):
        node = Node.objects.filter(name=name).first()
        if node is None:
            continue  # the node sync creates it; its devices follow on its next slice event / relist
        table = node_device_table(name, classes=classes)
        devices = {cls: len(devs) for cls, devs in table.items()}
        if devices != (node.devices or {}):
            try:
                node_upsert(name=name, devices=devices)
            except ApplicationError as exc:  # fewer devices than bound tasks hold: keep the last good value
                _event_once(reason="InvalidNode", message=f"Node {name} devices not synced: {exc}")


def refresh_all_node_devices(*, skip: Iterable[str] = ()) -> None:
    names = set(KubeResourceSlice.objects.values_list("node_name", flat=True))
    names |= set(Node.objects.exclude(devices={}).values_list("name", flat=True))
    _refresh_node_devices(names, skip=skip)


@transaction.atomic
def kube_device_class_observed(*, obj: Mapping[str, Any]) -> DeviceClass:
    info = translate.device_class_fields(obj)
    dc, _ = device_class_upsert(name=info.name, counts_as=info.counts_as,
                                description=(DeviceClass.objects.filter(name=info.name)
                                             .values_list("description", flat=True).first() or ""))
    if dc.driver != info.driver:
        DeviceClass.objects.filter(pk=dc.pk).update(driver=info.driver)
        refresh_all_node_devices()
    return dc


@transaction.atomic
def kube_device_class_gone(*, name: str) -> None:
    """A class deleted in the cluster: its devices leave the nodes; the row stays while tasks claim
    it (their pods cannot be scheduled, the engine says why), else it goes."""
    dc = DeviceClass.objects.filter(name=name).first()
    if dc is None:
        return
    refresh_all_node_devices(skip=[name])
    try:
        device_class_delete(device_class=dc)
    except ApplicationError as exc:  # tasks still claim it (or hold its devices): kept, reported
        _event_once(reason="DeviceClassInUse", message=f"DeviceClass {name} was deleted in the cluster but is "
                                                       f"still used here: {exc}")


@transaction.atomic
def kube_resource_slice_observed(*, obj: Mapping[str, Any]) -> None:
    info = translate.resource_slice_fields(obj)
    old = KubeResourceSlice.objects.filter(name=info.name).first()
    nodes = {info.node_name, old.node_name if old else ""}
    KubeResourceSlice.objects.update_or_create(name=info.name, defaults=dict(
        uid=info.uid, node_name=info.node_name, driver=info.driver, pool=info.pool, devices=list(info.devices),
        observed_at=timezone.now()))
    _refresh_node_devices(nodes)


@transaction.atomic
def kube_resource_slice_gone(*, name: str) -> None:
    old = KubeResourceSlice.objects.filter(name=name).first()
    if old is None:
        return
    node = old.node_name
    old.delete()
    _refresh_node_devices([node])


# ----------------------------------------------------------------------------- claims of tasks


def _claim_rows(namespace: str, names: Iterable[str]) -> dict[str, KubeResourceClaim]:
    return {c.name: c for c in KubeResourceClaim.objects.filter(namespace=namespace, name__in=[n for n in names if n])}


def task_claims_of(kpod: KubePod, claims: Mapping[str, KubeResourceClaim] | None = None) -> list[dict[str, Any]]:
    """A pod's claims as task claims: every request of its ResourceClaims, summed per class."""
    names = [obj for _, obj in (kpod.claims or ())]
    claims = claims if claims is not None else _claim_rows(kpod.namespace, names)
    per: dict[str, int] = {}
    for n in names:
        c = claims.get(n)
        for _req, cls, count in (c.requests if c else ()):
            per[cls] = per.get(cls, 0) + int(count)
    return [{"device_class": cls, "count": n} for cls, n in sorted(per.items())]


def task_devices_of(kpod: KubePod, node_name: str, claims: Mapping[str, KubeResourceClaim] | None = None
                    ) -> dict[str, list[int]]:
    """The devices the pod's allocated claims hold on ``node_name``, as indices per class."""
    names = [obj for _, obj in (kpod.claims or ())]
    claims = claims if claims is not None else _claim_rows(kpod.namespace, names)
    table = node_device_table(node_name)
    pos = {cls: {dev: i for i, dev in enumerate(devs)} for cls, devs in table.items()}
    out: dict[str, list[int]] = {}
    for n in names:
        c = claims.get(n)
        if c is None:
            continue
        cls_of = {req: cls for req, cls, _ in c.requests}
        for req, driver, pool, device in c.allocation or ():
            cls = cls_of.get(req)
            i = pos.get(cls, {}).get((driver, pool, device)) if cls else None
            if i is not None:
                out.setdefault(cls, []).append(i)
    return out


def sync_task_claims(kpods: Iterable[KubePod]) -> int:
    """Set ``claims`` / ``devices`` / ``dra_gpus`` of these pods' tasks from their ResourceClaims (a task
    on a node keeps the devices its allocation names). Returns how many tasks changed."""
    gpu = gpu_classes()
    changed = 0
    for kp in kpods:
        task = Task.objects.select_related("node").filter(pk=kp.task_id).first()
        if task is None:
            continue
        claims = task_claims_of(kp)
        devices = task_devices_of(kp, task.node.name) if task.node_id else {}
        dra = claims_gpu_count(claims, gpu)
        if (claims, devices, dra) != (task.claims or [], task.devices or {}, task.dra_gpus):
            Task.objects.filter(pk=task.pk).update(claims=claims, devices=devices, dra_gpus=dra,
                                                   version=task.version + 1, updated_at=timezone.now())
            changed += 1
    return changed


@transaction.atomic
def kube_resource_claim_observed(*, obj: Mapping[str, Any]) -> None:
    info = translate.resource_claim_fields(obj)
    KubeResourceClaim.objects.update_or_create(namespace=info.namespace, name=info.name, defaults=dict(
        uid=info.uid, resource_version=info.resource_version, requests=[list(r) for r in info.requests],
        allocation=[list(a) for a in info.allocation], reserved_for=list(info.reserved_for),
        observed_at=timezone.now()))
    sync_task_claims(_pods_using(info.namespace, info.name))


@transaction.atomic
def kube_resource_claim_gone(*, namespace: str, name: str) -> None:
    KubeResourceClaim.objects.filter(namespace=namespace, name=name).delete()
    sync_task_claims(_pods_using(namespace, name))


def _pods_using(namespace: str, claim: str) -> list[KubePod]:
    return [kp for kp in KubePod.objects.filter(namespace=namespace).exclude(claims=[])
            if any(obj == claim for _, obj in kp.claims or ())]


# ----------------------------------------------------------------------------- pod groups


def pod_group_of(workload: Workload) -> KubePodGroup | None:
    ref = KubeWorkloadRef.objects.filter(workload=workload).first()
    if ref is None or not ref.group.startswith("podgroup/"):
        return None
    return KubePodGroup.objects.filter(namespace=ref.namespace, name=ref.group.split("/", 1)[1]).first()


def apply_pod_group(workload: Workload, pg: KubePodGroup) -> None:
    """Give ``workload`` the gang of its PodGroup: a tree (subgroups, min_sub_groups, leaf of every
    task from its pod's label) or a flat gang (minMember). A tree the engine refuses is recorded as an
    event and the workload keeps its last good shape."""
    spec = pg.spec or {}
    tree_spec = spec.get("sub_groups") or []
    tasks = list(Task.objects.filter(workload=workload).select_related("node", "kube_pod").order_by("index"))
    if not tree_spec:
        mm = spec.get("min_member")
        if workload.sub_groups.exists():
            Task.objects.filter(workload=workload).update(sub_group=None)
            workload.sub_groups.all().delete()
        fields = {"min_sub_groups": None}
        if mm:
            fields["min_available"] = min(int(mm), 10_000)
        Workload.objects.filter(pk=workload.pk).update(version=workload.version + 1, **fields)
        return
    leaf_names = [getattr(getattr(t, "kube_pod", None), "sub_group_name", "") or None for t in tasks]
    try:
        tree = sub_group_specs(tree_spec, min_available=None, min_sub_groups=spec.get("min_sub_groups"))
        derived = check_tree_and_claims(queue=workload.queue.name, tree=tree, min_sub_groups=spec.get("min_sub_groups"),
                                        tasks=tasks, leaf_names=leaf_names,
                                        nodes={t.node.name: t.node for t in tasks if t.node_id})
    except ApplicationError as exc:
        _event_once(reason=REASON_INVALID_POD_GROUP, workload=workload,
                    message=f"PodGroup {pg.namespace}/{pg.name} not applied to workload {workload.name}: {exc}")
        return
    current = [(g.name, g.parent.name if g.parent_id else None, g.min_available, g.min_sub_groups, g.topology_required,
                g.topology_preferred) for g in workload.sub_groups.select_related("parent").order_by("index")]
    wanted = [(g["name"], g["parent"], g["min_available"], g["min_sub_groups"], g["topology_required"],
               g["topology_preferred"]) for g in tree]
    if current != wanted:
        Task.objects.filter(workload=workload).update(sub_group=None)
        workload.sub_groups.all().delete()
        rows = create_sub_groups(workload, tree)
    else:
        rows = {g.name: g for g in workload.sub_groups.all()}
    for t, leaf in zip(tasks, leaf_names):
        sg = rows.get(leaf) if leaf else None
        if t.sub_group_id != (sg.pk if sg else None):
            Task.objects.filter(pk=t.pk).update(sub_group=sg, version=t.version + 1)
    Workload.objects.filter(pk=workload.pk).update(
        min_available=derived, min_sub_groups=spec.get("min_sub_groups"), version=workload.version + 1,
        topology_required=spec.get("topology_required") or workload.topology_required,
        topology_preferred=spec.get("topology_preferred") or workload.topology_preferred)


@transaction.atomic
def kube_pod_group_observed(*, obj: Mapping[str, Any]) -> KubePodGroup | None:
    try:
        info = translate.pod_group_fields(obj)
    except ApplicationError as exc:
        md = obj.get("metadata") if isinstance(obj, Mapping) else None
        where = f"{(md or {}).get('namespace', '?')}/{(md or {}).get('name', '?')}" if isinstance(md, Mapping) else "?"
        _event_once(reason=REASON_INVALID_POD_GROUP, message=f"PodGroup {where} not synced: {exc}")
        return None
    spec = {"min_member": info.min_member, "min_sub_groups": info.min_sub_groups,
            "topology_required": info.topology_required, "topology_preferred": info.topology_preferred,
            "sub_groups": info.sub_groups}
    pg, _ = KubePodGroup.objects.update_or_create(namespace=info.namespace, name=info.name, defaults=dict(
        uid=info.uid, resource_version=info.resource_version, spec=spec, observed_at=timezone.now()))
    ref = KubeWorkloadRef.objects.select_related("workload", "workload__queue").filter(
        namespace=info.namespace, group=f"podgroup/{info.name}").first()
    if ref is not None:
        list(Workload.objects.select_for_update().filter(pk=ref.workload_id).values_list("id", flat=True))
        apply_pod_group(Workload.objects.select_related("queue").get(pk=ref.workload_id), pg)
    return pg


@transaction.atomic
def kube_pod_group_gone(*, namespace: str, name: str) -> None:
    KubePodGroup.objects.filter(namespace=namespace, name=name).delete()


def on_pod_created(task: Task, kpod: KubePod) -> None:
    """A new pod's task: its claims, and its leaf when its workload's PodGroup has a tree."""
    if kpod.claims:
        sync_task_claims([kpod])
    pg = pod_group_of(task.workload)
    if pg is not None:
        apply_pod_group(Workload.objects.select_related("queue").get(pk=task.workload_id), pg)


# ----------------------------------------------------------------------------- relist


@transaction.atomic
def kube_dra_relist(*, resource: str, objs: list[Mapping[str, Any]], resource_version: str) -> None:
    """A full list of ``resource`` (one of :data:`DRA_RESOURCES`): rows of objects no longer listed go,
    every listed object is upserted (a bad one is recorded and skipped), the cursor is stored."""
    if resource not in DRA_RESOURCES:
        raise ApplicationError("Invalid relist.", extra={"resource": [f"One of {', '.join(DRA_RESOURCES)}."]})

    def ident(o: Mapping[str, Any]) -> tuple[str, str]:
        md = o.get("metadata") or {}
        return str(md.get("namespace") or ""), str(md.get("name") or "")

    listed = {ident(o) for o in objs}
    handlers = {
        "podgroups": (kube_pod_group_observed, lambda r: kube_pod_group_gone(namespace=r.namespace, name=r.name),
                      KubePodGroup, True),
        "deviceclasses": (kube_device_class_observed, lambda r: kube_device_class_gone(name=r.name), DeviceClass,
                          False),
        "resourceslices": (kube_resource_slice_observed, lambda r: kube_resource_slice_gone(name=r.name),
                           KubeResourceSlice, False),
        "resourceclaims": (kube_resource_claim_observed,
                           lambda r: kube_resource_claim_gone(namespace=r.namespace, name=r.name),
                           KubeResourceClaim, True),
    }
    observe, gone, model, namespaced = handlers[resource]
    for row in list(model.objects.all()):
        key = (row.namespace if namespaced else "", row.name)
        if key not in listed:
            gone(row)
    for obj in objs:
        try:
            with transaction.atomic():
                observe(obj=obj)
        except ApplicationError as exc:
            _event_once(reason="InvalidObject", message=f"{resource} {'/'.join(x for x in ident(obj) if x)} not "
                                                         f"synced: {exc}")
    now = timezone.now()
    cursor, _ = KubeSyncCursor.objects.get_or_create(resource=resource)
    KubeSyncCursor.objects.filter(pk=cursor.pk).update(resource_version=resource_version, relists=cursor.relists + 1,
                                                       last_relist_at=now, last_event_at=now)


@transaction.atomic
def kube_dra_event(*, resource: str, etype: str, obj: Mapping[str, Any]) -> None:
    """One watch event of a :data:`DRA_RESOURCES` resource."""
    md = obj.get("metadata") or {}
    ns, name = str(md.get("namespace") or "default"), str(md.get("name") or "")
    try:
        if etype == "DELETED":
            if resource == "podgroups":
                kube_pod_group_gone(namespace=ns, name=name)
            elif resource == "deviceclasses":
                kube_device_class_gone(name=name)
            elif resource == "resourceslices":
                kube_resource_slice_gone(name=name)
            else:
                kube_resource_claim_gone(namespace=ns, name=name)
            return
        with transaction.atomic():
            {"podgroups": kube_pod_group_observed, "deviceclasses": kube_device_class_observed,
             "resourceslices": kube_resource_slice_observed, "resourceclaims": kube_resource_claim_observed
             }[resource](obj=obj)
    except ApplicationError as exc:
        _event_once(reason="InvalidObject", message=f"{resource} {ns}/{name} not synced: {exc}")
