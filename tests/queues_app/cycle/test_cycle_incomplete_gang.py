"""A gang with fewer task rows than its minAvailable (Kubernetes mode: a pod group whose pods are
still arriving, or a running gang that lost a pod) must not fail the whole cycle.

The engine refuses ``minAvailable > tasks`` as malformed input, so before this rule one such
workload made every cycle fail and nothing else was scheduled.
"""
from __future__ import annotations

import pytest

from queues_app.models import SchedulingEvent, Task, Workload
from queues_app.cycle.run import cycle_run
from tests.queues_app.cycle_helpers import make_cluster, make_queues, states, submit

pytestmark = pytest.mark.django_db


def test_waiting_gang_is_left_out_with_a_reason_and_others_still_schedule():
    make_cluster(nodes=1, gpus=4)
    q = make_queues()
    gang = submit(q["qa"], "gang", replicas=2, min_available=2)
    other = submit(q["qb"], "other")
    Task.objects.filter(workload=gang, index=1).delete()  # the second pod has not arrived yet
    out = cycle_run(trigger="test")
    assert out.status == "applied", out.reason
    assert states(other) == ["Binding"]
    assert states(gang) == ["Pending"]
    ev = SchedulingEvent.objects.get(workload=gang, reason="NotScheduled")
    assert ev.message == "waiting for pods: gang needs 2, 1 exist"


def test_running_gang_that_lost_a_pod_keeps_running():
    make_cluster(nodes=1, gpus=4)
    q = make_queues()
    gang = submit(q["qa"], "gang", replicas=2, min_available=2)
    assert cycle_run(trigger="test").status == "applied"
    assert cycle_run(trigger="test").status == "applied"
    assert states(gang) == ["Running", "Running"]
    Task.objects.filter(workload=gang, index=1).delete()
    out = cycle_run(trigger="test")
    assert out.status == "applied", out.reason
    assert states(gang) == ["Running"]
    assert not SchedulingEvent.objects.filter(workload=gang, reason="NotScheduled").exists()
    assert Workload.objects.get(pk=gang.pk).min_available == 2  # the stored gang size is not rewritten
