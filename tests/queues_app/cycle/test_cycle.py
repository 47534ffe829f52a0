"""The scheduling cycle end to end on the test database (SQLite by default, PostgreSQL in CI):
bind -> confirm, explanations, version-checked drops, fencing, lease dedup, refused decision
sets, database guards, reclaim with pipelining, cancellation."""
from __future__ import annotations

import copy
import os
import socket

import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction

from queues_app.cycle.scenario import import_scenario
from queues_app.choices import CycleStatus, TaskState, WorkloadStatus
from queues_app.invariants import check_invariants
from queues_app.models import QueueStatus, SchedulerState, SchedulingCycle, SchedulingEvent, Task, Workload
from queues_app.cycle import faults
from queues_app.cycle.run import cycle_run, lease_acquire
from queues_app.services.nodes import node_upsert
from queues_app.services.queues import queue_set_quota
from queues_app.services.workloads import workload_cancel
from tests.queues_app.cycle_helpers import dump, make_cluster, make_queues, states, submit

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_hooks():
    faults.clear()
    yield
    faults.clear()


def assert_invariants(**kw):
    violations = check_invariants(**kw)
    assert violations == [], [v.as_dict() for v in violations]


def test_a_fill_binds_then_the_embedded_cluster_confirms_running():
    make_cluster(nodes=2, gpus=4)
    qs = make_queues()
    small = [submit(qs["qa"], f"a{i}") for i in range(3)]
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED and out.generation == 1 and out.bound == 3
    assert all(states(w) == [TaskState.BINDING] for w in small)
    # not Running before the cluster confirmed the binds (the admin showed Running over Binding tasks)
    assert set(Workload.objects.values_list("status", flat=True)) == {WorkloadStatus.BINDING}
    assert_invariants(expected_workload_ids=[w.pk for w in small])
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED and out.confirmed == 3 and out.bound == 0
    assert all(states(w) == [TaskState.RUNNING] for w in small)
    assert set(Workload.objects.values_list("status", flat=True)) == {WorkloadStatus.RUNNING}
    assert Workload.objects.filter(started_at__isnull=True).count() == 0
    status = QueueStatus.objects.get(queue=qs["qa"])
    assert status.allocated_gpu == 3 and status.running_workloads == 3 and status.fair_share_gpu > 0
    assert QueueStatus.objects.get(queue=qs["root"]).allocated_gpu == 3
    cycles = SchedulingCycle.objects.filter(status=CycleStatus.APPLIED).order_by("generation")
    assert [c.generation for c in cycles] == [1, 2]
    assert cycles[0].bound_count == 3 and cycles[0].apply_started_at <= cycles[0].apply_finished_at
    assert {"snapshot", "compute", "apply"} <= set(cycles[0].phase_durations)
    assert SchedulerState.objects.get(id=1).generation == 2 and SchedulerState.objects.get(id=1).lease_holder == ""
    assert_invariants()


def test_a_pending_workload_gets_its_explanation_in_one_cycle():
    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    big = submit(qs["qa"], "too-big", gpu=8)
    cycle_run(trigger="test")
    events = SchedulingEvent.objects.filter(workload=big)
    assert events.exists(), "no explanation after one cycle"
    assert states(big) == [TaskState.PENDING]
    assert QueueStatus.objects.get(queue=qs["qa"]).pending_workloads == 1


def test_a_workload_cancelled_after_the_snapshot_loses_only_its_decisions():
    make_cluster(nodes=2, gpus=4)
    qs = make_queues()
    victim = submit(qs["qa"], "cancel-me", replicas=2)
    keep = submit(qs["qb"], "keep", replicas=2)
    faults.register("after_compute", lambda: workload_cancel(workload=Workload.objects.get(pk=victim.pk)))
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED and out.bound == 2 and out.dropped == 2
    assert states(keep) == [TaskState.BINDING] * 2
    assert states(victim) == [TaskState.FAILED] * 2
    assert Workload.objects.get(pk=victim.pk).status == WorkloadStatus.CANCELLED
    assert SchedulingEvent.objects.filter(workload=victim, reason="DecisionDropped").exists()
    assert_invariants()


