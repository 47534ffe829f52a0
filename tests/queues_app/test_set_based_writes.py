"""Issue 16 (3): cancel, submit and the cycle's apply touch tasks with a few set-based
statements, with bounded lock time, and a request cut off half-way leaves nothing behind.

Before: ``workload_cancel`` ran one ``bulk_update`` (``UPDATE ... SET state = CASE WHEN id = ...``
over every task): 12.5 s at 5,000 tasks, and at 10,000 PostgreSQL kept running the orphaned
statement for minutes with its row locks while every cycle failed.  Timings are measured by
``manage.py bench_writes`` (not here); these tests pin the shape: statement counts that do not
grow with the gang, no CASE, one UPDATE per target state, and atomicity under lock timeouts and
a killed client (PostgreSQL).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext

from queues_app.choices import CycleStatus, TaskState, WorkloadStatus
from queues_app.models import Node, Task, Workload
from queues_app.cycle.run import cycle_run
from queues_app.errors import ApplicationError
from queues_app.services import workloads as workload_services
from queues_app.services.nodes import nodes_delete, nodes_set_schedulable
from queues_app.services.workloads import workload_cancel, workload_import, workload_submit, workloads_cancel
from tests.queues_app.cycle_helpers import make_cluster, make_queues

ROOT = Path(__file__).resolve().parents[2]
POSTGRES = os.environ.get("DATABASE_URL", "").startswith("postgres")


def _task_writes(ctx) -> list[str]:
    return [q["sql"] for q in ctx.captured_queries
            if q["sql"].lstrip().upper().startswith(("UPDATE", "INSERT")) and "queues_app_task" in q["sql"]]


@pytest.mark.django_db
@pytest.mark.parametrize("size", [10, 3000])
def test_cancel_is_one_update_per_target_state_whatever_the_gang_size(size):
    make_cluster(nodes=2, gpus=4)
    qs = make_queues()
    w = workload_submit(queue=qs["qa"], name="big", replicas=size, task={"gpu": 0})
    with CaptureQueriesContext(connection) as ctx:
        workload_cancel(workload=w)
    writes = _task_writes(ctx)
    assert len(writes) == 2, writes  # Pending/Pipelined -> Failed, Running/Binding -> Releasing
    assert not any("CASE" in sql.upper() for sql in writes)
    assert len(ctx.captured_queries) <= 10
    assert set(Task.objects.filter(workload=w).values_list("state", flat=True)) == {TaskState.FAILED}
    assert Workload.objects.get(pk=w.pk).status == WorkloadStatus.CANCELLED


@pytest.mark.django_db
def test_cancel_of_running_and_pending_tasks_in_two_statements():
    nodes = make_cluster(nodes=1, gpus=8)
    qs = make_queues()
    w = workload_import(queue=qs["qa"], name="mixed", tasks=[
        {"gpu": 1, "state": "Running", "node": nodes[0].name}, {"gpu": 1, "state": "Binding", "node": nodes[0].name},
        {"gpu": 1}, {"gpu": 1}])
    with CaptureQueriesContext(connection) as ctx:
        workload_cancel(workload=w)
    assert len(_task_writes(ctx)) == 2
    assert list(Task.objects.filter(workload=w).order_by("index").values_list("state", "node__name")) == [
        (TaskState.RELEASING, nodes[0].name), (TaskState.RELEASING, nodes[0].name), (TaskState.FAILED, None),
        (TaskState.FAILED, None)]


def _workload_writes(ctx) -> list[str]:
    return [q["sql"] for q in ctx.captured_queries
            if q["sql"].lstrip().upper().startswith("UPDATE") and "queues_app_workload" in q["sql"].split("SET")[0]]


@pytest.mark.django_db
@pytest.mark.parametrize("count", [3, 40])
def test_bulk_cancel_is_three_updates_whatever_the_selection(count):
    """The admin's "Cancel selected workloads" was one workload_cancel per row (3 statements each)."""
    nodes = make_cluster(nodes=1, gpus=8)
    qs = make_queues()
    ws = [workload_import(queue=qs["qa"], name=f"w{i}", tasks=[{"gpu": 0, "state": "Running", "node": nodes[0].name},
                                                               {"gpu": 0}]) for i in range(count)]
    with CaptureQueriesContext(connection) as ctx:
        assert workloads_cancel(workload_ids=[w.pk for w in ws]) == count
    assert len(_task_writes(ctx)) == 2 and len(_workload_writes(ctx)) == 1
    assert len(ctx.captured_queries) <= 8
    assert set(Workload.objects.values_list("status", flat=True)) == {WorkloadStatus.CANCELLED}
    assert set(Task.objects.values_list("state", flat=True)) == {TaskState.FAILED, TaskState.RELEASING}
    assert workloads_cancel(workload_ids=[w.pk for w in ws]) == 0  # cancelled ones are skipped


