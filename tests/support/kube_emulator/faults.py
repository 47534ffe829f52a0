"""Fault injection (error statuses, errors after the request was performed, dropped connections,
delays) and the request log tests assert on."""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass

@dataclass
class _Fault:
    method: str
    path_re: re.Pattern
    status: int | None
    times: int | None
    after: bool
    delay: float
    drop_connection: bool
    body: dict | None
    query_re: re.Pattern | None
    hits: int = 0


class Faults:
    """Rules that make the next matching requests fail, be delayed, or lose their connection."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[_Fault] = []

    def add(
        self,
        method: str,
        path_regex: str,
        *,
        status: int | None = None,
        times: int | None = 1,
        after: bool = False,
        delay: float = 0.0,
        drop_connection: bool = False,
        body: dict | None = None,
        query_regex: str | None = None,
    ) -> _Fault:
        """``times=None`` means every matching request until ``clear()``.

        ``after=True``: the request is performed first, then answered with ``status`` / dropped
        (the client sees a failure for an operation that took effect).  ``delay`` seconds are slept
        before answering (before performing, unless ``after``).  With neither ``status`` nor
        ``drop_connection`` the request is only delayed.
        """
        if status is None and not drop_connection and delay <= 0:
            raise ValueError("faults.add: give status=, drop_connection=True or delay=")
        if times is not None and times < 1:
            raise ValueError(f"faults.add: times must be >= 1 or None, got {times!r}")
        rule = _Fault(
            method.upper(),
            re.compile(path_regex),
            status,
            times,
            after,
            delay,
            drop_connection,
            body,
            re.compile(query_regex) if query_regex else None,
        )
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def take(self, method: str, path: str, query: str) -> _Fault | None:
        with self._lock:
            for rule in self._rules:
                if rule.method not in (method, "*") or not rule.path_re.search(path):
                    continue
                if rule.query_re is not None and not rule.query_re.search(query):
                    continue
                rule.hits += 1
                if rule.times is not None:
                    rule.times -= 1
                    if rule.times == 0:
                        self._rules.remove(rule)
                return rule
        return None

    def __len__(self) -> int:
        with self._lock:
            return len(self._rules)


@dataclass
class RequestRecord:
    method: str
    path: str
    query: str
    status: int | None  # what the client was sent (None: dropped, or not answered yet)
    performed: int | None  # what the emulator produced before any fault rewrote it (None: not performed)
