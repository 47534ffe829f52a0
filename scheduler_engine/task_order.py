"""Task order inside a job: higher task priority first, tasks without a priority last, then index.

Its own module because both the job order (``ordering``) and the subgroup tree (``subgroups``) use
it, and ``ordering`` depends on ``subgroups``; ``ordering`` re-exports it.
"""
from __future__ import annotations

import math
from typing import Iterable


def task_order(state, tasks: Iterable[int]) -> list[int]:
    prio = state.tasks.priority

    def key(t):
        p = prio[t]
        return (1, 0.0, t) if math.isnan(p) else (0, -float(p), t)

    return sorted(tasks, key=key)
