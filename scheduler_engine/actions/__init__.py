"""Scheduling actions. Each module exposes ``run(state) -> None`` mutating a ``CycleState``.

Modules are imported lazily by name so that the cycle driver only pays for the actions a
scenario configures.
"""
from __future__ import annotations

import importlib
from typing import Callable

_MODULES = {
    "allocate": "allocate",
    "consolidation": "consolidation",
    "reclaim": "reclaim",
    "preempt": "preempt",
    "stalegangeviction": "stalegang",
}


def get_action(name: str) -> Callable:
    """Return the ``run(state)`` function of the action called ``name`` (a scenario action name)."""
    try:
        module = _MODULES[name]
    except KeyError:
        raise ValueError(f"unknown action {name!r}; known: {', '.join(_MODULES)}") from None
    return importlib.import_module(f"{__name__}.{module}").run
