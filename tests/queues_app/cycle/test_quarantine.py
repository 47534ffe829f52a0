"""Issue 16 (2): a bad row never stops the cycle.

Whatever reaches the database without the services' checks (raw SQL, an old migration, a pod
with odd annotations), the cycle asks the engine's contract, leaves out what it refuses --
workloads stay where they are with an ``Invalid`` event and ``status_message``
(``Invalid: <field>: <why>``), a refused queue with its whole subtree and their workloads, a
refused node with the workloads on it -- and schedules everything else.  Before, one such row
made every cycle fail (``ScenarioError: jobs[N].tasks[0].gpu: ...``) for every tenant.
"""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queues_app.choices import CycleStatus, TaskState, WorkloadStatus
from queues_app.invariants import check_invariants
from queues_app.models import Node, Queue, QueueResource, SchedulingCycle, SchedulingEvent, Task, Workload
from queues_app.cycle.run import cycle_run
from queues_app.services.workloads import workload_cancel
from tests.queues_app.cycle_helpers import make_cluster, make_queues, states, submit

pytestmark = pytest.mark.django_db


def _invalid_events(workload) -> list[str]:
    return list(SchedulingEvent.objects.filter(workload=workload, reason="Invalid").values_list("message", flat=True))


@pytest.fixture
def cluster():
    make_cluster(nodes=2, gpus=4)
    return make_queues()


def test_a_task_of_1_5_gpus_written_by_sql_is_quarantined_and_the_rest_is_scheduled(cluster):
    bad = submit(cluster["qa"], "bad")
    good = [submit(cluster["qb"], f"good-{i}") for i in range(3)]
    Task.objects.filter(workload=bad).update(gpu=Decimal("1.5"))  # raw SQL: no service checks
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED, out.reason
    assert out.bound == 3 and out.quarantined == 1
    assert all(states(w) == [TaskState.BINDING] for w in good)
    assert states(bad) == [TaskState.PENDING]
    why = "Invalid: tasks[0].gpu: a request above 1 gpu must be whole devices, got 1.5"
    assert _invalid_events(bad) == [why]
    bad.refresh_from_db()
    assert bad.status == WorkloadStatus.PENDING and bad.status_message == why
    cycle = SchedulingCycle.objects.get(pk=out.cycle_id)
    assert cycle.quarantined_count == 1 and "quarantined 1 workload(s)" in cycle.error
    assert check_invariants() == []
    # every following cycle too (the issue saw 15 failed cycles in a row)
    for _ in range(3):
        assert cycle_run(trigger="test").status == CycleStatus.APPLIED


def test_gpu_and_gpu_memory_together_is_quarantined(cluster):
    bad = submit(cluster["qa"], "bad")
    Task.objects.filter(workload=bad).update(gpu_memory_mib=1000)
    assert cycle_run(trigger="test").status == CycleStatus.APPLIED
    assert _invalid_events(bad) == ["Invalid: tasks[0].gpu_memory_mib: set either gpu or gpuMemory, not both"]


def test_why_pending_names_the_quarantine(tenants, queue_tree):
    from rest_framework.test import APIClient

    from queues_app.services.tenants import api_token_issue

    make_cluster(nodes=1, gpus=8)
    w = submit(queue_tree["a-train"], "bad", tenant=tenants["team_a"])
    Task.objects.filter(workload=w).update(gpu=Decimal("2.5"))
    assert cycle_run(trigger="test").status == CycleStatus.APPLIED
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=tenants['alice'])}")
    body = client.get(f"/api/v1/workloads/{w.pk}/why/").json()
    assert body["summary"] == "Invalid: tasks[0].gpu: a request above 1 gpu must be whole devices, got 2.5"
    assert body["events"][0]["reason"] == "Invalid"
    detail = client.get(f"/api/v1/workloads/{w.pk}/").json()
    assert detail["status"] == "Pending" and detail["status_message"].startswith("Invalid: tasks[0].gpu")


def test_a_queue_quota_the_engine_refuses_quarantines_its_subtree_and_their_workloads(cluster):
    from queues_app.services.queues import queue_create

    child = queue_create(name="qa-child", parent=cluster["qa"])  # qa is now an inner queue
    grandchild = queue_create(name="qa-grandchild", parent=child)
    deep = submit(grandchild, "deep")
    ok = submit(cluster["qb"], "ok")
    QueueResource.objects.filter(queue=cluster["qa"], resource="memory").update(quota=Decimal(2**70))
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED and states(ok) == [TaskState.BINDING]
    assert states(deep) == [TaskState.PENDING]
    [message] = _invalid_events(deep)
    assert message.startswith("Invalid: queue: queue 'qa-grandchild' is under queue 'qa', which is refused: "
                              "quotas.memory.quota: is too large"), message
    cycle = SchedulingCycle.objects.get(pk=out.cycle_id)
    assert cycle.error.count("queue ") >= 3 and "quotas.memory.quota" in cycle.error  # qa and both children


