"""The SQL invariant checker finds each kind of corruption (raw SQL, guards bypassed), and a
correctly scheduled database has none."""
from __future__ import annotations

from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from queues_app.invariants import CHECKS, check_invariants
from queues_app.models import Node, Queue, QueueStatus, SchedulerState, SchedulingCycle, Task, Workload
from queues_app.cycle.run import cycle_run
from tests.queues_app.cycle_helpers import make_cluster, make_queues, submit

pytestmark = pytest.mark.django_db(transaction=True)


class _Rollback(Exception):
    pass


@contextmanager
def corrupted():
    """Run the body with the guard triggers dropped, then roll everything back."""
    try:
        with transaction.atomic():
            with connection.cursor() as cur:
                for trig, table in (("kai_task_capacity_ins", "queues_app_task"),
                                    ("kai_task_capacity_upd", "queues_app_task"),
                                    ("kai_node_capacity_upd", "queues_app_node")):
                    if connection.vendor == "postgresql":
                        cur.execute(f"DROP TRIGGER IF EXISTS {trig} ON {table}")
                    else:
                        cur.execute(f"DROP TRIGGER IF EXISTS {trig}")
            yield
            raise _Rollback
    except _Rollback:
        pass


def found(**kw) -> set[str]:
    return {v.check for v in check_invariants(**kw)}


@pytest.fixture
def scheduled():
    nodes = make_cluster(nodes=2, gpus=4)
    qs = make_queues({"qa": 4, "qb": 4})
    wl = [submit(qs["qa"], "a", replicas=2), submit(qs["qb"], "b", replicas=2, gpu=0.5)]
    cycle_run(trigger="test")
    cycle_run(trigger="test")
    return {"nodes": nodes, "queues": qs, "workloads": wl}


def test_a_scheduled_database_satisfies_every_invariant(scheduled):
    assert check_invariants(expected_workload_ids=[w.pk for w in scheduled["workloads"]]) == []


def test_over_committed_nodes_are_found(scheduled):
    with corrupted():
        Node.objects.update(gpus=1)
        assert {"I1.devices", "I1.gpu"} <= found()
    with corrupted():
        Node.objects.update(cpu_millis=1, memory_bytes=1)
        assert {"I1.cpu", "I1.memory"} <= found()


def test_over_committed_shared_devices_are_found(scheduled):
    b = scheduled["workloads"][1]
    node = Task.objects.filter(workload=b).first().node
    with corrupted():
        Task.objects.filter(workload=b).update(gpu=0.75, node=node, gpu_groups=["0"])
        assert "I2.fraction" in found()
    with corrupted():
        Node.objects.update(gpu_memory_mib=100)
        Task.objects.filter(workload=b).update(gpu=0, gpu_memory_mib=80, node=node, gpu_groups=["0"])
        assert "I2.gpu_memory" in found()


def test_lost_workloads_and_contradicting_statuses_are_found(scheduled):
    a, b = scheduled["workloads"]
    with corrupted():
        Workload.objects.filter(pk=a.pk).update(status="Cancelled")
        assert "I3.tasks" in found()
    with corrupted():
        Task.objects.filter(workload=b).delete()
        Workload.objects.filter(pk=b.pk).delete()
        assert "I3.lost" in found(expected_workload_ids=[a.pk, b.pk])
        assert "I3.lost" not in found(expected_workload_ids=[a.pk])


def test_queue_tree_corruption_is_found(scheduled):
    qa, qb = scheduled["queues"]["qa"], scheduled["queues"]["qb"]
    with corrupted():
        Queue.objects.filter(pk=qa.pk).update(parent=qb)
        Queue.objects.filter(pk=qb.pk).update(parent=qa)
        assert "I4.tree" in found()
    with corrupted():
        Queue.objects.filter(pk=qb.pk).update(parent=qa)
        assert "I4.leaf" in found()


def test_allocation_drift_and_limits_are_found(scheduled):
    qa = scheduled["queues"]["qa"]
    with corrupted():
        QueueStatus.objects.filter(queue=qa).update(allocated_gpu=7)
        assert "I5.allocation" in found()
    with corrupted():
        from queues_app.models import QueueResource

        QueueResource.objects.filter(queue=qa, resource="gpu").update(limit=1)
        assert "I5.limit" in found()


def test_pipelined_where_nothing_is_releasing_is_found(scheduled):
    # issue #18: a task is Pipelined only onto resources being released
    a, b = scheduled["workloads"]
    ta = Task.objects.filter(workload=a).order_by("index").first()
    with corrupted():
        Task.objects.filter(pk=ta.pk).update(state="Pipelined")
        assert "I6.pipelined" in found()
    with corrupted():  # the same, waiting for a task that is really Releasing on that node
        Task.objects.filter(pk=ta.pk).update(state="Pipelined")
        Task.objects.filter(pk=Task.objects.filter(workload=b).first().pk).update(state="Releasing", node=ta.node)
        assert "I6.pipelined" not in found()
    with corrupted():  # the cluster confirmed a release since the last cycle: binds next cycle
        Task.objects.filter(pk=ta.pk).update(state="Pipelined")
        other = Task.objects.filter(workload=b).first()
        Task.objects.filter(pk=other.pk).update(state="Pending", node=None, version=other.version + 1,
                                                updated_at=timezone.now() + timedelta(seconds=1))
        assert "I6.pipelined" not in found()


def test_overlapping_apply_phases_and_bad_generations_are_found(scheduled):
    first, second = SchedulingCycle.objects.filter(status="applied").order_by("generation")
    with corrupted():
        SchedulingCycle.objects.filter(pk=second.pk).update(apply_started_at=first.apply_finished_at
                                                            - timedelta(milliseconds=1))
        assert "I8.overlap" in found()
    with corrupted():
        SchedulingCycle.objects.filter(pk=first.pk).update(apply_started_at=timezone.now() + timedelta(hours=1),
                                                           apply_finished_at=timezone.now() + timedelta(hours=2))
        assert "I8.generation" in found()
    with corrupted():
        SchedulerState.objects.update(generation=1)
        assert "I8.generation" in found()


def test_only_and_skip_select_checks(scheduled):
    with corrupted():
        Node.objects.update(gpus=1)
        assert found(only=["I1.gpu"]) == {"I1.gpu"}
        assert "I1.gpu" not in found(skip=["I1.gpu"])
    with pytest.raises(ValueError):
        check_invariants(only=["I9"])
    assert len(CHECKS) == 15
