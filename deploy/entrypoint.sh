#!/bin/sh
# Process selector for the kaiplatform image: web | worker | beat | dispatcher | sync | migrate | manage ...
set -eu
role="${1:-web}"

# The engine's kernels compiled at image build (deploy/Dockerfile: KAI_NUMBA_SEED) go into an empty
# NUMBA_CACHE_DIR, e.g. the fresh volume Helm mounts over /var/lib/kaiplatform; without them the first
# cycle of every container would compile them again (20-25 s of CPU). A cache that already has
# entries is left alone; a failed copy only costs that compile.
if [ -n "${NUMBA_CACHE_DIR:-}" ] && [ -n "${KAI_NUMBA_SEED:-}" ] && [ -d "$KAI_NUMBA_SEED" ] \
   && [ -z "$(ls -A "$NUMBA_CACHE_DIR" 2>/dev/null)" ]; then
  mkdir -p "$NUMBA_CACHE_DIR" && cp -R "$KAI_NUMBA_SEED/." "$NUMBA_CACHE_DIR/" \
    || echo "kai-entrypoint: could not copy the compiled kernels into $NUMBA_CACHE_DIR" >&2
fi
[ $# -gt 0 ] && shift
case "$role" in
  web)
    exec gunicorn kaiplatform.wsgi:application \
      --bind "0.0.0.0:${PORT:-8000}" \
      --workers "${WEB_CONCURRENCY:-2}" \
      --timeout "${GUNICORN_TIMEOUT:-60}" \
      --access-logfile - "$@" ;;
  worker)
    # Every task is on the default queue "celery"; the cycle is single-leader through its
    # database lease, so any worker may pick up a trigger.
    exec celery -A kaiplatform worker --loglevel "${LOG_LEVEL:-INFO}" \
      --queues "${WORKER_QUEUES:-celery}" \
      --concurrency "${WORKER_CONCURRENCY:-2}" "$@" ;;
  beat)
    exec celery -A kaiplatform beat --loglevel "${LOG_LEVEL:-INFO}" \
      --schedule "${KAI_VAR_DIR:-/tmp}/celerybeat-schedule" "$@" ;;
  dispatcher)
    exec celery -A kaiplatform worker --loglevel "${LOG_LEVEL:-INFO}" \
      --queues dispatch --concurrency "${DISPATCH_CONCURRENCY:-4}" "$@" ;;
  sync)
    # Kubernetes nodes and pods into the database (leader-elected through a database lease).
    exec python manage.py kube_sync "$@" ;;
  migrate)
    exec python manage.py migrate --noinput "$@" ;;
  manage)
    exec python manage.py "$@" ;;
  *)
    echo "unknown role '$role' (web | worker | beat | dispatcher | sync | migrate | manage ...)" >&2
    exit 64 ;;
esac
