"""``manage.py import_scenario FILE``: record a scenario's cluster, queue tree and jobs in the
database (for "what if" set-ups and demos).  Everything goes through the services; a
scenario the database cannot hold is rejected as a whole."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from queues_app.cycle.engine_io import ScenarioError, load_scenario_file
from queues_app.cycle.scenario import import_scenario
from queues_app.errors import ApplicationError
from queues_app.models import Node, Queue, Workload


class Command(BaseCommand):
    help = "Import a scenario file (nodes, queues, jobs with their task states) into an empty database."

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--allow-nonempty", action="store_true",
                            help="import even if nodes/queues/workloads exist (names must not clash)")

    def handle(self, *args, **options):
        if not options["allow_nonempty"] and (Node.objects.exists() or Queue.objects.exists()
                                              or Workload.objects.exists()):
            raise CommandError("the database already holds nodes/queues/workloads; use --allow-nonempty")
        try:
            snapshot = load_scenario_file(options["file"])
            import_scenario(snapshot)
        except ScenarioError as exc:
            raise CommandError(str(exc)) from None
        except ApplicationError as exc:
            raise CommandError(f"the database cannot hold this scenario: {exc}") from None
        self.stdout.write(f"imported {len(snapshot.nodes)} nodes, {len(snapshot.queues)} queues, "
                          f"{len(snapshot.jobs)} jobs from {options['file']}")