def test_held_resources_of_a_quarantined_running_workload_stay_taken(cluster):
    """A refused workload that runs still holds its GPUs: nothing is placed on top of them."""
    make_cluster(nodes=1, gpus=4, prefix="solo")  # n0, n1 (4 GPUs) + solo0
    Node.objects.filter(name__in=["n0", "n1"]).update(unschedulable=True)
    running = submit(cluster["qa"], "running", replicas=4)
    assert cycle_run(trigger="test").bound == 4
    cycle_run(trigger="test")
    assert set(states(running)) == {TaskState.RUNNING}
    Task.objects.filter(workload=running).update(node_selector={"not a key": "x"})
    newcomer = submit(cluster["qb"], "newcomer")
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED and out.quarantined == 1
    assert states(newcomer) == [TaskState.PENDING]  # solo0's 4 GPUs are still held
    assert check_invariants() == []
    Task.objects.filter(workload=running).update(node_selector={})  # fixed: back in the snapshot
    out = cycle_run(trigger="test")
    assert out.quarantined == 0
    running.refresh_from_db()
    assert running.status_message == "" and running.status == WorkloadStatus.RUNNING


def test_confirmations_still_reach_a_quarantined_workload(cluster):
    """Cancelling the refused workload (the issue's only way out) still finishes: its pods are
    confirmed gone although the engine never sees it."""
    w = submit(cluster["qa"], "w", replicas=2)
    cycle_run(trigger="test")
    cycle_run(trigger="test")
    assert set(states(w)) == {TaskState.RUNNING}
    Task.objects.filter(workload=w).update(gpu=Decimal("1.5"))
    workload_cancel(workload=w)
    assert set(states(w)) == {TaskState.RELEASING}
    assert cycle_run(trigger="test").status == CycleStatus.APPLIED
    assert set(states(w)) == {TaskState.FAILED}


def test_a_node_the_engine_refuses_is_left_out_with_its_workloads(cluster):
    w = submit(cluster["qa"], "w")
    cycle_run(trigger="test")
    node = Task.objects.get(workload=w).node
    Node.objects.filter(pk=node.pk).update(reserved_gpus=Decimal(9))
    other = submit(cluster["qb"], "other")
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED
    [message] = _invalid_events(w)
    assert message == (f"Invalid: tasks[0].node: node {node.name!r} is refused: reserved_gpus: must be <= the node's "
                       f"gpus (4), got 9")
    assert Task.objects.get(workload=other).node_id != node.pk  # nothing placed on the refused node
    assert f"node {node.pk}: Invalid: reserved_gpus" in SchedulingCycle.objects.get(pk=out.cycle_id).error


def test_dry_run_with_a_bad_row_in_the_live_state_answers(tenants, queue_tree):
    from rest_framework.test import APIClient

    from queues_app.services.tenants import api_token_issue

    make_cluster(nodes=1, gpus=8)
    bad = submit(queue_tree["b-train"], "bad", tenant=tenants["team_b"])
    Task.objects.filter(workload=bad).update(gpu=Decimal("1.5"))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_issue(user=tenants['alice'])}")
    body = {"name": "probe", "queue": "a-train", "replicas": 1, "task": {"gpu": 1}}
    response = client.post("/api/v1/workloads/?dry_run=1", body, format="json")
    assert response.status_code == 200, response.content[:300]
    assert response.json()["could_run_now"] is True


# ----------------------------------------------------------------------------- property


_CORRUPTIONS = st.one_of(
    st.tuples(st.just("task"), st.just("gpu"), st.sampled_from([Decimal("1.5"), Decimal("2.25"), Decimal("1.0001"),
                                                                  Decimal(0), Decimal("0.5"), Decimal(3)])),
    st.tuples(st.just("task"), st.just("gpu_memory_mib"), st.sampled_from([1, 1000, 10**6, None])),
    st.tuples(st.just("task"), st.just("node_selector"), st.sampled_from(
        [{"bad key": "x"}, {"k": 5}, {"k": None}, [1, 2], "text", {"ok": "v"}, {"-x": "y"}, {"k": {"a": 1}}])),
    st.tuples(st.just("task"), st.just("gpu_groups"), st.sampled_from([["g"], [1], {"a": 1}, "x", []])),
    st.tuples(st.just("task"), st.just("claims"), st.sampled_from(
        [[{"device_class": "nope"}], [{"count": 2}], "x", [1], [{"device_class": "gpu.x", "count": -1}], []])),
    st.tuples(st.just("task"), st.just("devices"), st.sampled_from([{"gpu.x": [0]}, "x", [1], {}])),
    st.tuples(st.just("workload"), st.just("min_available"), st.sampled_from([0, 2, 5, 10_000])),
    st.tuples(st.just("workload"), st.just("node_selector"), st.sampled_from([{"bad key": "x"}, {"a/b/c": "d"}, 7])),
    st.tuples(st.just("workload"), st.just("topology_required"), st.sampled_from(["rack", "x" * 300])),
    st.tuples(st.just("queue"), st.sampled_from(["quota", "limit", "over_quota_weight"]),
              st.sampled_from([Decimal(2**70), Decimal(10**20), Decimal(-1), Decimal(0), Decimal("0.5")])),
)


