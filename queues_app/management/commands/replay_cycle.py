"""``manage.py replay_cycle ID [--output FILE]``: export a recorded cycle as a scenario and re-run it.

Every applied cycle stores the scenario dict the engine ran and the task decisions it made
(``SchedulingCycle.scenario_gz`` / ``decisions_gz``).  This command writes that scenario (YAML
for ``.yaml``/``.yml``, JSON otherwise; ``-`` = stdout) so it can be studied with
``python -m scheduler_engine cycle FILE``, re-runs it through the same engine entry point the
cycle uses, and compares the decisions task by task.  Exit status 0 = same decisions, 1 = they
differ (each difference listed), CommandError (2) = no such cycle or nothing recorded.
"""
from __future__ import annotations

import json
import sys

import yaml
from django.core.management.base import BaseCommand, CommandError

from queues_app.cycle import replay as cycle_replay
from queues_app.models import SchedulingCycle


class Command(BaseCommand):
    help = "Export a recorded scheduling cycle as a scenario and re-run it to compare decisions."

    def add_arguments(self, parser):
        parser.add_argument("cycle_id", type=int, metavar="ID", help="SchedulingCycle id")
        parser.add_argument("--output", "-o", metavar="FILE", help="write the scenario here (.yaml/.yml/.json, - = stdout)")

    def handle(self, *args, **options):
        cid = options["cycle_id"]
        row = SchedulingCycle.objects.filter(pk=cid).values("scenario_gz", "decisions_gz", "status").first()
        if row is None:
            raise CommandError(f"cycle {cid}: no such cycle")
        if not row["scenario_gz"]:
            raise CommandError(f"cycle {cid}: no scenario recorded (status {row['status']}; only cycles that "
                               f"computed and applied record one)")
        outcome = cycle_replay.replay_recorded_cycle(scenario_gz=row["scenario_gz"], decisions_gz=row["decisions_gz"])
        out = options.get("output")
        if out:
            text = (yaml.safe_dump(outcome.scenario, sort_keys=False) if out.endswith((".yaml", ".yml"))
                    else json.dumps(outcome.scenario, indent=1))
            if out == "-":
                sys.stdout.write(text)
            else:
                with open(out, "w", encoding="utf-8") as fh:
                    fh.write(text)
                self.stderr.write(f"wrote {out}")
        n = len(outcome.recorded)
        if outcome.same:
            self.stderr.write(f"cycle {cid}: replay gives the same decisions for all {n} tasks")
            return
        for d in outcome.differences:
            self.stderr.write(f"  {d}")
        self.stderr.write(f"cycle {cid}: {len(outcome.differences)} of {n} task decisions differ")
        sys.exit(1)
