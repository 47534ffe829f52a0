"""Cycle storm (reliability.md 2.1, T-R1) against real PostgreSQL and Redis.

Several Celery worker processes and two ``celery beat`` processes (1 s cycle period) run
against the test database while this process fires cycle triggers and submits and cancels
workloads.  Every couple of seconds -- and at the end -- the SQL invariant checker must find
nothing; every accepted workload must still exist; every storm trigger must be accounted for
(skipped + aborted + failed + applied = triggers, from the ``SchedulingCycle`` rows); cycles
must keep applying (liveness).

Bounded: ``KAI_STORM_SECONDS`` (default 20; the design target is 60), ``KAI_STORM_WORKERS``
(default 3 processes x concurrency 2), ``KAI_STORM_TRIGGERS_PER_SECOND`` (default 8); about 5
submissions and 1 cancellation per second on 40 nodes x 8 GPUs.  The
broker is the Redis server of ``CELERY_BROKER_URL`` with database ``KAI_STORM_REDIS_DB``
(default 13), flushed first, so no other test's queue is touched.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection

from queues_app.choices import CycleStatus, WorkloadStatus
from queues_app.errors import ApplicationError
from queues_app.invariants import check_invariants
from queues_app.models import SchedulingCycle, Workload
from queues_app.cycle.run import cycle_run
from queues_app.services.nodes import node_upsert
from queues_app.services.queues import queue_create
from queues_app.services.workloads import workload_cancel, workload_submit

ROOT = Path(__file__).resolve().parents[3]
BROKER = os.environ.get("CELERY_BROKER_URL", "")
POSTGRES = os.environ.get("DATABASE_URL", "").startswith("postgres")
SECONDS = float(os.environ.get("KAI_STORM_SECONDS", "20"))
WORKERS = int(os.environ.get("KAI_STORM_WORKERS", "3"))
RATE = float(os.environ.get("KAI_STORM_TRIGGERS_PER_SECOND", "8"))
SUBMITS, CANCELS = 5.0, 1.0  # per second
GiB = 1024**3

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.slow,
    pytest.mark.skipif(not (POSTGRES and BROKER.startswith("redis")),
                       reason="the storm needs PostgreSQL and Redis (DATABASE_URL, CELERY_BROKER_URL)"),
    pytest.mark.django_db(transaction=True),
]


def storm_broker() -> str:
    parts = urlsplit(BROKER)
    return urlunsplit(parts._replace(path=f"/{int(os.environ.get('KAI_STORM_REDIS_DB', '13'))}"))


def child_env(broker: str) -> dict[str, str]:
    db = connection.settings_dict
    url = f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env = dict(os.environ)
    env.update({"DATABASE_URL": url, "CELERY_BROKER_URL": broker, "KAI_CYCLE_SECONDS": "1",
                "KAI_CYCLE_LEASE_SECONDS": "15", "CELERY_TASK_ALWAYS_EAGER": "0", "PYTHONUNBUFFERED": "1",
                # a short lease so a killed holder is taken over within the storm; the task limits
                # below it, as a worker requires (it refuses to start otherwise)
                "KAI_CYCLE_ENGINE_BUDGET": "6", "KAI_CYCLE_SOFT_TIME_LIMIT": "12", "KAI_CYCLE_TIME_LIMIT": "14"})
    return env


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(procs: list[subprocess.Popen], *, grace: float = 20.0) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


def build_cluster() -> list:
    for i in range(40):
        node_upsert(name=f"s{i:02d}", gpus=8, gpu_memory_mib=81920, cpu_millis=128000, memory_bytes=1024 * GiB,
                    labels={"rack": f"r{i % 4}"})
    root = queue_create(name="storm-root", quotas={"gpu": {"quota": 320}})
    return [queue_create(name=f"storm-{k}", parent=root, quotas={"gpu": {"quota": q}})
            for k, q in (("a", 160), ("b", 96), ("c", 64))]


def test_cycle_storm_keeps_every_invariant_and_accounts_for_every_trigger(tmp_path, monkeypatch):
    import redis
    from celery import Celery

    broker = storm_broker()
    # Celery lets the CELERY_BROKER_URL environment variable win over Celery(broker=...).
    monkeypatch.setenv("CELERY_BROKER_URL", broker)
    redis.Redis.from_url(broker).flushdb()
    leaves = build_cluster()
    env = child_env(broker)
    celery = [sys.executable, "-m", "celery", "-A", "kaiplatform"]
    procs = []
    try:
        for i in range(WORKERS):
            procs.append(start(celery + ["worker", "-c", "2", "-P", "prefork", "-n", f"storm{i}@%h",
                                         "--without-gossip", "--without-mingle", "--loglevel=INFO"],
                               env, tmp_path / f"worker{i}.log"))
        beat_dir = Path(tempfile.mkdtemp(dir=tmp_path))
        for i in range(2):
            procs.append(start(celery + ["beat", "-s", str(beat_dir / f"beat{i}"), "--max-interval", "1",
                                         "--loglevel=WARNING"], env, tmp_path / f"beat{i}.log"))
        driver = Celery("storm-driver", broker=broker)
        assert driver.connection_for_write().as_uri().endswith(urlsplit(broker).path)
        deadline = time.monotonic() + 90
        while not all("ready." in (tmp_path / f"worker{i}.log").read_text() for i in range(WORKERS)):
            assert time.monotonic() < deadline, "workers did not come up: " + "\n".join(
                (tmp_path / f"worker{i}.log").read_text()[-1500:] for i in range(WORKERS))
            assert all(p.poll() is None for p in procs), "a storm process died at start"
            time.sleep(0.5)

        # The path driver -> broker -> worker -> database works before the clock starts.
        driver.send_task("queues_app.tasks.scheduling_cycle", kwargs={"trigger": "storm-warmup"})
        while not SchedulingCycle.objects.filter(trigger="storm-warmup").exists():
            assert time.monotonic() < deadline, "the warm-up trigger never ran: " + "\n".join(
                (tmp_path / f"worker{i}.log").read_text()[-1500:] for i in range(WORKERS))
            time.sleep(0.2)

        rng = random.Random(4)
        accepted: list[int] = []
        fired = 0
        violations = []
        checks = 0
        t_start = time.monotonic()
        next_check = t_start + 2
        n = 0
        while (now := time.monotonic() - t_start) < SECONDS:
            for _ in range(int(now * RATE) + 1 - fired):  # triggers on schedule, catching up after slow steps
                driver.send_task("queues_app.tasks.scheduling_cycle", kwargs={"trigger": "storm"})
                fired += 1
            for _ in range(int(now * SUBMITS) + 1 - n):
                n += 1
                size = rng.choice([1, 1, 2, 4, 8])
                gpu = rng.choice([1, 1, 1, 0.5]) if size == 1 else 1
                wl = workload_submit(queue=rng.choice(leaves), name=f"w{n}", replicas=size,
                                     task={"gpu": gpu, "cpu_millis": 2000, "memory_bytes": 8 * GiB},
                                     priority=rng.choice([50, 50, 75, 100]))
                accepted.append(wl.pk)
                if rng.random() < CANCELS / SUBMITS:
                    victim = Workload.objects.filter(pk=rng.choice(accepted)).first()
                    if victim is not None and victim.status in (WorkloadStatus.PENDING, WorkloadStatus.RUNNING):
                        try:
                            workload_cancel(workload=victim)
                        except ApplicationError:
                            pass
            if time.monotonic() >= next_check:
                violations += check_invariants(expected_workload_ids=accepted)
                checks += 1
                next_check = time.monotonic() + 2
            time.sleep(0.02)
        elapsed = time.monotonic() - t_start

        storm_rows = SchedulingCycle.objects.filter(trigger="storm")
        wait_until = time.monotonic() + 120
        while storm_rows.count() < fired and time.monotonic() < wait_until:
            time.sleep(0.5)
        stop(procs)
        procs = []
        by_status = {s: storm_rows.filter(status=s).count() for s in CycleStatus.values}
        applied_all = SchedulingCycle.objects.filter(status=CycleStatus.APPLIED).count()
        beat_rows = SchedulingCycle.objects.filter(trigger="beat").count()
        print(f"\nstorm: {elapsed:.1f}s, {fired} storm triggers -> {by_status}; beat triggers recorded {beat_rows}; "
              f"applied cycles (all triggers) {applied_all}; {len(accepted)} workloads submitted; "
              f"{checks} invariant checks during the storm")

        assert violations == [], [v.as_dict() for v in violations[:5]]
        logs = "\n".join(f"--- {f.name}\n" + f.read_text()[-1200:] for f in sorted(tmp_path.glob("*.log")))
        assert storm_rows.count() == fired, f"{fired - storm_rows.count()} storm triggers unaccounted for\n{logs}"
        assert sum(by_status.values()) == fired
        assert by_status[CycleStatus.FAILED] == 0, list(storm_rows.filter(status="failed").values_list("error")[:3])
        assert by_status[CycleStatus.SKIPPED] > 0 and applied_all > 0
        assert applied_all >= elapsed / 4, f"only {applied_all} applied cycles in {elapsed:.0f}s (liveness)"

        for _ in range(3):  # settle: confirm the last binds and releases
            cycle_run(trigger="settle")
        final = check_invariants(expected_workload_ids=accepted)
        assert final == [], [v.as_dict() for v in final]
        assert Workload.objects.filter(pk__in=accepted).count() == len(accepted)
        assert Workload.objects.filter(status=WorkloadStatus.RUNNING).exists()
    finally:
        stop(procs, grace=5)
