#!/usr/bin/env python
"""Load benchmark: tenants submitting, cancelling and reading through the API while the
scheduling cycle runs (issue #16). A benchmark command, not a test: it prints figures.

    pip install -e '.[load]'
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/kai_load CELERY_BROKER_URL=redis://127.0.0.1:6379/1 \\
      .venv/bin/python scripts/bench_load.py [--tenants 16] [--seconds 60] [--web-workers 4]

What it does, on the database and broker the environment names (use a scratch database: it
adds tenants, queues, nodes and thousands of workloads):

1. migrates, creates ``--tenants`` tenants (``load-tNN``, one member and one leaf queue each,
   GPU quota 8) and 32 nodes of 8 GPUs, through the services;
2. starts gunicorn (``--web-workers`` sync workers), a Celery worker and Celery beat (the
   scheduling cycle every ``KAI_CYCLE_SECONDS``, default 5 s) with DEBUG off and the API's
   throttles lifted (a throttle is a policy; this measures capacity);
3. runs locust headless (``scripts/load/locustfile.py``): one user per tenant in a closed loop,
   submits (Idempotency-Key, retried with the same key on a 5xx) : cancels : reads = 6 : 2 : 4;
4. checks the database: every submit answered 201 is there exactly once (0 lost, 0 duplicated),
   no submit was left without an answer, and counts the cycles applied / failed meanwhile.

Prints submissions/s and p50 / p99 latency (all requests and submits alone) and exits 1 on any
5xx, lost or duplicated submission. Runs only against PostgreSQL + Redis (the figure is for that
stack); ``nice`` it on a shared machine.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NODES, NODE_GPUS, QUEUE_GPUS = 32, 8, 8


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def _setup(tenants: int, run: str) -> list[dict]:
    """Tenants, queues, nodes through the services; returns [{tenant, token, queue}]."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from queues_app.models import Queue
    from queues_app.services.tenants import api_token_issue
    from queues_app.services.nodes import node_upsert
    from queues_app.services.queues import queue_create
    from queues_app.services.tenants import tenant_create

    call_command("migrate", verbosity=0, interactive=False)
    root = Queue.objects.filter(name="load").first() or queue_create(
        name="load", quotas={"gpu": {"quota": NODES * NODE_GPUS}})
    for i in range(NODES):
        node_upsert(name=f"load-n{i:03d}", gpus=NODE_GPUS, cpu_millis=64_000, memory_bytes=512 * 2**30)
    out = []
    users = get_user_model()
    for i in range(tenants):
        name = f"load-{run}-t{i:02d}"
        queue = queue_create(name=f"load-{run}-q{i:02d}", parent=root, quotas={"gpu": {"quota": QUEUE_GPUS}})
        user = users.objects.create_user(username=f"load-{run}-u{i:02d}", password=None)
        tenant_create(name=name, members=[user], queues=[queue])
        out.append({"tenant": name, "token": api_token_issue(user=user), "queue": queue.name})
    return out


