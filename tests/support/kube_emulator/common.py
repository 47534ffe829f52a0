"""Shared pieces of the emulator: server version, clocks, time formats, the Status body and ApiError."""
from __future__ import annotations

import datetime as _dt
import re
import threading
import time
from http import HTTPStatus
from typing import Any

SERVER_VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-kai-emulator",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-08-13T00:00:00Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}

# Default tolerations that the DefaultTolerationSeconds admission plugin adds to every pod.
_DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]
# Resources the API server treats as overcommittable; every other (extended) resource needs limits.
_NATIVE_RESOURCES = {"cpu", "memory", "ephemeral-storage", "storage"}
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's SimpleNameGenerator alphabet


# --------------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------------


class ManualClock:
    """A clock that only moves when told to: tests decide exactly when grace periods elapse."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else float(start)
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError(f"advance(seconds): must be >= 0, got {seconds!r}")
        with self._lock:
            self._now += float(seconds)
            return self._now


class _RealClock:
    """Wall clock, offset so it never runs behind a manual clock it replaces (time stays monotonic)."""

    def __init__(self, not_before: float) -> None:
        self._offset = max(0.0, not_before - time.time())

    def __call__(self) -> float:
        return time.time() + self._offset


def _rfc3339(ts: float) -> str:
    return _dt.datetime.fromtimestamp(int(ts), tz=_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(value: str | None) -> float | None:
    if not value:
        return None
    text = value.replace("Z", "+00:00")
    return _dt.datetime.fromisoformat(text).timestamp()


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_body(code: int, message: str, *, reason: str | None = None, details: dict | None = None) -> dict:
    """A ``meta/v1 Status`` as the API server returns it for errors (and for a few successes)."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if 200 <= code < 300 else "Failure",
        "message": message,
        "reason": reason if reason is not None else _REASONS.get(code, HTTPStatus(code).phrase.replace(" ", "")),
        "code": code,
    }
    if 200 <= code < 300:  # success Statuses (binding, eviction) carry no message, reason or code
        body.pop("message")
        body.pop("reason")
        body.pop("code")
    if body.get("reason") == "":
        body.pop("reason")
    if details is not None:
        body["details"] = details
    return body


class ApiError(Exception):
    """An error the emulator answers with a Status body (raised from the store, also from the Python API)."""

    def __init__(self, code: int, message: str, *, reason: str | None = None, details: dict | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.body = status_body(code, message, reason=reason, details=details)


def _not_found(resource: str, name: str) -> ApiError:
    group, _, plural = resource.rpartition("/")
    return ApiError(
        404,
        f'{plural} "{name}" not found' if not group else f'{plural}.{group} "{name}" not found',
        details={"name": name, "kind": plural, **({"group": group} if group else {})},
    )


def _conflict(resource: str, name: str, why: str) -> ApiError:
    return ApiError(
        409, f'Operation cannot be fulfilled on {resource} "{name}": {why}', details={"name": name, "kind": resource}
    )


def _invalid(kind: str, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 Invalid with one cause per field, message shaped like the API server's aggregate."""
    text = "; ".join(f"{fld}: {msg}" for fld, msg in causes)
    if len(causes) > 1:
        text = "[" + ", ".join(f"{fld}: {msg}" for fld, msg in causes) + "]"
    return ApiError(
        422,
        f'{kind} "{name}" is invalid: {text}',
        details={
            "name": name,
            "kind": kind,
            "causes": [{"reason": "FieldValueInvalid", "message": msg, "field": fld} for fld, msg in causes],
        },
    )


def _parse_bool(value: str | None) -> bool:
    """Go's strconv.ParseBool, which the API server uses for query booleans (the client sends 'True')."""
    if value is None:
        return False
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("", "0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ApiError(400, f"invalid boolean value {value!r}")


def _parse_int(name: str, value: str | None) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ApiError(400, f"{name}: invalid value {value!r}: must be an integer") from None


def _deep(obj: Any, path: str, default: Any = None) -> Any:
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return default
        cur = cur[part]
    return cur