def test_a_quota_edit_after_the_snapshot_drops_that_queues_placements_only():
    make_cluster(nodes=2, gpus=4)
    qs = make_queues()
    a = submit(qs["qa"], "a", replicas=2)
    b = submit(qs["qb"], "b", replicas=2)
    faults.register("after_compute", lambda: queue_set_quota(queue=qs["qa"], resource="gpu", quota=1))
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED
    assert states(a) == [TaskState.PENDING] * 2 and states(b) == [TaskState.BINDING] * 2
    faults.clear()
    cycle_run(trigger="test")  # the next cycle decides under the new quota
    assert TaskState.PENDING not in states(a)
    assert_invariants()


def test_a_node_edit_after_the_snapshot_drops_the_placements_on_it_and_their_gangs():
    make_cluster(nodes=2, gpus=4)
    qs = make_queues({"qa": 8})
    gang = submit(qs["qa"], "gang", replicas=6)  # needs both nodes
    single = submit(qs["qa"], "single", replicas=1, gpu=1)
    faults.register("after_compute", lambda: node_upsert(name="n1", labels={"edited": "yes"}))
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED
    assert states(gang) == [TaskState.PENDING] * 6  # the whole gang, also its tasks on n0
    assert Task.objects.filter(node__name="n1").count() == 0
    assert_invariants()
    assert single  # placed or not depending on the node the engine chose; never half a gang


def test_a_stale_generation_aborts_the_cycle_with_nothing_written():
    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    submit(qs["qa"], "a")
    before = dump()
    faults.register("after_compute", lambda: SchedulerState.objects.filter(id=1).update(generation=41))
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.ABORTED
    after = dump()
    assert after["tasks"] == before["tasks"] and after["workloads"] == before["workloads"]
    assert after["generation"] == 41 and after["applied"] == 0


def test_extra_triggers_are_skipped_while_a_live_holder_has_the_lease_and_counted():
    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    submit(qs["qa"], "a")
    live = f"{socket.gethostname()}:{os.getpid()}::other"
    SchedulerState.objects.filter(id=1).update(lease_holder=live)
    assert lease_acquire(holder="someone-else", ttl=30)[0] is True  # no expiry set: the lease is free
    SchedulerState.objects.filter(id=1).update(lease_holder=live)
    from django.utils import timezone
    from datetime import timedelta

    SchedulerState.objects.filter(id=1).update(lease_expires_at=timezone.now() + timedelta(seconds=60))
    outcomes = [cycle_run(trigger="dup").status for _ in range(3)]
    assert outcomes == [CycleStatus.SKIPPED] * 3
    assert SchedulingCycle.objects.filter(trigger="dup", status=CycleStatus.SKIPPED).count() == 3
    SchedulerState.objects.filter(id=1).update(lease_holder="", lease_expires_at=None)
    assert cycle_run(trigger="dup").status == CycleStatus.APPLIED
    assert SchedulingCycle.objects.filter(trigger="dup").count() == 4


def test_a_lease_of_a_dead_process_is_taken_over_at_once():
    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    submit(qs["qa"], "a")
    import subprocess

    proc = subprocess.Popen(["true"])
    proc.wait()  # a pid that no longer exists
    backend = "999999" if connection.vendor == "postgresql" else ""
    from django.utils import timezone
    from datetime import timedelta

    SchedulerState.objects.filter(id=1).update(lease_holder=f"{socket.gethostname()}:{proc.pid}:{backend}:dead",
                                               lease_expires_at=timezone.now() + timedelta(hours=1))
    assert cycle_run(trigger="test").status == CycleStatus.APPLIED


class LyingEngine:
    """The real engine, then a doctored result: every pending task of ``job`` is bound onto
    ``node`` whatever fits (the double-booking engine of reliability.md T-R3)."""

    def __init__(self, job: str, node: str):
        self.job, self.node = job, node

    def __call__(self, snapshot):
        from queues_app.cycle import engine_io

        result = engine_io.run_engine(snapshot)
        doctored = copy.copy(result)
        doctored.jobs = copy.deepcopy(result.jobs)
        for t in doctored.jobs[self.job]["tasks"]:
            t["status"], t["node"], t["gpuGroups"] = "Binding", self.node, []
        return doctored


