"""Readiness: this process can reach its database and its Celery broker.

``/healthz`` (in urls.py) only says the process serves requests and is the liveness probe;
``/readyz`` is the readiness probe of the Helm chart and the container HEALTHCHECK, and
``manage.py healthcheck`` runs the same checks from a worker pod (which serves no HTTP).
"""
from __future__ import annotations

import time

from django.db import connection
from django.http import HttpRequest, JsonResponse
from kaiplatform.celery import app


def check_database() -> tuple[bool, str]:
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchone()
        return True, "ok"
    except Exception as exc:  # any driver error means "not ready"
        return False, f"{type(exc).__name__}: {exc}"


def check_broker(timeout: float = 3.0) -> tuple[bool, str]:
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)
        return True, "ok"
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"


def run_checks(*, broker: bool = True) -> dict:
    started = time.monotonic()
    checks = {"database": check_database()}
    if broker:
        checks["broker"] = check_broker()
    ok = all(passed for passed, _ in checks.values())
    return {
        "status": "ok" if ok else "unavailable",
        "checks": {name: {"ok": passed, "detail": detail} for name, (passed, detail) in checks.items()},
        "seconds": round(time.monotonic() - started, 4),
    }


def readyz(request: HttpRequest) -> JsonResponse:
    report = run_checks(broker=True)
    return JsonResponse(report, status=200 if report["status"] == "ok" else 503)
