"""Compare what a cycle decided with a scenario's ``expect`` block.

``compare(result, expect)`` lists every mismatch as a readable line naming the object, the field,
the expected and the actual value (``job X: status expected Binding, got Pending``).  Numbers are
compared with a relative tolerance of 1e-6 (plus a 1e-9 absolute floor so float noise around 0,
e.g. ``1e-13`` idle GPUs, is not a mismatch).

``check_snapshot(snapshot)`` also holds every checked cycle to the engine's result invariants
(:mod:`scheduler_engine.invariants`, e.g. nothing Pipelined where nothing is releasing), then applies
the format's "Rounds" rules: a plain scenario is compared with
its one cycle; a scenario that sets ``rounds``/``stableRounds`` is compared with the snapshot after
the rewrite that follows the last round, then again with each stable round's own result.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .cycle import run_cycle, run_rounds, uses_rounds
from .invariants import result_problems
from .result import CycleResult
from .snapshot import RESOURCES, Snapshot
from .units import parse_cpu, parse_gpu, parse_memory

__all__ = ["compare", "check_snapshot", "CheckOutcome", "REL_TOL", "ABS_TOL"]

REL_TOL = 1e-6
ABS_TOL = 1e-9


def _expected_amount(res: str, value: Any) -> float:
    """An expected queue amount in scenario units (cpu cores, memory bytes, gpu devices)."""
    if res == "cpu":
        return parse_cpu(value) / 1000.0
    if res == "memory":
        return parse_memory(value)
    return parse_gpu(value)


def _close(actual: float, expected: float) -> bool:
    return math.isclose(float(actual), float(expected), rel_tol=REL_TOL, abs_tol=ABS_TOL)


def _fmt(x: Any) -> str:
    if x is None:
        return "none"
    if isinstance(x, float):
        if x.is_integer() and abs(x) < 2**63:
            return str(int(x))
        return f"{x:.10g}"
    return str(x)


def compare(result: CycleResult, expect: dict | None) -> list[str]:
    """Every difference between ``result`` and ``expect`` (empty list = it holds)."""
    if not expect:
        return []
    out: list[str] = []
    for name, e in (expect.get("jobs") or {}).items():
        job = result.jobs.get(name)
        if job is None:
            out.append(f"job {name}: not in the result")
            continue
        if "status" in e and e["status"] != job["status"]:
            detail = ""
            if job["status"] == "Mixed":
                detail = " (" + ", ".join(f"{t['name']}={t['status']}" for t in job["tasks"]) + ")"
            out.append(f"job {name}: status expected {e['status']}, got {job['status']}{detail}")
        if e.get("node") is not None:
            nodes = result.job_nodes(name)
            if nodes != [e["node"]]:
                got = ", ".join(nodes) if nodes else "none"
                out.append(f"job {name}: node expected {e['node']}, got {got}")
        for sg, want in (e.get("subGroups") or {}).items():
            have = (job.get("subGroups") or {}).get(sg)
            if have is None:
                out.append(f"job {name}: subgroup {sg} not in the result")
                continue
            for key in ("placed", "satisfied"):
                if key in want and want[key] != have[key]:
                    out.append(f"job {name}: subgroup {sg} {key} expected {_fmt(want[key])}, got {_fmt(have[key])}")
    for name, e in (expect.get("tasks") or {}).items():
        task = result.tasks.get(name)
        if task is None:
            out.append(f"task {name}: not in the result")
            continue
        if "status" in e and e["status"] != task["status"]:
            out.append(f"task {name}: status expected {e['status']}, got {task['status']}")
        if e.get("node") is not None and e["node"] != task["node"]:
            out.append(f"task {name}: node expected {e['node']}, got {_fmt(task['node'])}")
        for cls, want in (e.get("devices") or {}).items():
            have = (task.get("devices") or {}).get(cls, [])
            if sorted(want) != sorted(have):
                out.append(f"task {name}: devices.{cls} expected {sorted(want)}, got {sorted(have)}")
    for name, e in (expect.get("queues") or {}).items():
        queue = result.queues.get(name)
        if queue is None:
            out.append(f"queue {name}: not in the result")
            continue
        for key in ("fairShare", "allocated"):
            for res in RESOURCES:
                if res not in (e.get(key) or {}):
                    continue
                want = _expected_amount(res, e[key][res])
                got = queue[key][res]
                if not _close(got, want):
                    out.append(f"queue {name}: {key}.{res} expected {_fmt(float(want))}, got {_fmt(float(got))}")
    for name, e in (expect.get("nodes") or {}).items():
        node = result.nodes.get(name)
        if node is None:
            out.append(f"node {name}: not in the result")
            continue
        for key in ("idleGpus", "releasingGpus"):
            if key in e and not _close(node[key], e[key]):
                out.append(f"node {name}: {key} expected {_fmt(float(e[key]))}, got {_fmt(float(node[key]))}")
    return out


@dataclass
class CheckOutcome:
    """Result of checking one scenario: ``mismatches`` empty = passed; ``result`` = what was compared
    (the single cycle, or the rewritten snapshot after the last round)."""

    name: str
    mismatches: list[str]
    result: CycleResult
    has_expect: bool
    stable_results: list[CycleResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.mismatches


def check_snapshot(snapshot: Snapshot) -> CheckOutcome:
    """Run the scenario as its config says and compare with ``snapshot.expect``.

    With stable rounds only the first stable round that breaks ``expect`` is reported (prefixed
    ``stable round K:``): later rounds usually repeat the same difference.
    """
    expect = snapshot.expect
    if not uses_rounds(snapshot):
        result = run_cycle(snapshot)
        mismatches = compare(result, expect) + [f"invariant: {p}" for p in result_problems(snapshot, result)]
        return CheckOutcome(snapshot.name, mismatches, result, expect is not None)
    rr = run_rounds(snapshot)
    mismatches = compare(rr.final, expect)
    inputs = [rr.final_snapshot] + rr.stable_snapshots[:-1]
    for k, (res, before) in enumerate(zip(rr.stable, inputs), start=1):
        mm = compare(res, expect) + [f"invariant: {p}" for p in result_problems(before, res)]
        if mm:
            mismatches.extend(f"stable round {k}: {m}" for m in mm)
            break
    return CheckOutcome(snapshot.name, mismatches, rr.final, expect is not None, rr.stable)
