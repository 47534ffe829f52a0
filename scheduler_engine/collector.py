"""The cyclic garbage collector paused around a phase that allocates many acyclic objects.

Why: the engine's hot phases (allocate's job loop, the evicting actions' job loop, building the
result) allocate hundreds of thousands to millions of small tuples, lists, sets and dicts and make no
reference cycles. With the collector on, those allocations trigger repeated collections that walk
the whole live state (at 10,000 nodes: 10-20 % of allocate, ~4 % of reclaim, most of building the
result), and find nothing. Pausing it is safe for the same reason: nothing built there is cyclic, so
nothing is left behind for it. One definition, so that every phase pauses and restores it the same way.
"""
from __future__ import annotations

import contextlib
import gc
from typing import Iterator

__all__ = ["cyclic_gc_paused"]


@contextlib.contextmanager
def cyclic_gc_paused(*, collect_young: bool = True) -> Iterator[None]:
    """Disable the cyclic collector for the ``with`` body and restore its previous state after
    (left off if it was off). ``collect_young``: then collect the young generations once, so the
    phase pays that single pass itself instead of the code after it meeting it at its next
    allocation (a bench times each phase apart)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
            if collect_young:
                gc.collect(1)
