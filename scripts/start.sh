#!/usr/bin/env bash
# The README's run command: create/refresh .venv, install the project, then start the whole
# control plane on the embedded default (SQLite + SQLite-backed Celery broker, demo cluster):
# migrate, load the demo, web on http://127.0.0.1:8000 (admin/admin), worker with embedded beat.
# Extra arguments go to `manage.py run_embedded` (--port, --host, --no-demo, --runserver).
set -euo pipefail
source "$(dirname "$0")/_venv.sh" ""
exec env PYTHON=.venv/bin/python sh scripts/run_embedded.sh "$@"
