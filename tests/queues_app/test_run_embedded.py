"""``manage.py run_embedded`` brings up web + worker + beat on the embedded defaults and
stops both children on SIGTERM.  Subprocess test in its own state directory, bounded."""
from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - loopback only
            return resp.status
    except OSError:
        return 0


@pytest.mark.slow
def test_run_embedded_serves_the_admin_and_runs_beat(tmp_path):
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "KAI_ENV")}
    env.update(KAI_VAR_DIR=str(tmp_path), KAI_HEARTBEAT_SECONDS="1")
    log = (tmp_path / "run.log").open("w")
    proc = subprocess.Popen([sys.executable, "manage.py", "run_embedded", "--port", str(port), "--web-workers", "1"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    beats = 0
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and _get(f"http://127.0.0.1:{port}/healthz") != 200:
            assert proc.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
            time.sleep(0.5)
        assert _get(f"http://127.0.0.1:{port}/admin/login/") == 200
        while time.monotonic() < deadline and beats < 2:
            try:
                with sqlite3.connect(tmp_path / "db.sqlite3", timeout=5) as conn:
                    beats = conn.execute("SELECT COUNT(*) FROM queues_app_heartbeat").fetchone()[0]
            except sqlite3.OperationalError:
                pass
            time.sleep(0.5)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()
    output = (tmp_path / "run.log").read_text()
    assert beats >= 2, output[-3000:]
    assert "admin/   user 'admin', password 'admin'" in output
    assert proc.returncode == 0, output[-3000:]
    assert _get(f"http://127.0.0.1:{port}/healthz") == 0  # the web child is gone too
