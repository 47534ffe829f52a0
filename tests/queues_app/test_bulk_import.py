"""Set-based scenario import: ``workloads_import`` and ``nodes_import`` (queues_app/services) store
many rows in a few statements under the same rules as the one-row services, all or nothing, with
errors naming the item.  Before, ``import_scenario`` called ``node_upsert`` / ``workload_import``
per row (~12 statements per workload: the 10,000-node bench cluster took 30 minutes to import).
"""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from queues_app.choices import TaskState, WorkloadStatus
from queues_app.errors import ApplicationError
from queues_app.models import Node, SubGroup, Task, Workload
from queues_app.services.nodes import node_upsert, nodes_import
from queues_app.services.queues import queue_create, queues_import
from queues_app.services.tenants import tenant_create, tenant_grant_queue
from queues_app.services.workloads import workload_import, workloads_import
from tests.queues_app.cycle_helpers import make_cluster, make_queues

GiB = 1024 ** 3
NOW = timezone.now().replace(microsecond=0)


def _items(queue, count: int, *, nodes: int = 4) -> list[dict]:
    """A mix like a scenario's: running gangs on nodes, pending gangs, elastic jobs, a subgroup tree."""
    out = []
    for i in range(count):
        kind = i % 4
        item = dict(queue=queue, name=f"w{i}", priority=[50, 100, 200, 75][kind],
                    created_at=NOW - timedelta(minutes=i + 1))
        if kind == 0:  # a running gang of two
            item["tasks"] = [{"gpu": 1, "cpu_millis": 1000, "memory_bytes": GiB, "state": "Running",
                              "node": f"n{(i // 2 + k) % nodes}", "gpu_groups": []} for k in range(2)]
            item["started_at"] = NOW - timedelta(minutes=i)
        elif kind == 1:  # pending, elastic (min 1 of 3)
            item["tasks"] = [{"gpu": 1, "cpu_millis": 500, "memory_bytes": GiB} for _ in range(3)]
            item["min_available"] = 1
        elif kind == 2:  # a fraction, pending, node selector
            item["tasks"] = [{"gpu": 0.5, "cpu_millis": 100, "memory_bytes": GiB, "node_selector": {"pool": "a"}}]
            item["preemptible"] = True
        else:  # a two-level subgroup tree
            item["sub_groups"] = [{"name": "top"}, {"name": "a", "parent": "top", "min_available": 1},
                                  {"name": "b", "parent": "top", "min_available": 1}]
            item["tasks"] = [{"gpu": 1, "cpu_millis": 100, "memory_bytes": GiB, "sub_group": g} for g in "ab"]
        out.append(item)
    return out


def _dump(queue) -> dict:
    workloads = sorted(Workload.objects.filter(queue=queue).values_list(
        "name", "priority", "preemptible", "min_available", "min_sub_groups", "status", "created_at", "started_at",
        "node_selector", "topology_required"))
    tasks = sorted(Task.objects.filter(workload__queue=queue).values_list(
        "workload__name", "name", "index", "gpu", "cpu_millis", "memory_bytes", "state", "node__name",
        "node_selector", "sub_group__name", "dra_gpus"))
    groups = sorted(SubGroup.objects.filter(workload__queue=queue).values_list(
        "workload__name", "name", "index", "parent__name", "min_available", "min_sub_groups"))
    return {"workloads": workloads, "tasks": tasks, "groups": groups}


@pytest.mark.django_db
def test_bulk_import_stores_what_the_one_row_import_stores():
    make_cluster(nodes=4, gpus=8)
    qs = make_queues()
    for item in _items(qs["qa"], 24):
        workload_import(**item)
    stored = workloads_import(workloads=_items(qs["qb"], 24))
    assert [w.name for w in stored] == [f"w{i}" for i in range(24)] and all(w.pk for w in stored)
    one, bulk = _dump(qs["qa"]), _dump(qs["qb"])
    assert bulk == one
    assert len(bulk["tasks"]) == 6 * 2 + 6 * 3 + 6 + 6 * 2 and len(bulk["groups"]) == 18
    assert {s for _, _, _, _, _, s, *_ in bulk["workloads"]} == {WorkloadStatus.RUNNING, WorkloadStatus.PENDING}


