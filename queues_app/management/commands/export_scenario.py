"""``manage.py export_scenario FILE``: the live scheduling state as a scenario file.

The file is exactly what the scheduling cycle feeds the engine, so
``python -m scheduler_engine cycle FILE`` replays the decision offline ("what would the
scheduler do now?").  ``-`` writes to stdout; a ``.json`` name writes JSON, anything else YAML.
"""
from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils.dateparse import parse_datetime

from queues_app.cycle.engine_io import ScenarioError, build_scenario_dict, snapshot_from_dict


def _json_object(text: str | None, option: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{option} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise CommandError(f"{option} must be a JSON object")
    return value


class Command(BaseCommand):
    help = "Write the live scheduling state (nodes, queues, workloads) as a scenario YAML/JSON file."

    def add_arguments(self, parser):
        parser.add_argument("file", help="output path, or - for stdout")
        parser.add_argument("--now", help="ISO timestamp used as the scenario clock (default: now)")
        parser.add_argument("--config", help='JSON object of scenario config keys, e.g. {"actions": ["allocate"]}')
        parser.add_argument("--usage", help="JSON object {queue: {resource: 0..1}} (default: the usage provider)")
        parser.add_argument("--name", default="kaiplatform live state", help="scenario name")

    def handle(self, *args, **options):
        now: datetime | None = None
        if options["now"]:
            now = parse_datetime(options["now"].replace("Z", "+00:00"))
            if now is None or now.tzinfo is None:
                raise CommandError("--now must be an ISO timestamp with a timezone, e.g. 2026-01-01T00:00:00Z")
        kwargs: dict[str, Any] = {"now": now, "config": _json_object(options["config"], "--config"),
                                  "name": options["name"]}
        if options["usage"]:
            kwargs["usage"] = _json_object(options["usage"], "--usage")
        # One transaction: every table read from the same state.
        with transaction.atomic():
            data = build_scenario_dict(**kwargs)
        try:
            snapshot_from_dict(json.loads(json.dumps(data)), source="export")  # never write a file the engine rejects
        except ScenarioError as exc:
            raise CommandError(f"the live state is not a valid scenario: {exc}") from None
        target = options["file"]
        if target.endswith(".json"):
            text = json.dumps(data, indent=2, sort_keys=False) + "\n"
        else:
            text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120)
        if target == "-":
            sys.stdout.write(text)
            return
        Path(target).write_text(text, encoding="utf-8")
        self.stderr.write(f"wrote {target}: {len(data['nodes'])} nodes, {len(data['queues'])} queues, "
                          f"{len(data['jobs'])} jobs")