def test_a_double_booking_decision_set_is_refused_with_nothing_written():
    make_cluster(nodes=1, gpus=4)
    qs = make_queues({"qa": 8})
    submit(qs["qa"], "fits", replicas=4)
    cycle_run(trigger="test")
    cycle_run(trigger="test")
    submit(qs["qa"], "extra", replicas=2)
    before = dump()
    out = cycle_run(trigger="test", engine=LyingEngine("extra", "n0"))
    assert out.status == CycleStatus.FAILED and "over-committed" in out.reason
    after = dump()
    assert after == before
    assert SchedulingCycle.objects.filter(status=CycleStatus.FAILED).count() == 1
    assert SchedulerState.objects.get(id=1).lease_holder == ""  # released: the next trigger runs
    assert_invariants()


class PipeliningEngine(LyingEngine):
    """The real engine, then every task of ``job`` Pipelined on ``node`` although nothing is
    releasing there (issue #18: what the engine returned when reclaim un-placed victims that
    allocate had placed in the same cycle)."""

    def __call__(self, snapshot):
        doctored = super().__call__(snapshot)
        for t in doctored.jobs[self.job]["tasks"]:
            t["status"] = "Pipelined"
        return doctored


def test_a_decision_set_pipelining_where_nothing_is_releasing_is_refused():
    make_cluster(nodes=1, gpus=4)
    qs = make_queues({"qa": 8})
    cycle_run(trigger="test")
    submit(qs["qa"], "waits", replicas=1)
    before = dump()
    out = cycle_run(trigger="test", engine=PipeliningEngine("waits", "n0"))
    assert out.status == CycleStatus.FAILED and "pipelined on n0 where nothing is releasing" in out.reason
    assert dump() == before
    assert cycle_run(trigger="test").status == CycleStatus.APPLIED  # the real engine binds it
    assert_invariants()


def test_the_database_refuses_a_double_booking_even_if_the_application_check_is_wrong(monkeypatch):
    from queues_app.cycle import apply

    make_cluster(nodes=1, gpus=4)
    qs = make_queues({"qa": 8})
    submit(qs["qa"], "fits", replicas=4)
    cycle_run(trigger="test")
    submit(qs["qa"], "extra", replicas=1)
    monkeypatch.setattr(apply, "_node_problems", lambda node, tasks: [])
    before = dump()
    out = cycle_run(trigger="test", engine=LyingEngine("extra", "n0"))
    assert out.status == CycleStatus.FAILED and "over-committed" in out.reason.lower()
    assert dump() == before


def test_the_guard_trigger_refuses_raw_writes_that_overcommit():
    nodes = make_cluster(nodes=1, gpus=2)
    qs = make_queues()
    w = submit(qs["qa"], "w", replicas=3)
    with pytest.raises((IntegrityError, DatabaseError)):
        with transaction.atomic():
            Task.objects.filter(workload=w).update(state=TaskState.RUNNING, node=nodes[0])
    assert states(w) == [TaskState.PENDING] * 3
    with pytest.raises((IntegrityError, DatabaseError)):
        with transaction.atomic():
            Task.objects.filter(workload=w, index__lt=2).update(state=TaskState.RUNNING, node=nodes[0])
            from queues_app.models import Node

            Node.objects.filter(pk=nodes[0].pk).update(gpus=1)


def test_reclaim_evicts_pipelines_and_binds_once_the_release_is_confirmed():
    make_cluster(nodes=1, gpus=8)
    qs = make_queues({"qa": 4, "qb": 4})
    hog = [submit(qs["qa"], f"hog{i}") for i in range(8)]
    cycle_run(trigger="test")
    cycle_run(trigger="test")
    assert all(states(w) == [TaskState.RUNNING] for w in hog)
    newcomer = submit(qs["qb"], "newcomer", replicas=4, min_available=4)
    seen = set()
    for _ in range(6):
        out = cycle_run(trigger="test")
        assert out.status == CycleStatus.APPLIED
        assert_invariants()
        seen.update(states(newcomer))
        if states(newcomer) == [TaskState.RUNNING] * 4:
            break
    assert states(newcomer) == [TaskState.RUNNING] * 4, seen
    assert TaskState.PIPELINED in seen or TaskState.BINDING in seen
    assert sum(1 for w in hog if states(w) == [TaskState.RUNNING]) == 4
    assert SchedulingCycle.objects.filter(evicted_count__gt=0).exists()


