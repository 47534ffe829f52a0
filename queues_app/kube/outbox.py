"""Carry the cycle's decisions out on a Kubernetes cluster: the outbox and its dispatcher.

Why an outbox: a decision (``Binding``, ``Releasing``) and the order to carry it out must
commit together, or a crash between them leaves a task Binding that nobody binds (or a pod
bound that the database never decided).  :func:`kube_outbox_write` runs inside the cycle's
apply transaction (kubernetes mode only) and writes one ``KubeOutbox`` row per bind, eviction
and Kubernetes Event; :func:`kube_dispatch_due` (Celery task ``queues_app.tasks.kube_dispatch``,
queue ``dispatch``, beat every ``KAI_KUBE_DISPATCH_SECONDS``) carries the due rows out.

Rules of the dispatcher (issue #7):

* **The cluster is the truth.**  After every bind or eviction attempt that did not plainly
  succeed (and after every successful bind, to confirm it) the pod is read back (GET) and what
  was read is handed to the sync services (``observed.kube_pod_observed`` /
  ``kube_pod_gone``), the one place where observed state changes rows.
* **Idempotent.**  A bind carries the pod's uid (a recreated pod of the same name is never
  bound by an old row); a second bind of a bound pod answers 409 and the read-back says
  whether it is bound where we wanted (success) or elsewhere (the cluster wins).  Events get a
  name derived from the row id, so a retried create answers 409 AlreadyExists = done.
* **Retries.**  No answer / 429 / 5xx: the row is retried with exponential backoff
  (``next_attempt_at``); after ``KAI_KUBE_MAX_ATTEMPTS`` it fails: a failed bind returns the
  task to Pending (``cluster_bind_failed``), a failed eviction leaves it Releasing (its
  resources stay held until the pod is seen gone; the stuck-eviction report follows).
* **Superseded.**  A row whose task is no longer in the state it was written for (a newer
  decision, a cancellation, the pod replaced) is marked superseded without a request.
* **Gangs are bound all-or-nothing.**  The bind rows of one workload written by one cycle
  form a unit.  Before binding any member, every member's pod is read back and every target
  node is checked (the API server does not check that a Binding's node exists).  If any
  member cannot be bound (pod gone or replaced, being deleted, already bound elsewhere, node
  gone, a permanent error) no member is bound: the cluster's view of the failing pods is
  applied and the other members return to Pending, to be placed together again by a later
  cycle.  A transient failure in the pre-flight retries the whole unit.  If a member fails
  permanently after others were bound (the pod vanished in the instant between pre-flight and
  bind; bindings cannot be undone in Kubernetes), the members already bound are evicted
  (``Releasing`` + eviction rows, reason ``GangBindFailed``), so a gang never keeps running
  below its gang size because of the dispatcher.
* **Resources of evicted pods are free only when the pod is gone**: a successful eviction
  leaves the task Releasing; the sync (or the read-back) reports the pod gone.  Releasing
  tasks older than ``KAI_KUBE_STUCK_EVICTION_SECONDS`` become ``StuckInReleasing`` and are
  reported (SchedulingEvent + Kubernetes Event ``EvictionStuck``).
* **RBAC** the dispatcher needs (core API group): ``pods/binding`` create, ``pods/eviction``
  create, ``pods`` get (read-back), ``nodes`` get (target check), ``events`` create.
* **Single flight.**  A database lease (``KubeLease`` "kube-dispatch") keeps two dispatchers
  from working the same rows at once; correctness does not depend on it (every request is
  idempotent), it only avoids duplicate requests.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from queues_app.choices import TaskState
from queues_app.cycle.cluster import (
    RELEASING_STATES,
    _lock_tasks,
    cluster_bind_failed,
    cluster_mark_stuck_releasing,
    refresh_workload_statuses,
)
from queues_app.cycle.config import cycle_config
from queues_app.kube import calls as api, observed
from queues_app.kube.client import kube_api_client
from queues_app.kube.condition_rows import status_rows, wanted_conditions
from queues_app.kube.conditions import condition_key, key_status, observed_key
from queues_app.kube.observed import kube_lease_acquire, kube_lease_holder, kube_lease_release
from queues_app.kube.observed_dra import node_device_table
from queues_app.models import (
    KubeOutbox,
    KubeOutboxKind,
    KubeOutboxStatus,
    KubePod,
    KubeResourceClaim,
    SchedulingCycle,
    SchedulingEvent,
    Task,
)

logger = logging.getLogger("queues_app.kube.dispatch")

__all__ = [
    "DispatchReport",
    "kube_dispatch_due",
    "kube_outbox_write",
    "kube_event_enqueue",
    "kube_gang_rollback",
    "request_dispatch",
]

LEASE_NAME = "kube-dispatch"
#: engine reasons reported as Kubernetes ``Normal`` events; the rest are ``Warning``
NORMAL_REASONS = frozenset({"Scheduled", "Preempted", "Reclaimed", "Consolidated", "Evicted", "StaleGang",
                            "Pipelined", "Cancelled"})
PENDING_STATES = (TaskState.PENDING, TaskState.PIPELINED)
CHUNK = 900


def _chunks(ids: Iterable[int]) -> Iterable[list[int]]:
    ids = sorted(set(ids))
    for i in range(0, len(ids), CHUNK):
        yield ids[i:i + CHUNK]


def _pods_of(task_ids: Iterable[int]) -> dict[int, KubePod]:
    out: dict[int, KubePod] = {}
    for chunk in _chunks(task_ids):
        for kp in KubePod.objects.filter(task_id__in=chunk):
            out[kp.task_id] = kp
    return out


def _event_type(reason: str) -> str:
    return "Normal" if reason in NORMAL_REASONS else "Warning"


def _event_row(*, pod: KubePod, reason: str, message: str, cycle: SchedulingCycle | None, now: datetime,
               task_id: int | None = None) -> KubeOutbox:
    return KubeOutbox(kind=KubeOutboxKind.EVENT, cycle=cycle, task_id=task_id or pod.task_id,
                      namespace=pod.namespace, pod_name=pod.name, pod_uid=pod.uid,
                      payload={"reason": reason[:128], "message": message[:1024], "type": _event_type(reason)},
                      next_attempt_at=now, created_at=now, updated_at=now)


def _digest(items: list[tuple[str, str]]) -> str:
    return hashlib.sha256(json.dumps(sorted(items)).encode()).hexdigest()[:64]


# ----------------------------------------------------------------------------- outbox writing


def kube_outbox_write(*, plan: Any, final: Mapping[int, str], drops: Mapping[int, str], index: Any,
                      cycle: SchedulingCycle, now: datetime,
                      exclusions: Mapping[int, tuple[str, str]] | None = None) -> int:
    """The cycle's orders to the cluster, written in its apply transaction (kubernetes mode).

    * one ``bind`` row per task whose ``Binding`` decision applied (payload: workload id, the
      gang unit key) and one ``evict`` row per applied ``Releasing`` decision (consolidation
      moves included); older pending bind/evict rows of those tasks are superseded;
    * one ``event`` row per engine explanation that names a task (victims: Preempted,
      Reclaimed, Consolidated, StaleGang ...) and, for every Pending/Pipelined pod of a
      workload with job-level explanations (Unschedulable, NotReclaiming, ...), one row per
      explanation -- only when their digest differs from the pod's ``last_event_digest``, so
      an unchanged pending reason is not written every cycle.

    * one ``status`` row per pod whose ``PodScheduled`` condition must change
      (``kube_conditions``: ``Unschedulable`` for capacity, other reasons for quota, limit, gangs
      waiting for pods and ``exclusions`` -- workload id -> (PendingCategory, message) of the
      workloads the cycle left out of the snapshot).

    Tasks without a ``KubePod`` (not from the cluster) get no rows: there is nothing to act on.
    Returns the number of rows written; the dispatcher is enqueued after commit when > 0.
    """
    node_name = {v: k for k, v in index.node_id.items()}
    applied = {tid: w for tid, w in plan.writes.items()
               if w.decision is not None and tid not in drops and w.kind in ("bind", "evict")}
    victim_events: dict[int, list[dict[str, Any]]] = defaultdict(list)
    job_events: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for ev in plan.events:
        wid = ev.workload_id
        if wid is None:
            continue
        reason, message, tid = ev.reason, ev.text, ev.task_id
        if tid is not None:
            victim_events[tid].append({"reason": reason, "message": message})
        else:
            job_events[wid].append((reason, message))
    waiting = [tid for wid in job_events for tid in plan.workload_tasks.get(wid, ())
               if final.get(tid, plan.final_state.get(tid)) in PENDING_STATES]
    wanted, pipelined = wanted_conditions(plan=plan, final=final, index=index, exclusions=exclusions)
    pods = _pods_of(set(applied) | set(victim_events) | set(waiting) | set(wanted) | pipelined)

    rows: list[KubeOutbox] = []
    touched_digest: list[KubePod] = []
    bind_ids, evict_ids = [], []
    for tid, w in sorted(applied.items()):
        pod = pods.get(tid)
        if pod is None:
            continue
        if w.kind == "bind":
            bind_ids.append(tid)
            rows.append(KubeOutbox(kind=KubeOutboxKind.BIND, cycle=cycle, task_id=tid, namespace=pod.namespace,
                                   pod_name=pod.name, pod_uid=pod.uid, node_name=node_name.get(w.decision.node_id, ""),
                                   payload={"workload_id": w.workload_id, "unit": f"{cycle.pk}:{w.workload_id}"},
                                   next_attempt_at=now, created_at=now, updated_at=now))
            if pod.last_event_digest:
                pod.last_event_digest = ""
                touched_digest.append(pod)
        else:
            evict_ids.append(tid)
            reasons = victim_events.get(tid) or [{"reason": "Evicted", "message": "evicted by the scheduler"}]
            rows.append(KubeOutbox(kind=KubeOutboxKind.EVICT, cycle=cycle, task_id=tid, namespace=pod.namespace,
                                   pod_name=pod.name, pod_uid=pod.uid, node_name=pod.node_name,
                                   payload={"workload_id": w.workload_id, "grace_seconds": None,
                                            "reason": reasons[0]["reason"]},
                                   next_attempt_at=now, created_at=now, updated_at=now))
    for tid, evs in sorted(victim_events.items()):
        pod = pods.get(tid)
        if pod is None:
            continue
        for ev in evs:
            rows.append(_event_row(pod=pod, reason=ev["reason"], message=ev["message"], cycle=cycle, now=now))
    for wid, items in job_events.items():
        digest = _digest(items)
        for tid in plan.workload_tasks.get(wid, ()):
            pod = pods.get(tid)
            if pod is None or final.get(tid, plan.final_state.get(tid)) not in PENDING_STATES:
                continue
            if pod.last_event_digest == digest:
                continue
            pod.last_event_digest = digest
            touched_digest.append(pod)
            for reason, message in items:
                rows.append(_event_row(pod=pod, reason=reason, message=message, cycle=cycle, now=now))
    changed = bind_ids + evict_ids
    for chunk in _chunks(changed):
        KubeOutbox.objects.filter(task_id__in=chunk, status=KubeOutboxStatus.PENDING,
                                  kind__in=(KubeOutboxKind.BIND, KubeOutboxKind.EVICT)).update(
            status=KubeOutboxStatus.SUPERSEDED, outcome="superseded by a newer decision", finished_at=now,
            updated_at=now)
    if touched_digest:
        KubePod.objects.bulk_update(touched_digest, ["last_event_digest"], batch_size=500)
    rows.extend(status_rows(wanted=wanted, pipelined=pipelined, pods=pods, cycle=cycle, now=now))
    KubeOutbox.objects.bulk_create(rows, batch_size=500)
    if rows:
        request_dispatch()
    return len(rows)


#: The dispatcher's Celery task, enqueued by name: the outbox does not import the tasks module.
KUBE_DISPATCH_TASK = "queues_app.tasks.kube_dispatch"


def request_dispatch() -> None:
    """Ask for a dispatcher run once the caller's transaction commits (best effort: beat runs
    it every ``KAI_KUBE_DISPATCH_SECONDS`` anyway)."""

    def send() -> None:
        try:
            current_app.send_task(KUBE_DISPATCH_TASK, expires=float(settings.KAI_KUBE_DISPATCH_SECONDS) * 2)
        except Exception:  # noqa: BLE001 - the broker being down must never fail the cycle
            logger.warning("could not enqueue the Kubernetes dispatcher; beat will run it", exc_info=True)

    if getattr(settings, "KAI_CLUSTER_MODE", "embedded") == "kubernetes":
        transaction.on_commit(send)


@transaction.atomic
def kube_event_enqueue(*, task_id: int, reason: str, message: str, now: datetime | None = None) -> bool:
    """One Kubernetes Event on the pod of a task (no-op when the task has no pod)."""
    now = now or timezone.now()
    pod = KubePod.objects.filter(task_id=task_id).first()
    if pod is None:
        return False
    _event_row(pod=pod, reason=reason, message=message, cycle=None, now=now).save()
    return True


# ----------------------------------------------------------------------------- the dispatcher


@dataclass
class DispatchReport:
    status: str = "ran"  # ran | skipped (lease held)
    done: int = 0
    failed: int = 0
    retried: int = 0
    superseded: int = 0
    requests: int = 0
    stuck: int = 0
    evictions_requested: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _backoff(attempts: int) -> float:
    """Seconds before attempt ``attempts + 1``: half a reconcile interval, doubling, capped."""
    base = max(0.5, float(settings.KAI_KUBE_DISPATCH_SECONDS) / 2.0)
    return min(base * (2 ** max(0, attempts - 1)), max(60.0, base * 30))


class _Run:
    """State of one dispatcher run: the API, the clock, caches and the report."""

    def __init__(self, *, core: Any, now: datetime, report: DispatchReport) -> None:
        self.core = core
        self.now = now
        self.report = report
        self.timeout = float(settings.KAI_KUBE_REQUEST_TIMEOUT)
        self.max_attempts = int(settings.KAI_KUBE_MAX_ATTEMPTS)
        self.component = str(settings.KAI_SCHEDULER_NAME)
        self.node_seen: dict[str, api.Reply] = {}

    def call(self, fn, **kw) -> api.Reply:
        self.report.requests += 1
        return fn(self.core, timeout=self.timeout, **kw)


def _sync():
    return observed


def _observe(pod: dict[str, Any]) -> None:
    _sync().kube_pod_observed(obj=pod)


def _gone(row: KubeOutbox) -> None:
    _sync().kube_pod_gone(uid=row.pod_uid or None, namespace=row.namespace, name=row.pod_name)


def _finish(run: _Run, row: KubeOutbox, status: str, outcome: str, error: str = "") -> None:
    """Close a row (only if still pending: a cycle may have superseded it meanwhile)."""
    n = KubeOutbox.objects.filter(pk=row.pk, status=KubeOutboxStatus.PENDING).update(
        status=status, outcome=outcome[:64], last_error=error[:4000], finished_at=run.now, updated_at=run.now)
    row.status, row.outcome = status, outcome
    if n:
        if status == KubeOutboxStatus.DONE:
            run.report.done += 1
        elif status == KubeOutboxStatus.FAILED:
            run.report.failed += 1
        elif status == KubeOutboxStatus.SUPERSEDED:
            run.report.superseded += 1
        run.report.count(outcome)


def _attempted(run: _Run, row: KubeOutbox) -> None:
    row.attempts += 1
    KubeOutbox.objects.filter(pk=row.pk).update(attempts=F("attempts") + 1, updated_at=run.now)


def _retry_or_fail(run: _Run, row: KubeOutbox, reply: api.Reply) -> bool:
    """Schedule the next attempt with backoff; True if the row is out of attempts (failed)."""
    if row.attempts >= run.max_attempts:
        _finish(run, row, KubeOutboxStatus.FAILED, "retries_exhausted", reply.describe())
        return True
    KubeOutbox.objects.filter(pk=row.pk, status=KubeOutboxStatus.PENDING).update(
        next_attempt_at=run.now + timedelta(seconds=_backoff(row.attempts)), last_error=reply.describe()[:4000],
        updated_at=run.now)
    run.report.retried += 1
    return False


def _bind_failed(run: _Run, rows: list[KubeOutbox], outcome: str, error: str = "") -> None:
    """Permanent bind failure of these rows: rows failed, tasks back to Pending, an event each."""
    for row in rows:
        _finish(run, row, KubeOutboxStatus.FAILED, outcome, error)
    ids = [r.task_id for r in rows if r.task_id]
    if ids:
        cluster_bind_failed(task_ids=ids)
        for row in rows:
            if row.task_id:
                kube_event_enqueue(task_id=row.task_id, reason="BindFailed", now=run.now,
                                   message=f"binding to node {row.node_name} not carried out ({outcome}"
                                           f"{': ' + error if error else ''}); the task is Pending again")


def _bind_stale(row: KubeOutbox) -> str:
    """Why a bind row no longer applies ('' = it does; 'confirmed' = it already took effect)."""
    if row.task_id is None:
        return "task gone"
    t = Task.objects.filter(pk=row.task_id).values("state", "node__name").first()
    if t is None:
        return "task gone"
    if t["state"] == TaskState.RUNNING and t["node__name"] == row.node_name:
        return "confirmed"
    if t["state"] != TaskState.BINDING:
        return f"task is {t['state']}"
    if t["node__name"] != row.node_name:
        return f"task now bound to {t['node__name']}"
    uid = KubePod.objects.filter(task_id=row.task_id).values_list("uid", flat=True).first()
    if row.pod_uid and uid is not None and uid != row.pod_uid:
        return "pod replaced"
    return ""


def _task_not_in(row: KubeOutbox, states: Iterable[str]) -> str:
    """Why a row's task no longer calls for it ('' = it still does): the task is gone, or it has
    left ``states`` (evictions: still releasing; conditions: still waiting)."""
    if row.task_id is None:
        return "task gone"
    state = Task.objects.filter(pk=row.task_id).values_list("state", flat=True).first()
    if state is None:
        return "task gone"
    if state not in states:
        return f"task is {state}"
    return ""


def _evict_stale(row: KubeOutbox) -> str:
    """Why an eviction row no longer applies ('' = it does): the task is gone or not releasing."""
    return _task_not_in(row, RELEASING_STATES)


def _node_check(run: _Run, node: str) -> api.Reply:
    """GET the target node once per run (the API server binds to nodes that do not exist)."""
    if node not in run.node_seen:
        run.node_seen[node] = run.call(api.read_node, name=node)
    return run.node_seen[node]


def _readback(run: _Run, row: KubeOutbox) -> api.Reply:
    return run.call(api.read_pod, namespace=row.namespace, name=row.pod_name)


def _verdict(row: KubeOutbox, pod: api.Reply) -> str:
    """What a read-back says about a bind row: bound | unbound | gone | replaced | elsewhere |
    terminating | unknown (no answer)."""
    if pod.not_found:
        return "gone"
    if not pod.ok:
        return "unknown"
    if row.pod_uid and api.pod_uid(pod.body) != row.pod_uid:
        return "replaced"
    node = api.pod_node(pod.body)
    if node == row.node_name:
        return "bound"
    if api.pod_terminating(pod.body):
        return "terminating"
    if node:
        return "elsewhere"
    return "unbound"


def _apply_verdict(run: _Run, row: KubeOutbox, verdict: str, pod: api.Reply) -> None:
    """Hand the cluster's view of a pod that cannot be bound to the sync services."""
    if verdict in ("gone", "replaced"):
        _gone(row)
        if verdict == "replaced" and pod.body:
            _observe(pod.body)
    elif verdict in ("elsewhere", "terminating") and pod.body:
        _observe(pod.body)


