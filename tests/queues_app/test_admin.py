"""Operator admin through the test client: the tree changelist, the change form with inline
quotas and their audit history, and writes that go through the services."""
from __future__ import annotations

from decimal import Decimal
from html.parser import HTMLParser

import pytest
from django.urls import reverse

from queues_app.models import Node, Queue, QueueResource, QueueStatus, QuotaChange, Tenant, Workload
from queues_app.services import node_upsert, workload_import
from tests.queues_app.factories import NodeFactory, WorkloadFactory

pytestmark = pytest.mark.django_db


class _FormFields(HTMLParser):
    """Collects the values a browser would submit for the first <form id=..._form>."""

    def __init__(self) -> None:
        super().__init__()
        self.data: dict[str, list[str]] = {}
        self._select: str | None = None
        self._textarea: str | None = None
        self._multiple = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        name = a.get("name")
        if tag == "input" and name and a.get("type") not in ("submit", "button", "file"):
            if a.get("type") in ("checkbox", "radio") and "checked" not in a:
                return
            self.data.setdefault(name, []).append(a.get("value", "on" if a.get("type") == "checkbox" else ""))
        elif tag == "select" and name:
            self._select = name
            self.data.setdefault(name, [])
        elif tag == "option" and self._select and "selected" in a:
            self.data[self._select].append(a.get("value", ""))
        elif tag == "textarea" and name:
            self._textarea = name
            self.data[name] = [""]

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None
        if tag == "textarea":
            self._textarea = None

    def handle_data(self, data):
        if self._textarea:
            self.data[self._textarea][0] += data


def form_data(response) -> dict[str, list[str]]:
    parser = _FormFields()
    parser.feed(response.content.decode())
    return {k: v for k, v in parser.data.items() if k != "csrfmiddlewaretoken"}


@pytest.fixture
def admin_client_op(client, operator):
    client.force_login(operator)
    return client


class QueueChangelistTests:
    def test_it_lists_the_tree_depth_first_with_indentation_and_status(self, admin_client_op, queue_tree):
        QueueStatus.objects.create(queue=queue_tree["a-train"], allocated_gpu=3, fair_share_gpu=2.5)
        resp = admin_client_op.get(reverse("admin:queues_app_queue_changelist"))
        assert resp.status_code == 200
        html = resp.content.decode()
        positions = [html.index(f"<strong>{n}</strong>") for n in
                     ("root", "team-a-dept", "a-train", "team-b-dept", "b-train")]
        assert positions == sorted(positions)
        assert 'padding-left:3.0em">└ <strong>a-train' in html
        assert "2.5" in html  # fair share column
        assert "a-train" in html and "team-a-dept" in html  # children column of the depts

    def test_it_runs_a_constant_number_of_queries(self, admin_client_op, queue_tree, django_assert_max_num_queries):
        from queues_app.services import queue_create

        for i in range(20):
            queue_create(name=f"extra-{i}", parent=queue_tree["root"])
        with django_assert_max_num_queries(15):
            assert admin_client_op.get(reverse("admin:queues_app_queue_changelist")).status_code == 200