def test_a_spent_engine_budget_applies_what_allocate_decided_and_says_what_was_not_run(settings):
    """KAI_CYCLE_ENGINE_BUDGET: the evicting actions stop when it is spent; the cycle still applies."""
    make_cluster(nodes=1, gpus=8)
    qs = make_queues({"qa": 4, "qb": 4})
    hog = [submit(qs["qa"], f"hog{i}") for i in range(8)]
    cycle_run(trigger="test")
    cycle_run(trigger="test")
    newcomer = submit(qs["qb"], "newcomer", replicas=4, min_available=4)
    small = submit(qs["qb"], "small-cpu", gpu=0)
    settings.KAI_CYCLE_ENGINE_BUDGET = 0
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED and out.evicted == 0 and out.bound == 1  # allocate ran
    assert states(small) == [TaskState.BINDING] and states(newcomer) == [TaskState.PENDING] * 4
    assert all(states(w) == [TaskState.RUNNING] for w in hog)
    row = SchedulingCycle.objects.get(pk=out.cycle_id)
    assert row.error.startswith("engine time budget of 0 s ran out; not run: consolidation, reclaim, preempt")
    assert "KAI_CYCLE_ENGINE_BUDGET" in row.error and row.phase_durations["engine_budget"] == 0
    assert "engine time budget" in out.reason
    del settings.KAI_CYCLE_ENGINE_BUDGET  # the default (half the soft limit): reclaim runs again
    out = cycle_run(trigger="test")
    assert out.evicted > 0 and SchedulingCycle.objects.get(pk=out.cycle_id).error == ""
    assert_invariants()


def test_a_cancelled_running_workload_releases_and_ends_failed():
    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    w = submit(qs["qa"], "w", replicas=2)
    cycle_run(trigger="test")
    cycle_run(trigger="test")
    workload_cancel(workload=w)
    assert states(w) == [TaskState.RELEASING] * 2
    assert_invariants()  # Releasing still holds the node; allocation check skips the changed queue
    cycle_run(trigger="test")
    assert states(w) == [TaskState.FAILED] * 2
    assert Task.objects.filter(workload=w, node__isnull=False).count() == 0
    assert QueueStatus.objects.get(queue=qs["qa"]).allocated_gpu == 0
    assert_invariants()


def test_kubernetes_mode_confirms_nothing_itself(settings):
    from queues_app.cycle.cluster import cluster_confirm_bound

    settings.KAI_CLUSTER_MODE = "kubernetes"
    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    w = submit(qs["qa"], "w")
    cycle_run(trigger="test")
    cycle_run(trigger="test")
    assert states(w) == [TaskState.BINDING]
    assert cluster_confirm_bound(task_ids=Task.objects.filter(workload=w).values_list("id", flat=True)) == 1
    assert states(w) == [TaskState.RUNNING]
    cycle_run(trigger="test")
    assert_invariants()


def test_rerunning_a_cycle_on_a_settled_state_changes_nothing():
    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    submit(qs["qa"], "a", replicas=2)
    submit(qs["qa"], "too-big", gpu=8)
    cycle_run(trigger="test")
    cycle_run(trigger="test")
    settled = dump()
    cycle_run(trigger="test")
    again = dump()
    assert again["tasks"] == settled["tasks"] and again["workloads"] == settled["workloads"]
    assert again["queue_status"] == settled["queue_status"]


