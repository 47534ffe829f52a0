"""Scheduling actions (KAI ``pkg/scheduler/actions``): one module per action, each exposing
``run(state) -> None`` that mutates a ``CycleState``; :mod:`.common` holds what they share.

The rules they apply live in :mod:`scheduler_engine.plugins`, the victim search of the evicting
actions in :mod:`scheduler_engine.solvers`.
"""
from __future__ import annotations

from typing import Callable

from . import allocate, consolidation, preempt, reclaim, stalegang

_ACTIONS: dict[str, Callable] = {
    "allocate": allocate.run,
    "consolidation": consolidation.run,
    "reclaim": reclaim.run,
    "preempt": preempt.run,
    "stalegangeviction": stalegang.run,
}


def get_action(name: str) -> Callable:
    """Return the ``run(state)`` function of the action called ``name`` (a scenario action name)."""
    try:
        return _ACTIONS[name]
    except KeyError:
        raise ValueError(f"unknown action {name!r}; known: {', '.join(_ACTIONS)}") from None
