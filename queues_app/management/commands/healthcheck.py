"""``manage.py healthcheck [--broker]``: exit 0 when the database (and broker) answer.

Used as the liveness probe of worker pods in the Helm chart, which serve no HTTP.
"""
from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from kaiplatform.health import run_checks


class Command(BaseCommand):
    help = "Check that the database (and with --broker the Celery broker) is reachable."

    def add_arguments(self, parser):
        parser.add_argument("--broker", action="store_true", help="also check the Celery broker")

    def handle(self, *args, **options):
        report = run_checks(broker=options["broker"])
        self.stdout.write(json.dumps(report))
        if report["status"] != "ok":
            raise CommandError("not healthy: " + ", ".join(
                f"{name}: {c['detail']}" for name, c in report["checks"].items() if not c["ok"]))