def _statements(ctx) -> tuple[int, int]:
    """(INSERT statements, other statements but savepoints)."""
    sql = [q["sql"].lstrip().upper() for q in ctx.captured_queries]
    inserts = sum(1 for q in sql if q.startswith("INSERT"))
    return inserts, sum(1 for q in sql if not q.startswith(("INSERT", "SAVEPOINT", "RELEASE SAVEPOINT")))


@pytest.mark.django_db
def test_bulk_import_statements_do_not_grow_with_the_workloads():
    make_cluster(nodes=60, gpus=8)
    qs = make_queues()
    counts = []
    for queue, size in ((qs["qa"], 20), (qs["qb"], 400)):
        items = _items(queue, size, nodes=60)
        with CaptureQueriesContext(connection) as ctx:
            workloads_import(workloads=items)
        counts.append(_statements(ctx))
    # the reads are made once whatever the size (queues + children, names taken, nodes); the rest
    # are batched INSERTs (workloads, subgroups a tree level at a time, tasks), no UPDATE: on SQLite
    # a statement carries at most 999 parameters (~50 workload rows), PostgreSQL INSERT_BATCH rows
    (small_inserts, small_other), (big_inserts, big_other) = counts
    assert big_other == small_other <= 6, counts
    assert big_inserts <= 400 // 40 + 100 // 40 + 2 + 1, counts
    assert Task.objects.filter(workload__queue=qs["qb"]).count() == 100 * (2 + 3 + 1 + 2)
    assert not SubGroup.objects.filter(workload__queue=qs["qb"], name="a", parent__isnull=True).exists()


@pytest.mark.django_db
def test_one_bad_workload_refuses_the_whole_import_naming_it():
    make_cluster(nodes=2, gpus=8)
    qs = make_queues()
    items = _items(qs["qa"], 10, nodes=2)
    items[4]["tasks"][0]["node"] = "nowhere"
    items[6]["priority"] = 10 ** 9
    items[7]["tasks"] = [{"gpu": -1}]
    with pytest.raises(ApplicationError) as caught:
        workloads_import(workloads=items, label="jobs")
    extra = caught.value.extra
    assert extra["jobs[4].tasks[0].node"][0] == "Unknown node 'nowhere'."
    assert "jobs[6].priority" in extra and "jobs[7].tasks[0].gpu" in extra
    assert not Workload.objects.exists() and not Task.objects.exists()


@pytest.mark.django_db
def test_names_taken_before_or_twice_in_the_import_are_refused():
    make_cluster(nodes=1, gpus=8)
    qs = make_queues()
    workloads_import(workloads=_items(qs["qa"], 2, nodes=1))
    again = _items(qs["qa"], 4, nodes=1)[1:]  # w1 is stored already
    again.append(dict(again[1]))  # w2 twice
    with pytest.raises(ApplicationError) as caught:
        workloads_import(workloads=again)
    assert set(caught.value.extra) == {"workloads[0].name", "workloads[3].name"}
    assert Workload.objects.count() == 2


@pytest.mark.django_db
def test_inner_queues_unknown_fields_and_tenants_without_the_grant_are_refused():
    make_cluster(nodes=1, gpus=8)
    qs = make_queues()
    inner = queue_create(name="inner", parent=qs["root"])
    queue_create(name="leaf", parent=inner)
    granted = tenant_create(name="acme")
    tenant_grant_queue(tenant=granted, queue=qs["qa"])
    other = tenant_create(name="other")
    pending = {"tasks": [{"gpu": 1}]}
    items = [dict(queue=qs["qa"], name="ok", tenant=granted, **pending),
             dict(queue=inner, name="inner", **pending),
             dict(queue=qs["qa"], name="no-grant", tenant=other, **pending)]
    with pytest.raises(ApplicationError) as caught:
        workloads_import(workloads=items)
    extra = caught.value.extra
    assert "has child queues" in extra["workloads[1].queue"][0]
    assert extra["workloads[2].queue"] == ["Queue 'qa' is not granted to tenant 'other'."]
    with pytest.raises(ApplicationError) as caught:
        workloads_import(workloads=[dict(queue=qs["qa"], name="x", replicas=3, **pending)])
    assert caught.value.extra == {"workloads[0]": ["Unknown field(s): replicas."]}
    assert not Workload.objects.exists()
    stored = workloads_import(workloads=items[:1])
    assert stored[0].tenant == granted


