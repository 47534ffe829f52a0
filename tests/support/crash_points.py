"""Run a ``manage.py`` command that SIGKILLs itself at named phase points of the scheduling cycle.

    python -m tests.support.crash_points POINT[,POINT...] run_cycle --trigger crash ...

A real crash -- no cleanup, no atexit, no rollback message to the database -- for the crash tests
(reliability.md 2.2): the product only calls its phase points (``queues_app.cycle.faults``); the
kill is registered here, in a process started for that purpose, never in a deployed one.
"""
from __future__ import annotations

import os
import signal
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    points, command = argv[0], argv[1:]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kaiplatform.settings")
    import django

    django.setup()
    from django.core.management import execute_from_command_line

    from queues_app.cycle import faults

    def kill() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    for point in filter(None, (p.strip() for p in points.split(","))):
        faults.register(point, kill)  # an unknown name is a ValueError naming the known ones
    execute_from_command_line(["manage.py", *command])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
