"""``python -m scheduler_engine``: output shapes, exit statuses, lazy commands."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

from scheduler_engine import cli

REPO = Path(__file__).resolve().parents[2]


def scenario(expect_status: str = "Pending", actions=()) -> dict:
    """No actions by default: the cycle reports the input as is, independent of action code."""
    return {
        "name": "cli test",
        "config": {"actions": list(actions)},
        "nodes": [{"name": "node0", "gpus": 2, "cpu": 8, "memory": "8Gi"}],
        "queues": [{"name": "q", "resources": {
            "gpu": {"quota": 2, "overQuotaWeight": 1, "limit": -1},
            "cpu": {"quota": -1, "overQuotaWeight": 1, "limit": -1},
            "memory": {"quota": -1, "overQuotaWeight": 1, "limit": -1}}}],
        "jobs": [
            {"name": "run", "queue": "q", "tasks": [{"gpu": 1, "cpu": "500m", "state": "Running", "node": "node0"}]},
            {"name": "wait", "queue": "q", "tasks": [{"gpu": 1}]},
        ],
        "expect": {"jobs": {"wait": {"status": expect_status}},
                   "queues": {"q": {"fairShare": {"gpu": 2}, "allocated": {"cpu": 0.5}}},
                   "nodes": {"node0": {"idleGpus": 1}}},
    }


def write(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".json":
        path.write_text(json.dumps(data))
    else:
        path.write_text(yaml.safe_dump(data))
    return path


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = cli.main(list(argv), out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


def test_cycle_json_lines_one_object_per_file(tmp_path):
    a = write(tmp_path / "a.yaml", scenario())
    b = write(tmp_path / "b.json", scenario())
    rc, out, err = run("cycle", str(a), str(b), "--json")
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) == 2
    objs = [json.loads(line) for line in lines]
    assert [o["file"] for o in objs] == [str(a), str(b)]
    o = objs[0]
    assert set(o) == {"file", "jobs", "tasks", "queues", "nodes", "events"}
    assert o["jobs"]["run"] == {"status": "Running", "tasks": [
        {"name": "run-0", "status": "Running", "node": "node0", "gpuGroups": []}]}
    assert o["tasks"]["wait-0"] == {"status": "Pending", "node": None}
    assert o["queues"]["q"]["allocated"] == {"gpu": 1, "cpu": 0.5, "memory": 0}
    assert set(o["queues"]["q"]["fairShare"]) == {"gpu", "cpu", "memory"}
    assert o["nodes"]["node0"] == {"idleGpus": 1, "releasingGpus": 0}
    assert o["events"] == []


def test_cycle_timings_flag_adds_phases(tmp_path):
    a = write(tmp_path / "a.yaml", scenario())
    rc, out, _ = run("cycle", str(a), "--json", "--timings")
    assert rc == 0
    assert {"open", "result", "total"} <= set(json.loads(out)["timings"])


def test_cycle_text_summary(tmp_path):
    a = write(tmp_path / "a.yaml", scenario())
    rc, out, _ = run("cycle", str(a))
    assert rc == 0
    assert f"== {a}: cli test" in out
    assert "tasks: Pending 1, Running 1" in out
    assert "run   Running          node0" in out
    assert "idleGpus 1  releasingGpus 0" in out


def test_cycle_rejects_directories_and_missing_files(tmp_path):
    rc, out, err = run("cycle", str(tmp_path))
    assert rc == 2 and out == "" and "is a directory" in err
    rc, out, err = run("cycle", str(tmp_path / "nope.yaml"))
    assert rc == 2 and out == "" and "no such file" in err


def test_check_recurses_and_summarises(tmp_path):
    write(tmp_path / "good.yaml", scenario("Pending"))
    write(tmp_path / "sub" / "bad.yml", scenario("Binding"))
    write(tmp_path / "sub" / "noexpect.json", {k: v for k, v in scenario().items() if k != "expect"})
    (tmp_path / "notes.txt").write_text("not a scenario")
    rc, out, err = run("check", str(tmp_path))
    assert rc == 1, err
    assert f"FAIL {tmp_path / 'sub' / 'bad.yml'}" in out
    assert "  job wait: status expected Binding, got Pending" in out
    assert out.strip().splitlines()[-1] == "check: 1 passed, 1 failed, 1 skipped (no expect)"


def test_check_all_passing_exits_0_and_verbose_lists_files(tmp_path):
    f = write(tmp_path / "good.yaml", scenario("Pending"))
    rc, out, _ = run("check", str(f))
    assert rc == 0 and out == "check: 1 passed, 0 failed\n"
    rc, out, _ = run("check", "-v", str(f))
    assert rc == 0 and f"ok   {f}" in out


def test_check_invalid_file_prints_nothing_on_stdout(tmp_path):
    write(tmp_path / "good.yaml", scenario())
    bad = scenario()
    bad["nodes"][0]["gpus"] = -2
    write(tmp_path / "bad.yaml", bad)
    rc, out, err = run("check", str(tmp_path))
    assert rc == 2
    assert out == ""
    assert "nodes[0].gpus: must be >= 0, got -2" in err and "nothing was run" in err


def test_check_empty_directory(tmp_path):
    rc, out, err = run("check", str(tmp_path))
    assert rc == 2 and out == "" and "no scenario files" in err


def test_check_engine_error_counts_as_failure(tmp_path, monkeypatch):
    import scheduler_engine.cycle as cycle_mod

    def boom(state):
        raise RuntimeError("kaput")

    monkeypatch.setattr(cycle_mod, "get_action", lambda name: boom)
    f = write(tmp_path / "a.yaml", scenario(actions=["allocate"]))
    rc, out, _ = run("check", str(f))
    assert rc == 1
    assert "engine error: RuntimeError: kaput" in out


def test_usage_error_exits_2():
    rc, _, _ = run("frobnicate")
    assert rc == 2
    rc, _, _ = run("cycle")
    assert rc == 2


def test_missing_lazy_command_module(monkeypatch):
    monkeypatch.setitem(cli._LAZY_COMMANDS, "simulate", ("scheduler_engine._no_such_module_", "x"))
    rc, out, err = run("simulate", "x.yaml", "--output", "h.csv")
    assert rc == 2 and out == ""
    assert "'simulate' command is not available" in err


def test_lazy_command_gets_remaining_arguments(monkeypatch):
    seen = {}
    fake = types.ModuleType("scheduler_engine._fake_bench_")
    fake.main = lambda argv: seen.setdefault("argv", argv) and 0
    monkeypatch.setitem(sys.modules, "scheduler_engine._fake_bench_", fake)
    monkeypatch.setitem(cli._LAZY_COMMANDS, "bench", ("scheduler_engine._fake_bench_", "x"))
    rc, _, _ = run("bench", "--nodes", "10", "--help")
    assert rc == 0 and seen["argv"] == ["--nodes", "10", "--help"]


def test_lazy_module_without_main(monkeypatch):
    fake = types.ModuleType("scheduler_engine._fake_sim_")
    monkeypatch.setitem(sys.modules, "scheduler_engine._fake_sim_", fake)
    monkeypatch.setitem(cli._LAZY_COMMANDS, "simulate", ("scheduler_engine._fake_sim_", "x"))
    rc, _, err = run("simulate")
    assert rc == 2 and "has no main(argv)" in err


def test_subprocess_cycle_json(tmp_path):
    f = write(tmp_path / "a.yaml", scenario())
    proc = subprocess.run([sys.executable, "-m", "scheduler_engine", "cycle", "--json", str(f)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["file"] == str(f)


def test_subprocess_closed_stdout_ends_quietly(tmp_path):
    """`python -m scheduler_engine cycle FILE | head` must not print a BrokenPipeError traceback."""
    f = write(tmp_path / "a.yaml", scenario())
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: every write hits EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "scheduler_engine", "cycle", str(f)],
                              cwd=REPO, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("status", ["Pending", "Binding"])
def test_subprocess_check_exit_status(tmp_path, status):
    f = write(tmp_path / "a.yaml", scenario(status))
    proc = subprocess.run([sys.executable, "-m", "scheduler_engine", "check", str(f)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == (0 if status == "Pending" else 1), proc.stderr
    assert proc.stdout.splitlines()[-1] == ("check: 1 passed, 0 failed" if status == "Pending"
                                            else "check: 0 passed, 1 failed")


def test_cycle_engine_error_names_the_file(tmp_path, monkeypatch):
    import scheduler_engine.cycle as cycle_mod

    def boom(state):
        raise RuntimeError("kaput")

    monkeypatch.setattr(cycle_mod, "get_action", lambda name: boom)
    f = write(tmp_path / "a.yaml", scenario(actions=["allocate"]))
    rc, out, err = run("cycle", "--json", str(f))
    assert rc == 1 and out == ""
    assert f"error: {f}: engine error: RuntimeError: kaput" in err
