"""Crash points (reliability.md 2.2, T-R4): a real ``manage.py run_cycle`` process SIGKILLs
itself at each named fault point (``tests/support/crash_points.py``).  Afterwards the database equals exactly
the state before the cycle (killed before commit) or after it (killed after commit) -- compared
with a reference run of the same cycle without the kill -- and the next cycle, in a fresh
process, applies normally.  PostgreSQL only (the subject is real transactions and sessions);
``KAI_CRASH_ITERATIONS`` repeats each point (default 1 in CI)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection

from queues_app.invariants import check_invariants
from queues_app.models import SchedulerState, SchedulingCycle, Task
from queues_app.cycle.run import cycle_run
from queues_app.cycle.faults import POINTS
from queues_app.services.workloads import workload_cancel
from tests.queues_app.cycle_helpers import dump, make_cluster, make_queues, submit

ROOT = Path(__file__).resolve().parents[3]
ITERATIONS = int(os.environ.get("KAI_CRASH_ITERATIONS", "1"))
POSTGRES = os.environ.get("DATABASE_URL", "").startswith("postgres")

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not POSTGRES, reason="crash points need PostgreSQL (DATABASE_URL=postgres://...)"),
    pytest.mark.django_db(transaction=True),
]


def setup_state() -> None:
    """Two full nodes, a cancelled running workload (release to confirm), a gang in an
    under-served queue (reclaim: evictions + pipelined / bound placements) and a small one."""
    make_cluster(nodes=2, gpus=4)
    qs = make_queues({"qa": 4, "qb": 4})
    hogs = [submit(qs["qa"], f"hog{i}") for i in range(8)]
    cycle_run(trigger="setup")
    cycle_run(trigger="setup")
    workload_cancel(workload=hogs[0])
    submit(qs["qb"], "newcomer", replicas=3, min_available=3)
    submit(qs["qb"], "small", gpu=0.5)


def child_env(**extra: str) -> dict[str, str]:
    db = connection.settings_dict
    url = f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env = dict(os.environ)
    env.update({"DATABASE_URL": url, "KAI_CYCLE_LEASE_SECONDS": "5", "CELERY_TASK_ALWAYS_EAGER": "0"})
    env.update(extra)
    return env


def run_child(*, fault: str | None, wait_lease: float = 0.0) -> subprocess.CompletedProcess:
    env = child_env()
    args = ["run_cycle", "--trigger", f"crash:{fault or 'none'}", "--wait-lease", str(wait_lease)]
    cmd = [sys.executable, "-m", "tests.support.crash_points", fault, *args] if fault else \
        [sys.executable, "manage.py", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)


def reset() -> None:
    connection.close()
    call_command("flush", interactive=False, verbosity=0)


@pytest.mark.parametrize("point", POINTS)
def test_a_cycle_killed_at_a_fault_point_commits_all_or_nothing(point):
    setup_state()
    reference_cycle = cycle_run(trigger="reference")
    assert reference_cycle.status == "applied"
    reference = dump()
    assert reference_cycle.bound + reference_cycle.evicted + reference_cycle.pipelined > 0
    for _ in range(ITERATIONS):
        reset()
        setup_state()
        before = dump()
        killed = run_child(fault=point)
        assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr[-2000:])
        after_kill = dump()
        if point == "after_commit":
            assert after_kill == reference
        else:
            assert after_kill == before, f"partial writes after a kill at {point}"
        assert SchedulingCycle.objects.filter(status="running").count() == 0
        nxt = run_child(fault=None, wait_lease=20)
        assert nxt.returncode == 0, nxt.stdout[-2000:] + nxt.stderr[-2000:]
        if point != "after_commit":
            assert dump() == reference, f"the cycle after a kill at {point} differs from a clean run"
        assert SchedulerState.objects.get(id=1).lease_holder == ""
        assert check_invariants() == []
        assert Task.objects.filter(state="Binding").exists() or Task.objects.filter(state="Running").exists()
