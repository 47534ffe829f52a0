"""The operators' dashboard (the admin's index) and the workload page, on the demo cluster with
cycles run: the figures it shows, the JSON its poller reads, and a query count that does not
grow with the number of nodes, queues' workloads or events."""
from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from queues_app import selectors
from queues_app.models import Node, Queue, QueueStatus, SchedulingEvent, Task, Workload
from queues_app.services import node_set_schedulable, node_upsert, workload_submit
from queues_app.cycle.run import cycle_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(db):
    call_command("load_demo", stdout=StringIO())
    for _ in range(2):
        cycle_run(trigger="test")
    return {q.name: q for q in Queue.objects.all()}


@pytest.fixture
def op_client(client, operator):
    client.force_login(operator)
    return client


def test_the_admin_index_is_the_dashboard(op_client, demo):
    resp = op_client.get(reverse("admin:index"))
    assert resp.status_code == 200
    html = resp.content.decode()
    ctx = resp.context
    # whole devices (issue #18.6): a shared device in use counts as one, whatever its fractions
    busy = Task.objects.filter(state__in=("Running", "Binding"))
    held = sum(float(t.gpu) for t in busy if t.gpu >= 1) + len(
        {(t.node_id, (t.gpu_groups or [""])[0]) for t in busy if 0 < t.gpu < 1 or (t.gpu == 0 and t.gpu_memory_mib)})
    assert ctx["gpus"]["in_use"] == pytest.approx(held) and ctx["gpus"]["total"] == 128
    assert ctx["gpus"]["idle"] == pytest.approx(128 - held)
    # every queue, in tree order, with one bar per resource
    assert [q["name"] for q in ctx["queues"]] == list(Queue.objects.order_by("path").values_list("name", flat=True))
    research = next(q for q in ctx["queues"] if q["name"] == "research")
    status = QueueStatus.objects.get(queue=demo["research"])
    assert status.allocated_gpu > 0  # a parent: its subtree's allocation, not 0
    assert research["bars"][0]["label"].startswith(f"{status.allocated_gpu:g} /")
    assert not research["leaf"] and research["pending"] == 1
    # the pending workload of the demo with the reason the last cycle gave
    [row] = ctx["pending_rows"]
    assert row["queue"] == "nlp" and row["pending"] == 1
    assert row["reasons"][0]["reason"] == "Unschedulable" and row["reasons"][0]["workload"] == "llm-sft-big"
    assert "llm-sft-big" in html and "Unschedulable" in html
    # node map: one link per node to its change page, grouped by rack
    assert [r["name"] for r in ctx["racks"]] == ["rack-1", "rack-2", "rack-3"]  # rack-3: the DRA-only pool
    node = Node.objects.get(name="dgx-rack-1-01")
    assert f'href="{reverse("admin:queues_app_node_change", args=[node.pk])}"' in html
    assert html.count('class="node u') >= 16
    assert ctx["cycles"][0]["status"] == "applied" and len(ctx["cycles"]) == 2
    assert "queues_app/dashboard.js" in html and "//cdn" not in html and "https://" not in html


def test_the_gpu_figures_add_up_with_releasing_cordoned_and_not_ready_nodes(op_client, demo):
    node_set_schedulable(node=Node.objects.get(name="dgx-rack-2-08"), schedulable=False)
    node_upsert(name="dgx-rack-2-07", gpus=8, ready=False)
    t = Task.objects.filter(state="Running").select_related("node").first()
    Task.objects.filter(pk=t.pk).update(state="Releasing")
    s = op_client.get(reverse("admin:index")).context["gpus"]
    parts = ("in_use", "releasing", "idle", "cordoned_idle", "not_ready", "reserved")
    assert sum(s[p] for p in parts) == pytest.approx(s["total"])
    assert s["not_ready"] == 8 and s["nodes_not_ready"] == 1 and s["nodes_cordoned"] == 1
    assert s["releasing"] == pytest.approx(float(t.gpu))


def test_the_json_endpoint_renders_the_same_sections_and_the_node_states(op_client, demo):
    resp = op_client.get(reverse("admin:dashboard_data"))
    assert resp.status_code == 200 and "no-store" in resp["Cache-Control"]
    body = resp.json()
    assert set(body["sections"]) == {"cards", "queues", "pending", "cycles"}
    assert "llm-sft-big" in body["sections"]["pending"] and "research" in body["sections"]["queues"]
    assert len(body["nodes"]) == 20 and all(len(n) == 3 for n in body["nodes"])  # 16 + the DRA pool
    assert "nodes_html" not in body
    assert 'data-node="' in op_client.get(reverse("admin:dashboard_data") + "?nodes=html").json()["nodes_html"]


