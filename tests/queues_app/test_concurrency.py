"""Concurrent tree writes (reliability.md 2.9): two re-parents that are each valid alone
(A under B, B under A) must not both commit.

Thread 1 validates and writes its move, then holds its transaction open; thread 2 starts
only then.  With the tree lock, thread 2 waits for thread 1's commit and then sees the
cycle; without it, thread 2 would validate against the old tree and both would commit.
Needs real transactions and concurrent connections: PostgreSQL only (SQLite's test database
is a shared in-memory file that serializes differently).
"""
from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections

from queues_app.errors import ApplicationError
from queues_app.models import Queue
from queues_app.services import queue_create, queue_update
from queues_app.services import queues as queue_services

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres,
]


@pytest.fixture(autouse=True)
def _postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (DATABASE_URL=postgres://...)")


def test_two_crossing_reparents_cannot_both_commit(monkeypatch):
    root = queue_create(name="root")
    a = queue_create(name="a", parent=root)
    b = queue_create(name="b", parent=root)
    first_wrote = threading.Event()
    real_update = queue_services.model_update

    def slow_update(**kwargs):
        result = real_update(**kwargs)
        if threading.current_thread().name == "first":
            first_wrote.set()
            time.sleep(1.0)  # keep the transaction (and the tree lock) open
        return result

    monkeypatch.setattr(queue_services, "model_update", slow_update)
    outcome: dict[str, str] = {}

    def move(name: str, queue: Queue, parent: Queue) -> None:
        try:
            queue_update(queue=queue, data={"parent": parent})
            outcome[name] = "ok"
        except ApplicationError as exc:
            outcome[name] = str(exc)
        finally:
            connections.close_all()

    t1 = threading.Thread(target=move, args=("first", a, b), name="first")
    t2 = threading.Thread(target=move, args=("second", b, a), name="second")
    t1.start()
    assert first_wrote.wait(10)
    t2.start()
    t1.join(20)
    t2.join(20)
    assert outcome["first"] == "ok"
    assert outcome["second"] != "ok" and "cycle" in outcome["second"]
    parents = dict(Queue.objects.values_list("name", "parent__name"))
    assert parents == {"root": None, "a": "b", "b": "root"}


def test_a_child_and_a_workload_on_the_same_queue_cannot_both_commit(monkeypatch):
    from queues_app.services import workload_submit
    from queues_app.services import workloads as workload_services

    leaf = queue_create(name="leaf")
    first_wrote = threading.Event()
    real_validate = workload_services.validate

    def slow_validate(instance, **kwargs):
        real_validate(instance, **kwargs)
        if threading.current_thread().name == "first":
            first_wrote.set()
            time.sleep(1.0)

    monkeypatch.setattr(workload_services, "validate", slow_validate)
    outcome: dict[str, str] = {}

    def submit() -> None:
        try:
            workload_submit(queue=leaf, name="w", task={"gpu": 1})
            outcome["first"] = "ok"
        except ApplicationError as exc:
            outcome["first"] = str(exc)
        finally:
            connections.close_all()

    def add_child() -> None:
        try:
            queue_create(name="kid", parent=leaf)
            outcome["second"] = "ok"
        except ApplicationError as exc:
            outcome["second"] = str(exc)
        finally:
            connections.close_all()

    t1 = threading.Thread(target=submit, name="first")
    t2 = threading.Thread(target=add_child, name="second")
    t1.start()
    assert first_wrote.wait(10)
    t2.start()
    t1.join(20)
    t2.join(20)
    assert outcome["first"] == "ok" and "workloads" in outcome["second"]
    assert not Queue.objects.filter(name="kid").exists()
