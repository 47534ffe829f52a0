"""Locust users for the load benchmark (``scripts/bench_load.py`` starts the stack and runs this).

Each user is one tenant (its API token), in a closed loop with no think time: it submits
(``Idempotency-Key`` on every submit, the same key again on a 5xx or a connection error, as a
client should), cancels one of its own workloads now and then, and reads its list, details,
``why`` and queues. What every submit got is written to ``KAI_LOAD_RESULTS`` when the run stops,
so the benchmark can check the database for lost and duplicated submissions; every response's
status and time are written too (exact percentiles, every 5xx counted).

Environment: ``KAI_LOAD_TENANTS`` (JSON file: ``[{"tenant", "token", "queue"}]``),
``KAI_LOAD_RESULTS`` (output JSON file).
"""
from __future__ import annotations

import itertools
import json
import os
import random
import uuid

from locust import HttpUser, events, task
from locust.exception import StopUser

TENANTS = json.loads(open(os.environ["KAI_LOAD_TENANTS"]).read())
_SLOTS = itertools.count()
SUBMIT_RETRIES = 3
RESULTS: dict = {"submits": [], "responses": [], "cancels": {"ok": 0, "refused": 0}}


@events.request.add_listener
def _record(request_type, name, response_time, response_length, response=None, exception=None, **kwargs):
    status = getattr(response, "status_code", 0) if exception is None or response is not None else 0
    RESULTS["responses"].append((f"{request_type} {name}", int(status or 0), float(response_time)))


@events.quitting.add_listener
def _write(environment, **kwargs):
    with open(os.environ["KAI_LOAD_RESULTS"], "w") as fh:
        json.dump(RESULTS, fh)


class Tenant(HttpUser):
    # A closed loop with no think time: the offered load is whatever the server sustains.
    wait_time = staticmethod(lambda: 0)

    def on_start(self) -> None:
        slot = next(_SLOTS)
        if slot >= len(TENANTS):
            raise StopUser()
        me = TENANTS[slot]
        self.tenant, self.queue = me["tenant"], me["queue"]
        self.client.headers.update({"Authorization": f"Token {me['token']}", "Content-Type": "application/json"})
        self.mine: list[int] = []

    @task(6)
    def submit(self) -> None:
        key = uuid.uuid4().hex
        body = json.dumps({"name": f"w-{key[:12]}", "queue": self.queue, "replicas": 1,
                           "task": {"gpu": 1, "cpu_millis": 100, "memory_bytes": 2**28}})
        record = {"tenant": self.tenant, "key": key, "statuses": [], "id": None}
        for attempt in range(1 + SUBMIT_RETRIES):
            name = "/api/v1/workloads/" if attempt == 0 else "/api/v1/workloads/ (retry, same key)"
            with self.client.post("/api/v1/workloads/", data=body, headers={"Idempotency-Key": key}, name=name,
                                  catch_response=True) as response:
                record["statuses"].append(response.status_code)
                if response.status_code == 201:
                    record["id"] = response.json()["id"]
                    self.mine.append(record["id"])
                    break
                if response.status_code and response.status_code < 500:
                    response.failure(f"{response.status_code}: {response.text[:200]}")
                    break
                response.failure(f"{response.status_code or 'connection error'}; retrying with the same key")
        RESULTS["submits"].append(record)

    @task(2)
    def cancel(self) -> None:
        if not self.mine:
            return
        pk = self.mine.pop(random.randrange(len(self.mine)))
        with self.client.post(f"/api/v1/workloads/{pk}/cancel/", name="/api/v1/workloads/{id}/cancel/",
                              catch_response=True) as response:
            if response.status_code == 200:
                RESULTS["cancels"]["ok"] += 1
            elif response.status_code == 400:  # it finished meanwhile: the answer says so
                RESULTS["cancels"]["refused"] += 1
                response.success()

    @task(4)
    def read(self) -> None:
        self.client.get("/api/v1/workloads/?page_size=20", name="/api/v1/workloads/?page_size=20")
        if self.mine:
            pk = random.choice(self.mine)
            self.client.get(f"/api/v1/workloads/{pk}/", name="/api/v1/workloads/{id}/")
            self.client.get(f"/api/v1/workloads/{pk}/why/", name="/api/v1/workloads/{id}/why/")
        else:
            self.client.get("/api/v1/queues/", name="/api/v1/queues/")
