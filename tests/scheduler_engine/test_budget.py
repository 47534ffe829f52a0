"""The cycle's time budget (scheduler_engine.budget): without one nothing depends on the clock; with
one the evicting actions stop between two jobs, keep what they decided, and say who was not tried.

A fake clock that advances one tick per reading makes the cut land at a chosen point, so the tests
are exact (no sleeping, no timing)."""
from __future__ import annotations

import io
import itertools
import json
import math
import sys

import pytest

from scheduler_engine.bench import generate
from scheduler_engine.budget import TimeBudget
from scheduler_engine.cli import main
from scheduler_engine.cycle import run_cycle, run_cycle_with_state
from scheduler_engine.loader import snapshot_to_dict

NOT_TRIED = "Not tried by"


@pytest.fixture(scope="module")
def snap():
    return generate(nodes=40, jobs=400, queues=12, seed=3, shape="mixed")


@pytest.fixture(scope="module")
def full(snap):
    return run_cycle(snap)


def ticking(start: float = 0.0):
    counter = itertools.count()
    return lambda: start + next(counter)


def test_without_a_budget_or_with_a_large_one_the_decisions_are_the_same(snap, full):
    assert full.budget is None and "budget" not in full.to_json()
    big = run_cycle(snap, time_budget=1e9)
    assert big.budget is None
    assert big.to_json() == full.to_json()
    assert run_cycle(snap, time_budget=math.inf).to_json() == full.to_json()


def readings(snap) -> int:
    """How often an unlimited cycle reads the clock (start, each action start, each popped job)."""
    n = itertools.count()
    run_cycle_with_state(snap, time_budget=1e9, clock=lambda: float(next(n)))
    return next(n)


_ORDER = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")


def where_it_ran_out(snap, ticks: int):
    """(state, result, index in _ORDER of the action where a budget of ``ticks`` readings ran out)."""
    state, res = run_cycle_with_state(snap, time_budget=float(ticks), clock=ticking())
    b = res.budget
    if b is None:
        return state, res, len(_ORDER)
    return state, res, _ORDER.index(b["cutIn"] or b["skipped"][0])


def last_cut_in(snap, action: str) -> int:
    """The largest budget (in readings) that runs out inside or before ``action`` (bisection: the cut
    point only moves forward as the budget grows)."""
    lo, hi = 1, readings(snap)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if where_it_ran_out(snap, mid)[2] <= _ORDER.index(action):
            lo = mid
        else:
            hi = mid - 1
    return lo


@pytest.mark.parametrize("action, refused, skipped", [("reclaim", "NotReclaiming", ["preempt"]),
                                                      ("preempt", "NotPreempting", [])])
def test_a_cut_keeps_a_prefix_of_the_decisions_and_explains_the_rest(snap, full, action, refused, skipped):
    assert sum(e["reason"] in ("Reclaimed", "Preempted") for e in full.events) > 5  # contended
    top = last_cut_in(snap, action)
    cuts = mid_search = 0
    for ticks in range(top, max(top - 25, 0), -1):  # the last 25 cut points inside the action
        state, res, at = where_it_ran_out(snap, ticks)
        b = res.budget
        if b["cutIn"] != action:
            break
        cuts += 1
        mid_search += state.budget.mid_search
        assert b["skipped"] == skipped and b["untried"] > 0
        untried = [e for e in res.events if e["message"].startswith(NOT_TRIED)]
        assert len(untried) == b["untried"] and all(e["reason"] == refused for e in untried)
        assert len({e["job"] for e in untried}) == b["untried"]
        # everything before the cut is exactly what the unlimited cycle did first; an interrupted
        # search left nothing behind (its scenarios were rolled back)
        first = res.events.index(untried[0])
        assert res.events[:first] == full.events[:first]
        if skipped:
            assert not any(e["reason"] in ("Preempted", "NotPreempting") for e in res.events)
    assert cuts >= 10, cuts


def expiring_inside_searches(after: int):
    """A clock that stands still except that the ``after``-th reading taken by a victim search
    (solvers/accumulation.py, between two scenarios) jumps past every budget; and its reading count."""
    seen = {"n": 0}

    def clock():
        caller = sys._getframe(2).f_code  # clock <- TimeBudget.expired <- the caller
        if caller.co_filename.endswith("accumulation.py"):
            seen["n"] += 1
        return 1e12 if seen["n"] >= after else 0.0
    return clock, seen


@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.7, 1.0])
def test_a_cut_inside_a_victim_search_rolls_it_back_and_counts_the_job_as_not_tried(snap, full, fraction):
    never, seen = expiring_inside_searches(10**9)
    run_cycle_with_state(snap, time_budget=1.0, clock=never)
    total = seen["n"]  # readings the searches take in a whole cycle
    assert total >= 4
    after = 1 + int(fraction * (total - 1))
    state, res = run_cycle_with_state(snap, time_budget=1.0, clock=expiring_inside_searches(after)[0])
    b = res.budget
    assert b is not None and b["cutIn"] in ("consolidation", "reclaim", "preempt") and state.budget.mid_search
    untried = [e for e in res.events if e["message"].startswith(NOT_TRIED)]
    assert len(untried) == (b["untried"] if b["cutIn"] != "consolidation" else 0)
    first = res.events.index(untried[0]) if untried else len(res.events)
    assert res.events[:first] == full.events[:first]  # the interrupted search left nothing behind


def test_a_spent_budget_still_allocates_and_skips_the_evicting_actions(snap, full):
    res = run_cycle(snap, time_budget=0)
    assert res.budget == {"seconds": 0.0, "cutIn": None, "tried": 0, "untried": 0,
                          "skipped": ["consolidation", "reclaim", "preempt"]}
    bound = {t for t, v in res.tasks.items() if v["status"] == "Binding"}
    assert bound  # allocate ran to the end
    assert not any(v["status"] in ("Releasing", "Pipelined") for v in res.tasks.values())
    assert res.to_json()["budget"]["skipped"] == ["consolidation", "reclaim", "preempt"]


@pytest.mark.parametrize("bad", [-1, float("nan"), "10", True])
def test_a_bad_budget_is_refused(bad):
    with pytest.raises(ValueError, match="time budget"):
        TimeBudget(bad)


def test_note_says_where_it_ran_out():
    b = TimeBudget(5, clock=ticking())
    assert b.note() == "" and b.summary() is None
    b.cut("reclaim", tried=3, untried=7)
    b.skip("preempt")
    assert b.note() == "time budget of 5 s ran out; reclaim tried 3 of 10 jobs; not run: preempt"


def test_cli_cycle_with_a_time_budget(tmp_path, snap, capsys):
    f = tmp_path / "c.json"
    f.write_text(json.dumps(snapshot_to_dict(snap)))

    out, err = io.StringIO(), io.StringIO()
    assert main(["cycle", "--time-budget", "0", str(f)], out=out, err=err) == 0, err.getvalue()
    assert "budget: 0 s ran out; not run: consolidation, reclaim, preempt" in out.getvalue()
    out = io.StringIO()
    assert main(["cycle", "--json", "--time-budget", "0", str(f)], out=out, err=err) == 0
    assert json.loads(out.getvalue())["budget"]["skipped"] == ["consolidation", "reclaim", "preempt"]
    assert main(["cycle", "--time-budget", "-2", str(f)], out=io.StringIO(), err=io.StringIO()) == 2
    assert "--time-budget: must be a finite number of seconds >= 0" in capsys.readouterr().err  # argparse's stderr
