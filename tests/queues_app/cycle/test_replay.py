"""Replay: every applied cycle records its scenario and decisions; ``replay_cycle`` exports and re-runs it."""
from __future__ import annotations

import json
import zlib

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from queues_app.cycle import engine_io
from queues_app.cycle import replay
from queues_app.models import SchedulingCycle
from queues_app.cycle.run import cycle_run
from tests.queues_app.cycle_helpers import make_cluster, make_queues, submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def applied_cycle():
    make_cluster(nodes=2, gpus=4)
    qs = make_queues({"qa": 4, "qb": 2})
    submit(qs["qa"], "a-big", gpu=4)
    submit(qs["qb"], "b-gang", gpu=1, replicas=2)
    submit(qs["qb"], "b-too-much", gpu=8)  # stays pending
    out = cycle_run(trigger="test")
    assert out.status == "applied", out.reason
    return SchedulingCycle.objects.get(pk=out.cycle_id)


def test_applied_cycle_records_scenario_and_decisions(applied_cycle):
    row = applied_cycle
    scenario = json.loads(zlib.decompress(bytes(row.scenario_gz)))
    decisions = json.loads(zlib.decompress(bytes(row.decisions_gz)))
    assert {n["name"] for n in scenario["nodes"]} == {"n0", "n1"}
    assert {j["name"] for j in scenario["jobs"]} >= {"a-big", "b-gang", "b-too-much"}
    statuses = {t: v[0] for t, v in decisions.items()}
    assert sum(1 for s in statuses.values() if s == "Binding") == 3  # a-big's task and b-gang's two
    assert [v for t, v in statuses.items() if "too-much" in t] == ["Pending"]


def test_replay_gives_the_same_decisions_and_exports_a_scenario(applied_cycle, tmp_path, capsys):
    out = tmp_path / "cycle.yaml"
    call_command("replay_cycle", str(applied_cycle.pk), "--output", str(out))
    err = capsys.readouterr().err
    assert "same decisions" in err
    data = yaml.safe_load(out.read_text())
    # the exported file is a valid scenario the engine CLI can run
    from scheduler_engine.loader import load_dict  # test-only: check the file with the engine itself

    snap = load_dict(data)
    assert len(snap.nodes) == 2 and "a-big" in snap.jobs.names


def test_replay_reports_differences(applied_cycle, capsys):
    decisions = json.loads(zlib.decompress(bytes(applied_cycle.decisions_gz)))
    task = next(t for t, v in decisions.items() if v[0] == "Binding")
    decisions[task] = ["Pending", None]
    SchedulingCycle.objects.filter(pk=applied_cycle.pk).update(
        decisions_gz=zlib.compress(json.dumps(decisions).encode()))
    with pytest.raises(SystemExit) as exc:
        call_command("replay_cycle", str(applied_cycle.pk))
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert f"task {task}: recorded Pending on None, replayed Binding" in err and "1 of" in err


def test_replay_errors(db):
    with pytest.raises(CommandError, match="no such cycle"):
        call_command("replay_cycle", "999999")
    row = SchedulingCycle.objects.create(status="skipped", trigger="test")
    with pytest.raises(CommandError, match="no scenario recorded"):
        call_command("replay_cycle", str(row.pk))


def test_replay_record_round_trip_without_a_database_cycle():
    """engine_io's record / replay pair on a plain scenario dict."""
    data = {"name": "x", "nodes": [{"name": "n", "gpus": 2, "cpu": 4, "memory": "4Gi"}],
            "queues": [{"name": "q", "resources": {"gpu": {"quota": 2, "overQuotaWeight": 1, "limit": -1}}}],
            "jobs": [{"name": "j", "queue": "q", "tasks": [{"gpu": 1}]}]}
    result = engine_io.run_engine(engine_io.snapshot_from_dict(data))
    rec = replay.cycle_replay_record(data, result)
    outcome = replay.replay_recorded_cycle(**rec)
    assert outcome.same and outcome.recorded == {"j-0": ["Binding", "n"]}
