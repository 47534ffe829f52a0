"""Golden scenarios from ``shared/scenarios`` (beside the repository) must pass ``check``.

Files listed in ``golden_known_failures.txt`` (``dir/file.yaml  # reason``) are expected to fail
(``xfail(strict=True)``): when one starts passing, the suite says so and the line must go.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scheduler_engine.check import check_snapshot
from scheduler_engine.loader import load_scenario

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
GOLDEN_DIRS = ("allocate", "reclaim_preempt", "fairshare")
KNOWN_FAILURES_FILE = Path(__file__).with_name("golden_known_failures.txt")


def known_failures() -> dict[str, str]:
    """``dir/file.yaml`` -> reason, from the known-failures list (comments and blanks ignored)."""
    out: dict[str, str] = {}
    if not KNOWN_FAILURES_FILE.exists():
        return out
    for line in KNOWN_FAILURES_FILE.read_text(encoding="utf-8").splitlines():
        entry, _, reason = line.partition("#")
        entry = entry.strip()
        if entry:
            out[entry] = reason.strip() or "known failure"
    return out


def golden_files() -> list[str]:
    files: list[str] = []
    for d in GOLDEN_DIRS:
        base = SHARED / "scenarios" / d
        if base.is_dir():
            files.extend(f"{d}/{p.name}" for p in sorted(base.iterdir()) if p.suffix in (".yaml", ".yml", ".json"))
    return files


FILES = golden_files()
KNOWN = known_failures()
pytestmark = pytest.mark.skipif(not FILES, reason=f"golden scenarios not found under {SHARED / 'scenarios'}")


def _params():
    for rel in FILES:
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN[rel])] if rel in KNOWN else []
        yield pytest.param(rel, marks=marks, id=rel)


@pytest.mark.parametrize("rel", list(_params()))
def test_golden_scenario(rel):
    outcome = check_snapshot(load_scenario(SHARED / "scenarios" / rel))
    assert outcome.has_expect, f"{rel} has no expect block"
    assert outcome.passed, "\n".join(outcome.mismatches)


def test_known_failures_name_existing_files():
    missing = sorted(set(KNOWN) - set(FILES))
    assert not missing, f"golden_known_failures.txt lists files that do not exist: {missing}"


def test_cli_check_passes_on_a_golden_file():
    passing = [rel for rel in FILES if rel not in KNOWN]
    if not passing:
        pytest.skip("every golden file is a known failure")
    target = SHARED / "scenarios" / passing[0]
    proc = subprocess.run([sys.executable, "-m", "scheduler_engine", "check", str(target)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "check: 1 passed, 0 failed"


def regenerate() -> int:
    """Rewrite the known-failures list from the engine's current results (first mismatch as reason).

    ``python tests/scheduler_engine/test_golden.py --regenerate``
    """
    lines = []
    for rel in FILES:
        try:
            outcome = check_snapshot(load_scenario(SHARED / "scenarios" / rel))
            problems = outcome.mismatches if outcome.has_expect else ["no expect block"]
        except Exception as exc:  # noqa: BLE001 - any engine error is a failure reason
            problems = [f"engine error: {type(exc).__name__}: {exc}"]
        if problems:
            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            lines.append(f"{rel}  # {problems[0][:160]}{more}")
    header = ("# Golden scenarios that currently fail `check` (xfail strict in test_golden.py).\n"
              "# One `dir/file.yaml  # reason` per line; regenerate with\n"
              "#   python tests/scheduler_engine/test_golden.py --regenerate\n")
    KNOWN_FAILURES_FILE.write_text(header + "".join(line + "\n" for line in lines), encoding="utf-8")
    print(f"{len(lines)} known failures of {len(FILES)} golden files written to {KNOWN_FAILURES_FILE}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit("usage: python tests/scheduler_engine/test_golden.py --regenerate")
    sys.path.insert(0, str(REPO))
    sys.exit(regenerate())
