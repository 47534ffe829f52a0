#!/usr/bin/env sh
# Run the whole control plane with no servers: SQLite database and an SQLite-backed Celery
# broker under ./var, web on http://127.0.0.1:8000 (admin/admin), worker with embedded beat.
# Extra arguments go to `manage.py run_embedded` (--port, --host, --no-demo, --runserver).
set -eu
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
unset DATABASE_URL CELERY_BROKER_URL
exec "$PY" manage.py run_embedded "$@"