def test_the_reconciler_confirms_releases_in_kubernetes_mode(settings):
    from queues_app.cycle.cluster import cluster_confirm_released

    settings.KAI_CLUSTER_MODE = "kubernetes"
    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    w = submit(qs["qa"], "w", replicas=2)
    cycle_run(trigger="test")
    workload_cancel(workload=w)
    cycle_run(trigger="test")
    assert states(w) == [TaskState.RELEASING] * 2  # nothing confirmed by the cycle itself
    ids = list(Task.objects.filter(workload=w).values_list("id", flat=True))
    assert cluster_confirm_released(task_ids=ids) == 2
    assert cluster_confirm_released(task_ids=ids) == 0  # idempotent
    assert states(w) == [TaskState.FAILED] * 2
    assert Workload.objects.get(pk=w.pk).status == WorkloadStatus.CANCELLED
    cycle_run(trigger="test")
    assert_invariants()


class UndoneMoveEngine:
    """The real engine, then the result a consolidation move followed by an eviction of the
    moved task produces: the task that was Running comes back Pending (found by the 60 s storm)."""

    def __init__(self, job: str):
        self.job = job

    def __call__(self, snapshot):
        from queues_app.cycle import engine_io

        result = engine_io.run_engine(snapshot)
        doctored = copy.copy(result)
        doctored.jobs = copy.deepcopy(result.jobs)
        for t in doctored.jobs[self.job]["tasks"]:
            t["status"], t["node"], t["gpuGroups"] = "Pending", None, []
        return doctored


def test_a_running_task_the_engine_returns_pending_is_evicted_from_its_node():
    make_cluster(nodes=1, gpus=4)
    qs = make_queues({"qa": 8})
    w = submit(qs["qa"], "moved", replicas=1)
    cycle_run(trigger="test")
    cycle_run(trigger="test")  # confirmed Running
    assert states(w) == ["Running"]
    out = cycle_run(trigger="test", engine=UndoneMoveEngine("moved"))
    assert out.status == CycleStatus.APPLIED, out.reason
    assert states(w) == ["Releasing"]
    assert Task.objects.get(workload=w).node.name == "n0"
    assert_invariants()


class MoveEngine(UndoneMoveEngine):
    """The real engine, then a consolidation move of ``job``'s running task to ``node``."""

    def __init__(self, job: str, node: str):
        super().__init__(job)
        self.node = node

    def __call__(self, snapshot):
        from queues_app.cycle import engine_io

        result = engine_io.run_engine(snapshot)
        doctored = copy.copy(result)
        doctored.jobs = copy.deepcopy(result.jobs)
        for t in doctored.jobs[self.job]["tasks"]:
            t["status"], t["node"], t["gpuGroups"] = "Pipelined", self.node, []
        return doctored


def test_a_consolidation_move_is_applied_as_an_eviction_from_the_old_node():
    make_cluster(nodes=2, gpus=4)
    qs = make_queues({"qa": 8})
    w = submit(qs["qa"], "moved", replicas=1)
    cycle_run(trigger="test")
    cycle_run(trigger="test")
    task = Task.objects.get(workload=w)
    assert task.state == "Running"
    other = "n1" if task.node.name == "n0" else "n0"
    out = cycle_run(trigger="test", engine=MoveEngine("moved", other))
    assert out.status == CycleStatus.APPLIED, out.reason
    task.refresh_from_db()
    assert (task.state, task.node.name) == ("Releasing", "n0" if other == "n1" else "n1")
    assert_invariants()


def test_tasks_that_swap_nodes_in_one_cycle_never_overcommit_a_node_mid_statement():
    """Two released victims placed again on each other's node in the same cycle (embedded mode:
    the release is confirmed and the task re-placed at once).  The task written first must not
    land on the other's node while the other still holds it: SQLite's guard checks every row,
    so a move is written as a release first, then the placement."""
    unl = {"quota": -1, "overQuotaWeight": 1, "limit": -1}
    import_scenario({
        "name": "swap", "nodes": [{"name": "a", "gpus": 1}, {"name": "b", "gpus": 1}],
        "queues": [{"name": "q", "resources": {"gpu": {"quota": 2, "overQuotaWeight": 1, "limit": -1},
                                               "cpu": dict(unl), "memory": dict(unl)}}],
        "jobs": [
            {"name": "x", "queue": "q", "createdMinutesAgo": 9,
             "tasks": [{"gpu": 1, "state": "Releasing", "node": "a", "nodeSelector": {"kubernetes.io/hostname": "b"}}]},
            {"name": "y", "queue": "q", "createdMinutesAgo": 8,
             "tasks": [{"gpu": 1, "state": "Releasing", "node": "b", "nodeSelector": {"kubernetes.io/hostname": "a"}}]},
        ],
    })
    node_upsert(name="a", labels={"kubernetes.io/hostname": "a"})
    node_upsert(name="b", labels={"kubernetes.io/hostname": "b"})
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED, out.reason
    assert sorted(Task.objects.values_list("name", "state", "node__name")) == [
        ("x-0", TaskState.BINDING, "b"), ("y-0", TaskState.BINDING, "a")]
    assert check_invariants() == []