def _node(name: str, **kw) -> dict:
    return {"name": name, "gpus": 8, "gpu_memory_mib": 81920, "cpu_millis": 64000, "memory_bytes": 512 * GiB,
            "labels": {"pool": "a"}, **kw}


@pytest.mark.django_db
def test_nodes_import_creates_in_batches_and_updates_stored_names_through_upsert():
    node_upsert(**_node("n0", gpus=2))
    items = [_node(f"n{i}") for i in range(300)]
    with CaptureQueriesContext(connection) as ctx:
        created = nodes_import(nodes=items)
    assert created == 299
    inserts, other = _statements(ctx)
    # batched INSERTs (SQLite caps a statement at 999 parameters: ~50 nodes), the rest constant:
    # the names' SELECT and n0's node_upsert (lock, held tasks, UPDATE)
    assert inserts <= 300 // 40 and other <= 8, (inserts, other)
    assert Node.objects.count() == 300 and Node.objects.get(name="n0").gpus == 8
    assert Node.objects.get(name="n0").version == 2  # the stored one went through node_upsert
    assert all(n.labels == {"pool": "a"} and n.gpu_memory_mib == 81920 for n in Node.objects.all())


@pytest.mark.django_db
def test_nodes_import_refuses_bad_items_naming_them_and_writes_nothing():
    items = [_node("a"), _node("b", gpus=-1), _node("c", cpu_millis=1.5), _node("a"), _node("d", reserved_gpus=99)]
    with pytest.raises(ApplicationError) as caught:
        nodes_import(nodes=items)
    assert caught.value.extra == {"nodes[3].name": ["Node 'a' appears twice."]}
    with pytest.raises(ApplicationError) as caught:
        nodes_import(nodes=items[:3] + items[4:])
    extra = caught.value.extra
    assert set(extra) >= {"nodes[1].gpus", "nodes[2].cpu_millis"} and any(k.startswith("nodes[3].") for k in extra)
    assert not Node.objects.exists()


@pytest.mark.django_db
def test_nodes_import_cannot_shrink_a_stored_node_below_its_bound_tasks():
    make_cluster(nodes=1, gpus=8)
    qs = make_queues()
    workloads_import(workloads=[dict(queue=qs["qa"], name="r", tasks=[
        {"gpu": 4, "state": TaskState.RUNNING, "node": "n0"}])])
    with pytest.raises(ApplicationError) as caught:
        nodes_import(nodes=[_node("n0", gpus=2), _node("n1")])
    assert "hold 4" in caught.value.extra["nodes[0].gpus"][0]
    assert list(Node.objects.values_list("name", "gpus")) == [("n0", 8)]


def _tree(width: int = 3, depth: int = 3) -> list[dict]:
    """A queue tree listed children first (the import must not depend on the order)."""
    out, level = [], [None]
    for d in range(depth):
        nxt = []
        for parent in level:
            for k in range(width if parent is not None or d == 0 else 1):
                name = f"{parent or 'q'}-{k}" if parent else f"top{k}"
                out.append({"name": name, "parent": parent, "priority": 100 + d,
                            "quotas": {"gpu": {"quota": 2 + k, "over_quota_weight": 1 + k, "limit": -1},
                                       "cpu": {"quota": 1.5}},
                            "reclaim_min_runtime": timedelta(minutes=k) if k else None,
                            "created_at": NOW - timedelta(minutes=len(out))})
                nxt.append(name)
        level = nxt
    return list(reversed(out))


