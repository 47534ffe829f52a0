"""Services: validation errors name the field, nothing is written on error, audit and versions."""
from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from queues_app.choices import TaskState, WorkloadStatus
from queues_app.errors import ApplicationError
from queues_app.models import Node, Queue, QueueResource, QuotaChange, Task, Workload
from queues_app.services import (
    node_delete,
    node_upsert,
    queue_create,
    queue_delete,
    queue_set_quota,
    queue_update,
    tenant_create,
    tenant_grant_queue,
    tenant_update,
    workload_cancel,
    workload_import,
    workload_submit,
)
from tests.queues_app.factories import NodeFactory, QueueFactory, WorkloadFactory

pytestmark = pytest.mark.django_db


def _errors(fn) -> dict[str, list[str]]:
    with pytest.raises(ApplicationError) as info:
        fn()
    return info.value.extra


class QueueTreeTests:
    def test_it_rejects_making_a_queue_its_own_parent(self, queue_tree):
        root = queue_tree["root"]
        assert "parent" in _errors(lambda: queue_update(queue=root, data={"parent": root}))

    def test_it_rejects_a_cycle_through_a_descendant(self, queue_tree):
        errors = _errors(lambda: queue_update(queue=queue_tree["root"], data={"parent": queue_tree["a-train"]}))
        assert "cycle" in errors["parent"][0]
        assert Queue.objects.get(name="root").parent_id is None

    def test_it_moves_a_subtree_and_rewrites_paths(self, queue_tree):
        b_dept = queue_tree["team-b-dept"]
        queue_update(queue=b_dept, data={"parent": queue_tree["team-a-dept"]})
        b_train = Queue.objects.get(name="b-train")
        a_dept = Queue.objects.get(name="team-a-dept")
        assert b_train.depth == 4 and b_train.path.startswith(a_dept.path)
        # depth-first, siblings in creation order: the moved subtree stays contiguous
        assert [q.name for q in Queue.objects.order_by("path")] == [
            "root", "team-a-dept", "team-b-dept", "b-train", "a-train"]

    def test_it_rejects_children_under_a_queue_with_workloads(self, queue_tree):
        leaf = QueueFactory(name="leafy")
        WorkloadFactory(queue=leaf)
        errors = _errors(lambda: queue_create(name="kid", parent=leaf))
        assert "workloads" in errors["parent"][0]
        assert not Queue.objects.filter(name="kid").exists()

    def test_it_rejects_children_under_a_granted_queue(self, tenants, queue_tree):
        assert "granted" in _errors(lambda: queue_create(name="kid", parent=queue_tree["a-train"]))["parent"][0]

    def test_it_rejects_a_tree_deeper_than_the_limit(self, settings):
        settings.KAI_MAX_QUEUE_DEPTH = 3
        a = queue_create(name="l1")
        b = queue_create(name="l2", parent=a)
        c = queue_create(name="l3", parent=b)
        assert "levels deep" in _errors(lambda: queue_create(name="l4", parent=c))["parent"][0]
        # moving a two-level subtree under a depth-2 queue would give depth 4 as well
        other = queue_create(name="m1")
        assert "parent" in _errors(lambda: queue_update(queue=b, data={"parent": queue_create(name="m2", parent=other)}))

    def test_it_rejects_bad_names(self):
        assert "name" in _errors(lambda: queue_create(name="has space"))
        assert "name" in _errors(lambda: queue_create(name=""))
        assert "name" in _errors(lambda: queue_create(name="x" * 500))

    def test_it_refuses_to_delete_a_parent_a_queue_with_work_or_a_grant(self, tenants, queue_tree):
        assert "children" in _errors(lambda: queue_delete(queue=queue_tree["root"]))
        assert "tenants" in _errors(lambda: queue_delete(queue=queue_tree["a-train"]))
        leaf = QueueFactory()
        WorkloadFactory(queue=leaf)
        assert "workloads" in _errors(lambda: queue_delete(queue=leaf))

    def test_it_deletes_a_leaf_and_keeps_its_history(self):
        leaf = QueueFactory(name="gone")
        queue_delete(queue=leaf)
        assert not Queue.objects.filter(name="gone").exists()
        hist = QuotaChange.objects.filter(queue_name="gone")
        assert hist.filter(source="delete", new_value__isnull=True).count() == 9
        assert all(h.queue_id is None for h in hist)


