"""Two cycles in threads with a barrier at a phase boundary (reliability.md T-R2), PostgreSQL:
the lease dedups a concurrent trigger; a holder whose lease expired while computing cannot
apply after another cycle took over (fencing generation)."""
from __future__ import annotations

import dataclasses
import os
import threading

import pytest
from django.db import connection

from queues_app.choices import CycleStatus
from queues_app.invariants import check_invariants
from queues_app.models import SchedulerState
from queues_app.cycle import faults
from queues_app.cycle.run import cycle_run
from queues_app.cycle.config import cycle_config
from tests.queues_app.cycle_helpers import make_cluster, make_queues, submit

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not os.environ.get("DATABASE_URL", "").startswith("postgres"), reason="needs PostgreSQL"),
    pytest.mark.django_db(transaction=True),
]


def _run_paused_cycle(cfg, results: dict, reached: threading.Event, release: threading.Event) -> None:
    def pause() -> None:
        if threading.current_thread().name == "cycle-a":
            reached.set()
            release.wait(30)

    faults.register("after_compute", pause)
    try:
        results["a"] = cycle_run(trigger="thread-a", config=cfg)
    finally:
        connection.close()


@pytest.mark.parametrize("lease_seconds, expected_b, expected_a", [
    (60.0, CycleStatus.SKIPPED, CycleStatus.APPLIED),   # B arrives while A holds a live lease
    (0.2, CycleStatus.APPLIED, CycleStatus.ABORTED),    # A's lease expired while computing; B took over
])
def test_two_concurrent_cycles_never_both_apply(lease_seconds, expected_b, expected_a):
    make_cluster(nodes=1, gpus=4)
    qs = make_queues()
    submit(qs["qa"], "a", replicas=2)
    cfg = dataclasses.replace(cycle_config(), lease_seconds=lease_seconds)
    results: dict = {}
    reached, release = threading.Event(), threading.Event()
    thread = threading.Thread(target=_run_paused_cycle, args=(cfg, results, reached, release), name="cycle-a")
    try:
        thread.start()
        assert reached.wait(30), "cycle A never reached its barrier"
        if lease_seconds < 1:
            import time

            time.sleep(lease_seconds + 0.3)
        results["b"] = cycle_run(trigger="main-b", config=cfg)
    finally:
        release.set()
        thread.join(60)
        faults.clear()
    assert results["b"].status == expected_b
    assert results["a"].status == expected_a
    assert SchedulerState.objects.get(id=1).generation == 1
    assert check_invariants() == []
