"""Run a test's check in a new interpreter and read back the integers it returned.

Why: the compiled entry points (``victim_run.entry_point``) are only taken while their dispatcher
holds exactly one compiled version; a test earlier in the same process that called a kernel with
other argument types leaves a second version, after which every call falls back to the dispatcher
and a check of the entry point's calls would check nothing. A fresh process has one version.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fresh_process_ints(target: str, *, timeout: float = 900) -> list[int]:
    """Call ``"package.module:function"`` (no arguments) in a new interpreter with the checkout on
    its path; return the integers it returned (one int or a tuple of them). A failure in the child
    fails the caller's test with the child's stderr."""
    module, func = target.split(":")
    code = (f"from {module} import {func} as f; r = f(); "
            "print('RESULT', *(r if isinstance(r, tuple) else (r,)))")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [int(x) for x in proc.stdout.split("RESULT")[-1].split()]