class _MoveWithinNode:
    """The real engine, then a consolidation that moves the running shared-GPU task ``task`` to
    another GPU of its own node (as the engine decides on generated clusters: "moved from node X
    to node X")."""

    def __init__(self, task: str) -> None:
        self.task = task

    def __call__(self, snapshot):
        from queues_app.cycle import engine_io

        result = engine_io.run_engine(snapshot)
        for job, jres in result.jobs.items():
            for entry in jres["tasks"]:
                if entry["name"] == self.task:
                    entry.update(status="Pipelined", gpuGroups=["moved-here"])
                    result.tasks[self.task] = {"status": "Pipelined", "node": entry["node"]}
                    result.events.append({"job": job, "task": self.task, "reason": "Consolidated",
                                          "message": f"task {self.task} moved from node n0 to node n0"})
        return result


def test_a_shared_gpu_task_moved_within_its_node_is_evicted_not_refused():
    """A Running task the engine pipelines on its own node (another GPU) is a move like any other:
    the cycle evicts it (it was refusing the whole decision set, so nothing was scheduled)."""
    unl = {"quota": -1, "overQuotaWeight": 1, "limit": -1}
    import_scenario({
        "name": "move", "nodes": [{"name": "n0", "gpus": 2}],
        "queues": [{"name": "q", "resources": {"gpu": {"quota": 2, "overQuotaWeight": 1, "limit": -1},
                                               "cpu": dict(unl), "memory": dict(unl)}}],
        "jobs": [{"name": "s", "queue": "q", "startedMinutesAgo": 5,
                  "tasks": [{"gpu": 0.5, "state": "Running", "node": "n0", "gpuGroups": ["g0"]}]},
                 {"name": "t", "queue": "q", "startedMinutesAgo": 5,
                  "tasks": [{"gpu": 0.5, "state": "Running", "node": "n0", "gpuGroups": ["g0"]}]},
                 {"name": "w", "queue": "q", "tasks": [{"gpu": 1}]}],
    })
    out = cycle_run(trigger="test", engine=_MoveWithinNode("s-0"))
    assert out.status == CycleStatus.APPLIED, out.reason
    tasks = {t.name: (t.state, t.node.name if t.node else None) for t in Task.objects.select_related("node")}
    assert tasks["s-0"] == (TaskState.RELEASING, "n0") and tasks["t-0"] == (TaskState.RUNNING, "n0")
    assert tasks["w-0"] == (TaskState.BINDING, "n0")
    assert check_invariants() == []


@pytest.mark.parametrize("states, min_available, expected", [
    (["Binding", "Binding"], 2, "Binding"),               # a fresh gang: binds issued, none confirmed
    (["Running", "Binding"], 2, "Binding"),               # half the gang confirmed: not running yet
    (["Running", "Running"], 2, "Running"),
    (["Running", "Running", "Binding"], 2, "Running"),    # an elastic workload growing past its gang
    (["Binding", "Pending"], 1, "Binding"),
    (["Pipelined", "Pending"], 1, "Pending"),
    (["Releasing", "Running"], 1, "Running"),
])
def test_workload_status_follows_its_tasks(states, min_available, expected):
    from queues_app.cycle.rollup import workload_status_of

    assert workload_status_of(states, WorkloadStatus.PENDING, min_available) == expected
    assert workload_status_of(states, WorkloadStatus.CANCELLED, min_available) == WorkloadStatus.CANCELLED


