"""The Kubernetes outbox is written in the cycle's apply transaction (kubernetes mode only):
bind rows for Binding decisions, evict rows for Releasing decisions, Kubernetes Event rows for
victims and for pending reasons (once per distinct reason), superseding older orders."""
from __future__ import annotations

import uuid

import pytest

from queues_app.choices import CycleStatus, TaskState
from queues_app.models import KubeOutbox, KubePod, Task
from queues_app.cycle import faults
from queues_app.cycle.run import cycle_run
from tests.queues_app.cycle_helpers import make_cluster, make_queues, states, submit

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_hooks():
    faults.clear()
    yield
    faults.clear()


@pytest.fixture(autouse=True)
def enqueued(monkeypatch):
    """Dispatcher triggers are recorded instead of sent to the broker (and only after commit)."""
    from django.db import transaction

    from queues_app.kube import outbox

    sent: list[int] = []
    monkeypatch.setattr(outbox, "request_dispatch", lambda: transaction.on_commit(lambda: sent.append(1)))
    return sent


def with_pods(workload, namespace: str = "team") -> list[KubePod]:
    """KubePod rows for every task, as the sync would have created them."""
    return [KubePod.objects.create(task=t, uid=str(uuid.uuid4()), namespace=namespace, name=t.name)
            for t in Task.objects.filter(workload=workload).order_by("index")]


def rows(kind: str, **kw) -> list[KubeOutbox]:
    return list(KubeOutbox.objects.filter(kind=kind, **kw).order_by("id"))


def test_embedded_mode_writes_no_outbox_rows():
    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    w = submit(qs["qa"], "w", replicas=2)
    with_pods(w)
    assert cycle_run(trigger="test").bound == 2
    assert KubeOutbox.objects.count() == 0


def test_a_bind_decision_and_its_outbox_row_commit_together(settings, enqueued):
    settings.KAI_CLUSTER_MODE = "kubernetes"
    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    w = submit(qs["qa"], "gang", replicas=3)
    pods = with_pods(w)
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED and out.bound == 3
    binds = rows("bind")
    assert [(r.pod_name, r.pod_uid, r.node_name) for r in binds] == [(p.name, p.uid, "n0") for p in pods]
    assert {r.cycle_id for r in binds} == {out.cycle_id}
    assert {r.payload["unit"] for r in binds} == {f"{out.cycle_id}:{w.pk}"}, "one gang = one dispatch unit"
    assert all(r.status == "pending" and r.attempts == 0 for r in binds)
    assert enqueued == [1], "the dispatcher is asked for once, after the commit"
    # a second cycle decides nothing new: no new rows
    cycle_run(trigger="test")
    assert len(rows("bind")) == 3


def test_a_crash_before_commit_writes_neither_decisions_nor_outbox_rows(settings, enqueued):
    settings.KAI_CLUSTER_MODE = "kubernetes"
    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    w = submit(qs["qa"], "w", replicas=2)
    with_pods(w)

    def boom():
        raise RuntimeError("killed before commit")

    faults.register("before_commit", boom)
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.FAILED
    assert states(w) == [TaskState.PENDING] * 2
    assert KubeOutbox.objects.count() == 0 and enqueued == []


def test_tasks_without_a_pod_get_no_rows(settings):
    settings.KAI_CLUSTER_MODE = "kubernetes"
    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    submit(qs["qa"], "api-only")
    assert cycle_run(trigger="test").bound == 1
    assert KubeOutbox.objects.count() == 0


def test_a_pending_reason_becomes_one_event_per_pod_and_is_not_repeated(settings):
    settings.KAI_CLUSTER_MODE = "kubernetes"
    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    big = submit(qs["qa"], "too-big", gpu=8, replicas=2)
    pods = with_pods(big)
    cycle_run(trigger="test")
    events = rows("event")
    assert {r.pod_name for r in events} == {p.name for p in pods}
    assert {(r.pod_name, r.payload["reason"]) for r in events} >= {(p.name, "Unschedulable") for p in pods}
    assert all(r.payload["type"] == "Warning" for r in events)
    assert all(r.payload["message"] for r in events)
    digests = set(KubePod.objects.values_list("last_event_digest", flat=True))
    assert len(digests) == 1 and "" not in digests
    cycle_run(trigger="test")
    cycle_run(trigger="test")
    assert len(rows("event")) == len(events), "an unchanged pending reason is written once"
    # the reason changes (more GPUs needed than before) -> written again
    KubePod.objects.update(last_event_digest="something-else")
    cycle_run(trigger="test")
    assert len(rows("event")) == 2 * len(events)


