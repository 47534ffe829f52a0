"""The cycle's Celery task, beat entry, settings relations (T-R21), metrics and commands."""
from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from queues_app.choices import CycleStatus, TaskState
from queues_app.models import SchedulingCycle
from queues_app.cycle.config import cycle_config, validate_cycle_config
from tests.queues_app.cycle_helpers import make_cluster, make_queues, states, submit


def test_beat_runs_the_cycle_every_interval_with_expires_of_one_interval(settings):
    from kaiplatform.celery import _beat_schedule

    entry = _beat_schedule()["scheduling-cycle"]
    assert entry["task"] == "queues_app.tasks.scheduling_cycle"
    assert entry["schedule"] == float(settings.KAI_CYCLE_SECONDS)
    assert 0 < entry["options"]["expires"] <= entry["schedule"]


def test_the_time_limits_sit_below_the_lease_and_the_visibility_timeout():
    from queues_app.tasks import scheduling_cycle

    cfg = cycle_config()
    assert validate_cycle_config(cfg) == []
    assert scheduling_cycle.soft_time_limit < scheduling_cycle.time_limit < cfg.lease_seconds
    broken = cfg.__class__(**{**cfg.__dict__, "lease_seconds": cfg.time_limit - 1})
    assert validate_cycle_config(broken)
    assert 0 < cfg.engine_budget < cfg.soft_time_limit
    no_time_to_apply = cfg.__class__(**{**cfg.__dict__, "engine_budget": cfg.soft_time_limit})
    assert any("engine time budget" in p for p in validate_cycle_config(no_time_to_apply))


@pytest.mark.django_db(transaction=True)
def test_the_task_runs_one_cycle_and_records_its_trigger():
    from queues_app.tasks import scheduling_cycle

    make_cluster(nodes=1, gpus=2)
    qs = make_queues()
    w = submit(qs["qa"], "w")
    out = scheduling_cycle.apply(kwargs={"trigger": "beat"}).get()
    assert out["status"] == CycleStatus.APPLIED
    assert states(w) == [TaskState.BINDING]
    assert SchedulingCycle.objects.get(pk=out["cycle"]).trigger == "beat"


@pytest.mark.django_db(transaction=True)
def test_an_expired_trigger_is_counted_as_skipped():
    from queues_app.tasks import CYCLE_TASK, _record_expired_trigger, scheduling_cycle

    class Req:
        task = CYCLE_TASK
        kwargs = {"trigger": "storm"}

    _record_expired_trigger(sender=scheduling_cycle, request=Req(), expired=True)
    row = SchedulingCycle.objects.get()
    assert row.status == CycleStatus.SKIPPED and row.trigger == "storm" and "expired" in row.error


@pytest.mark.django_db(transaction=True)
def test_metrics_expose_phases_decisions_and_queue_state(client, settings):
    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    submit(qs["qa"], "w", replicas=2)
    submit(qs["qb"], "big", gpu=8)
    call_command("run_cycle", "--count", "2")
    body = client.get("/metrics").content.decode()
    assert 'kai_cycle_phase_seconds{phase="apply"}' in body
    assert 'kai_cycles_total{status="applied"} 2.0' in body
    assert 'kai_cycle_decisions_total{kind="bound"} 2.0' in body
    assert 'kai_queue_allocated{queue="qa",resource="gpu"} 2.0' in body
    assert 'kai_queue_pending_workloads{queue="qb"} 1.0' in body
    assert 'kai_queue_fair_share{queue="qa",resource="gpu"}' in body
    assert "kai_cycle_duration_seconds_bucket" in body
    settings.KAI_METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert client.post("/metrics").status_code in (401, 403, 405)


@pytest.mark.django_db(transaction=True)
def test_check_invariants_command_reports_and_fails_on_a_violation(capsys):
    from queues_app.models import Node

    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    submit(qs["qa"], "w", replicas=4, gpu=0.5)
    call_command("run_cycle")
    capsys.readouterr()
    call_command("check_invariants", "--json")
    assert json.loads(capsys.readouterr().out)["ok"] is True
    Node.objects.update(cpu_millis=1)  # capacity shrunk under the tasks (cpu is not guarded by a trigger)
    with pytest.raises(CommandError):
        call_command("check_invariants")
    assert "I1.cpu" in capsys.readouterr().out


@pytest.mark.django_db(transaction=True)
def test_bench_fill_fills_the_cluster_and_explains_the_extra_workload(capsys):
    call_command("bench_fill", "--nodes", "3", "--gpus", "2", "--workloads", "6", "--queues", "2")
    out = json.loads(capsys.readouterr().out)
    assert out["running_tasks"] == 6 and out["fill_cycles"] == 2
    assert out["explanation_cycles"] == 1 and out["explanation"]["reason"]
    with pytest.raises(CommandError):
        call_command("bench_fill", "--nodes", "1", "--workloads", "1")  # refuses a non-empty database