def test_the_cycle_writes_its_events_in_engine_order_with_a_few_statements(monkeypatch):
    """Events go in as one INSERT per 5,000 rows (PostgreSQL: unnest arrays; SQLite: executemany),
    ids in the order the engine gave them, each with its workload, reason, text and category."""
    from django.test.utils import CaptureQueriesContext

    from queues_app.cycle import apply as cycle_apply

    given: list[tuple] = []
    original = cycle_apply._insert_events

    def recording(rows, *, now):
        given.extend(rows)
        return original(rows, now=now)

    monkeypatch.setattr(cycle_apply, "_insert_events", recording)
    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    waiting = [submit(qs["qa"], f"big{i}", gpu=8) for i in range(40)]  # never fits
    with CaptureQueriesContext(connection) as ctx:
        out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED
    inserts = [q["sql"] for q in ctx.captured_queries  # (SQLite's executemany is one "120 times: INSERT")
               if "INSERT INTO" in q["sql"].upper() and "queues_app_schedulingevent" in q["sql"]]
    assert len(inserts) == 1, inserts
    rows = list(SchedulingEvent.objects.filter(cycle_id=out.cycle_id).order_by("id").values_list(
        "cycle_id", "workload_id", "task_id", "reason", "message", "category"))
    assert rows == given and len(rows) >= 40
    assert {w for _, w, *_ in rows} == {w.pk for w in waiting}
    unschedulable = [r for r in rows if r[3] == "Unschedulable"]
    assert len(unschedulable) == 40 and all(r[5] for r in unschedulable)  # every one says why, with a category
    assert SchedulingEvent.objects.filter(cycle_id=out.cycle_id).values("created_at").distinct().count() == 1


class _GcWatchingEngine:
    """The real engine, noting whether the cyclic collector runs while it computes; with
    ``lie=True`` it double-books (the refused path) to check the collector is restored then too."""

    def __init__(self, lie: bool = False):
        self.lie, self.seen = lie, []

    def __call__(self, snapshot):
        import gc

        from queues_app.cycle import engine_io

        self.seen.append(gc.isenabled())
        result = engine_io.run_engine(snapshot)
        if self.lie:
            result = copy.copy(result)
            result.jobs = copy.deepcopy(result.jobs)
            for t in result.jobs["extra"]["tasks"]:
                t["status"], t["node"], t["gpuGroups"] = "Binding", "n0", []
        return result


def test_the_collector_pauses_for_the_bulk_phases_and_is_restored(monkeypatch):
    """cycle_run pauses the cyclic GC around snapshot + load and plan + apply (CPU at 10k nodes), not
    around the engine, and leaves it as it found it whether the cycle applies or is refused."""
    import gc

    from queues_app.cycle import apply as cycle_apply, run as cycle_run_module

    seen: dict[str, bool] = {}
    real_snapshot, real_plan = cycle_run_module.take_snapshot, cycle_apply.build_plan

    def snapshot(**kw):
        seen["snapshot"] = gc.isenabled()
        return real_snapshot(**kw)

    def plan(**kw):
        seen["plan"] = gc.isenabled()
        return real_plan(**kw)

    monkeypatch.setattr(cycle_run_module, "take_snapshot", snapshot)
    monkeypatch.setattr(cycle_apply, "build_plan", plan)
    make_cluster(nodes=1, gpus=4)
    qs = make_queues({"qa": 8})
    submit(qs["qa"], "fits", replicas=4)
    engine = _GcWatchingEngine()
    assert gc.isenabled()
    assert cycle_run(trigger="test", engine=engine).status == CycleStatus.APPLIED
    assert seen == {"snapshot": False, "plan": False} and engine.seen == [True] and gc.isenabled()
    cycle_run(trigger="test")
    submit(qs["qa"], "extra", replicas=2)
    out = cycle_run(trigger="test", engine=_GcWatchingEngine(lie=True))
    assert out.status == CycleStatus.FAILED and gc.isenabled()
    gc.disable()
    try:  # a caller that runs with the collector off keeps it off
        cycle_run(trigger="test")
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert_invariants()