@pytest.mark.django_db
def test_bulk_cancel_goes_in_chunks(monkeypatch):
    monkeypatch.setattr(workload_services, "CANCEL_CHUNK", 2)
    qs = make_queues()
    ws = [workload_submit(queue=qs["qa"], name=f"w{i}", replicas=2, task={"gpu": 0}) for i in range(5)]
    with CaptureQueriesContext(connection) as ctx:
        assert workloads_cancel(workload_ids=[w.pk for w in ws] + [ws[0].pk]) == 5
    assert len(_task_writes(ctx)) == 6 and len(_workload_writes(ctx)) == 3  # 3 chunks of <= 2 workloads
    assert Workload.objects.filter(status=WorkloadStatus.CANCELLED).count() == 5


@pytest.mark.django_db
def test_bulk_cancel_with_a_finished_workload_writes_nothing_and_names_it():
    qs = make_queues()
    a = workload_submit(queue=qs["qa"], name="pending-one", replicas=2, task={"gpu": 0})
    done = workload_submit(queue=qs["qa"], name="done-one", replicas=1, task={"gpu": 0})
    Workload.objects.filter(pk=done.pk).update(status=WorkloadStatus.SUCCEEDED)
    with pytest.raises(ApplicationError) as exc:
        workloads_cancel(workload_ids=[a.pk, done.pk])
    assert "done-one (succeeded)" in exc.value.extra["workloads"][0]
    assert Workload.objects.get(pk=a.pk).status != WorkloadStatus.CANCELLED
    assert set(Task.objects.filter(workload=a).values_list("state", flat=True)) == {TaskState.PENDING}


@pytest.mark.django_db
def test_cordon_of_many_nodes_is_one_update_and_bumps_only_changed_rows():
    nodes = make_cluster(nodes=30, gpus=8)
    Node.objects.filter(pk=nodes[0].pk).update(unschedulable=True)
    before = dict(Node.objects.values_list("pk", "version"))
    with CaptureQueriesContext(connection) as ctx:
        names = nodes_set_schedulable(node_ids=[n.pk for n in nodes], schedulable=False)
    assert names == sorted(n.name for n in nodes)
    assert len([q for q in ctx.captured_queries if q["sql"].lstrip().upper().startswith("UPDATE")]) == 1
    after = dict(Node.objects.values_list("pk", "version"))
    assert after[nodes[0].pk] == before[nodes[0].pk]  # already cordoned: untouched
    assert all(after[n.pk] == before[n.pk] + 1 for n in nodes[1:])
    assert Node.objects.filter(unschedulable=False).count() == 0


@pytest.mark.django_db
def test_deleting_nodes_is_all_or_nothing_and_names_the_busy_ones():
    nodes = make_cluster(nodes=4, gpus=8)
    qs = make_queues()
    workload_import(queue=qs["qa"], name="on-two", tasks=[{"gpu": 1, "state": "Running", "node": nodes[2].name}])
    done = workload_import(queue=qs["qa"], name="done", tasks=[{"gpu": 1, "state": "Succeeded", "node": nodes[0].name}])
    with pytest.raises(ApplicationError) as exc:
        nodes_delete(node_ids=[n.pk for n in nodes])
    assert f"{nodes[2].name} (1)" in exc.value.extra["tasks"][0]
    assert Node.objects.count() == 4
    with CaptureQueriesContext(connection) as ctx:
        assert nodes_delete(node_ids=[nodes[0].pk, nodes[1].pk, nodes[3].pk]) == 3
    assert len(ctx.captured_queries) <= 12  # lock, count, history UPDATE, DELETE (+ cascade collection)
    assert list(Node.objects.values_list("name", flat=True)) == [nodes[2].name]
    assert Task.objects.get(workload=done).node_id is None  # history keeps the task, forgets the node


