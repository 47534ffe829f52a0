"""Every answer under /api/ is JSON (kaiplatform.api_errors): unknown URLs, unexpected
exceptions, a database that is down or busy (503 + Retry-After), with DEBUG on or off."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import DataError, OperationalError

ROOT = Path(__file__).resolve().parents[2]


def _error_body(response) -> dict:
    assert response["Content-Type"].startswith("application/json"), (response.status_code, response.content[:200])
    body = json.loads(response.content)
    assert set(body) == {"message", "extra"} and isinstance(body["extra"], dict)
    return body


@pytest.fixture
def operator_client(operator, client):
    from queues_app.services.tenants import api_token_issue

    client.defaults["HTTP_AUTHORIZATION"] = f"Token {api_token_issue(user=operator)}"
    return client


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("path", ["/api/v1/", "/api/v1/no-such-thing/", "/api/nothing", "/api/v1/workloads/1/x/"])
def test_unknown_api_urls_answer_a_json_404_without_the_url_list(db, settings, client, path, debug):
    settings.DEBUG = debug
    response = client.get(path)
    assert response.status_code == 404
    assert _error_body(response)["message"] == "Not found."
    assert b"urlpatterns" not in response.content and b"admin/" not in response.content


@pytest.mark.django_db
def test_outside_the_api_django_pages_stay(client):
    assert client.get("/no-such-page/")["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("debug", [False, True])
def test_an_unexpected_exception_is_a_json_500_and_is_logged(operator_client, settings, monkeypatch, caplog, debug):
    settings.DEBUG = debug

    def boom(**kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr("queues_app.selectors.queue_list", boom)
    response = operator_client.get("/api/v1/queues/")
    assert response.status_code == 500
    assert _error_body(response)["message"] == "Server error."
    assert b"secret internals" not in response.content and b"Traceback" not in response.content
    assert any("secret internals" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)


@pytest.mark.parametrize("exc", [OperationalError("server closed the connection unexpectedly"),
                                 OperationalError("canceling statement due to lock timeout")])
def test_a_database_outage_or_lock_timeout_is_a_503_with_retry_after(operator_client, monkeypatch, exc):
    def down(**kwargs):
        raise exc

    monkeypatch.setattr("queues_app.selectors.queue_list", down)
    response = operator_client.get("/api/v1/queues/")
    assert response.status_code == 503
    assert int(response["Retry-After"]) > 0
    assert "database" in _error_body(response)["extra"]


def test_a_value_the_database_refuses_is_a_400(operator_client, monkeypatch):
    def refused(**kwargs):
        raise DataError("A string literal cannot contain NUL (0x00) characters.")

    monkeypatch.setattr("queues_app.selectors.queue_list", refused)
    response = operator_client.get("/api/v1/queues/")
    assert response.status_code == 400
    assert _error_body(response)["extra"]


def test_a_real_database_outage_answers_503_json(tmp_path):
    """Nothing listens on the database port: token authentication's first query fails to
    connect. The request gets a JSON 503 with Retry-After, not Django's HTML 500."""
    code = (
        "import django, json; django.setup()\n"
        "from django.test import Client\n"
        "r = Client().get('/api/v1/queues/', HTTP_AUTHORIZATION='Token abc')\n"
        "print(json.dumps({'status': r.status_code, 'type': r['Content-Type'], "
        "'retry': r.get('Retry-After'), 'body': r.content.decode()}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DEBUG", "KAI_ENV")}
    env.update(DJANGO_SETTINGS_MODULE="kaiplatform.settings", KAI_VAR_DIR=str(tmp_path),
               DATABASE_URL="postgres://postgres@127.0.0.1:1/nowhere", DEBUG="1")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["status"] == 503 and out["type"].startswith("application/json") and int(out["retry"]) > 0, out
    assert set(json.loads(out["body"])) == {"message", "extra"}