class QuotaTests:
    @pytest.mark.parametrize("value", [-2, -0.5, float("nan"), float("inf"), float("-inf"), "nan", "Infinity",
                                       "abc", 10**30, True, None])
    @pytest.mark.parametrize("field", ["quota", "limit", "over_quota_weight"])
    def test_it_rejects_bad_values_with_the_field_name(self, queue_tree, field, value):
        q = queue_tree["a-train"]
        before = QuotaChange.objects.count()
        errors = _errors(lambda: queue_set_quota(queue=q, resource="gpu", **{field: value}))
        assert field in errors, errors
        assert QuotaChange.objects.count() == before
        assert QueueResource.objects.get(queue=q, resource="gpu").quota == Decimal(4)

    def test_it_rejects_an_absurd_memory_quota_on_create(self):
        errors = _errors(lambda: queue_create(name="big", quotas={"memory": {"limit": 2**80}}))
        assert "quotas.memory.limit" in errors
        assert not Queue.objects.filter(name="big").exists()

    def test_it_rejects_an_unknown_resource(self):
        assert "quotas" in _errors(lambda: queue_create(name="q", quotas={"tpu": {"quota": 1}}))
        q = QueueFactory()
        assert "resource" in _errors(lambda: queue_set_quota(queue=q, resource="tpu", quota=1))

    def test_it_accepts_minus_one_and_audits_old_and_new(self, queue_tree, operator):
        q = queue_tree["a-train"]
        version = q.version
        queue_set_quota(queue=q, resource="gpu", quota=6, limit=-1, actor=operator, source="api")
        change = QuotaChange.objects.filter(queue=q, source="api").get()
        assert (change.field, change.old_value, change.new_value) == ("quota", Decimal(4), Decimal(6))
        assert change.changed_by == operator and change.changed_by_name == "operator"
        assert Queue.objects.get(pk=q.pk).version == version + 1

    def test_it_writes_nothing_when_nothing_changes(self, queue_tree):
        q = queue_tree["a-train"]
        before = QuotaChange.objects.count()
        queue_set_quota(queue=q, resource="gpu", quota=4)
        assert QuotaChange.objects.count() == before


class NodeTests:
    @pytest.mark.parametrize("field,value", [("gpus", -1), ("cpu_millis", -5), ("memory_bytes", 2**70),
                                             ("reserved_gpus", Decimal("NaN")), ("labels", {"k": 5}),
                                             ("labels", ["x"]), ("gpus", 10**12)])
    def test_it_rejects_bad_capacity(self, field, value):
        assert field in _errors(lambda: node_upsert(name="n0", **{field: value}))
        assert not Node.objects.exists()

    def test_it_updates_by_name_and_bumps_the_version(self):
        n, created = node_upsert(name="n0", gpus=8)
        n2, created2 = node_upsert(name="n0", gpus=4)
        assert created and not created2 and n2.pk == n.pk and n2.version == n.version + 1

    def test_it_refuses_to_shrink_below_bound_tasks_or_delete_a_busy_node(self, queue_tree):
        NodeFactory(name="n0", gpus=8)
        workload_import(queue=queue_tree["a-train"], name="w", tasks=[
            {"gpu": 4, "state": "Running", "node": "n0"}])
        assert "gpus" in _errors(lambda: node_upsert(name="n0", gpus=2))
        assert "tasks" in _errors(lambda: node_delete(node=Node.objects.get(name="n0")))


