"""The engine still decides without numba installed: the kernels fall back to their own Python
source (as under ``NUMBA_DISABLE_JIT=1``), so a bare numpy environment can run ``check``.

Run in a child process where ``import numba`` fails, so this test cannot pass on an interpreter
that happens to have numba loaded already.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT.parent / "shared" / "scenarios" / "reclaim_preempt"

_CHILD = """
import sys
sys.modules["numba"] = None  # makes `import numba` raise ImportError
from scheduler_engine import kernels
from scheduler_engine.cli import main
assert kernels.JIT_ENABLED is False
sys.exit(main(["check", sys.argv[1]]))
"""


def test_golden_reclaim_scenarios_pass_without_numba():
    out = subprocess.run([sys.executable, "-c", _CHILD, str(GOLDEN)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert " 0 failed" in out.stdout