@pytest.mark.slow
@settings(max_examples=int(__import__("os").environ.get("KAI_QUARANTINE_EXAMPLES", "40")), deadline=None,
          derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(corruptions=st.lists(st.tuples(st.integers(0, 5), _CORRUPTIONS), min_size=1, max_size=4))
def test_random_malformed_rows_never_stop_the_cycle(django_db_blocker, corruptions):
    """Random malformed values written straight into the tables (SQL UPDATE, no validation):
    the cycle applies, every workload with an untouched row and queue is placed, every touched
    one is either placed (the value was fine) or left Pending with an Invalid event."""
    with django_db_blocker.unblock(), transaction.atomic():
        make_cluster(nodes=4, gpus=8)
        qs = make_queues({"qa": 8, "qb": 8, "qc": 8})
        leaves = [qs["qa"], qs["qb"], qs["qc"]]
        workloads = [submit(leaves[i % 3], f"w{i}") for i in range(6)]
        touched: set[int] = set()
        bad_queues: set[int] = set()
        for target, (kind, column, value) in corruptions:
            w = workloads[target]
            touched.add(w.pk)
            if kind == "task":
                Task.objects.filter(workload=w).update(**{column: value})
            elif kind == "workload":
                Workload.objects.filter(pk=w.pk).update(**{column: value})
            else:
                QueueResource.objects.filter(queue_id=w.queue_id, resource="memory").update(**{column: value})
                bad_queues.add(w.queue_id)
        out = cycle_run(trigger="property")
        assert out.status == CycleStatus.APPLIED, out.reason
        for w in workloads:
            st_ = states(w)
            events = list(SchedulingEvent.objects.filter(workload=w).values_list("reason", "message"))
            if w.pk not in touched and w.queue_id not in bad_queues:
                assert st_ == [TaskState.BINDING], (w.name, st_, events)
            elif st_ != [TaskState.BINDING]:
                # refused (Invalid), waiting for its gang (NotScheduled), or valid but blocked (a
                # limit of 0): always explained
                assert st_ == [TaskState.PENDING] and events, (w.name, st_, events, corruptions)
                assert all(m.startswith("Invalid: ") for r, m in events if r == "Invalid")
        assert Queue.objects.count() == 4
        transaction.set_rollback(True)


# ----------------------------------------------------------------------------- subgroups and devices (issue 21)


def test_a_subgroup_tree_broken_by_sql_is_quarantined_naming_the_api_field(cluster):
    from queues_app.models import SubGroup
    from queues_app.services.workloads import workload_submit

    tree = workload_submit(queue=cluster["qa"], name="tree", sub_groups=[{"name": "a", "min_available": 1}],
                           tasks=[{"gpu": 1, "sub_group": "a"}])
    good = submit(cluster["qb"], "good")
    Workload.objects.filter(pk=tree.pk).update(min_sub_groups=3)  # raw SQL: more than its subgroups
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED and out.quarantined == 1
    assert states(good) == [TaskState.BINDING] and states(tree) == [TaskState.PENDING]
    tree.refresh_from_db()
    assert tree.status_message.startswith("Invalid: min_sub_groups: "), tree.status_message
    # a leaf asking for more tasks than it has waits for its pods (like a gang), it is not refused
    SubGroup.objects.filter(workload=tree).update(min_available=5)
    Workload.objects.filter(pk=tree.pk).update(min_sub_groups=None)
    cycle_run(trigger="test")
    messages = list(SchedulingEvent.objects.filter(workload=tree).values_list("message", flat=True))
    assert "waiting for pods: subgroup a needs 5, 1 exist" in messages, messages


def test_a_claim_of_an_undeclared_class_written_by_sql_is_quarantined(cluster):
    bad = submit(cluster["qa"], "bad")
    Task.objects.filter(workload=bad).update(gpu=0, claims=[{"device_class": "fpga.example.com", "count": 1}])
    out = cycle_run(trigger="test")
    assert out.status == CycleStatus.APPLIED and out.quarantined == 1
    bad.refresh_from_db()
    assert bad.status_message == ("Invalid: tasks[0].claims[0].device_class: unknown device class "
                                  "'fpga.example.com' (declare it in deviceClasses)")
