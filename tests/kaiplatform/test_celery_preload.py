"""The worker's start hook loads the engine's kernels before the pool forks, only where cycles run."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from kaiplatform import celery as celery_module


def _worker(consume_from):
    """A stand-in for Celery's WorkController: the real app's router, a chosen ``-Q`` selection."""
    app = celery_module.app
    amqp = SimpleNamespace(router=app.amqp.router, queues=SimpleNamespace(consume_from=consume_from))
    return SimpleNamespace(app=SimpleNamespace(amqp=amqp))


@pytest.fixture
def preloads(monkeypatch):
    calls = []
    from queues_app.cycle import engine_io

    monkeypatch.setattr(engine_io, "preload_engine", lambda: calls.append(1) or "1 kernels ready")
    return calls


def test_a_worker_on_the_cycle_queue_preloads(preloads, settings):
    settings.KAI_WORKER_PRELOAD_ENGINE = True
    celery_module._preload_engine(sender=_worker({"celery": object()}))
    celery_module._preload_engine(sender=_worker(None))  # no -Q: every queue
    assert preloads == [1, 1]


def test_a_dispatch_only_worker_and_the_setting_skip_it(preloads, settings):
    settings.KAI_WORKER_PRELOAD_ENGINE = True
    celery_module._preload_engine(sender=_worker({"dispatch": object()}))
    settings.KAI_WORKER_PRELOAD_ENGINE = False
    celery_module._preload_engine(sender=_worker({"celery": object()}))
    assert preloads == []


def test_a_failing_preload_is_logged_not_fatal(monkeypatch, settings, caplog):
    from queues_app.cycle import engine_io

    def boom():
        raise RuntimeError("no compiler today")

    settings.KAI_WORKER_PRELOAD_ENGINE = True
    monkeypatch.setattr(engine_io, "preload_engine", boom)
    celery_module._preload_engine(sender=_worker(None))
    assert "could not preload the engine's kernels" in caplog.text


_PROBE = """
import django, os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kaiplatform.settings")
django.setup()
from scheduler_engine.kernels import node_index
def loaded():
    return sum(1 for f in vars(node_index).values() if getattr(f, "signatures", None))
before = loaded()
from queues_app.cycle.engine_io import preload_engine
text = preload_engine()
assert "kernels ready" in text, text
print(before, loaded())
"""


def test_preload_engine_leaves_the_kernels_loaded():
    """The real call, in a fresh process: before it no kernel of the node index is loaded, after it
    they are (compiled, or loaded from the cache)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from scheduler_engine.kernels import JIT_ENABLED

    if not JIT_ENABLED:
        pytest.skip("NUMBA_DISABLE_JIT=1: nothing is compiled")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("DATABASE_URL", None)
    out = subprocess.run([sys.executable, "-c", _PROBE], cwd=root, env=env, capture_output=True, text=True,
                         timeout=300, check=True).stdout.split()
    assert int(out[0]) == 0 and int(out[1]) > 0, out
