"""The cycle's time budget (scheduler_engine.budget): without one nothing depends on the clock; with
one the evicting actions stop between two jobs, keep what they decided, and say who was not tried.

A fake clock that advances one tick per reading makes the cut land at a chosen point, so the tests
are exact (no sleeping, no timing)."""
from __future__ import annotations

import io
import itertools
import json
import math

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


def test_a_cut_in_reclaim_keeps_a_prefix_of_the_decisions_and_explains_the_rest(snap, full):
    assert sum(e["reason"] == "Reclaimed" for e in full.events) > 5  # contended: reclaim has work
    for ticks in range(readings(snap), 0, -1):  # the latest cut that stops reclaim part-way
        res = run_cycle_with_state(snap, time_budget=float(ticks), clock=ticking())[1]
        if res.budget and res.budget["cutIn"] == "reclaim" and res.budget["tried"] >= 10:
            break
    else:
        pytest.fail("no budget cut reclaim part-way")
    b = res.budget
    assert b["skipped"] == ["preempt"] and b["untried"] > 0
    untried = [e for e in res.events if e["message"].startswith(NOT_TRIED)]
    assert len(untried) == b["untried"] and all(e["reason"] == "NotReclaiming" for e in untried)
    assert len({e["job"] for e in untried}) == b["untried"]
    assert all(res.jobs[e["job"]]["status"] not in ("Running", "Succeeded") for e in untried)
    # everything before the cut is exactly what the unlimited cycle did first
    first = res.events.index(untried[0])
    assert first > 0 and res.events[:first] == full.events[:first]
    assert not any(e["reason"] in ("Preempted", "NotPreempting") for e in res.events)  # preempt did not run


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
    assert b.note() == "time budget of 5 s ran out; reclaim stopped after 3 of 10 jobs; not run: preempt"


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
