"""The snapshot builder: the engine's own Snapshot type, a constant number of queries, the
index back to database ids, and the DB -> scenario state mapping."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from django.db import connection
from django.db.models import JSONField, Value
from django.test.utils import CaptureQueriesContext

from queues_app.choices import TaskState
from queues_app.cycle.engine_io import build_engine_input, build_snapshot, build_snapshot_with_index
from queues_app.models import Task
from queues_app.services import queue_create, workload_cancel, workload_import, workload_submit
from scheduler_engine.snapshot import CPU, GPU, MEM, Snapshot
from scheduler_engine.snapshot import TaskState as EngineState
from tests.queues_app.factories import NodeFactory

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def _populate(n: int, queue_tree) -> None:
    start = Task.objects.count()
    for i in range(n):
        NodeFactory()
        q = queue_create(name=f"leaf-{start}-{i}", parent=queue_tree["team-b-dept"])
        workload_import(queue=q, name=f"run-{i}", created_at=NOW - timedelta(minutes=5), tasks=[
            {"gpu": 1, "cpu_millis": 500, "memory_bytes": 2**30, "state": "Pending"}] * 2)
        workload_submit(queue=queue_tree["a-train"], name=f"pend-{start}-{i}", replicas=3, task={"gpu": 0.5})


class SnapshotBuilderTests:
    def test_it_builds_the_engines_snapshot_type_in_engine_units(self, queue_tree):
        node = NodeFactory(name="n0", gpus=8, cpu_millis=64_000, memory_bytes=2**39,
                           labels={"kai.scheduler/rack": "r1"})
        workload_import(queue=queue_tree["a-train"], name="train", created_at=NOW - timedelta(minutes=10),
                        started_at=NOW - timedelta(minutes=4), topology_required="kai.scheduler/rack",
                        tasks=[{"gpu": 0.5, "gpu_memory_mib": None, "cpu_millis": 1500, "memory_bytes": 2**30,
                                "state": "Running", "node": "n0", "gpu_groups": ["g0"]}, {"gpu": 1}])
        snap, index = build_snapshot_with_index(now=NOW)
        assert isinstance(snap, Snapshot)
        assert snap.nodes.names == ["n0"] and snap.nodes.capacity[0, CPU] == 64_000
        assert snap.nodes.capacity[0, MEM] == 2**39
        j = snap.jobs.index["train"]
        assert snap.jobs.created_minutes_ago[j] == 10 and snap.jobs.started_minutes_ago[j] == 4
        assert snap.jobs.topology_required[j] == "kai.scheduler/rack"
        t = snap.tasks.index["train-0"]
        assert snap.tasks.request[t, GPU] == 0.5 and snap.tasks.request[t, CPU] == 1500
        assert snap.tasks.state[t] == EngineState.RUNNING and snap.nodes.names[snap.tasks.node[t]] == "n0"
        assert snap.tasks.gpu_groups[t] == ["g0"]
        q = snap.queues.index["a-train"]
        assert snap.queues.names[snap.queues.parent[q]] == "team-a-dept"
        assert snap.queues.deserved[q, GPU] == 4
        assert snap.queues.deserved[snap.queues.index["root"], CPU] == 0 and snap.queues.limit[q, CPU] == -1
        ids = index.aligned(snap)
        assert ids.node.tolist() == [node.pk]
        assert ids.task[t] == Task.objects.get(name="train-0").pk
        assert index.task_version[int(ids.task[t])] == 1

    def test_binding_exports_as_running_and_pipelined_as_pending(self, queue_tree):
        NodeFactory(name="n0")
        w = workload_import(queue=queue_tree["a-train"], name="w", tasks=[
            {"gpu": 1, "state": "Running", "node": "n0"}, {"gpu": 1, "state": "Running", "node": "n0"}])
        Task.objects.filter(workload=w, index=0).update(state=TaskState.BINDING)
        Task.objects.filter(workload=w, index=1).update(state=TaskState.PIPELINED)
        snap = build_snapshot(now=NOW)
        assert snap.tasks.state.tolist() == [EngineState.RUNNING, EngineState.PENDING]
        assert snap.tasks.node.tolist() == [0, -1]

    def test_cancelled_workloads_are_exported_only_while_they_hold_resources(self, queue_tree):
        NodeFactory(name="n0")
        running = workload_import(queue=queue_tree["a-train"], name="r", tasks=[
            {"gpu": 1, "state": "Running", "node": "n0"}])
        pending = workload_submit(queue=queue_tree["a-train"], name="p", task={"gpu": 1})
        workload_cancel(workload=running)
        workload_cancel(workload=pending)
        snap = build_snapshot(now=NOW)
        assert snap.jobs.names == ["r"] and snap.tasks.state.tolist() == [EngineState.RELEASING]

    def test_duplicate_workload_names_in_two_queues_stay_distinct(self, queue_tree):
        workload_submit(queue=queue_tree["a-train"], name="same", task={"gpu": 1})
        workload_submit(queue=queue_tree["b-train"], name="same", task={"gpu": 1})
        snap, index = build_snapshot_with_index(now=NOW)
        assert sorted(snap.jobs.names) == ["a-train/same", "b-train/same"]
        assert len(set(snap.tasks.names)) == 2 and len(set(index.workload_id.values())) == 2

    def test_usage_and_config_are_passed_through(self, queue_tree):
        snap = build_snapshot(now=NOW, config={"actions": ["allocate"], "kValue": 2},
                              usage={"a-train": {"gpu": 0.25}, "unknown-queue": {"gpu": 1}})
        assert snap.config.actions == ("allocate",) and snap.config.k_value == 2
        assert snap.usage[snap.queues.index["a-train"], GPU] == 0.25
        assert snap.config.now == NOW

    def test_the_number_of_queries_does_not_grow_with_the_rows(self, queue_tree):
        def count() -> int:
            with CaptureQueriesContext(connection) as ctx:
                data = build_engine_input(now=NOW, usage={}).data
            assert data["jobs"]
            return len(ctx.captured_queries)

        _populate(2, queue_tree)
        small = count()
        _populate(25, queue_tree)
        assert count() == small <= 8  # + device classes, subgroups
        snap = build_snapshot(now=NOW, usage={})
        assert len(snap.tasks) == 27 * 5 and np.all(snap.tasks.request[:, GPU] > 0)

    def test_json_columns_read_once_per_distinct_text_export_independent_values(self, queue_tree):
        """The snapshot parses each distinct JSON text once and shares the parsed value between rows
        (engine_io._values): every exported value must still be the row's own, equal to what the ORM
        reads, and changing one exported task must not change another."""
        NodeFactory(name="n0", labels={"zone": "a"})
        NodeFactory(name="n1", labels={"zone": "a"})
        w = workload_import(queue=queue_tree["a-train"], name="w", node_selector={"zone": "a"}, tasks=[
            {"gpu": 1, "state": "Running", "node": "n0", "gpu_groups": ["g"], "node_selector": {"rack": "1"}},
            {"gpu": 1, "state": "Running", "node": "n1", "gpu_groups": ["g"], "node_selector": {"rack": "1"}},
            {"gpu": 1}])
        # raw SQL can leave a JSON null or a wrong shape: passed on as the ORM reads it, for the engine to name
        Task.objects.filter(workload=w, index=2).update(gpu_groups=Value(None, JSONField()), node_selector=[])
        data = build_engine_input(now=NOW, usage={}).data
        nodes = {n["name"]: n for n in data["nodes"]}
        assert nodes["n0"]["labels"] == nodes["n1"]["labels"] == {"zone": "a"}
        assert nodes["n0"]["labels"] is not nodes["n1"]["labels"]
        t0, t1, t2 = data["jobs"][0]["tasks"]
        assert t0["nodeSelector"] == t1["nodeSelector"] == {"zone": "a", "rack": "1"}
        assert t0["gpuGroups"] == t1["gpuGroups"] == ["g"]
        t0["gpuGroups"].append("h")
        t0["nodeSelector"]["x"] = "y"
        nodes["n0"]["labels"]["zone"] = "b"
        assert t1["gpuGroups"] == ["g"] and t1["nodeSelector"] == {"zone": "a", "rack": "1"}
        assert nodes["n1"]["labels"] == {"zone": "a"}
        assert t2["gpuGroups"] == [] and t2["nodeSelector"] == []
        again = build_engine_input(now=NOW, usage={}).data
        assert again["jobs"][0]["tasks"][0]["gpuGroups"] == ["g"]
        assert {n["name"]: n["labels"] for n in again["nodes"]} == {"n0": {"zone": "a"}, "n1": {"zone": "a"}}


class CorruptTreeTests:
    """reliability.md 2.9: a tree corrupted by raw SQL must not stop scheduling the rest."""

    def test_a_queue_cycle_excludes_that_subtree_and_keeps_the_rest(self, queue_tree):
        good = workload_submit(queue=queue_tree["b-train"], name="good", task={"gpu": 1})
        stuck = workload_submit(queue=queue_tree["a-train"], name="stuck", task={"gpu": 1})
        # team-a-dept <-> a-train: bypasses every service check
        from queues_app.models import Queue

        Queue.objects.filter(pk=queue_tree["team-a-dept"].pk).update(parent=queue_tree["a-train"])
        engine_input = build_engine_input(now=NOW, usage={})
        assert set(engine_input.excluded_queues) == {"team-a-dept", "a-train"}
        assert "cycle" in engine_input.excluded_queues["a-train"]
        assert set(engine_input.excluded_workloads) == {stuck.pk}
        snap = build_snapshot(now=NOW, usage={})
        assert snap.jobs.names == ["good"] and "a-train" not in snap.queues.index
        assert engine_input.index.workload_id == {"good": good.pk}

    def test_a_workload_on_an_inner_queue_is_excluded(self, queue_tree):
        w = workload_submit(queue=queue_tree["a-train"], name="w", task={"gpu": 1})
        from queues_app.models import Workload

        Workload.objects.filter(pk=w.pk).update(queue=queue_tree["team-a-dept"])
        engine_input = build_engine_input(now=NOW, usage={})
        assert "child queues" in engine_input.excluded_workloads[w.pk]
        build_snapshot(now=NOW, usage={})  # the engine accepts the rest


def test_kai_scheduler_config_reaches_the_engine(settings, queue_tree):
    """Operators tune the engine's search limits through ``KAI_SCHEDULER_CONFIG`` (README,
    Performance): the keys land in the snapshot's config, and bad values are refused by name."""
    from scheduler_engine.loader import ScenarioError

    NodeFactory()
    snap = build_snapshot(now=NOW)
    assert snap.config.scenario_search_budget == 5000 and snap.config.max_consolidation_preemptees == 16
    settings.KAI_SCHEDULER_CONFIG = {"scenarioSearchBudget": 500, "maxConsolidationPreemptees": -1}
    snap = build_snapshot(now=NOW)
    assert snap.config.scenario_search_budget == 500 and snap.config.max_consolidation_preemptees == -1
    settings.KAI_SCHEDULER_CONFIG = {"scenarioSearchBudget": -7}
    with pytest.raises(ScenarioError, match="config.scenarioSearchBudget"):
        build_snapshot(now=NOW)


