"""A wall-clock budget for one cycle's actions.

Why: the control plane runs a cycle inside a Celery task with a soft time limit (50 s by
default). A contended cluster of thousands of nodes can need minutes of reclaim; a cycle killed at
its limit writes nothing, so the cluster would stop scheduling altogether. With a budget the
cycle keeps what it decided so far: allocate always runs to the end (it is cheap and is what
binds work), the evicting actions stop between two jobs (or between two scenarios of one job's
victim search, which is then rolled back) once the budget is spent, and the jobs
they did not reach are told so (an event each: "the next cycle tries it again"). The actions
after the cut are not run; stale gang eviction always runs (it frees what broken gangs hold and costs
nothing).

Without a budget (``seconds=None``: the CLI's default, bench, scenario checks) nothing changes:
decisions do not depend on the clock.
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable

__all__ = ["TimeBudget", "ALWAYS_RUN", "seconds_text", "summary_text"]

#: Actions run even after the budget is spent.
ALWAYS_RUN = frozenset({"allocate", "stalegangeviction"})


def seconds_text(seconds: float | None) -> str:
    """``25``, ``20.8``, ``1234``: tenths at most (messages, not measurements)."""
    return "none" if seconds is None else f"{round(float(seconds), 1):g}"


class TimeBudget:
    """Seconds a cycle's actions may take, measured from construction with ``clock``."""

    def __init__(self, seconds: float | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        if seconds is not None and (not isinstance(seconds, (int, float)) or isinstance(seconds, bool)
                                    or math.isnan(seconds) or seconds < 0):
            raise ValueError(f"time budget must be a number of seconds >= 0, got {seconds!r}")
        self.seconds = None if seconds is None or math.isinf(seconds) else float(seconds)
        self._clock = clock
        self._end = None if self.seconds is None else clock() + self.seconds
        self.cut_in: str | None = None  # the action that stopped part-way
        self.tried = 0  # jobs of that action tried before the cut
        self.untried = 0  # jobs of that action not reached
        self.mid_search = False  # the cut came inside a job's victim search
        self.skipped: list[str] = []  # actions not run at all

    def expired(self) -> bool:
        return self._end is not None and self._clock() >= self._end

    def cut(self, action: str, *, tried: int, untried: int, mid_search: bool = False) -> None:
        """``action`` stopped with ``untried`` of its jobs not reached (``mid_search``: one of them
        was interrupted between two scenarios of its victim search and counts as not reached)."""
        self.cut_in, self.tried, self.untried, self.mid_search = action, tried, untried, mid_search

    def skip(self, action: str) -> None:
        self.skipped.append(action)

    @property
    def ran_out(self) -> bool:
        return self.cut_in is not None or bool(self.skipped)

    def untried_text(self, action: str) -> str:
        """The event message of a job the action did not reach."""
        return (f"Not tried by {action}: the cycle's time budget of {seconds_text(self.seconds)} s ran out before this "
                "job's turn; the next cycle tries it again.")

    def summary(self) -> dict[str, Any] | None:
        """For the result (``budget`` in its JSON): None when the budget did not run out."""
        if not self.ran_out:
            return None
        return {"seconds": self.seconds, "cutIn": self.cut_in, "tried": self.tried, "untried": self.untried,
                "skipped": list(self.skipped)}

    def note(self) -> str:
        """One line for a log ('' when the budget did not run out)."""
        text = summary_text(self.summary())
        return f"time budget of {text}" if text else ""


def summary_text(summary: dict[str, Any] | None) -> str:
    """A result's ``budget`` (:meth:`TimeBudget.summary`) as words: "25 s ran out; reclaim tried 812 of
    4000 jobs; not run: preempt" ('' for None). The CLI and the control plane's cycle record use it."""
    if not summary:
        return ""
    text = f"{seconds_text(summary['seconds'])} s ran out"
    if summary.get("cutIn"):
        text += f"; {summary['cutIn']} tried {summary['tried']} of {summary['tried'] + summary['untried']} jobs"
    if summary.get("skipped"):
        text += "; not run: " + ", ".join(summary["skipped"])
    return text