def _queue_dump() -> list[tuple]:
    from queues_app.models import Queue, QueueResource, QuotaChange

    rows = []
    for q in Queue.objects.select_related("parent").order_by("name"):
        assert q.path == (q.parent.path if q.parent else "") + f"{q.pk:0{Queue.PATH_SEGMENT_WIDTH}d}."
        assert q.depth == (q.parent.depth + 1 if q.parent else 1)
        res = sorted(QueueResource.objects.filter(queue=q).values_list("resource", "quota", "over_quota_weight",
                                                                       "limit"))
        audit = QuotaChange.objects.filter(queue=q).count()
        rows.append((q.name, q.parent.name if q.parent else None, q.priority, q.depth, q.reclaim_min_runtime,
                     q.created_at, tuple(res), audit))
    return rows


@pytest.mark.django_db
def test_queues_import_stores_what_queue_create_stores_with_paths_and_audit():
    items = _tree()
    made = queues_import(queues=items)
    assert [q.name for q in made] == [i["name"] for i in items]
    assert all(q.path and q.depth for q in made)
    bulk = _queue_dump()
    from queues_app.models import Queue, QueueResource, QuotaChange

    QuotaChange.objects.all().delete()
    QueueResource.objects.all().delete()
    for q in Queue.objects.order_by("-depth"):
        q.delete()
    by_name = {}
    for item in reversed(items):  # parents first
        by_name[item["name"]] = queue_create(**{**item, "parent": by_name.get(item["parent"]), "source": "import"})
    assert _queue_dump() == bulk


@pytest.mark.django_db
def test_queues_import_statements_are_per_level_not_per_queue():
    counts = []
    for width in (2, 6):  # 3 levels: 2 + 4 + 8 queues, then 6 + 36 + 216
        items = [{**i, "name": f"w{width}-{i['name']}", "parent": i["parent"] and f"w{width}-{i['parent']}"}
                 for i in _tree(width=width)]
        with CaptureQueriesContext(connection) as ctx:
            queues_import(queues=items)
        counts.append(_statements(ctx))
    # per level one UPDATE of the paths, plus the lock and the names' SELECT: the same for 14 and 258
    # queues; INSERTs in batches (SQLite: at most 999 parameters a statement, ~90 queues or ~110
    # audit rows; PostgreSQL: 2,000 rows)
    assert counts[0][1] == counts[1][1] <= 6, counts
    assert counts[1][0] <= 258 * (1 + 3 + 9) // 100 + 3, counts


@pytest.mark.django_db
def test_queues_import_refuses_bad_trees_and_values_naming_the_item(settings):
    queue_create(name="taken")
    cases = [
        ([{"name": "a"}, {"name": "a"}], {"queues[1].name": ["Queue 'a' appears twice."]}),
        ([{"name": "a", "parent": "nope"}], {"queues[0].parent": ["Unknown parent queue 'nope' (not in this import)."]}),
        ([{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}], "cycle"),
        ([{"name": "taken"}], {"queues[0].name": ["Queue with this Name already exists."]}),
        ([{"name": "a"}, {"name": "b", "parent": "a", "quotas": {"gpu": {"quota": "nan"}}}], "queues[1].quotas.gpu"),
        ([{"name": "a", "priority": 10 ** 9}], "queues[0].priority"),
        ([{"name": "a", "color": "red"}], {"queues[0]": ["Unknown field(s): color."]}),
    ]
    for items, expected in cases:
        with pytest.raises(ApplicationError) as caught:
            queues_import(queues=items)
        extra = caught.value.extra
        if isinstance(expected, dict):
            assert extra == expected
        elif expected == "cycle":
            assert any(v == ["The parents form a cycle."] for v in extra.values()), extra
        else:
            assert any(k.startswith(expected) for k in extra), extra
    settings.KAI_MAX_QUEUE_DEPTH = 2
    with pytest.raises(ApplicationError) as caught:
        queues_import(queues=_tree(width=1, depth=3))
    assert any("3 levels deep; at most 2" in v[0] for v in caught.value.extra.values())
    from queues_app.models import Queue

    assert list(Queue.objects.values_list("name", flat=True)) == ["taken"]
