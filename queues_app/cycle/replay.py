"""Replay of a recorded cycle: what a cycle ran and decided is stored compressed on its
``SchedulingCycle`` row; re-running that scenario through the engine must decide the same
(``manage.py replay_cycle``, ``GET /api/v1/cycles/<id>/replay``-style checks in the tests).
"""
from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any, Mapping

from queues_app.cycle.engine_io import run_engine, snapshot_from_dict

def cycle_replay_record(data: Mapping[str, Any], result: Any) -> dict[str, bytes]:
    """Compressed copies of what a cycle ran (its scenario dict) and decided (task status and node),
    as ``SchedulingCycle.scenario_gz`` / ``decisions_gz`` values, so the cycle can be replayed."""
    decisions = {t: [v["status"], v["node"]] for t, v in (getattr(result, "tasks", None) or {}).items()}
    return {
        "scenario_gz": zlib.compress(json.dumps(data, separators=(",", ":"), default=str).encode(), 1),
        "decisions_gz": zlib.compress(json.dumps(decisions, separators=(",", ":")).encode(), 1),
    }


@dataclass
class ReplayOutcome:
    scenario: dict[str, Any]
    recorded: dict[str, list]
    replayed: dict[str, list]
    differences: list[str]

    @property
    def same(self) -> bool:
        return not self.differences


def replay_recorded_cycle(*, scenario_gz: bytes, decisions_gz: bytes | None) -> ReplayOutcome:
    """Re-run a recorded cycle's scenario through the engine and compare with its recorded decisions."""
    scenario = json.loads(zlib.decompress(bytes(scenario_gz)))
    recorded = json.loads(zlib.decompress(bytes(decisions_gz))) if decisions_gz else {}
    result = run_engine(snapshot_from_dict(scenario, source="replay"))
    replayed = {t: [v["status"], v["node"]] for t, v in result.tasks.items()}
    diffs = []
    for t in sorted(set(recorded) | set(replayed)):
        a, b = recorded.get(t), replayed.get(t)
        if a != b:
            diffs.append(f"task {t}: recorded {a[0] + ' on ' + str(a[1]) if a else 'absent'}, "
                         f"replayed {b[0] + ' on ' + str(b[1]) if b else 'absent'}")
    return ReplayOutcome(scenario=scenario, recorded=recorded, replayed=replayed, differences=diffs)
