"""Models and their database constraints: the last line of defence when app checks are bypassed."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction

from queues_app.choices import TaskState
from queues_app.models import Node, Queue, QueueResource, Task, Workload
from queues_app.services.nodes import node_upsert
from queues_app.services.queues import queue_create
from queues_app.services.workloads import workload_submit

pytestmark = pytest.mark.django_db


def _raw_fails(fn) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        fn()


class QueueConstraintTests:
    def test_it_creates_three_resource_rows_with_path_and_depth(self, queue_tree):
        leaf = queue_tree["a-train"]
        assert leaf.depth == 3
        assert leaf.path.startswith(queue_tree["team-a-dept"].path)
        assert set(leaf.resources.values_list("resource", flat=True)) == {"gpu", "cpu", "memory"}

    def test_it_refuses_duplicate_names_in_the_database(self, queue_tree):
        _raw_fails(lambda: Queue.objects.create(name="root"))

    def test_it_refuses_own_parent_in_the_database(self, queue_tree):
        q = queue_tree["root"]
        _raw_fails(lambda: Queue.objects.filter(pk=q.pk).update(parent_id=q.pk))

    @pytest.mark.parametrize("field", ["quota", "limit", "over_quota_weight"])
    def test_it_refuses_negative_other_than_minus_one(self, queue_tree, field):
        row = QueueResource.objects.get(queue=queue_tree["root"], resource="gpu")
        _raw_fails(lambda: QueueResource.objects.filter(pk=row.pk).update(**{field: Decimal("-2")}))
        QueueResource.objects.filter(pk=row.pk).update(**{field: Decimal("-1")})  # -1 is legal

    def test_it_refuses_a_second_row_per_resource(self, queue_tree):
        _raw_fails(lambda: QueueResource.objects.create(queue=queue_tree["root"], resource="gpu"))


class NodeConstraintTests:
    def test_it_refuses_negative_capacity(self):
        node, _ = node_upsert(name="n0", gpus=8, cpu_millis=64000, memory_bytes=2**30)
        _raw_fails(lambda: Node.objects.filter(pk=node.pk).update(cpu_millis=-1))
        _raw_fails(lambda: Node.objects.filter(pk=node.pk).update(reserved_gpus=Decimal(-1)))


class TaskConstraintTests:
    @pytest.fixture
    def task(self, queue_tree):
        wl = workload_submit(queue=queue_tree["a-train"], name="w", task={"gpu": 1, "cpu_millis": 1000})
        return wl.tasks.get()

    def test_it_refuses_running_without_a_node(self, task):
        _raw_fails(lambda: Task.objects.filter(pk=task.pk).update(state=TaskState.RUNNING))

    def test_it_refuses_pending_on_a_node(self, task):
        node, _ = node_upsert(name="n0", gpus=8)
        _raw_fails(lambda: Task.objects.filter(pk=task.pk).update(node=node))

    def test_it_allows_running_on_a_node_and_failed_keeping_it(self, task):
        node, _ = node_upsert(name="n0", gpus=8)
        Task.objects.filter(pk=task.pk).update(state=TaskState.RUNNING, node=node)
        Task.objects.filter(pk=task.pk).update(state=TaskState.FAILED)

    def test_it_refuses_negative_requests(self, task):
        _raw_fails(lambda: Task.objects.filter(pk=task.pk).update(gpu=Decimal("-0.5")))
        _raw_fails(lambda: Task.objects.filter(pk=task.pk).update(memory_bytes=-1))

    def test_it_refuses_an_unknown_state(self, task):
        _raw_fails(lambda: Task.objects.filter(pk=task.pk).update(state="Exploded"))

    def test_it_refuses_a_duplicate_workload_name_in_a_queue(self, task):
        _raw_fails(lambda: Workload.objects.create(queue=task.workload.queue, name="w"))