class QueueChangeFormTests:
    def url(self, queue):
        return reverse("admin:queues_app_queue_change", args=[queue.pk])

    def test_it_shows_inline_quotas_children_and_history(self, admin_client_op, queue_tree):
        resp = admin_client_op.get(self.url(queue_tree["team-a-dept"]))
        html = resp.content.decode()
        assert resp.status_code == 200
        assert 'name="resources-0-quota"' in html and 'name="resources-2-limit"' in html
        assert "quota history" in html.lower()
        assert "root / team-a-dept" in html  # position in the tree
        assert reverse("admin:queues_app_queue_change", args=[queue_tree["a-train"].pk]) in html

    def test_it_saves_a_quota_edit_through_the_service_with_the_acting_user(self, admin_client_op, queue_tree,
                                                                             operator):
        q = queue_tree["a-train"]
        data = form_data(admin_client_op.get(self.url(q)))
        idx = [i for i in range(3) if data[f"resources-{i}-id"] == [str(QueueResource.objects.get(
            queue=q, resource="gpu").pk)]][0]
        data[f"resources-{idx}-quota"] = ["6"]
        resp = admin_client_op.post(self.url(q), data)
        assert resp.status_code == 302, resp.content.decode()[:2000]
        assert QueueResource.objects.get(queue=q, resource="gpu").quota == Decimal(6)
        change = QuotaChange.objects.filter(queue=q, source="admin").get()
        assert (change.old_value, change.new_value, change.changed_by) == (Decimal(4), Decimal(6), operator)
        html = admin_client_op.get(self.url(q)).content.decode()
        assert "operator" in html  # visible in the history inline

    def test_it_shows_field_errors_for_bad_quotas_and_writes_nothing(self, admin_client_op, queue_tree):
        q = queue_tree["a-train"]
        data = form_data(admin_client_op.get(self.url(q)))
        data["resources-0-limit"] = ["-3"]
        data["resources-1-quota"] = ["NaN"]
        resp = admin_client_op.post(self.url(q), data)
        assert resp.status_code == 200
        html = resp.content.decode()
        assert "no other negative value" in html
        assert "errornote" in html
        assert not QuotaChange.objects.filter(source="admin").exists()

    def test_it_rejects_a_cycle_as_a_parent_field_error(self, admin_client_op, queue_tree):
        root = queue_tree["root"]
        data = form_data(admin_client_op.get(self.url(root)))
        data["parent"] = [str(queue_tree["a-train"].pk)]
        resp = admin_client_op.post(self.url(root), data)
        assert resp.status_code == 200
        assert "would form a cycle" in resp.content.decode()
        assert Queue.objects.get(pk=root.pk).parent_id is None

    def test_it_creates_a_queue_through_the_service(self, admin_client_op, queue_tree):
        url = reverse("admin:queues_app_queue_add")
        data = form_data(admin_client_op.get(url))
        data.update({"name": ["new-leaf"], "parent": [str(queue_tree["team-b-dept"].pk)], "priority": ["10"]})
        resp = admin_client_op.post(url, data)
        assert resp.status_code == 302, resp.content.decode()[:3000]
        q = Queue.objects.get(name="new-leaf")
        assert q.depth == 3 and q.resources.count() == 3
        assert QuotaChange.objects.filter(queue=q, changed_by_name="operator").count() == 9

    def test_deleting_a_granted_queue_shows_an_error_not_a_500(self, admin_client_op, tenants, queue_tree):
        q = queue_tree["a-train"]
        resp = admin_client_op.post(reverse("admin:queues_app_queue_delete", args=[q.pk]), {"post": "yes"})
        assert resp.status_code == 302
        assert Queue.objects.filter(pk=q.pk).exists()
        follow = admin_client_op.get(resp["Location"])
        assert "revoke the grants first" in follow.content.decode()