def _unit_retry(run: _Run, live: list[KubeOutbox], reply: api.Reply, unit: str | None) -> None:
    """A transient problem before any member of the unit was bound in this run: the whole unit
    is retried (its rows share their attempt count, so they run out of attempts together)."""
    for row in live:
        _attempted(run, row)
    failed = [r for r in live if _retry_or_fail(run, r, reply)]
    if failed:
        _bind_lost(run, failed, unit)


def _bind_lost(run: _Run, lost: list[KubeOutbox], unit: str | None) -> None:
    """Members that finally cannot be bound (rows already closed).  Their tasks return to
    Pending (unless the read-back moved them already); in a gang, the members not yet bound
    are aborted and the members already bound are evicted (:func:`kube_gang_rollback`)."""
    cluster_bind_failed(task_ids=[r.task_id for r in lost if r.task_id])
    for row in lost:
        if row.task_id:
            kube_event_enqueue(task_id=row.task_id, reason="BindFailed", now=run.now,
                               message=f"binding to node {row.node_name} failed ({row.outcome}); "
                                       "the scheduler places it again")
    if not unit:
        return
    members = list(KubeOutbox.objects.filter(kind=KubeOutboxKind.BIND, payload__unit=unit).exclude(
        pk__in=[r.pk for r in lost]))
    pending = [r for r in members if r.status == KubeOutboxStatus.PENDING]
    if pending:
        _bind_failed(run, pending, "gang_aborted", "another member of the gang cannot be bound")
    bound = [r.task_id for r in members if r.status == KubeOutboxStatus.DONE and r.task_id]
    if bound:
        kube_gang_rollback(task_ids=bound, now=run.now)


