"""Named fault points of the scheduling cycle, for crash and interleaving tests.

``fault_point(name)`` is called at each phase boundary of :func:`cycle_run`:

    after_lock, after_snapshot, after_compute, mid_apply, before_commit, after_commit

Two ways to act there, both inert in normal operation:

* environment ``KAI_CYCLE_FAULT=<name>`` (comma separated for several): the process kills
  itself with SIGKILL at that point -- a real crash, no cleanup, no atexit, no rollback
  message to the database.  Ignored when ``KAI_ENV=production``.
* in-process hooks registered by tests (``register(name, fn)``) -- e.g. cancel a workload
  between snapshot and apply, or block on a barrier.
"""
from __future__ import annotations

import os
import signal
from typing import Callable

POINTS = ("after_lock", "after_snapshot", "after_compute", "mid_apply", "before_commit", "after_commit")
_hooks: dict[str, list[Callable[[], None]]] = {}


def register(name: str, fn: Callable[[], None]) -> None:
    if name not in POINTS:
        raise ValueError(f"unknown fault point {name!r}; use one of {', '.join(POINTS)}")
    _hooks.setdefault(name, []).append(fn)


def clear() -> None:
    _hooks.clear()


def fault_point(name: str) -> None:
    for fn in list(_hooks.get(name, ())):
        fn()
    wanted = os.environ.get("KAI_CYCLE_FAULT", "")
    if wanted and os.environ.get("KAI_ENV", "").lower() != "production":
        if name in {w.strip() for w in wanted.split(",")}:
            os.kill(os.getpid(), signal.SIGKILL)
