"""The cycle settings system check (queues_app/checks.py) and the worker / beat refusal
(kaiplatform/celery.py): unreadable values are errors, broken limit relations are warnings for
manage.py and a refusal for a Celery worker, each naming the setting."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from queues_app.checks import check_cycle_settings

ROOT = Path(__file__).resolve().parents[2]


def _ids(messages):
    return [m.id for m in messages]


def test_the_default_settings_pass():
    assert check_cycle_settings() == []
    call_command("check", tags=["kai_cycle"])  # raises SystemCheckError on an error


def test_a_budget_at_the_soft_limit_is_a_warning_naming_both(settings):
    settings.KAI_CYCLE_ENGINE_BUDGET = 50
    settings.KAI_CYCLE_SOFT_TIME_LIMIT = 50
    messages = check_cycle_settings()
    assert _ids(messages) == ["queues_app.W002"]
    assert "engine time budget 50.0s must be below the soft time limit 50.0s" in messages[0].msg
    assert "refuses to start" in messages[0].msg
    with pytest.raises(SystemCheckError, match="queues_app.W002"):
        call_command("check", tags=["kai_cycle"], fail_level="WARNING")
    call_command("check", tags=["kai_cycle"])  # a warning: migrate / runserver / run_cycle go on


@pytest.mark.parametrize(("name", "value", "text"), [
    ("KAI_CYCLE_SOFT_TIME_LIMIT", "fifty", "KAI_CYCLE_SOFT_TIME_LIMIT='fifty' is not a number"),
    ("KAI_CYCLE_TIME_LIMIT", float("nan"), "KAI_CYCLE_TIME_LIMIT=nan must be a finite number"),
    ("KAI_CYCLE_LEASE_SECONDS", float("inf"), "KAI_CYCLE_LEASE_SECONDS=inf must be a finite number"),
    ("KAI_CYCLE_ENGINE_BUDGET", -1, "KAI_CYCLE_ENGINE_BUDGET=-1.0 must be a finite number >= 0"),
    ("KAI_CYCLE_ENGINE_BUDGET", None, "KAI_CYCLE_ENGINE_BUDGET=None is not a number"),
])
def test_an_unreadable_value_is_an_error_naming_the_setting(settings, name, value, text):
    setattr(settings, name, value)
    messages = check_cycle_settings()
    assert _ids(messages) == ["queues_app.E001"]
    assert text in messages[0].msg
    with pytest.raises(SystemCheckError, match="queues_app.E001"):
        call_command("check", tags=["kai_cycle"])


def test_each_broken_relation_is_named(settings):
    settings.KAI_CYCLE_SOFT_TIME_LIMIT = 70  # >= hard (60)
    settings.KAI_CYCLE_TIME_LIMIT = 60
    settings.KAI_CYCLE_LEASE_SECONDS = 60  # not above the hard limit
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 30}  # below the lease
    text = " | ".join(m.msg for m in check_cycle_settings())
    assert "soft time limit 70.0s must be below the hard limit 60.0s" in text
    assert "hard time limit 60.0s must be below the lease TTL 60.0s" in text
    assert "lease TTL 60.0s must be below the broker visibility timeout 30.0s" in text


def test_the_worker_start_hook_refuses_with_the_problems(settings):
    from kaiplatform.celery import CycleSettingsError, _refuse_broken_cycle_settings

    _refuse_broken_cycle_settings()  # fine settings: returns
    settings.KAI_CYCLE_ENGINE_BUDGET = 55
    with pytest.raises(CycleSettingsError) as caught:
        _refuse_broken_cycle_settings()
    assert "engine time budget 55.0s must be below the soft time limit" in str(caught.value.code)


def test_a_real_worker_with_a_budget_above_the_soft_limit_exits_naming_it(tmp_path):
    """The real ``celery worker`` process (solo pool, embedded broker in a scratch directory) exits
    at start instead of consuming cycles it could never apply."""
    env = {**os.environ, "KAI_CYCLE_ENGINE_BUDGET": "60", "KAI_VAR_DIR": str(tmp_path),
           "CELERY_BROKER_URL": f"sqla+sqlite:///{tmp_path / 'broker.sqlite3'}",
           "DJANGO_SETTINGS_MODULE": "kaiplatform.settings"}
    env.pop("DATABASE_URL", None)
    done = subprocess.run([sys.executable, "-m", "celery", "-A", "kaiplatform", "worker", "--pool", "solo",
                           "-l", "warning"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "refusing to start" in done.stderr
    assert "engine time budget 60.0s must be below the soft time limit 50.0s" in done.stderr