def _bind_unit(run: _Run, rows: list[KubeOutbox]) -> None:
    unit = (rows[0].payload or {}).get("unit")
    live = []
    for row in rows:
        why = _bind_stale(row)
        if why == "confirmed":  # the sync saw the pod bound there (an earlier reply was lost)
            _finish(run, row, KubeOutboxStatus.DONE, "confirmed_by_sync")
        elif why:
            _finish(run, row, KubeOutboxStatus.SUPERSEDED, "superseded", why)
        else:
            live.append(row)
    if not live:
        return
    # 1. the target nodes exist (the API server would bind to a node that does not)
    for node in sorted({r.node_name for r in live}):
        reply = _node_check(run, node)
        if reply.not_found:
            for row in live:
                _finish(run, row, KubeOutboxStatus.FAILED, "node_gone", f"node {node} does not exist")
            _bind_lost(run, live, unit)
            return
        if not reply.ok:
            _unit_retry(run, live, reply, unit)
            return
    # 2. pre-flight read-back of every member of a gang (a single pod is read back after its bind)
    if len(live) > 1:
        broken: list[KubeOutbox] = []
        unknown: api.Reply | None = None
        for row in live:
            pod = _readback(run, row)
            verdict = _verdict(row, pod)
            if verdict == "bound":  # bound by an earlier attempt whose reply was lost
                if pod.body:
                    _observe(pod.body)
                _finish(run, row, KubeOutboxStatus.DONE, "already_bound")
                _scheduled(run, row)
            elif verdict == "unknown":
                unknown = pod
            elif verdict != "unbound":
                _apply_verdict(run, row, verdict, pod)
                _finish(run, row, KubeOutboxStatus.FAILED, f"pod_{verdict}")
                broken.append(row)
        live = [r for r in live if r.status == KubeOutboxStatus.PENDING]
        if broken:
            _bind_lost(run, broken, unit)  # aborts the unbound members, evicts the bound ones
            return
        if unknown is not None:
            _unit_retry(run, live, unknown, unit)
            return
    # 3. the members' ResourceClaims are allocated (the devices the cycle chose) and reserved for
    #    them before any member is bound: the kubelet starts a pod only then
    claim_rows = [r for r in live if r.task_id and KubePod.objects.filter(task_id=r.task_id).exclude(claims=[]).exists()]
    for row in claim_rows:
        verdict, reply = _allocate_claims(run, row)
        if verdict == "transient":
            _unit_retry(run, live, reply, unit)
            return
        if verdict != "ok":
            _finish(run, row, KubeOutboxStatus.FAILED, "claims_refused", verdict)
            _bind_lost(run, [row], unit)
            return
    # 4. bind, then read back
    bound: list[KubeOutbox] = []
    lost: list[KubeOutbox] = []
    for row in live:
        _attempted(run, row)
        reply = run.call(api.bind_pod, namespace=row.namespace, name=row.pod_name, uid=row.pod_uid,
                         node=row.node_name, annotations=_bind_annotations(row))
        pod = _readback(run, row)
        verdict = _verdict(row, pod)
        if verdict == "bound" or (verdict == "unknown" and reply.ok):
            if pod.ok and pod.body:
                _observe(pod.body)  # confirms Binding -> Running (else the watch will)
            _finish(run, row, KubeOutboxStatus.DONE, "bound" if reply.ok else "bound_on_readback",
                    "" if reply.ok else reply.describe())
            bound.append(row)
        elif verdict in ("unbound", "unknown") and reply.transient:
            if _retry_or_fail(run, row, reply):
                lost.append(row)
        elif verdict in ("unbound", "unknown"):  # a permanent refusal (400, 422, ...)
            _finish(run, row, KubeOutboxStatus.FAILED, f"rejected_{reply.status}", reply.describe())
            lost.append(row)
        else:  # gone, replaced, terminating, bound elsewhere: the cluster wins
            _apply_verdict(run, row, verdict, pod)
            _finish(run, row, KubeOutboxStatus.FAILED, f"pod_{verdict}", reply.describe())
            lost.append(row)
    for row in bound:
        _scheduled(run, row)
    if lost:
        _bind_lost(run, lost, unit)