class WorkloadTests:
    def test_it_submits_pending_tasks_with_defaults(self, queue_tree):
        w = workload_submit(queue=queue_tree["a-train"], name="train", replicas=3,
                            task={"gpu": 0.5, "cpu_millis": 500, "memory_bytes": 2**30})
        assert w.min_available == 3 and w.preemptible and w.status == WorkloadStatus.PENDING
        assert [t.name for t in w.tasks.order_by("index")] == ["train-0", "train-1", "train-2"]
        assert set(w.tasks.values_list("state", flat=True)) == {TaskState.PENDING}
        assert w.tasks.first().gpu == Decimal("0.5")

    def test_it_rejects_a_non_leaf_queue(self, queue_tree):
        errors = _errors(lambda: WorkloadFactory(queue=queue_tree["team-a-dept"]))
        assert "queue" in errors and "leaf" in errors["queue"][0]

    def test_it_rejects_a_queue_not_granted_to_the_tenant(self, tenants, queue_tree):
        errors = _errors(lambda: WorkloadFactory(queue=queue_tree["b-train"], tenant=tenants["team_a"]))
        assert "not granted" in errors["queue"][0]
        WorkloadFactory(queue=queue_tree["a-train"], tenant=tenants["team_a"])

    @pytest.mark.parametrize("spec,field", [
        ({"gpu": -1}, "tasks[0].gpu"), ({"gpu": float("nan")}, "tasks[0].gpu"), ({"gpu": 1e9}, "tasks[0].gpu"),
        ({"cpu_millis": -1}, "tasks[0].cpu_millis"), ({"memory_bytes": 2**80}, "tasks[0].memory_bytes"),
        ({"node_selector": {"a": 1}}, "tasks[0].node_selector"), ({"bogus": 1}, "tasks[0]"),
        ({"gpu": True}, "tasks[0].gpu"),
    ])
    def test_it_names_the_bad_task_field(self, queue_tree, spec, field):
        errors = _errors(lambda: workload_submit(queue=queue_tree["a-train"], name="w", tasks=[spec]))
        assert field in errors, errors
        assert not Workload.objects.exists() and not Task.objects.exists()

    @pytest.mark.parametrize("kwargs,field", [
        ({"min_available": 5}, "min_available"), ({"min_available": 0}, "min_available"),
        ({"priority": 10**30}, "priority"), ({"replicas": 0}, "replicas"), ({"replicas": 10**9}, "replicas"),
        ({"name": "bad name"}, "name"), ({"preemption_delay": timedelta(days=10**5)}, "preemption_delay"),
    ])
    def test_it_names_the_bad_workload_field(self, queue_tree, kwargs, field):
        base = {"queue": queue_tree["a-train"], "name": "w", "replicas": 2, "task": {"gpu": 1}}
        errors = _errors(lambda: workload_submit(**{**base, **kwargs}))
        assert field in errors, errors

    def test_it_rejects_a_duplicate_name_in_the_queue(self, queue_tree):
        WorkloadFactory(queue=queue_tree["a-train"], name="same")
        assert _errors(lambda: WorkloadFactory(queue=queue_tree["a-train"], name="same"))
        WorkloadFactory(queue=queue_tree["b-train"], name="same")  # other queue: fine

    def test_names_are_unique_per_tenant_and_queue(self, tenants, queue_tree):
        """Issue #16: another tenant's name in a shared queue is free (and never named in an
        error); the same tenant's, or an operator's twice, is a field error."""
        from queues_app.services import workload_submit
        from queues_app.services.tenants import tenant_grant_queue

        tenant_grant_queue(tenant=tenants["team_b"], queue=queue_tree["a-train"])
        submit = dict(queue=queue_tree["a-train"], name="same", task={"gpu": 1})
        workload_submit(**submit, tenant=tenants["team_a"])
        workload_submit(**submit, tenant=tenants["team_b"])
        workload_submit(**submit)  # no tenant (an operator)
        for tenant in (tenants["team_a"], tenants["team_b"], None):
            errors = _errors(lambda: workload_submit(**submit, tenant=tenant))
            assert errors == {"name": ["You already have a workload with this name in this queue."]}
        assert Workload.objects.filter(name="same").count() == 3

    def test_the_database_keeps_names_unique_per_tenant_and_queue(self, tenants, queue_tree):
        from django.db import IntegrityError, transaction

        WorkloadFactory(queue=queue_tree["a-train"], name="x", tenant=tenants["team_a"])
        WorkloadFactory(queue=queue_tree["a-train"], name="x", tenant=None)
        for tenant in (tenants["team_a"], None):
            with pytest.raises(IntegrityError), transaction.atomic():
                Workload.objects.create(queue=queue_tree["a-train"], name="x", tenant=tenant)
        Workload.objects.create(queue=queue_tree["a-train"], name="x", tenant=tenants["team_b"])

    def test_it_cancels_pending_and_running_tasks(self, queue_tree):
        NodeFactory(name="n0")
        w = workload_import(queue=queue_tree["a-train"], name="w", tasks=[
            {"gpu": 1, "state": "Running", "node": "n0"}, {"gpu": 1}])
        assert w.status == WorkloadStatus.RUNNING
        w = workload_cancel(workload=w)
        states = dict(w.tasks.values_list("index", "state"))
        assert w.status == WorkloadStatus.CANCELLED and states == {0: TaskState.RELEASING, 1: TaskState.FAILED}
        assert workload_cancel(workload=w).version == w.version  # idempotent

    def test_import_rejects_state_without_node(self, queue_tree):
        errors = _errors(lambda: workload_import(queue=queue_tree["a-train"], name="w", tasks=[
            {"gpu": 1, "state": "Running"}]))
        assert "tasks[0].node" in errors

    def test_grant_rejects_inner_queue(self, tenants, queue_tree):
        assert "queues" in _errors(lambda: tenant_grant_queue(tenant=tenants["team_a"], queue=queue_tree["root"]))