class OtherAdminPagesTests:
    def test_nodes_are_browsable_and_filterable(self, admin_client_op, queue_tree):
        NodeFactory(name="gpu-a", gpus=8)
        node_upsert(name="gpu-b", gpus=4, unschedulable=True)
        workload_import(queue=queue_tree["a-train"], name="w", tasks=[{"gpu": 3, "state": "Running", "node": "gpu-a"}])
        url = reverse("admin:queues_app_node_changelist")
        html = admin_client_op.get(url).content.decode()
        assert "gpu-a" in html and "gpu-b" in html
        html = admin_client_op.get(url + "?unschedulable__exact=1").content.decode()
        assert "gpu-b" in html and "gpu-a" not in html

    def test_node_edit_goes_through_node_upsert(self, admin_client_op):
        node = NodeFactory(name="n0", gpus=8)
        url = reverse("admin:queues_app_node_change", args=[node.pk])
        data = form_data(admin_client_op.get(url))
        data["gpus"] = ["-1"]
        assert admin_client_op.post(url, data).status_code == 200  # form error
        data["gpus"] = ["4"]
        assert admin_client_op.post(url, data).status_code == 302
        assert Node.objects.get(pk=node.pk).gpus == 4 and Node.objects.get(pk=node.pk).version == node.version + 1

    def test_workloads_are_browsable_filterable_and_cancellable(self, admin_client_op, queue_tree, tenants):
        w = WorkloadFactory(queue=queue_tree["a-train"], tenant=tenants["team_a"], name="alpha")
        WorkloadFactory(queue=queue_tree["b-train"], tenant=tenants["team_b"], name="beta")
        url = reverse("admin:queues_app_workload_changelist")
        html = admin_client_op.get(url + f"?tenant__id__exact={tenants['team_a'].pk}").content.decode()
        assert "alpha" in html and "beta" not in html
        assert admin_client_op.get(reverse("admin:queues_app_workload_change", args=[w.pk])).status_code == 200
        resp = admin_client_op.post(url, {"action": "cancel", "_selected_action": [str(w.pk)]})
        assert resp.status_code == 302
        assert Workload.objects.get(pk=w.pk).status == "Cancelled"

    def test_cancelling_a_selection_with_a_finished_workload_changes_nothing(self, admin_client_op, queue_tree,
                                                                             tenants):
        w = WorkloadFactory(queue=queue_tree["a-train"], tenant=tenants["team_a"], name="alpha")
        done = WorkloadFactory(queue=queue_tree["a-train"], tenant=tenants["team_a"], name="omega")
        Workload.objects.filter(pk=done.pk).update(status="Succeeded")
        url = reverse("admin:queues_app_workload_changelist")
        resp = admin_client_op.post(url, {"action": "cancel", "_selected_action": [str(w.pk), str(done.pk)]},
                                    follow=True)
        assert resp.status_code == 200
        assert "omega (succeeded)" in resp.content.decode()
        assert Workload.objects.get(pk=w.pk).status != "Cancelled"

    def test_tenant_admin_grants_only_leaves(self, admin_client_op, queue_tree, tenants):
        url = reverse("admin:queues_app_tenant_change", args=[tenants["team_a"].pk])
        data = form_data(admin_client_op.get(url))
        data["queues"] = [str(queue_tree["root"].pk)]
        resp = admin_client_op.post(url, data)
        assert resp.status_code == 200 and "Only leaf queues" in resp.content.decode()
        data["queues"] = [str(queue_tree["a-train"].pk), str(queue_tree["b-train"].pk)]
        assert admin_client_op.post(url, data).status_code == 302
        assert set(Tenant.objects.get(pk=tenants["team_a"].pk).queues.values_list("name", flat=True)) == {
            "a-train", "b-train"}

    @pytest.mark.parametrize("model", ["quotachange", "queuestatus", "task", "schedulingcycle", "schedulingevent",
                                       "heartbeat", "tenant"])
    def test_read_only_pages_render(self, admin_client_op, queue_tree, model):
        assert admin_client_op.get(reverse(f"admin:queues_app_{model}_changelist")).status_code == 200

    def test_anonymous_users_are_sent_to_login(self, client):
        resp = client.get(reverse("admin:queues_app_queue_changelist"))
        assert resp.status_code == 302 and "/login/" in resp["Location"]

    def test_a_post_without_csrf_token_is_rejected(self, operator, queue_tree):
        from django.test import Client

        c = Client(enforce_csrf_checks=True)
        c.force_login(operator)
        resp = c.post(reverse("admin:queues_app_queue_change", args=[queue_tree["root"].pk]), {"name": "x"})
        assert resp.status_code == 403