#: Karpenter leaves nodes alone while a pod on them carries this annotation (voluntary disruption).
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


def _bind_annotations(row: KubeOutbox) -> dict[str, str] | None:
    """With cluster autoscaling on, a pod bound onto a shared GPU (a fraction or GPU memory,
    invisible in its resource requests) is annotated ``karpenter.sh/do-not-disrupt``: Karpenter's
    consolidation simulates from requests and would otherwise see a node running only such pods as
    GPU-free and replace it with a node without GPUs.  (KAI puts the annotation on the reservation
    pod that holds the shared device; here the engine keeps the device's share itself, so the
    annotation goes on the shared pod.)"""
    if not getattr(settings, "KAI_AUTOSCALE_ENABLED", False) or row.task_id is None:
        return None
    t = Task.objects.filter(pk=row.task_id).values("gpu", "gpu_memory_mib").first()
    if t is None:
        return None
    shared = bool(t["gpu_memory_mib"]) or 0 < float(t["gpu"] or 0) < 1
    return {DO_NOT_DISRUPT: "true"} if shared else None


def _allocate_claims(run: _Run, row: KubeOutbox) -> tuple[str, api.Reply]:
    """Write the allocation of the pod's ResourceClaims: the devices its task got (``Task.devices``,
    indices per class) as the node's ``(driver, pool, device)`` (:func:`observed_dra.node_device_table`),
    request by request, and reserve each claim for the pod. Idempotent: a claim already allocated so
    only gains the reservation; one allocated differently is taken over only when no live pod
    reserves it (its allocation is cleared first: an allocation cannot change in place). Returns
    ``("ok" | "transient" | why it cannot be done, last reply)``."""
    kpod = KubePod.objects.filter(task_id=row.task_id).first()
    task = Task.objects.filter(pk=row.task_id).values("devices").first()
    ok = api.Reply(status=200)
    if kpod is None or task is None or not kpod.claims:
        return "ok", ok
    table = node_device_table(row.node_name)
    left = {cls: list(idx) for cls, idx in (task["devices"] or {}).items()}
    for _pod_name, claim_name in kpod.claims:
        if not claim_name:
            return f"a claim of pod {row.pod_name} has no ResourceClaim yet", ok
        claim = KubeResourceClaim.objects.filter(namespace=row.namespace, name=claim_name).first()
        if claim is None:
            return f"ResourceClaim {row.namespace}/{claim_name} is not known", ok
        results = []
        for req, cls, count in claim.requests:
            idx, left[cls] = left.get(cls, [])[:count], left.get(cls, [])[count:]
            devs = table.get(cls, [])
            if len(idx) < count or any(i >= len(devs) for i in idx):
                return (f"the cycle chose {len(idx)} of the {count} {cls} devices request {req} of claim "
                        f"{claim_name} needs on node {row.node_name}"), ok
            results += [{"request": req, "driver": devs[i][0], "pool": devs[i][1], "device": devs[i][2]} for i in idx]
        verdict, reply = _write_claim(run, row, claim_name, results)
        if verdict != "ok":
            return verdict, reply
    return "ok", ok