def _wait_ready(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the web server did not become ready at {url}")


def _start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _children_cpu() -> float:
    """CPU seconds of this script's finished (waited-for) descendants."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _stop(proc: subprocess.Popen) -> None:
    """End a process this script started (its own session), by its id."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _create_database(url: str) -> None:
    """The scratch database is created when it does not exist yet, so the README's command works on
    a fresh server (the migrations then run in ``_setup``)."""
    import psycopg
    from psycopg import sql
    from urllib.parse import urlsplit

    name = urlsplit(url).path.lstrip("/")
    admin_url = urlsplit(url)._replace(path="/postgres").geturl()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            print(f"created database {name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, default=16)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--web-workers", type=int, default=4)
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    db, broker = os.environ.get("DATABASE_URL", ""), os.environ.get("CELERY_BROKER_URL", "")
    if not db.startswith(("postgres://", "postgresql://")) or not broker.startswith("redis://"):
        print("bench_load measures the production stack: set DATABASE_URL=postgres://... and "
              "CELERY_BROKER_URL=redis://...", file=sys.stderr)
        return 2

    _create_database(db)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kaiplatform.settings")
    import django

    django.setup()
    from django.db.models import Count

    from queues_app.models import IdempotencyKey, SchedulingCycle, Workload

    run = time.strftime("%H%M%S")
    tenants = _setup(args.tenants, run)
    work = Path(tempfile.mkdtemp(prefix="kai-load-"))
    (work / "tenants.json").write_text(json.dumps(tenants))
    env = {**os.environ, "DEBUG": "0", "KAI_API_RATE": "1000000/min", "KAI_API_SUBMIT_RATE": "1000000/min",
           "CACHE_URL": os.environ.get("CACHE_URL", broker), "KAI_LOAD_TENANTS": str(work / "tenants.json"),
           "KAI_LOAD_RESULTS": str(work / "results.json"), "KAI_VAR_DIR": str(work)}
    url = f"http://127.0.0.1:{args.port}"
    procs = [
        _start([str(BIN / "gunicorn"), "kaiplatform.wsgi:application", "--bind", f"127.0.0.1:{args.port}",
                "--workers", str(args.web_workers), "--timeout", "60"], env, work / "web.log"),
        _start([str(BIN / "celery"), "-A", "kaiplatform", "worker", "--concurrency", "2", "--loglevel", "WARNING"],
               env, work / "worker.log"),
        _start([str(BIN / "celery"), "-A", "kaiplatform", "beat", "--loglevel", "WARNING",
                "--schedule", str(work / "beat-schedule")], env, work / "beat.log"),
    ]
    cpu: dict[str, float] = {}
    try:
        _wait_ready(f"{url}/healthz")
        started = time.time()
        from django.utils import timezone

        t0 = timezone.now()
        before = _children_cpu()
        locust = subprocess.run(
            [str(BIN / "locust"), "-f", str(ROOT / "scripts" / "load" / "locustfile.py"), "--headless",
             "-u", str(args.tenants), "-r", str(args.tenants), "-t", f"{args.seconds}s", "--host", url,
             "--only-summary", "--stop-timeout", "10", "--exit-code-on-error", "0"],
            cwd=ROOT, env=env, capture_output=True, text=True)
        cpu["locust"] = _children_cpu() - before
        elapsed = time.time() - started
        t1 = timezone.now()
    finally:
        # Stopped one by one: each one's CPU seconds (its workers' too, once reaped) are the
        # difference in this script's children's usage; a figure the machine's load does not scale.
        for role, proc in zip(("web", "worker", "beat"), procs):
            before = _children_cpu()
            _stop(proc)
            cpu[role] = _children_cpu() - before
    results_file = work / "results.json"
    if not results_file.exists():
        print(locust.stdout[-3000:], locust.stderr[-3000:], file=sys.stderr)
        return 1
    results = json.loads(results_file.read_text())

    # ---- the database against what the clients were told
    submits = results["submits"]
    answered = [s for s in submits if s["id"] is not None]
    unanswered = [s for s in submits if s["id"] is None and any(c >= 500 or c == 0 for c in s["statuses"])]
    ids = [s["id"] for s in answered]
    names = [t["tenant"] for t in tenants]
    rows = dict(Workload.objects.filter(pk__in=ids).values_list("pk", "tenant__name"))
    lost = [s for s in answered if rows.get(s["id"]) != s["tenant"]]
    per_key = IdempotencyKey.objects.filter(key__in=[s["key"] for s in submits]).values("key").annotate(
        n=Count("id")).filter(n__gt=1).count()
    stored = Workload.objects.filter(tenant__name__in=names).count()
    duplicated = per_key + max(0, stored - len(set(ids)) - len(unanswered)) + (len(ids) - len(set(ids)))
    cycles = SchedulingCycle.objects.filter(started_at__gte=t0, started_at__lte=t1)
    by_status = dict(cycles.values_list("status").annotate(n=Count("id")))

    responses = results["responses"]
    statuses: dict[int, int] = {}
    for _, code, _ in responses:
        statuses[code] = statuses.get(code, 0) + 1
    server_errors = sum(n for code, n in statuses.items() if code >= 500)
    all_ms = [ms for _, _, ms in responses]
    submit_ms = [ms for name, _, ms in responses if name.startswith("POST /api/v1/workloads/") and "cancel" not in name]
    load = os.getloadavg()
    report = {
        "tenants": args.tenants, "seconds": round(elapsed, 1), "web_workers": args.web_workers,
        "requests": len(responses), "requests_per_s": round(len(responses) / elapsed, 1),
        "submissions": len(answered), "submissions_per_s": round(len(answered) / elapsed, 1),
        "cancels": results["cancels"],
        "p50_ms": round(_percentile(all_ms, 50), 1), "p99_ms": round(_percentile(all_ms, 99), 1),
        "submit_p50_ms": round(_percentile(submit_ms, 50), 1), "submit_p99_ms": round(_percentile(submit_ms, 99), 1),
        "statuses": {str(k): v for k, v in sorted(statuses.items())}, "5xx": server_errors,
        "lost": len(lost), "duplicated": duplicated, "unanswered_after_retries": len(unanswered),
        "cycles": by_status,
        "cpu_seconds": {k: round(v, 1) for k, v in cpu.items()},
        "web_cpu_ms_per_request": round(1000 * cpu.get("web", 0) / max(1, len(responses)), 1),
        "load_average": [round(x, 2) for x in load], "logs": str(work),
    }
    print(json.dumps(report, indent=2))
    ok = server_errors == 0 and not lost and not duplicated and not unanswered
    print("PASS: 0 5xx, 0 lost, 0 duplicated" if ok else "FAIL", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