@pytest.mark.django_db
@pytest.mark.parametrize("form", ["replicas", "tasks"])
def test_submit_inserts_in_bounded_batches(form):
    qs = make_queues()
    kwargs = {"replicas": 4500, "task": {"gpu": 1}} if form == "replicas" else {"tasks": [{"gpu": 1}] * 4500}
    with CaptureQueriesContext(connection) as ctx:
        w = workload_submit(queue=qs["qa"], name="big", **kwargs)
    inserts = _task_writes(ctx)
    if connection.vendor == "postgresql":
        assert len(inserts) == 3  # 2,000 rows per statement
    else:
        assert len(inserts) <= 3  # executemany of one statement per batch
    assert Task.objects.filter(workload=w).count() == 4500
    assert list(Task.objects.filter(workload=w).order_by("index").values_list("name", flat=True)[:2]) == [
        "big-0", "big-1"]


@pytest.mark.django_db
def test_the_apply_writes_tasks_with_one_update_per_target_state():
    make_cluster(nodes=40, gpus=8)
    qs = make_queues({"qa": 320, "qb": 0})
    w = workload_submit(queue=qs["qa"], name="gang", replicas=300, task={"gpu": 1})
    with CaptureQueriesContext(connection) as ctx:
        out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED and out.bound == 300
    updates = [s for s in _task_writes(ctx) if s.lstrip().upper().startswith("UPDATE")]
    assert len(updates) == (1 if connection.vendor == "postgresql" else 300 // (900 // 4) + 1), updates
    assert not any("CASE" in sql.upper() for sql in updates)
    with CaptureQueriesContext(connection) as ctx:
        assert cycle_run(trigger="test").confirmed == 300
    assert len([s for s in _task_writes(ctx) if "UPDATE" in s.upper()]) >= 1
    assert set(Task.objects.filter(workload=w).values_list("state", flat=True)) == {TaskState.RUNNING}


# ----------------------------------------------------------------------------- PostgreSQL: locks and kills


def _other_connection(*, autocommit: bool = False):
    import psycopg

    db = connection.settings_dict
    return psycopg.connect(host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, user=db["USER"] or "postgres",
                           dbname=db["NAME"], autocommit=autocommit)


def _mixed_workload():
    nodes = make_cluster(nodes=1, gpus=8)
    qs = make_queues()
    return workload_import(queue=qs["qa"], name="mixed", tasks=[
        {"gpu": 1, "state": "Running", "node": nodes[0].name}, {"gpu": 1}, {"gpu": 1}])


def _states(w) -> list[str]:
    return list(Task.objects.filter(workload=w).order_by("index").values_list("state", flat=True))


@pytest.mark.postgres
@pytest.mark.skipif(not POSTGRES, reason="needs PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_requests_get_bounded_lock_and_statement_timeouts(settings):
    from django.db import transaction

    from queues_app.services.common import bound_request_locks

    with transaction.atomic():
        bound_request_locks()
        with connection.cursor() as cur:
            cur.execute("SHOW lock_timeout")
            lock = cur.fetchone()[0]
            cur.execute("SHOW statement_timeout")
            statement = cur.fetchone()[0]
    assert (lock, statement) == ("2s", "4s")
    with connection.cursor() as cur:  # SET LOCAL: gone after the transaction
        cur.execute("SHOW statement_timeout")
        assert cur.fetchone()[0] == "0"


@pytest.mark.postgres
@pytest.mark.skipif(not POSTGRES, reason="needs PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_a_cancel_that_times_out_on_a_lock_leaves_nothing_half_done(settings):
    settings.KAI_REQUEST_LOCK_TIMEOUT = 0.3
    w = _mixed_workload()
    running = Task.objects.get(workload=w, index=0)
    other = _other_connection()
    try:
        other.execute("SELECT 1 FROM queues_app_task WHERE id = %s FOR UPDATE", [running.pk])
        t0 = time.monotonic()
        with pytest.raises(OperationalError):  # the Pending -> Failed UPDATE ran; the second waited
            workload_cancel(workload=w)
        assert time.monotonic() - t0 < 3
    finally:
        other.rollback()
        other.close()
    assert _states(w) == [TaskState.RUNNING, TaskState.PENDING, TaskState.PENDING]
    assert Workload.objects.get(pk=w.pk).status != WorkloadStatus.CANCELLED


@pytest.mark.postgres
@pytest.mark.skipif(not POSTGRES, reason="needs PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_a_request_killed_mid_way_leaves_nothing_half_done():
    """A web worker SIGKILLed inside a cancel (its second UPDATE waits for a lock): PostgreSQL
    notices the dead client (client_connection_check_interval), rolls back and frees its locks."""
    w = _mixed_workload()
    running = Task.objects.get(workload=w, index=0)
    other = _other_connection()
    monitor = _other_connection(autocommit=True)  # pg_stat_activity is a snapshot inside a transaction
    db = connection.settings_dict
    env = {**os.environ, "DATABASE_URL": f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:"
                                         f"{db['PORT'] or 5432}/{db['NAME']}",
           "KAI_REQUEST_LOCK_TIMEOUT": "60", "KAI_REQUEST_STATEMENT_TIMEOUT": "60", "KAI_CYCLE_LOCK_TIMEOUT": "120"}
    code = ("from queues_app.models import Workload; from queues_app.services.workloads import workload_cancel; "
            f"workload_cancel(workload=Workload.objects.get(pk={w.pk}))")
    child = None
    try:
        other.execute("SELECT 1 FROM queues_app_task WHERE id = %s FOR UPDATE", [running.pk])
        child = subprocess.Popen([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        waiting = None
        for _ in range(200):  # until the child's UPDATE waits for our lock
            row = monitor.execute("SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND "
                                "query LIKE 'UPDATE%%queues_app_task%%'").fetchone()
            if row:
                waiting = row[0]
                break
            time.sleep(0.1)
        assert waiting is not None, "the child's cancel never reached its second UPDATE"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        for _ in range(100):  # the backend goes away within client_connection_check_interval (1 s)
            if monitor.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [waiting]).fetchone() is None:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the killed client's backend kept running")
    finally:
        if child is not None and child.poll() is None:
            child.kill()
        other.rollback()
        other.close()
        monitor.close()
    assert _states(w) == [TaskState.RUNNING, TaskState.PENDING, TaskState.PENDING]
    assert Workload.objects.get(pk=w.pk).status != WorkloadStatus.CANCELLED


@pytest.mark.django_db(transaction=True)
def test_the_capacity_guard_still_refuses_over_commitment_and_lets_frees_through():
    """Migration 0010 (PostgreSQL) checks only the nodes a statement leaves tasks holding: the
    same refusals as before (whole devices, shared fractions above one device), while a statement
    that only frees resources is not checked at all."""
    from django.db import DatabaseError, IntegrityError, transaction

    nodes = make_cluster(nodes=1, gpus=1)
    qs = make_queues()
    shared = workload_submit(queue=qs["qa"], name="shared", replicas=2, task={"gpu": 0.6})
    with pytest.raises((IntegrityError, DatabaseError), match="over-committed"):
        with transaction.atomic():
            Task.objects.filter(workload=shared).update(state=TaskState.RUNNING, node=nodes[0], gpu_groups=["g0"])
    whole = workload_submit(queue=qs["qb"], name="whole", replicas=2, task={"gpu": 1})
    with pytest.raises((IntegrityError, DatabaseError), match="over-committed"):
        with transaction.atomic():
            Task.objects.filter(workload=whole).update(state=TaskState.RUNNING, node=nodes[0])
    Task.objects.filter(workload=whole, index=0).update(state=TaskState.RUNNING, node=nodes[0])
    Task.objects.filter(workload=whole).update(state=TaskState.FAILED)  # frees: fine
    assert set(Task.objects.filter(workload=whole).values_list("state", flat=True)) == {TaskState.FAILED}


@pytest.mark.postgres
@pytest.mark.skipif(not POSTGRES, reason="needs PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_the_apply_s_queue_locks_let_rows_referencing_a_queue_through():
    """The load benchmark: the usage accounting (inserting usage rows: FOR KEY SHARE on their
    queues) and the cycle's apply (every queue row locked, in id order) deadlocked. The apply
    locks queues FOR NO KEY UPDATE now: a row referencing a queue goes in meanwhile, a quota
    edit (FOR UPDATE) still waits for the apply."""
    from types import SimpleNamespace

    import psycopg
    from django.db import transaction

    from queues_app.cycle.apply import lock_and_read_versions

    queue = make_queues()["qa"]
    other = _other_connection()
    try:
        other.execute("SET lock_timeout = '300ms'")
        with transaction.atomic():
            lock_and_read_versions(SimpleNamespace(writes={}, node_ids=set()))
            other.execute("SELECT 1 FROM queues_app_queue WHERE id = %s FOR KEY SHARE", [queue.pk])
            other.rollback()
            other.execute("SET lock_timeout = '300ms'")
            with pytest.raises(psycopg.errors.LockNotAvailable):
                other.execute("SELECT 1 FROM queues_app_queue WHERE id = %s FOR UPDATE", [queue.pk])
    finally:
        other.rollback()
        other.close()
