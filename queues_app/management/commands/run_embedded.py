"""``manage.py run_embedded``: the whole control plane on one machine with no servers.

Migrates, loads the demo (unless ``--no-demo``), then runs the web server (gunicorn, or
Django's runserver with ``--runserver``) and one Celery worker with embedded beat on the
embedded defaults (SQLite database + kombu SQLAlchemy broker over SQLite).  Ctrl-C (SIGINT)
or SIGTERM stops both children.  Refuses to run with ``KAI_ENV=production``.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Migrate, load the demo and run web + Celery worker + beat on the embedded defaults."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-demo", action="store_true", help="do not load the demo data")
        parser.add_argument("--runserver", action="store_true", help="use Django's runserver instead of gunicorn")
        parser.add_argument("--web-workers", type=int, default=2)

    def handle(self, *args, **options):
        if settings.PRODUCTION:
            raise CommandError("run_embedded is for development / evaluation; KAI_ENV=production is set")
        if not settings.EMBEDDED_DATABASE or not settings.EMBEDDED_BROKER:
            self.stderr.write("note: DATABASE_URL / CELERY_BROKER_URL point at servers; using them anyway")
        call_command("migrate", interactive=False, verbosity=0)
        if not options["no_demo"]:
            call_command("load_demo", stdout=self.stdout)
        bin_dir = Path(sys.executable).parent
        host, port = options["host"], options["port"]
        if options["runserver"]:
            web = [sys.executable, "manage.py", "runserver", "--noreload", f"{host}:{port}"]
        else:
            web = [str(bin_dir / "gunicorn"), "kaiplatform.wsgi:application", "--bind", f"{host}:{port}",
                   "--workers", str(options["web_workers"]), "--access-logfile", "-"]
        worker = [str(bin_dir / "celery"), "-A", "kaiplatform", "worker", "-B", "--pool=solo", "--loglevel=info",
                  "--without-mingle", "--without-gossip"]
        cwd = Path(settings.BASE_DIR)
        procs = [subprocess.Popen(cmd, cwd=cwd, env=os.environ.copy(), start_new_session=True)
                 for cmd in (web, worker)]
        self.stdout.write(self.style.SUCCESS(
            f"\nkaiplatform is running (database {settings.DATABASES['default']['NAME']}, broker "
            f"{settings.CELERY_BROKER_URL})\n"
            f"  admin:  http://{host}:{port}/admin/   user 'admin', password 'admin'\n"
            f"  health: http://{host}:{port}/healthz\n"
            "Ctrl-C stops web and worker."))
        stopping = {"flag": False}

        def stop(signum, frame):  # noqa: ARG001
            stopping["flag"] = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            while not stopping["flag"]:
                dead = [p for p in procs if p.poll() is not None]
                if dead:
                    self.stderr.write(f"a child exited (code {dead[0].returncode}); stopping")
                    break
                time.sleep(0.5)
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
            deadline = time.monotonic() + 20
            for p in procs:
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(timeout=5)
