"""``scripts/kube_demo.sh`` / ``manage.py kube_demo`` (the README's one-command Kubernetes demo)
tells its whole story.

It runs the real pieces: emulator over HTTP, the sync thread behind its lease, cycles and the
dispatcher -- in a subprocess on its own SQLite file, exactly as a newcomer runs it (an in-memory
test database cannot be shared by the sync thread).  The assertions are on what the command printed
and on the database it left, so a regression anywhere on that path (sync, outbox, bind, reclaim,
evict, events) fails here.
"""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

ROOT = Path(__file__).resolve().parents[3]


def _run_demo(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "KAI_", "CELERY_"))}
    env.update(KAI_VAR_DIR=str(tmp_path), KAI_CLUSTER_MODE="kubernetes", KAI_KUBECONFIG=str(tmp_path / "kubeconfig"),
               DJANGO_SETTINGS_MODULE="kaiplatform.settings")
    return subprocess.run([sys.executable, "manage.py", "kube_demo", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)


def test_demo_binds_reclaims_and_explains(tmp_path):
    proc = _run_demo(tmp_path, "--seconds", "120", "--interval", "0.3")
    text = proc.stdout
    assert proc.returncode == 0, text + proc.stderr[-3000:]
    assert "demo complete" in text
    assert "phase 1 done" in text and "phase 2 done: reclaimed llm-workers-" in text
    # Events as `kubectl describe pod` shows them: a bind, a reclaim, an invalid queue label.
    assert "Successfully assigned ml/detr-train-0 to gpu-node-" in text
    assert "Reclaimed" in text and "InvalidQueue" in text and "'vison' names no queue" in text
    assert "web-0 (default-scheduler) was ignored" in text
    # PodScheduled as autoscalers read it: bound pods True (set by the binding), the gang was
    # Unschedulable (waiting for capacity) before the reclaim, the pod with a typo in its queue has none
    assert "detr-train-0 [Running on gpu-node-" in text and "PodScheduled=True]" in text
    assert "typo-0 [Pending on -]" in text
    assert (tmp_path / "kubeconfig").exists()
    # The database converged to the cluster: the detr gang runs, reclaimed pods left the DB.
    db = sqlite3.connect(tmp_path / "db.sqlite3")
    rows = db.execute(
        "SELECT p.name, t.state FROM queues_app_kubepod p JOIN queues_app_task t ON t.id = p.task_id").fetchall()
    state = dict(rows)
    for name in ("resnet-0", "resnet-1", "notebook-0", "detr-train-0", "detr-train-1"):
        assert state.get(name) == "Running", rows
    assert "typo-0" not in state and "web-0" not in state
    reclaimed = [n for n in (f"llm-workers-{i}" for i in range(4)) if n not in state]
    assert reclaimed, rows  # their pods are gone from the cluster, so their rows are gone too
    assert db.execute("SELECT count(*) FROM queues_app_kubeoutbox WHERE status = 'failed'").fetchone() == (0,)


def test_demo_refuses_embedded_mode(settings):
    settings.KAI_CLUSTER_MODE = "embedded"
    with pytest.raises(CommandError, match="KAI_CLUSTER_MODE=kubernetes"):
        call_command("kube_demo", seconds=5)
