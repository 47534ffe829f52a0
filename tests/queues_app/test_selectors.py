"""Selectors: tenant scoping (alice/bob in team-a, charlie the outsider), filters validated
like any input, and list reads with a constant number of queries."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from queues_app import selectors
from queues_app.errors import ApplicationError
from queues_app.models import Queue, Workload
from queues_app.services import queue_set_quota, workload_submit
from tests.queues_app.factories import NodeFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def work(tenants, queue_tree):
    a = workload_submit(queue=queue_tree["a-train"], name="a1", tenant=tenants["team_a"], task={"gpu": 1})
    b = workload_submit(queue=queue_tree["b-train"], name="b1", tenant=tenants["team_b"], task={"gpu": 1})
    op = workload_submit(queue=queue_tree["b-train"], name="op1", task={"gpu": 2})
    return {"a": a, "b": b, "op": op}


class TenantScopeTests:
    def test_a_tenant_sees_only_its_workloads(self, tenants, work):
        assert [w.name for w in selectors.workload_list(tenant=tenants["team_a"])] == ["a1"]
        assert {w.name for w in selectors.workload_list(tenant=None)} == {"a1", "b1", "op1"}

    def test_an_outsider_cannot_fetch_another_tenants_workload(self, tenants, work):
        with pytest.raises(Workload.DoesNotExist):
            selectors.workload_get(tenant=tenants["team_b"], pk=work["a"].pk)
        assert selectors.workload_get(tenant=tenants["team_a"], pk=work["a"].pk).tasks.count() == 1

    def test_a_tenant_sees_its_granted_queues_only(self, tenants, queue_tree):
        assert [q.name for q in selectors.queue_list(tenant=tenants["team_a"])] == ["a-train"]
        with pytest.raises(Queue.DoesNotExist):
            selectors.queue_get(tenant=tenants["team_a"], name="b-train")
        assert len(selectors.queue_list(tenant=None)) == 5

    def test_tasks_events_and_history_are_scoped(self, tenants, work, queue_tree):
        assert {t.workload.name for t in selectors.task_list(tenant=tenants["team_b"])} == {"b1"}
        queue_set_quota(queue=queue_tree["b-train"], resource="gpu", quota=2)
        hist = selectors.quota_history(tenant=tenants["team_a"])
        assert hist.exists() and not hist.filter(queue_name="b-train").exists()

    def test_tenants_of_a_user(self, tenants):
        assert [t.name for t in selectors.tenant_list_for_user(user=tenants["charlie"])] == ["team-b"]
        assert [t.name for t in selectors.tenant_list_for_user(user=tenants["alice"])] == ["team-a"]


class FilterTests:
    def test_workload_filters(self, tenants, work):
        names = lambda f: sorted(w.name for w in selectors.workload_list(tenant=None, filters=f))  # noqa: E731
        assert names({"queue": "b-train"}) == ["b1", "op1"]
        assert names({"ancestor": "team-a-dept"}) == ["a1"]
        assert names({"ancestor": "root"}) == ["a1", "b1", "op1"]
        assert names({"tenant": "team-b"}) == ["b1"]
        assert names({"status": ["Pending"]}) == ["a1", "b1", "op1"]

    def test_queue_filters(self, queue_tree):
        names = lambda f: [q.name for q in selectors.queue_list(tenant=None, filters=f)]  # noqa: E731
        assert names({"leaf": "true"}) == ["a-train", "b-train"]
        assert names({"ancestor": "team-b-dept"}) == ["b-train"]
        assert names({"top_level": "true"}) == ["root"]

    def test_node_label_filter_with_dots_and_slashes(self):
        NodeFactory(name="x", labels={"topology.kubernetes.io/zone": "a"})
        NodeFactory(name="y", labels={"topology.kubernetes.io/zone": "b"})
        got = selectors.node_list(tenant=None, filters={"label": "topology.kubernetes.io/zone=b"})
        assert [n.name for n in got] == ["y"]

    @pytest.mark.parametrize("filters,field", [({"status": ["Exploded"]}, "status"),
                                               ({"priority__gte": "lots"}, "priority__gte"),
                                               ({"created_after": "never"}, "created_after")])
    def test_bad_filter_values_name_the_filter(self, filters, field, work):
        with pytest.raises(ApplicationError) as info:
            list(selectors.workload_list(tenant=None, filters=filters))
        assert field in info.value.extra

    def test_a_malformed_label_filter_is_an_error(self):
        with pytest.raises(ApplicationError) as info:
            list(selectors.node_list(tenant=None, filters={"label": "novalue"}))
        assert "label" in info.value.extra


class QueryBudgetTests:
    def _count(self, fn) -> int:
        with CaptureQueriesContext(connection) as ctx:
            rows = list(fn())
            for row in rows:  # touch what a list endpoint would serialize
                if isinstance(row, Queue):
                    _ = (row.parent, list(row.resources.all()), selectors.queue_status(queue=row))
                else:
                    _ = (row.queue.name, row.tenant, row.task_count)
        return len(ctx.captured_queries)

    def test_list_selectors_do_not_grow_with_rows(self, tenants, queue_tree):
        from queues_app.services import queue_create

        def grow(n: int, tag: str) -> None:
            for i in range(n):
                queue_create(name=f"{tag}-{i}", parent=queue_tree["team-b-dept"])
                workload_submit(queue=queue_tree["a-train"], name=f"{tag}-{i}", tenant=tenants["team_a"],
                                replicas=2, task={"gpu": 1})

        grow(2, "s")
        small = (self._count(lambda: selectors.queue_list(tenant=None)),
                 self._count(lambda: selectors.workload_list(tenant=tenants["team_a"])))
        grow(20, "l")
        assert (self._count(lambda: selectors.queue_list(tenant=None)),
                self._count(lambda: selectors.workload_list(tenant=tenants["team_a"]))) == small
