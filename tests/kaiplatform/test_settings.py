"""Settings from the environment: typed helpers and the production guard rails."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from kaiplatform.env import development_secret_key, envbool, envint, envlist, envstr

ROOT = Path(__file__).resolve().parents[2]
STRONG_KEY = "k" * 20 + "Zq9#xLm2$vB7!pR4@wT6^yU8&iO0*aS3(dF5)gH1-jK"


class EnvHelperTests:
    @pytest.mark.parametrize("raw,expected", [("1", True), ("yes", True), ("ON", True), ("0", False),
                                              ("false", False), ("", False)])
    def test_envbool_parses(self, monkeypatch, raw, expected):
        monkeypatch.setenv("X_FLAG", raw)
        assert envbool("X_FLAG", not expected) is expected

    def test_envbool_rejects_garbage_naming_the_variable(self, monkeypatch):
        monkeypatch.setenv("X_FLAG", "maybe")
        with pytest.raises(ImproperlyConfigured, match="X_FLAG"):
            envbool("X_FLAG", False)

    def test_envint_bounds_and_garbage(self, monkeypatch):
        monkeypatch.setenv("X_N", "12")
        assert envint("X_N", 1) == 12
        monkeypatch.setenv("X_N", "twelve")
        with pytest.raises(ImproperlyConfigured, match="X_N"):
            envint("X_N", 1)
        monkeypatch.setenv("X_N", "0")
        with pytest.raises(ImproperlyConfigured, match="minimum"):
            envint("X_N", 1, minimum=1)
        monkeypatch.delenv("X_N")
        assert envint("X_N", 7) == 7

    def test_envstr_prefers_a_mounted_file(self, monkeypatch, tmp_path):
        (tmp_path / "s").write_text("from-file\n")
        monkeypatch.setenv("X_SECRET", "from-env")
        monkeypatch.setenv("X_SECRET_FILE", str(tmp_path / "s"))
        assert envstr("X_SECRET") == "from-file"
        monkeypatch.setenv("X_SECRET_FILE", str(tmp_path / "missing"))
        with pytest.raises(ImproperlyConfigured, match="X_SECRET_FILE"):
            envstr("X_SECRET")

    def test_envlist(self, monkeypatch):
        monkeypatch.setenv("X_HOSTS", "a.example, b.example,,")
        assert envlist("X_HOSTS", []) == ["a.example", "b.example"]

    def test_the_development_key_is_generated_once_and_kept(self, tmp_path):
        key = development_secret_key(tmp_path / "k" / "secret.txt")
        assert len(key) > 40 and development_secret_key(tmp_path / "k" / "secret.txt") == key
        assert oct((tmp_path / "k" / "secret.txt").stat().st_mode)[-3:] == "600"


def _settings_in_subprocess(tmp_path, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY", "DEBUG", "KAI_ENV")}
    clean.update(KAI_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="kaiplatform.settings", **env)
    code = ("from django.conf import settings as s; "
            "print(s.DEBUG, s.DATABASES['default']['ENGINE'], s.CELERY_BROKER_URL, s.SESSION_COOKIE_SECURE)")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=clean, capture_output=True, text=True,
                          timeout=60)


class SettingsTests:
    def test_the_default_is_embedded_sqlite_and_an_sqlite_broker(self, tmp_path):
        proc = _settings_in_subprocess(tmp_path)
        assert proc.returncode == 0, proc.stderr
        debug, engine, broker, secure = proc.stdout.split()
        # DEBUG is off unless asked for, also in development (debug pages leak tracebacks and URLs)
        assert (debug, engine, secure) == ("False", "django.db.backends.sqlite3", "False")
        assert broker == f"sqla+sqlite:///{tmp_path}/celery-broker.sqlite3"
        assert (tmp_path / "secret_key.txt").exists()

    def test_production_requires_a_secret_key(self, tmp_path):
        proc = _settings_in_subprocess(tmp_path, KAI_ENV="production")
        assert proc.returncode != 0 and "SECRET_KEY" in proc.stderr

    def test_production_turns_debug_off_and_cookies_secure(self, tmp_path):
        proc = _settings_in_subprocess(tmp_path, KAI_ENV="production", SECRET_KEY=STRONG_KEY,
                                       DATABASE_URL="postgres://postgres@127.0.0.1:5432/kaiplatform")
        assert proc.returncode == 0, proc.stderr
        debug, engine, _, secure = proc.stdout.split()
        assert (debug, engine, secure) == ("False", "django.db.backends.postgresql", "True")

    def test_debug_only_when_asked_for(self, tmp_path):
        proc = _settings_in_subprocess(tmp_path, DEBUG="1")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split()[0] == "True"

    @pytest.mark.parametrize("key", ["changeme", "CHANGEME", "secret", "x" * 60, "short-but-random-Zq9#xLm2",
                                     "django-insecure-" + "Zq9#xLm2$vB7!pR4@wT6^yU8&iO0*aS3(dF5)gH1-jK"])
    def test_production_refuses_a_weak_secret_key(self, tmp_path, key):
        proc = _settings_in_subprocess(tmp_path, KAI_ENV="production", SECRET_KEY=key,
                                       DATABASE_URL="postgres://postgres@127.0.0.1:5432/kaiplatform")
        assert proc.returncode != 0 and "SECRET_KEY" in proc.stderr, proc.stderr

    def test_development_keeps_any_secret_key(self, tmp_path):
        proc = _settings_in_subprocess(tmp_path, SECRET_KEY="changeme")
        assert proc.returncode == 0, proc.stderr

    @pytest.mark.parametrize("url, expected", [("postgres://postgres@127.0.0.1:5432/kaiplatform", "60 True"),
                                               (None, "0 True")])
    def test_persistent_connections_on_a_database_server(self, tmp_path, url, expected):
        """A new PostgreSQL connection per request cost the load benchmark a third of its throughput."""
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DB_CONN_MAX_AGE")}
        env.update(KAI_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="kaiplatform.settings",
                   **({"DATABASE_URL": url} if url else {}))
        code = ("from django.conf import settings as s; d = s.DATABASES['default']; "
                "print(d['CONN_MAX_AGE'], d['CONN_HEALTH_CHECKS'])")
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == expected

    def test_a_bad_database_url_is_a_configuration_error(self, tmp_path):
        proc = _settings_in_subprocess(tmp_path, DATABASE_URL="nosuchdb://x")
        assert proc.returncode != 0 and "DATABASE_URL" in proc.stderr

    def test_a_bad_boolean_names_the_variable(self, tmp_path):
        proc = _settings_in_subprocess(tmp_path, DEBUG="perhaps")
        assert proc.returncode != 0 and "DEBUG='perhaps'" in proc.stderr