class EngineDecisionsTests:
    """The engine -> DB direction: the result by database id, numbers from the snapshot, so the
    apply parses nothing (issue #20: cpu was written as "500m" and parsed again downstream)."""

    def test_decisions_are_typed_by_database_id_with_numeric_resources(self, queue_tree):
        from dataclasses import FrozenInstanceError

        from queues_app.cycle.engine_io import EngineDecisions, engine_decisions, load_quarantined, run_engine

        node = NodeFactory(name="n0", gpus=8, cpu_millis=64_000, memory_bytes=2**39, reserved_cpu_millis=1000)
        wl = workload_submit(queue=queue_tree["a-train"], name="train", replicas=2,
                             task={"gpu": 1, "cpu_millis": 500, "memory_bytes": 2**30})
        engine_input = build_engine_input(now=NOW)
        snapshot, _ = load_quarantined(engine_input.data, engine_input.index)
        decided = engine_decisions(snapshot=snapshot, data=engine_input.data, index=engine_input.index,
                                   result=run_engine(snapshot))
        assert isinstance(decided, EngineDecisions)
        (job,) = decided.jobs
        assert job.workload_id == wl.pk and job.queue_id == queue_tree["a-train"].pk and job.status == "Binding"
        ids = set(Task.objects.filter(workload=wl).values_list("id", flat=True))
        assert {t.task_id for t in job.tasks} == ids
        for t in job.tasks:
            assert (t.given_state, t.status, t.node) == ("Pending", "Binding", "n0")
            assert (t.gpu, t.cpu, t.memory) == (1.0, 500.0, float(2**30))
        n0 = decided.nodes["n0"]
        assert n0.node_id == node.pk and n0.free_cpu == 63_000 and n0.gpus == 8 and n0.schedulable
        assert decided.queue_parent[queue_tree["a-train"].pk] == queue_tree["team-a-dept"].pk
        with pytest.raises(FrozenInstanceError):
            job.tasks[0].status = "Pending"  # type: ignore[misc]