class UnitsAndMessagesTests:
    """Figures people can read: GiB, cores, "unlimited", resource names; messages after actions;
    a warning (never a refusal) when the child queues' quotas exceed their parent's."""

    def url(self, queue):
        return reverse("admin:queues_app_queue_change", args=[queue.pk])

    def test_the_quota_table_names_resources_and_shows_human_units(self, admin_client_op, queue_tree):
        from queues_app.services import queue_set_quota

        q = queue_tree["a-train"]
        queue_set_quota(queue=q, resource="memory", quota=512 * 2**30, limit=-1)
        QueueStatus.objects.create(queue=q, allocated_memory=506806140928, allocated_cpu=88, allocated_gpu=3)
        html = admin_client_op.get(self.url(q)).content.decode()
        assert f"{q.pk}:cpu" not in html and f"{q.pk}:memory" not in html  # the old row labels
        assert "-1.0000" not in html and "506806140928" not in html
        assert 'value="512"' in html and 'value="unlimited"' in html  # memory quota in GiB, limits unlimited
        assert "472 GiB" in html  # 506806140928 bytes allocated
        assert "88 cores" in html
        for label in (">GPU", ">CPU", ">Memory"):
            assert label in html

    def test_memory_is_typed_in_gib_or_as_a_quantity_and_unlimited_as_a_word(self, admin_client_op, queue_tree):
        q = queue_tree["a-train"]
        data = form_data(admin_client_op.get(self.url(q)))
        rows = {QueueResource.objects.get(pk=int(data[f"resources-{i}-id"][0])).resource: i for i in range(3)}
        data[f"resources-{rows['memory']}-quota"] = ["256"]
        data[f"resources-{rows['memory']}-limit"] = ["2Ti"]
        data[f"resources-{rows['cpu']}-limit"] = ["500m"]
        data[f"resources-{rows['gpu']}-limit"] = ["unlimited"]
        resp = admin_client_op.post(self.url(q), data)
        assert resp.status_code == 302, resp.content.decode()[:3000]
        mem = QueueResource.objects.get(queue=q, resource="memory")
        assert (mem.quota, mem.limit) == (256 * 2**30, 2 * 2**40)
        assert QueueResource.objects.get(queue=q, resource="cpu").limit == Decimal("0.5")
        assert QueueResource.objects.get(queue=q, resource="gpu").limit == -1
        # untouched rows and values are not re-saved: only the three edits are audited
        assert sorted(QuotaChange.objects.filter(source="admin").values_list("resource", "field")) == [
            ("cpu", "limit"), ("memory", "limit"), ("memory", "quota")]

    def test_a_bad_unit_is_a_field_error(self, admin_client_op, queue_tree):
        q = queue_tree["a-train"]
        data = form_data(admin_client_op.get(self.url(q)))
        rows = {QueueResource.objects.get(pk=int(data[f"resources-{i}-id"][0])).resource: i for i in range(3)}
        data[f"resources-{rows['memory']}-quota"] = ["12 parsecs"]
        resp = admin_client_op.post(self.url(q), data)
        assert resp.status_code == 200 and "Enter GiB" in resp.content.decode()
        assert not QuotaChange.objects.filter(source="admin").exists()

    def test_children_quotas_over_the_parent_s_are_saved_with_a_warning(self, admin_client_op):
        from queues_app.services import queue_create

        research = queue_create(name="research", quotas={"gpu": {"quota": 64}})
        queue_create(name="vision", parent=research, quotas={"gpu": {"quota": 40}})
        nlp = queue_create(name="nlp", parent=research, quotas={"gpu": {"quota": 32}})
        data = form_data(admin_client_op.get(self.url(nlp)))
        rows = {QueueResource.objects.get(pk=int(data[f"resources-{i}-id"][0])).resource: i for i in range(3)}
        data[f"resources-{rows['gpu']}-quota"] = ["100"]
        resp = admin_client_op.post(self.url(nlp), data, follow=True)
        assert resp.status_code == 200
        assert QueueResource.objects.get(queue=nlp, resource="gpu").quota == 100  # saved, not refused
        shown = [str(m) for m in resp.context["messages"]]
        assert any("add up to 140 GPUs (nlp 100 + vision 40)" in m and "research's own quota of 64 GPUs" in m
                   for m in shown), shown
        page = admin_client_op.get(self.url(research)).content.decode()
        assert "add up to 140 GPUs" in page  # also on the parent's page

    def test_cordon_and_uncordon_say_what_they_did(self, admin_client_op):
        node = NodeFactory(name="dgx-1", gpus=8)
        url = reverse("admin:queues_app_node_changelist")
        resp = admin_client_op.post(url, {"action": "cordon", "_selected_action": [str(node.pk)]}, follow=True)
        shown = [str(m) for m in resp.context["messages"]]
        assert any(m.startswith("Cordoned 1 node (dgx-1)") for m in shown), shown
        assert Node.objects.get(pk=node.pk).unschedulable
        resp = admin_client_op.post(url, {"action": "uncordon", "_selected_action": [str(node.pk)]}, follow=True)
        assert any(str(m).startswith("Uncordoned 1 node (dgx-1)") for m in resp.context["messages"])

    def test_deleting_selected_nodes_goes_through_the_bulk_service(self, admin_client_op, queue_tree):
        a, b, busy = (NodeFactory(name=n, gpus=8) for n in ("idle-1", "idle-2", "busy-1"))
        workload_import(queue=queue_tree["a-train"], name="w", tasks=[{"gpu": 1, "state": "Running",
                                                                        "node": "busy-1"}])
        url = reverse("admin:queues_app_node_changelist")
        resp = admin_client_op.post(url, {"action": "delete_selected", "post": "yes",
                                          "_selected_action": [str(a.pk), str(busy.pk)]}, follow=True)
        assert resp.status_code == 200 and "Cannot delete nodes" in resp.content.decode()  # a task is bound
        assert Node.objects.filter(name__in=["idle-1", "busy-1"]).count() == 2
        resp = admin_client_op.post(url, {"action": "delete_selected", "post": "yes",
                                          "_selected_action": [str(a.pk), str(b.pk)]}, follow=True)
        assert any(str(m) == "Successfully deleted 2 nodes." for m in resp.context["messages"])
        assert list(Node.objects.values_list("name", flat=True)) == ["busy-1"]

    def test_nodes_and_tasks_show_cores_and_gib(self, admin_client_op, queue_tree):
        node_upsert(name="n1", gpus=8, cpu_millis=128_000, memory_bytes=1024 * 2**30, gpu_memory_mib=81920)
        w = workload_import(queue=queue_tree["a-train"], name="w", tasks=[
            {"gpu": 2, "cpu_millis": 8000, "memory_bytes": 64 * 2**30, "state": "Running", "node": "n1"}])
        html = admin_client_op.get(reverse("admin:queues_app_node_changelist")).content.decode()
        assert "128 cores" in html and "1,024 GiB" in html and "80 GiB" in html
        html = admin_client_op.get(reverse("admin:queues_app_workload_change", args=[w.pk])).content.decode()
        assert "8 cores" in html and "64 GiB" in html and "68719476736" not in html

    def test_node_capacity_is_typed_in_cores_and_gib(self, admin_client_op):
        url = reverse("admin:queues_app_node_add")
        data = form_data(admin_client_op.get(url))
        data.update({"name": ["dgx-9"], "gpus": ["8"], "cpu_millis": ["128"], "memory_bytes": ["1024"],
                     "gpu_memory_mib": ["80"], "reserved_cpu_millis": ["500m"], "reserved_memory_bytes": ["512Mi"],
                     "labels": ["{}"], "reserved_gpus": ["0"]})
        resp = admin_client_op.post(url, data)
        assert resp.status_code == 302, resp.content.decode()[:3000]
        n = Node.objects.get(name="dgx-9")
        assert (n.cpu_millis, n.memory_bytes, n.gpu_memory_mib) == (128_000, 1024 * 2**30, 81920)
        assert (n.reserved_cpu_millis, n.reserved_memory_bytes) == (500, 512 * 2**20)
        change = reverse("admin:queues_app_node_change", args=[n.pk])
        html = admin_client_op.get(change).content.decode()
        assert 'value="128"' in html and 'value="1024"' in html and 'value="0.5"' in html and 'value="80"' in html
        data = form_data(admin_client_op.get(change))
        data["memory_bytes"] = ["lots"]
        resp = admin_client_op.post(change, data)
        assert resp.status_code == 200 and "Enter GiB" in resp.content.decode()
