"""Named phase points of the scheduling cycle, where tests act: crash and interleaving tests.

``fault_point(name)`` is called at each phase boundary of :func:`queues_app.cycle.run.cycle_run`:

    after_lock, after_snapshot, after_compute, mid_apply, before_commit, after_commit

In normal operation nothing is registered and a point does nothing.  Tests register in-process
hooks (``register(name, fn)``): cancel a workload between snapshot and apply, block on a barrier,
or -- ``tests/support/crash_points.py``, a real process running ``manage.py run_cycle`` -- kill
the process with SIGKILL at that point.  The killing itself is test tooling and lives there.
"""
from __future__ import annotations

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
