"""``manage.py check_invariants``: the SQL invariant checker (exit status 1 on any violation)."""
from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from queues_app.invariants import CHECKS, check_invariants


class Command(BaseCommand):
    help = "Check the scheduling invariants (I1-I8 of reliability.md) with plain SQL."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print violations as one JSON document")
        parser.add_argument("--only", action="append", choices=CHECKS, help="run only this check (repeatable)")
        parser.add_argument("--skip", action="append", choices=CHECKS, default=[], help="skip this check")
        parser.add_argument("--expect-workloads", type=Path,
                            help="file with workload ids (one per line) that must all still exist (I3.lost)")

    def handle(self, *args, json: bool = False, only=None, skip=(), expect_workloads=None, **options):
        expected = None
        if expect_workloads is not None:
            try:
                expected = [int(line) for line in expect_workloads.read_text().split() if line.strip()]
            except (OSError, ValueError) as exc:
                raise CommandError(f"--expect-workloads: {exc}") from exc
        violations = check_invariants(expected_workload_ids=expected, only=only, skip=skip)
        if json:
            import json as _json

            self.stdout.write(_json.dumps({"ok": not violations, "violations": [v.as_dict() for v in violations]},
                                          indent=2))
        elif not violations:
            self.stdout.write("all invariants hold")
        else:
            for v in violations:
                self.stdout.write(f"{v.check}: {v.message}")
                for row in v.rows:
                    self.stdout.write(f"    {row}")
        if violations:
            raise CommandError(f"{len(violations)} invariant(s) violated")
