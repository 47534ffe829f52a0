"""The database can express everything a scenario expresses: every golden scenario, imported
into the database through the services and exported again, gives the engine the same input."""
from __future__ import annotations

import copy
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from queues_app.cycle.engine_io import build_snapshot
from queues_app.cycle.scenario import import_scenario
from scheduler_engine.loader import load_dict, snapshot_to_dict

SCENARIOS = sorted(Path("/work/shared/scenarios").glob("*/*.yaml"))
FIXED_NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def canonical(snapshot) -> dict:
    d = snapshot_to_dict(snapshot)
    d.pop("expect", None)
    d.pop("simulation", None)
    d["config"].pop("now", None)
    for key in ("nodes", "queues", "jobs"):
        d[key] = sorted(d[key], key=lambda x: x["name"])
    if "deviceClasses" in d:  # the database lists classes by name; the order means nothing
        d["deviceClasses"] = sorted(d["deviceClasses"], key=lambda x: x["name"])
        for job in d["jobs"]:
            for task in job["tasks"]:
                if "claims" in task:
                    task["claims"] = sorted(task["claims"], key=lambda c: c["deviceClass"])
    return d


@pytest.mark.skipif(not SCENARIOS, reason="golden scenarios not available")
@pytest.mark.parametrize("path", SCENARIOS, ids=[f"{p.parent.name}/{p.stem[:40]}" for p in SCENARIOS])
@pytest.mark.django_db
def test_it_round_trips_every_golden_scenario_through_the_database(path):
    data = yaml.safe_load(path.read_text())
    original = load_dict(copy.deepcopy(data), source=str(path))
    now = original.config.now or FIXED_NOW
    import_scenario(original, now=now)
    exported = build_snapshot(now=now, config=data.get("config") or {}, usage=data.get("usage") or {},
                              name=original.name)
    assert canonical(exported) == canonical(original)


FEATURE_SCENARIOS = sorted((Path(__file__).parents[2] / "scheduler_engine" / "scenarios").glob("*/*.yaml"))


@pytest.mark.parametrize("path", FEATURE_SCENARIOS, ids=[f"{p.parent.name}/{p.stem}" for p in FEATURE_SCENARIOS])
@pytest.mark.django_db
def test_it_round_trips_subgroups_and_devices_through_the_database(path):
    """Subgroup trees, device classes, node devices, task claims and held devices survive the
    database (scenario-format "SubGroups" / "Devices")."""
    data = yaml.safe_load(path.read_text())
    original = load_dict(copy.deepcopy(data), source=str(path))
    now = original.config.now or FIXED_NOW
    import_scenario(original, now=now)
    exported = build_snapshot(now=now, config=data.get("config") or {}, usage=data.get("usage") or {},
                              name=original.name)
    assert canonical(exported) == canonical(original)
