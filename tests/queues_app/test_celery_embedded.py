"""A real worker with embedded beat (``celery -A kaiplatform worker -B``) on the embedded
broker (kombu SQLAlchemy transport over SQLite) runs the periodic heartbeat task.

Runs in a subprocess against its own state directory (SQLite DB + broker file), so it needs
no server and does not touch the test database; bounded to 90 s.
"""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CELERY = Path(sys.executable).with_name("celery")


def _heartbeats(db: Path) -> int:
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return conn.execute("SELECT COUNT(*) FROM queues_app_heartbeat").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


@pytest.mark.slow
def test_it_runs_the_periodic_heartbeat_on_the_embedded_broker(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(KAI_VAR_DIR=str(tmp_path), KAI_HEARTBEAT_SECONDS="1", DJANGO_SETTINGS_MODULE="kaiplatform.settings",
               KAI_ENV="development")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=120)
    db = tmp_path / "db.sqlite3"
    assert _heartbeats(db) == 0
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [str(CELERY), "-A", "kaiplatform", "worker", "-B", "--pool=solo", "--loglevel=info",
         "--without-mingle", "--without-gossip"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 150  # the worker loads the engine's kernels first (compiles on a cold cache)
        while time.monotonic() < deadline and _heartbeats(db) < 3 and worker.poll() is None:
            time.sleep(0.5)
        count = _heartbeats(db)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)
        log.close()
    output = (tmp_path / "worker.log").read_text()
    assert count >= 3, f"only {count} heartbeats; worker log:\n{output[-3000:]}"
    assert (tmp_path / "celery-broker.sqlite3").exists()  # the embedded broker really was used
    assert "kaiplatform.tasks.heartbeat" in output
    assert "engine kernels ready in" in output  # the start hook preloaded them (KAI_WORKER_PRELOAD_ENGINE)
