"""Usage history for the cycle and the API, from whichever app provides it.

The cycle asks, it does not know who answers: ``fairshare_app`` registers itself here when Django
starts (``FairshareAppConfig.ready``), so queues_app never imports fairshare_app (the dependency goes
one way: fairshare_app reads queues_app's models and reaches the engine through
``queues_app.cycle.engine_io``).  Without a registered provider the engine sees no usage history and
the API reports usage as ``"unavailable"``.

May import: nothing of the project.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class UsageProvider:
    """``name`` says where usage comes from (the API shows ``<name>.normalized_usage`` as source).

    ``engine_inputs(*, now)`` -> ``{"usage": {queue: {resource: U}}, "config": {...}, "queues":
    {queue: {resource: {field: value}}}}``, merged into the cycle's engine input;
    ``normalized_usage(*, tenant)`` -> ``{queue_name: {resource: 0..1 of the cluster}}``."""

    name: str
    engine_inputs: Callable[..., Mapping[str, Any]]
    normalized_usage: Callable[..., Mapping[str, Mapping[str, float]]]


_provider: UsageProvider | None = None


def register(provider: UsageProvider) -> None:
    """Make ``provider`` the usage source (the last registration wins; an app registers once)."""
    global _provider
    _provider = provider


def registered() -> UsageProvider | None:
    return _provider


def engine_inputs(*, now: datetime) -> dict[str, Any]:
    """The provider's part of the engine input; empty without a provider."""
    return {} if _provider is None else dict(_provider.engine_inputs(now=now) or {})


def normalized_usage(*, tenant: Any) -> tuple[dict[str, Mapping[str, float]], str] | None:
    """``({queue_name: {resource: U}}, source)``, or None without a provider."""
    if _provider is None:
        return None
    return dict(_provider.normalized_usage(tenant=tenant) or {}), f"{_provider.name}.normalized_usage"