# Malformed input of every kind: always an ApplicationError (-> 400), never a crash (-> 500).
BAD_INPUTS = [
    lambda q: node_upsert(name="n", gpus="abc"),
    lambda q: node_upsert(name="", gpus=1),
    lambda q: node_upsert(name=None, gpus=1),
    lambda q: node_upsert(name="n", labels="x"),
    lambda q: workload_submit(queue=q, name="w", task={"gpu": "1e400"}),
    lambda q: workload_submit(queue=q, name="w", task={"gpu": "abc"}),
    lambda q: workload_submit(queue=q, name="w", tasks="abc"),
    lambda q: workload_submit(queue=q, name="w", tasks=[1, 2]),
    lambda q: workload_submit(queue=q, name=None, task={"gpu": 1}),
    lambda q: workload_submit(queue=q, name="w", task={"gpu": 1}, priority="high"),
    lambda q: workload_submit(queue=q, name="w", task={"gpu": 1}, min_available=2.5),
    lambda q: workload_submit(queue=q, name="w", task={"cpu_millis": 1.5}),
    lambda q: workload_submit(queue=q, name="w", task={"cpu_millis": "x"}),
    lambda q: workload_submit(queue=q, name="w", task={"gpu_memory_mib": -5}),
    lambda q: workload_submit(queue=q, name="w", task={"gpu": 1}, node_selector={"a": ["b"]}),
    lambda q: workload_submit(queue=q, name="w", task={"gpu": 1}, topology_required="x" * 1000),
    lambda q: queue_create(name="z", priority="x"),
    lambda q: queue_create(name="z", priority=10**40),
    lambda q: queue_create(name="z", quotas="gpu"),
    lambda q: queue_create(name="z", quotas={"gpu": 5}),
    lambda q: queue_create(name="z", quotas={"gpu": {"quota": [1]}}),
    lambda q: queue_update(queue=q, data={"priority": "x"}),
    lambda q: queue_update(queue=q, data={"name": ""}),
    lambda q: queue_set_quota(queue=q, resource="gpu", quota={"a": 1}),
    lambda q: tenant_create(name="bad name"),
    lambda q: tenant_update(tenant=tenant_create(name="t1"), data={"name": ""}),
]


@pytest.mark.parametrize("case", range(len(BAD_INPUTS)))
def test_malformed_input_is_an_application_error(case, queue_tree):
    with pytest.raises(ApplicationError) as info:
        BAD_INPUTS[case](queue_tree["a-train"])
    assert info.value.extra
