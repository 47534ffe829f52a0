"""``manage.py run_cycle``: run scheduling cycles in this process (no broker needed).

Used by operators (one cycle now), by the crash tests (a real process killed at a named fault
point: ``python -m tests.support.crash_points POINT run_cycle``) and by the embedded quick start.
"""
from __future__ import annotations

import json
import time

from django.core.management.base import BaseCommand, CommandError

from queues_app.choices import CycleStatus
from queues_app.cycle.run import cycle_run


class Command(BaseCommand):
    help = "Run one (or --count N) scheduling cycles now and print the outcome as JSON lines."

    def add_arguments(self, parser):
        parser.add_argument("--count", type=int, default=1, help="cycles to run back to back (default 1)")
        parser.add_argument("--trigger", default="command", help="recorded in SchedulingCycle.trigger")
        parser.add_argument("--wait-lease", type=float, default=0.0,
                            help="retry for up to this many seconds while another cycle holds the lease")
        parser.add_argument("--interval", type=float, default=0.0, help="seconds to sleep between cycles")

    def handle(self, *args, count: int, trigger: str, wait_lease: float, interval: float, **options):
        if count < 1 or count > 100000:
            raise CommandError("--count must be between 1 and 100000")
        failed = 0
        for i in range(count):
            deadline = time.monotonic() + max(0.0, wait_lease)
            while True:
                outcome = cycle_run(trigger=trigger)
                if outcome.status != CycleStatus.SKIPPED or time.monotonic() >= deadline:
                    break
                time.sleep(0.2)
            failed += outcome.status in (CycleStatus.FAILED, CycleStatus.ABORTED)
            self.stdout.write(json.dumps({k: v for k, v in outcome.as_dict().items() if k != "phase_durations"}
                                         | {"phases": outcome.phase_durations}, default=str))
            if interval and i + 1 < count:
                time.sleep(interval)
        if failed:
            raise CommandError(f"{failed} cycle(s) failed or aborted")