def test_the_dashboard_needs_a_staff_login(client, demo):
    assert client.get(reverse("admin:dashboard_data")).status_code == 302
    assert client.get(reverse("admin:index")).status_code == 302


def test_the_dashboard_query_count_does_not_grow_with_the_cluster(op_client, demo, django_assert_max_num_queries):
    def count() -> int:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as ctx:
            assert op_client.get(reverse("admin:index")).status_code == 200
            assert op_client.get(reverse("admin:dashboard_data")).status_code == 200
        return len(ctx.captured_queries)

    before = count()
    for i in range(40):
        node_upsert(name=f"extra-{i}", gpus=8, labels={"kai.scheduler/rack": f"rack-{3 + i // 10}"})
    for i in range(30):
        workload_submit(queue=demo["vision"], name=f"more-{i}", task={"gpu": 16}, replicas=2)  # fits no node
    cycle_run(trigger="test")
    assert SchedulingEvent.objects.count() > 30
    assert count() == before <= 40


def test_the_workload_page_gives_the_api_s_why(op_client, demo):
    wl = Workload.objects.get(name="llm-sft-big")
    resp = op_client.get(reverse("admin:queues_app_workload_change", args=[wl.pk]))
    assert resp.status_code == 200
    html = resp.content.decode()
    from queues_app.selectors import workload_why

    why = workload_why(tenant=None, workload=wl)
    assert why["summary"].startswith("topology: no domain")  # the allocation verdict, not the last attempt
    assert why["summary"] in html.replace("&#x27;", "'")
    assert "1 of 1 pending in nlp" in html
    assert why["estimated_start_note"][:40] in html
    for reason in ("Unschedulable", "NotReclaiming", "NotPreempting"):
        assert reason in html
    assert "(2 cycles)" in html  # the same verdict of both cycles folded into one row
    running = Workload.objects.get(name="resnet-train")
    html = op_client.get(reverse("admin:queues_app_workload_change", args=[running.pk])).content.decode()
    assert "dgx-rack-1-01" in html and reverse("admin:queues_app_node_change", args=[
        Node.objects.get(name="dgx-rack-1-01").pk]) in html  # task -> its node, a link
    assert "Running since" in html


def test_selectors_partition_gpus_per_node():
    nodes = [
        {"gpus": 8, "in_use": 8, "releasing": 2, "pipelined": 2, "reserved": 0, "ready": True, "cordoned": False},
        {"gpus": 8, "in_use": 2, "releasing": 0, "pipelined": 0, "reserved": 1, "ready": True, "cordoned": True},
        {"gpus": 4, "in_use": 4, "releasing": 0, "pipelined": 0, "reserved": 0, "ready": False, "cordoned": False},
    ]
    s = selectors.cluster_gpu_summary(nodes)
    assert (s["in_use"], s["releasing"], s["idle"], s["cordoned_idle"], s["not_ready"], s["reserved"]) == (
        10, 0, 0, 5, 4, 1)
    assert s["pipelined"] == 2 and s["total"] == 20


def test_node_holdings_count_whole_devices_as_kai_and_the_engine_do(db):
    """Issue #18.6 (KAI node_info.addSharedGPUTaskResourcesPerPodGroup, contract "Statuses"): a
    shared device is in use while any of its fractions runs and releasing only once all of them
    release; whole-GPU tasks count their GPUs."""
    from tests.queues_app.cycle_helpers import make_cluster, make_queues, submit

    n0, n1 = make_cluster(nodes=2, gpus=4)
    qs = make_queues({"qa": 8})
    halves = submit(qs["qa"], "halves", replicas=2, gpu=0.5)
    quarters = submit(qs["qa"], "quarters", replicas=2, gpu=0.25)
    whole = submit(qs["qa"], "whole", replicas=1, gpu=2)
    h0, h1 = Task.objects.filter(workload=halves).order_by("index")
    q0, q1 = Task.objects.filter(workload=quarters).order_by("index")
    w0 = Task.objects.get(workload=whole)
    # n0: device 0 = one half running + one half releasing -> in use; whole 2-GPU task releasing
    Task.objects.filter(pk=h0.pk).update(state="Running", node=n0, gpu_groups=["0"])
    Task.objects.filter(pk=h1.pk).update(state="Releasing", node=n0, gpu_groups=["0"])
    Task.objects.filter(pk=w0.pk).update(state="Releasing", node=n0)
    # n1: device 0 = both quarters releasing -> one releasing device
    Task.objects.filter(pk__in=[q0.pk, q1.pk]).update(state="Releasing", node=n1, gpu_groups=["0"])
    held = selectors.node_gpu_holdings(tenant=None)
    assert held[n0.pk] == {"in_use": 1.0, "releasing": 2.0, "pipelined": 0.0}
    assert held[n1.pk] == {"in_use": 0.0, "releasing": 1.0, "pipelined": 0.0}