def test_reclaim_writes_evict_rows_and_victim_events_and_no_bind_for_the_pipelined(settings):
    from queues_app.cycle.cluster import cluster_confirm_bound

    settings.KAI_CLUSTER_MODE = "kubernetes"
    make_cluster(nodes=1, gpus=8)
    qs = make_queues({"qa": 4, "qb": 4})
    hogs = [submit(qs["qa"], f"hog{i}") for i in range(8)]
    hog_pods = [p for w in hogs for p in with_pods(w)]
    cycle_run(trigger="test")
    cluster_confirm_bound(task_ids=[p.task_id for p in hog_pods])
    KubePod.objects.update(node_name="n0")
    newcomer = submit(qs["qb"], "newcomer", replicas=4, min_available=4)
    with_pods(newcomer)
    out = cycle_run(trigger="test")
    assert out.evicted == 4, out
    victims = set(Task.objects.filter(state=TaskState.RELEASING).values_list("id", flat=True))
    evicts = rows("evict")
    assert {r.task_id for r in evicts} == victims and len(evicts) == 4
    assert all(r.node_name == "n0" and r.pod_uid for r in evicts)
    victim_events = rows("event", task_id__in=victims)
    assert {r.task_id for r in victim_events} == victims
    assert all(r.payload["reason"] == "Reclaimed" and "newcomer" in r.payload["message"] for r in victim_events)
    assert states(newcomer) == [TaskState.PIPELINED] * 4
    assert not rows("bind", task__workload=newcomer), "pipelined tasks are bound only once the victims are gone"
    # the pipelined pods are told why they wait
    waiting = rows("event", task__workload=newcomer)
    assert len({r.task_id for r in waiting}) == 4


def test_a_newer_decision_supersedes_a_pending_bind_row(settings):
    settings.KAI_CLUSTER_MODE = "kubernetes"
    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    w = submit(qs["qa"], "w")
    with_pods(w)
    cycle_run(trigger="test")
    (first,) = rows("bind")
    # the dispatcher gave up, the task is Pending again, the next cycle binds it anew
    from queues_app.cycle.cluster import cluster_bind_failed

    assert cluster_bind_failed(task_ids=[first.task_id]) == 1
    assert cluster_bind_failed(task_ids=[first.task_id]) == 0  # idempotent
    t = Task.objects.get(pk=first.task_id)
    assert t.state == TaskState.PENDING and t.node_id is None and t.gpu_groups == []
    cycle_run(trigger="test")
    first.refresh_from_db()
    assert first.status == "superseded"
    assert [r.status for r in rows("bind")] == ["superseded", "pending"]


def test_finished_rows_are_pruned_after_the_retention_period(settings):
    from datetime import timedelta

    from django.utils import timezone

    from queues_app.kube.outbox import kube_dispatch_due

    settings.KAI_CLUSTER_MODE = "kubernetes"
    settings.KAI_CYCLE_RETENTION_HOURS = 1
    old = timezone.now() - timedelta(hours=2)
    for status in ("done", "failed", "superseded", "pending"):
        KubeOutbox.objects.create(kind="event", status=status, namespace="team", pod_name="p",
                                  finished_at=None if status == "pending" else old,
                                  next_attempt_at=timezone.now() + timedelta(days=1))
    KubeOutbox.objects.create(kind="event", status="done", namespace="team", pod_name="p", finished_at=timezone.now())
    report = kube_dispatch_due(api_client=object(), now=timezone.now())
    assert report.requests == 0
    assert sorted(KubeOutbox.objects.values_list("status", flat=True)) == ["done", "pending"]