def _write_claim(run: _Run, row: KubeOutbox, name: str, results: list[dict[str, str]]) -> tuple[str, api.Reply]:
    read = run.call(api.read_claim, namespace=row.namespace, name=name)
    if read.not_found:
        return f"ResourceClaim {row.namespace}/{name} does not exist", read
    if not read.ok or not read.body:
        return "transient", read
    status = read.body.get("status") or {}
    current = (status.get("allocation") or {})
    have = sorted(tuple(sorted(r.items())) for r in (current.get("devices") or {}).get("results") or [])
    want = sorted(tuple(sorted(r.items())) for r in results)
    me = {"resource": "pods", "name": row.pod_name, "uid": row.pod_uid}
    reserved = []
    for x in status.get("reservedFor") or []:
        if x.get("uid") == row.pod_uid:
            continue
        if x.get("resource") != "pods":
            reserved.append(x)  # another kind of consumer: live as far as we can tell
            continue
        pod = run.call(api.read_pod, namespace=row.namespace, name=str(x.get("name") or ""))
        if pod.ok and api.pod_uid(pod.body) == x.get("uid") and not api.pod_terminating(pod.body):
            reserved.append(x)  # a live pod uses the claim
        elif not pod.ok and not pod.not_found:
            return "transient", pod
        # else: that pod is gone (or replaced): a stale reservation the claim controller would drop
    rv = str((read.body.get("metadata") or {}).get("resourceVersion") or "")
    if current and have != want:
        if reserved:
            return (f"ResourceClaim {row.namespace}/{name} is allocated to other devices and reserved by "
                    f"{', '.join(x.get('name', '?') for x in reserved)}"), read
        cleared = run.call(api.patch_claim_status, namespace=row.namespace, name=name, resource_version=rv,
                           allocation=None, reserved_for=None)
        if not cleared.ok:
            return ("transient" if cleared.transient or cleared.conflict else cleared.describe()), cleared
        rv = str(((cleared.body or {}).get("metadata") or {}).get("resourceVersion") or "")
        current = {}
    if current and any(x.get("uid") == row.pod_uid for x in status.get("reservedFor") or []):
        return "ok", read  # done by an earlier attempt whose reply was lost
    allocation = {"devices": {"results": results}, "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [row.node_name]}]}]}}
    wrote = run.call(api.patch_claim_status, namespace=row.namespace, name=name, resource_version=rv,
                     allocation=current or allocation, reserved_for=reserved + [me])
    if wrote.ok:
        return "ok", wrote
    if wrote.transient or wrote.conflict:  # 409: the claim changed since it was read: read it again
        return "transient", wrote
    return f"ResourceClaim {row.namespace}/{name}: {wrote.describe()}", wrote


def _scheduled(run: _Run, row: KubeOutbox) -> None:
    """The ``Scheduled`` event, as kube-scheduler writes it once a binding took effect."""
    if row.task_id:
        kube_event_enqueue(task_id=row.task_id, reason="Scheduled", now=run.now,
                           message=f"Successfully assigned {row.namespace}/{row.pod_name} to {row.node_name}")


def _evict_row(run: _Run, row: KubeOutbox) -> None:
    why = _evict_stale(row)
    if why:
        _finish(run, row, KubeOutboxStatus.SUPERSEDED, "superseded", why)
        return
    _attempted(run, row)
    grace = (row.payload or {}).get("grace_seconds")
    reply = run.call(api.evict_pod, namespace=row.namespace, name=row.pod_name, uid=row.pod_uid,
                     grace_seconds=int(grace) if grace is not None else None)
    if reply.status == 429:  # a PodDisruptionBudget refuses for now: no need to read back
        _retry_or_fail(run, row, reply)
        return
    pod = _readback(run, row)
    if pod.not_found or (pod.ok and row.pod_uid and api.pod_uid(pod.body) != row.pod_uid):
        _gone(row)
        if pod.ok and pod.body:
            _observe(pod.body)
        _finish(run, row, KubeOutboxStatus.DONE, "pod_gone", "" if reply.ok else reply.describe())
        return
    if pod.ok and api.pod_terminating(pod.body):
        _observe(pod.body)
        _finish(run, row, KubeOutboxStatus.DONE, "evicted" if reply.ok else "evicted_on_readback",
                "" if reply.ok else reply.describe())
        return
    if reply.ok:  # accepted; the read-back did not (yet) show the deletion: the watch will
        _finish(run, row, KubeOutboxStatus.DONE, "evicted")
        return
    if reply.transient or reply.conflict or not pod.ok:
        _retry_or_fail(run, row, reply)
        return
    _finish(run, row, KubeOutboxStatus.FAILED, f"rejected_{reply.status}", reply.describe())


def _event(run: _Run, row: KubeOutbox) -> None:
    p = row.payload or {}
    _attempted(run, row)
    reply = run.call(api.post_event, namespace=row.namespace, event_name=f"{row.pod_name}.kai{row.pk:x}"[:253],
                     pod_name=row.pod_name, pod_uid=row.pod_uid, reason=str(p.get("reason") or "Event"),
                     message=str(p.get("message") or ""), event_type=str(p.get("type") or "Normal"),
                     component=run.component, at=row.created_at)
    if reply.ok or reply.conflict:
        _finish(run, row, KubeOutboxStatus.DONE, "posted" if reply.ok else "already_posted")
    elif reply.not_found:
        _finish(run, row, KubeOutboxStatus.DONE, "namespace_gone", reply.describe())
    elif reply.transient:
        _retry_or_fail(run, row, reply)
    else:
        _finish(run, row, KubeOutboxStatus.FAILED, f"rejected_{reply.status}", reply.describe())


def _status_stale(row: KubeOutbox) -> str:
    """Why a condition row no longer applies ('' = it does): the task is gone, no longer waiting
    (bound meanwhile: the binding set PodScheduled=True), or its pod was replaced."""
    why = _task_not_in(row, PENDING_STATES)
    if why:
        return why
    uid = KubePod.objects.filter(task_id=row.task_id).values_list("uid", flat=True).first()
    if row.pod_uid and uid is not None and uid != row.pod_uid:
        return "pod replaced"
    return ""


def _status_row(run: _Run, row: KubeOutbox) -> None:
    """PATCH pods/{name}/status with the wanted PodScheduled condition.

    The pod's last observed resourceVersion is the patch's precondition: a condition never lands
    on a pod that changed meanwhile (bound by another binder, replaced, deleted).  On 409 the pod
    is read back and handed to the sync services; a pod now bound or terminating needs nothing
    (superseded), one already showing the condition is done, otherwise the patch is retried once
    at once with the fresh resourceVersion (then with backoff)."""
    why = _status_stale(row)
    if why:
        _finish(run, row, KubeOutboxStatus.SUPERSEDED, "superseded", why)
        return
    p = row.payload or {}
    kpod = KubePod.objects.filter(task_id=row.task_id).values("resource_version", "pod_scheduled").first() or {}
    rv, current = kpod.get("resource_version") or "", kpod.get("pod_scheduled") or ""
    want = condition_key(str(p.get("status")), str(p.get("reason")), str(p.get("message") or ""))
    _attempted(run, row)
    for _try in range(2):
        reply = run.call(api.patch_pod_scheduled, namespace=row.namespace, name=row.pod_name, resource_version=rv,
                         status=str(p.get("status") or "False"), reason=str(p.get("reason") or ""),
                         message=str(p.get("message") or ""), transition=key_status(current) != p.get("status"),
                         at=run.now)
        if reply.ok:
            if reply.body and api.pod_uid(reply.body) == row.pod_uid:
                _observe(reply.body)
            _finish(run, row, KubeOutboxStatus.DONE, "patched")
            return
        if reply.not_found:
            _gone(row)
            _finish(run, row, KubeOutboxStatus.DONE, "pod_gone", reply.describe())
            return
        if not reply.conflict:
            break
        back = _readback(run, row)
        if back.not_found or (back.ok and row.pod_uid and api.pod_uid(back.body) != row.pod_uid):
            _gone(row)
            if back.ok and back.body:
                _observe(back.body)
            _finish(run, row, KubeOutboxStatus.DONE, "pod_gone", reply.describe())
            return
        if not back.ok:
            reply = back
            break
        _observe(back.body)
        if api.pod_node(back.body) or api.pod_terminating(back.body):
            _finish(run, row, KubeOutboxStatus.SUPERSEDED, "pod_bound_or_terminating", reply.describe())
            return
        current = observed_key(back.body)
        if current == want:
            _finish(run, row, KubeOutboxStatus.DONE, "already_set")
            return
        rv = str(((back.body or {}).get("metadata") or {}).get("resourceVersion") or "")
    if reply.transient or reply.conflict:
        _retry_or_fail(run, row, reply)
    else:
        _finish(run, row, KubeOutboxStatus.FAILED, f"rejected_{reply.status}", reply.describe())


@transaction.atomic
def kube_gang_rollback(*, task_ids: Iterable[int], now: datetime | None = None) -> int:
    """Members of a gang that were bound although another member could not be: ->
    ``Releasing`` on their node with an eviction row each (a binding cannot be undone; the
    pods' controllers recreate them and the gang is placed again as a whole)."""
    now = now or timezone.now()
    tasks = [t for t in _lock_tasks(task_ids) if t.state in (TaskState.BINDING, TaskState.RUNNING)]
    for t in tasks:
        t.state, t.version, t.updated_at = TaskState.RELEASING, t.version + 1, now
    Task.objects.bulk_update(tasks, ["state", "version", "updated_at"])
    pods = _pods_of(t.id for t in tasks)
    rows = []
    for t in tasks:
        pod = pods.get(t.id)
        if pod is None:
            continue
        rows.append(KubeOutbox(kind=KubeOutboxKind.EVICT, task_id=t.id, namespace=pod.namespace, pod_name=pod.name,
                               pod_uid=pod.uid, node_name=pod.node_name,
                               payload={"workload_id": t.workload_id, "grace_seconds": None,
                                        "reason": "GangBindFailed"},
                               next_attempt_at=now, created_at=now, updated_at=now))
        rows.append(_event_row(pod=pod, reason="GangBindFailed", cycle=None, now=now,
                               message="another pod of the gang could not be bound; evicted so that the gang "
                                       "is placed again as a whole"))
        SchedulingEvent.objects.create(workload_id=t.workload_id, task_id=t.id, reason="GangBindFailed",
                                       created_at=now,
                                       message=f"task {t.name}: another pod of the gang could not be bound; evicted")
    KubeOutbox.objects.bulk_create(rows)
    refresh_workload_statuses({t.workload_id for t in tasks}, now=now)
    return len(tasks)


@transaction.atomic
def _sweep(run: _Run) -> None:
    """Before the due rows: report stuck evictions, and write eviction rows for Releasing
    tasks that have none (cancellations write ``Releasing`` outside the cycle)."""
    stuck = cluster_mark_stuck_releasing(older_than_seconds=float(settings.KAI_KUBE_STUCK_EVICTION_SECONDS),
                                         now=run.now)
    run.report.stuck += len(stuck)
    if stuck:
        pods = _pods_of(stuck)
        rows, events = [], []
        for tid, wid, name in Task.objects.filter(id__in=stuck).values_list("id", "workload_id", "name"):
            msg = (f"task {name} still present {settings.KAI_KUBE_STUCK_EVICTION_SECONDS}s after its eviction; "
                   "its resources stay held until the pod is gone")
            events.append(SchedulingEvent(workload_id=wid, task_id=tid, reason="EvictionStuck", message=msg,
                                          created_at=run.now))
            if tid in pods:
                rows.append(_event_row(pod=pods[tid], reason="EvictionStuck", message=msg, cycle=None, now=run.now))
        SchedulingEvent.objects.bulk_create(events)
        KubeOutbox.objects.bulk_create(rows)
    releasing = list(Task.objects.filter(state__in=RELEASING_STATES, kube_pod__isnull=False).values_list(
        "id", "workload_id"))
    if not releasing:
        _prune(run)
        return
    pods = _pods_of(t for t, _ in releasing)
    asked: set[str] = set()
    uids = [p.uid for p in pods.values()]
    for i in range(0, len(uids), CHUNK):
        asked |= set(KubeOutbox.objects.filter(kind=KubeOutboxKind.EVICT, pod_uid__in=uids[i:i + CHUNK]).exclude(
            status=KubeOutboxStatus.SUPERSEDED).values_list("pod_uid", flat=True))
    rows = []
    for tid, wid in releasing:
        pod = pods.get(tid)
        if pod is None or pod.uid in asked or pod.deletion_timestamp is not None:
            continue
        rows.append(KubeOutbox(kind=KubeOutboxKind.EVICT, task_id=tid, namespace=pod.namespace, pod_name=pod.name,
                               pod_uid=pod.uid, node_name=pod.node_name,
                               payload={"workload_id": wid, "grace_seconds": None, "reason": "Cancelled"},
                               next_attempt_at=run.now, created_at=run.now, updated_at=run.now))
        rows.append(_event_row(pod=pod, reason="Cancelled", cycle=None, now=run.now,
                               message="the workload was cancelled; evicting the pod"))
    KubeOutbox.objects.bulk_create(rows)
    run.report.evictions_requested += sum(1 for r in rows if r.kind == KubeOutboxKind.EVICT)
    _prune(run)


def _prune(run: _Run) -> None:
    """Finished rows are kept as long as cycle records (``KAI_CYCLE_RETENTION_HOURS``), then deleted."""
    horizon = run.now - timedelta(hours=cycle_config().cycle_retention_hours)
    KubeOutbox.objects.filter(finished_at__lt=horizon).exclude(status=KubeOutboxStatus.PENDING).delete()


def _claim(*, now: datetime, limit: int, exclude: set[int]) -> list[list[KubeOutbox]]:
    """Due pending rows, oldest first, grouped into units (a gang's bind rows stay together
    even past ``limit``)."""
    rows = list(KubeOutbox.objects.filter(status=KubeOutboxStatus.PENDING, next_attempt_at__lte=now)
                .exclude(pk__in=exclude).order_by("id")[:limit])
    units: dict[str, list[KubeOutbox]] = {}
    order: list[str] = []
    for row in rows:
        key = (row.payload or {}).get("unit") if row.kind == KubeOutboxKind.BIND else None
        key = f"u{key}" if key else f"r{row.pk}"
        if key not in units:
            units[key] = []
            order.append(key)
        units[key].append(row)
    for key in order:
        if key.startswith("u"):
            have = {r.pk for r in units[key]}
            extra = KubeOutbox.objects.filter(status=KubeOutboxStatus.PENDING, kind=KubeOutboxKind.BIND,
                                              payload__unit=key[1:]).exclude(pk__in=have).order_by("id")
            units[key].extend(extra)
    return [units[k] for k in order]


def kube_dispatch_due(*, limit: int = 500, api_client: Any = None, now: datetime | None = None) -> DispatchReport:
    """Carry out the due outbox rows (see the module docstring for every outcome).

    Not one transaction: each row's outcome is committed as soon as the cluster answered, so
    a crash mid-run repeats at most the request in flight (and every request is idempotent).
    ``api_client`` is a ``kubernetes.client.ApiClient`` (default: ``kube_api_client()`` from
    settings); ``now`` fixes the clock (tests).
    """
    from kubernetes import client as k8s

    now = now or timezone.now()
    report = DispatchReport()
    holder = kube_lease_holder()
    ttl = max(30.0, 6.0 * float(settings.KAI_KUBE_REQUEST_TIMEOUT))
    if not kube_lease_acquire(name=LEASE_NAME, holder=holder, ttl_seconds=ttl, now=now):
        report.status = "skipped"
        return report
    owned = api_client is None
    try:
        if owned:
            api_client = kube_api_client()
        run = _Run(core=k8s.CoreV1Api(api_client), now=now, report=report)
        _sweep(run)
        seen: set[int] = set()
        for _round in range(3):  # a bind's Scheduled event is posted in the same run
            units = _claim(now=now, limit=max(0, limit - len(seen)), exclude=seen)
            if not units:
                break
            for unit in units:
                seen.update(r.pk for r in unit)
                try:
                    if unit[0].kind == KubeOutboxKind.BIND:
                        _bind_unit(run, unit)
                    elif unit[0].kind == KubeOutboxKind.EVICT:
                        _evict_row(run, unit[0])
                    elif unit[0].kind == KubeOutboxKind.STATUS:
                        _status_row(run, unit[0])
                    else:
                        _event(run, unit[0])
                except Exception:  # noqa: BLE001 - one bad row must not stop the others
                    logger.exception("dispatch of outbox row(s) %s failed", [r.pk for r in unit])
                kube_lease_acquire(name=LEASE_NAME, holder=holder, ttl_seconds=ttl, now=timezone.now())
    finally:
        kube_lease_release(name=LEASE_NAME, holder=holder)
        if owned and api_client is not None:
            api_client.close()
    return report
