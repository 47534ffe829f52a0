"""Typed readers for environment variables (12-factor settings).

Each helper raises ``ImproperlyConfigured`` naming the variable when its value cannot be
parsed, so a typo in a deployment manifest stops the process at start-up instead of
silently falling back to a default.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def envstr(name: str, default: str | None = None) -> str | None:
    """A string variable; ``NAME_FILE`` (a mounted secret) wins over ``NAME``."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={path!r} cannot be read: {exc}") from exc
    return os.environ.get(name, default)


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use one of 1/0, true/false, yes/no, on/off)")


def envint(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below the minimum {minimum}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}={value} is above the maximum {maximum}")
    return value


def envfloat(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw.strip())
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from exc
    if value != value or value in (float("inf"), float("-inf")):
        raise ImproperlyConfigured(f"{name}={raw!r} is not finite")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below the minimum {minimum}")
    return value


def envlist(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def development_secret_key(path: Path) -> str:
    """Generate once and persist a development key, so sessions survive restarts.

    Only used outside production; production must pass SECRET_KEY (or SECRET_KEY_FILE).
    """
    try:
        key = path.read_text().strip()
        if key:
            return key
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(50)
    # O_EXCL: if two processes race at first start, one wins and the other reads its key.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as fh:
        fh.write(key)
    return key


#: Placeholders seen in manifests and tutorials; compared case-insensitively.
KNOWN_WEAK_SECRET_KEYS = frozenset({
    "changeme", "change-me", "change_me", "changethis", "secret", "secretkey", "secret_key", "secret-key",
    "password", "insecure", "django-insecure", "dev", "development", "test", "testing", "default", "example",
    "kaiplatform", "replace-me", "replaceme", "xxx", "please-change-me",
})
MIN_SECRET_KEY_LENGTH = 50
MIN_SECRET_KEY_UNIQUE_CHARACTERS = 5


def weak_secret_key_reason(key: str) -> str | None:
    """Why ``key`` must not sign production sessions and tokens (None: acceptable).

    Django's own deployment check (security.W009): at least 50 characters, at least 5
    distinct ones, not a generated ``django-insecure-`` development key; and no well-known
    placeholder."""
    if key.strip().lower() in KNOWN_WEAK_SECRET_KEYS:
        return "is a well-known placeholder"
    if key.startswith("django-insecure-"):
        return "is a development key (django-insecure-...)"
    if len(key) < MIN_SECRET_KEY_LENGTH:
        return f"is shorter than {MIN_SECRET_KEY_LENGTH} characters"
    if len(set(key)) < MIN_SECRET_KEY_UNIQUE_CHARACTERS:
        return f"has fewer than {MIN_SECRET_KEY_UNIQUE_CHARACTERS} distinct characters"
    return None
