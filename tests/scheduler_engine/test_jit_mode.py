"""``python -m scheduler_engine cycle|check`` on a cold kernel cache runs small inputs interpreted
(:mod:`scheduler_engine.jit_mode`): same output, no compile, a note on stderr; ``--jit`` overrides."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from scheduler_engine import cli, jit_mode
from tests.scheduler_engine.test_cli import REPO, scenario, write

SHARED = REPO.parent / "shared" / "scenarios" / "reclaim_preempt"


def _env(cache: Path, **extra) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), **extra}
    env.pop("NUMBA_DISABLE_JIT", None)  # (the CI pass without the JIT sets it: this is about the JIT's absence)
    env.pop(jit_mode.ENV, None)
    return env


def _golden_file() -> Path:
    files = sorted(SHARED.glob("*.yaml")) if SHARED.is_dir() else []
    if not files:
        pytest.skip("golden scenarios not found")
    return files[0]


def test_cold_cache_small_file_runs_interpreted_with_the_same_output(tmp_path):
    """An empty cache directory: the run re-executes itself interpreted (the note), prints exactly what
    the in-process engine prints for the file, and leaves no compiled kernel behind (nothing compiled)."""
    f = _golden_file()
    cache = tmp_path / "cache"
    proc = subprocess.run([sys.executable, "-m", "scheduler_engine", "cycle", "--json", str(f)],
                          cwd=REPO, env=_env(cache), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "running the kernels interpreted" in proc.stderr and "kernels.warm" in proc.stderr
    out = io.StringIO()
    assert cli.main(["cycle", "--json", str(f)], out=out, err=io.StringIO()) == 0
    assert json.loads(proc.stdout) == json.loads(out.getvalue())
    assert not list(cache.rglob("*.nbi")), "a kernel was compiled although the run was interpreted"
    ledger = list(cache.rglob(jit_mode.LEDGER))
    assert len(ledger) == 1 and jit_mode.interpreted_seconds(ledger[0]) > 0


def test_check_directory_counts_every_scenario_file(tmp_path):
    a = write(tmp_path / "d" / "a.yaml", scenario())
    write(tmp_path / "d" / "sub" / "b.yaml", scenario())
    (tmp_path / "d" / "notes.txt").write_text("x" * 10_000)
    size = jit_mode.input_bytes("check", [str(tmp_path / "d")])
    assert size == a.stat().st_size * 2
    assert jit_mode.input_bytes("cycle", [str(a), str(tmp_path / "missing.yaml")]) is None


@pytest.fixture
def small_file(tmp_path):
    return write(tmp_path / "a.yaml", scenario())


def test_choose(monkeypatch, small_file):
    """Interpreted only for cycle / check, JIT not already off, a small input and a cold cache;
    --jit / KAI_ENGINE_JIT decide over auto."""
    cold = {"v": True}
    monkeypatch.setattr(jit_mode, "cache_is_cold", lambda: cold["v"])
    ledger = small_file.parent / "ledger.json"  # (not this machine's: it may hold seconds already)
    monkeypatch.setattr(jit_mode, "ledger_path", lambda: ledger)
    env: dict = {}
    assert "cold" in jit_mode.choose(["cycle", str(small_file)], env)
    assert "cold" in jit_mode.choose(["--log-level", "INFO", "check", str(small_file)], env)
    assert jit_mode.choose(["cycle", "--jit", "on", str(small_file)], env) is None
    assert jit_mode.choose(["cycle", str(small_file)], {jit_mode.ENV: "on"}) is None
    assert jit_mode.choose(["cycle", "--jit", "auto", str(small_file)], {jit_mode.ENV: "on"}) is not None
    assert jit_mode.choose(["cycle", str(small_file)], {"NUMBA_DISABLE_JIT": "1"}) is None
    assert jit_mode.choose(["bench", "--nodes", "10", "--jobs", "10"], env) is None
    assert jit_mode.choose(["cycle"], env) is None  # (a usage error: the command prints it)
    assert jit_mode.choose(["cycle", str(small_file) + ".missing"], env) is None
    monkeypatch.setattr(jit_mode, "MAX_BYTES", small_file.stat().st_size - 1)
    assert jit_mode.choose(["cycle", str(small_file)], env) is None
    assert "--jit off" in jit_mode.choose(["cycle", "--jit", "off", str(small_file)], env)
    monkeypatch.setattr(jit_mode, "MAX_BYTES", 10**9)
    jit_mode.add_interpreted_seconds(ledger, jit_mode.COMPILE_SECONDS - 1)
    assert jit_mode.choose(["cycle", str(small_file)], env) is not None
    jit_mode.add_interpreted_seconds(ledger, 1.5)  # interpreted runs have cost a compile: compile now
    assert jit_mode.choose(["cycle", str(small_file)], env) is None
    assert jit_mode.choose(["cycle", "--jit", "off", str(small_file)], env) is not None
    ledger.unlink()
    cold["v"] = False
    assert jit_mode.choose(["cycle", str(small_file)], env) is None
    cold["v"] = None
    assert jit_mode.choose(["cycle", str(small_file)], env) is None


def test_cache_is_cold_reads_each_key_kernel_for_this_cpu(monkeypatch):
    """Cold when one key kernel has no index entry compiled for this CPU (an entry for another CPU, or
    an index that is stale or missing - numba's own ``_load_index`` gives {} - does not count)."""
    numba = pytest.importorskip("numba")
    if numba.config.DISABLE_JIT:
        pytest.skip("the JIT is disabled in this process: nothing to read")
    from numba.core.registry import cpu_target

    from scheduler_engine.kernels import warm

    magic = cpu_target.target_context.codegen().magic_tuple()
    index = {name: {(("sig",), magic): "data"} for name in jit_mode.KEY_KERNELS}

    def fake(name):
        return SimpleNamespace(_cache=SimpleNamespace(_cache_file=SimpleNamespace(_load_index=lambda: index[name])))

    monkeypatch.setattr(warm, "kernels", lambda: {n: fake(n) for n in jit_mode.KEY_KERNELS})
    assert jit_mode.cache_is_cold() is False
    index[jit_mode.KEY_KERNELS[1]] = {(("sig",), ("other-cpu",)): "data"}
    assert jit_mode.cache_is_cold() is True
    index[jit_mode.KEY_KERNELS[1]] = {}
    assert jit_mode.cache_is_cold() is True
    monkeypatch.setattr(warm, "kernels", lambda: {})
    assert jit_mode.cache_is_cold() is None


def test_cache_is_cold_on_an_empty_cache_directory(tmp_path):
    """The real numba cache layout: an empty NUMBA_CACHE_DIR reads as cold (no compile needed to tell)."""
    code = "from scheduler_engine import jit_mode; print(jit_mode.cache_is_cold())"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_env(tmp_path / "c"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    pytest.importorskip("numba")
    assert proc.stdout.strip() == "True"
