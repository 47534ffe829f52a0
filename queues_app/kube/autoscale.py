"""The scale adjuster: utility pods that make GPU-sharing demand visible to cluster autoscalers
(kubernetes mode with ``KAI_AUTOSCALE_ENABLED``; Celery task ``queues_app.tasks.kube_scale_adjust``,
its own beat entry ``kube-scale-adjust`` every ``KAI_AUTOSCALE_SECONDS``).

One run is a level-triggered reconcile against the API server (KAI's node-scale-adjuster,
``pkg/nodescaleadjuster``, with the differences listed in ``queues_app/kube/scaling.py``):

1. list the pods of our scheduler that are not bound (``spec.schedulerName``, ``spec.nodeName=``
   field selectors) and keep the GPU-sharing ones whose ``PodScheduled`` condition is
   ``False/Unschedulable`` -- the dispatcher writes that reason only for pods waiting for
   capacity, so pods waiting for their queue's quota or limit never cause a node to be bought;
2. group them by placement constraints and want ``ceil(sum of fractions)`` utility pods per
   group (deterministic names ``kai-scale-adjust-<group>-<i>`` in ``KAI_AUTOSCALE_NAMESPACE``);
3. list the utility pods and delete those no longer wanted (the demand fell: pods were placed,
   deleted, or now wait for something else) and those that got a node (a default scheduler bound
   it: capacity arrived; the GPU it holds must go to the real pods).  Removing one that got a node
   starts a cool-down (``KAI_AUTOSCALE_COOLDOWN_SECONDS``, KAI's 60 s) during which nothing is
   created, so the scheduler can place the waiting pods on the new node before more is asked;
4. create the wanted utility pods that are missing (outside the cool-down), each marked
   ``PodScheduled=False/Unschedulable`` at once (as KAI's scaler does) so autoscalers see it
   without waiting for the default scheduler.

Nothing is kept in memory between runs: utility pods carry their group in labels, the cool-down
and the last report live in ``KubeAutoscaleState``, so a restarted or replaced worker continues
where the last one stopped.  A failed list changes nothing (no deletion from a partial view); a
failed create or delete is retried by the next run (a create whose reply was lost answers 409
AlreadyExists then).  A database lease (``KubeLease`` "kube-scale-adjust") keeps two workers from
working at once.

RBAC (core group): ``pods`` list (cluster-wide, as the sync already has) and create/delete in the
utility namespace, ``pods/status`` patch, ``namespaces`` get on that namespace (the Helm chart
creates it; without the chart, ``namespaces`` create lets the adjuster create it when missing).
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from queues_app.errors import ApplicationError
from queues_app.kube import calls as api, scaling
from queues_app.kube.client import kube_api_client
from queues_app.kube.observed import kube_lease_acquire, kube_lease_holder, kube_lease_release
from queues_app.models import KubeAutoscaleState

logger = logging.getLogger("queues_app.kube.autoscale")

__all__ = ["AutoscaleReport", "kube_scale_adjust", "autoscale_state"]

LEASE_NAME = "kube-scale-adjust"
STATE_NAME = "scale-adjuster"


@dataclass
class AutoscaleReport:
    status: str = "ran"  # ran | off | skipped (lease held) | error (a list failed: nothing changed)
    demand_pods: int = 0
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    wanted: int = 0
    existing: int = 0
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped_pods: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    note: str = ""
    cooldown_until: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def autoscale_state() -> KubeAutoscaleState:
    state, _ = KubeAutoscaleState.objects.get_or_create(name=STATE_NAME)
    return state


@transaction.atomic
def _save(*, report: AutoscaleReport, now: datetime, cooldown_until: datetime | None) -> None:
    state = KubeAutoscaleState.objects.select_for_update().get(pk=autoscale_state().pk)
    state.last_run_at = now
    state.last_report = json.loads(json.dumps(report.as_dict(), default=str))
    if cooldown_until is not None and (state.cooldown_until is None or cooldown_until > state.cooldown_until):
        state.cooldown_until = cooldown_until
    state.save(update_fields=["last_run_at", "last_report", "cooldown_until"])


def _items(reply: api.Reply) -> list[dict[str, Any]]:
    items = (reply.body or {}).get("items") or []
    return [i for i in items if isinstance(i, dict)]


def _name(pod: dict[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name") or "")


def _list_all(run_call, fn, **kw) -> tuple[list[dict[str, Any]], api.Reply | None]:
    """Every page of a list (``limit`` / ``continue``); (items, failed reply or None)."""
    items: list[dict[str, Any]] = []
    token = None
    while True:
        reply = run_call(fn, limit=500, _continue=token, **kw) if token else run_call(fn, limit=500, **kw)
        if not reply.ok:
            return items, reply
        items.extend(_items(reply))
        token = ((reply.body or {}).get("metadata") or {}).get("continue")
        if not token:
            return items, None


def kube_scale_adjust(*, api_client: Any = None, now: datetime | None = None) -> AutoscaleReport:
    """One reconcile of the utility pods (see the module docstring).  ``api_client``: a
    ``kubernetes.client.ApiClient`` (default: from settings); ``now`` fixes the clock (tests)."""
    from kubernetes import client as k8s

    report = AutoscaleReport()
    if getattr(settings, "KAI_CLUSTER_MODE", "embedded") != "kubernetes" or not settings.KAI_AUTOSCALE_ENABLED:
        report.status = "off"
        return report
    now = now or timezone.now()
    holder = kube_lease_holder()
    ttl = max(30.0, 6.0 * float(settings.KAI_KUBE_REQUEST_TIMEOUT))
    if not kube_lease_acquire(name=LEASE_NAME, holder=holder, ttl_seconds=ttl, now=now):
        report.status = "skipped"
        return report
    owned = api_client is None
    cooldown_from: datetime | None = None
    try:
        if owned:
            api_client = kube_api_client()
        core = k8s.CoreV1Api(api_client)
        timeout = float(settings.KAI_KUBE_REQUEST_TIMEOUT)

        def call(fn, **kw) -> api.Reply:
            return api._call(fn, _request_timeout=timeout, **kw)

        cooldown_from = _reconcile(core=core, call=call, report=report, now=now)
    finally:
        cooldown_until = (now + timedelta(seconds=int(settings.KAI_AUTOSCALE_COOLDOWN_SECONDS))
                          if cooldown_from is not None else None)
        if cooldown_until is not None:
            report.cooldown_until = cooldown_until.isoformat()
        try:
            _save(report=report, now=now, cooldown_until=cooldown_until)
        finally:
            kube_lease_release(name=LEASE_NAME, holder=holder)
            if owned and api_client is not None:
                api_client.close()
    if report.created or report.deleted or report.errors:
        logger.info("scale adjuster: %s", {k: v for k, v in report.as_dict().items() if v})
    return report


def _ensure_namespace(core: Any, call, namespace: str, report: AutoscaleReport) -> bool:
    reply = call(core.read_namespace, name=namespace)
    if reply.ok:
        if ((reply.body or {}).get("status") or {}).get("phase") == "Terminating":
            report.errors.append(f"namespace {namespace} is being deleted; utility pods are created once it is gone "
                                 "and recreated")
            return False
        return True
    if reply.status == 403:
        return True  # no permission to look (granted only by the chart): the pod creates will tell
    if not reply.not_found:
        report.errors.append(f"read namespace {namespace}: {reply.describe()}")
        return False
    body = {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {scaling.LABEL_APP: scaling.APP_NAME}}}
    made = call(core.create_namespace, body=body)
    if made.ok or made.conflict:
        return True
    report.errors.append(f"create namespace {namespace}: {made.describe()}")
    return False


def _reconcile(*, core: Any, call, report: AutoscaleReport, now: datetime) -> datetime | None:
    """The run itself; returns ``now`` if a cool-down starts (a utility pod that got a node was removed)."""
    namespace = settings.KAI_AUTOSCALE_NAMESPACE
    scheduler = settings.KAI_SCHEDULER_NAME
    # 1. demand: unbound pods of our scheduler, sharing a GPU, Unschedulable (= waiting for capacity)
    pending, failed = _list_all(call, core.list_pod_for_all_namespaces,
                                field_selector=f"spec.schedulerName={scheduler},spec.nodeName=")
    if failed is not None:
        report.status = "error"
        report.errors.append(f"list pending pods: {failed.describe()}")
        return None
    demands = []
    for pod in pending:
        try:
            d = scaling.sharing_demand(pod, scheduler_name=scheduler,
                                       gpu_memory_fraction=float(settings.KAI_AUTOSCALE_GPU_MEMORY_FRACTION))
        except ApplicationError as exc:
            md = pod.get("metadata") or {}
            report.skipped_pods.append(f"{md.get('namespace')}/{md.get('name')}: {exc.extra or exc.message}")
            continue
        if d is not None:
            demands.append(d)
    groups = scaling.demand_groups(demands)
    wanted = {name: (g, i) for g in groups.values() for i, name in enumerate(g.names())}
    report.demand_pods = len(demands)
    report.wanted = len(wanted)
    report.groups = {k: {"gpus": g.hundredths / scaling.HUNDREDTHS, "utility_pods": g.gpus, "pods": len(g.pods),
                         "constraints": g.constraints} for k, g in groups.items()}
    # 2. what exists (listing a namespace that does not exist yet answers an empty list)
    existing, failed = _list_all(call, core.list_namespaced_pod, namespace=namespace,
                                 label_selector=f"{scaling.LABEL_MANAGED}=true")
    if failed is not None:
        report.status = "error"
        report.errors.append(f"list utility pods: {failed.describe()}")
        return None
    report.existing = len(existing)
    cooldown = False
    present: set[str] = set()
    for pod in existing:
        name = _name(pod)
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            present.add(name)  # going away: do not recreate under the same name in this run
            continue
        got_node = bool((pod.get("spec") or {}).get("nodeName")) or \
            (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if name in wanted and not got_node:
            present.add(name)
            continue
        reply = call(core.delete_namespaced_pod, name=name, namespace=namespace,
                     body={"apiVersion": "v1", "kind": "DeleteOptions",
                           "preconditions": {"uid": meta.get("uid")} if meta.get("uid") else None})
        if reply.ok or reply.not_found:
            report.deleted.append(name)
            cooldown |= got_node
            if got_node:
                present.add(name)  # its node is (or was) there: let the scheduler use it first
        else:
            present.add(name)
            report.errors.append(f"delete {namespace}/{name}: {reply.describe()}")
    # 3. create what is missing, outside the cool-down
    missing = [n for n in sorted(wanted) if n not in present]
    state = autoscale_state()
    if missing and (cooldown or (state.cooldown_until is not None and state.cooldown_until > now)):
        until = state.cooldown_until if not cooldown else None
        report.note = (f"cool-down: {len(missing)} utility pod(s) wait" + (f" until {until.isoformat()}" if until else
                       " (utility pods that got a node were just removed)"))
        return now if cooldown else None
    if missing and not _ensure_namespace(core, call, namespace, report):
        return now if cooldown else None
    for name in missing:
        group, index = wanted[name]
        body = scaling.utility_pod(group, index, namespace=namespace, image=settings.KAI_AUTOSCALE_POD_IMAGE,
                                   scheduler_name=scheduler)
        reply = call(core.create_namespaced_pod, namespace=namespace, body=body)
        if reply.conflict:  # created by an earlier run whose reply was lost (or just now by another)
            continue
        if not reply.ok:
            report.errors.append(f"create {namespace}/{name}: {reply.describe()}")
            continue
        report.created.append(name)
        rv = str(((reply.body or {}).get("metadata") or {}).get("resourceVersion") or "")
        marked = api.patch_pod_scheduled(core, namespace=namespace, name=name, resource_version=rv, status="False",
                                         reason="Unschedulable", message=scaling.utility_message(group),
                                         transition=True, at=now, timeout=float(settings.KAI_KUBE_REQUEST_TIMEOUT))
        if not marked.ok and not marked.conflict:  # 409: the default scheduler got to it first
            report.errors.append(f"mark {namespace}/{name} Unschedulable: {marked.describe()}")
    return now if cooldown else None
