"""Throttles keyed by tenant, so all members of a tenant share one budget.

DRF's throttles are best-effort (non-atomic, cache based; see reliability.md 3.3): they
protect the service from one noisy tenant, they are not a security boundary.  Rates are
read from settings at request time (DRF binds them at import), so tests and operators can
change them without a restart of the class.
"""
from __future__ import annotations

from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle
from queues_app.api.permissions import caller_of


class _SettingsRate(SimpleRateThrottle):
    def get_rate(self):
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)


class TenantRateThrottle(_SettingsRate):
    """Every request: per tenant for members, per user for operators, per IP when anonymous."""

    scope = "tenant"

    def get_cache_key(self, request, view):
        user = request.user
        if not getattr(user, "is_authenticated", False):
            self.scope = "anon"
            self.rate = self.get_rate()
            self.num_requests, self.duration = self.parse_rate(self.rate)
            return self.cache_format % {"scope": "anon", "ident": self.get_ident(request)}
        caller = caller_of(request, required=False)
        if caller is not None and caller.tenant is not None:
            ident = f"tenant-{caller.tenant.pk}"
        else:
            ident = f"user-{user.pk}"
        return self.cache_format % {"scope": self.scope, "ident": ident}


class SubmitRateThrottle(_SettingsRate):
    """Workload creates (including dry runs): a tighter per-tenant budget (OWASP API6).

    Only creates: a cancel (also a POST) is not counted, so a tenant at its submit limit can
    still cancel what it submitted."""

    scope = "submit"

    def get_cache_key(self, request, view):
        if request.method != "POST" or getattr(view, "action", None) != "create":
            return None

        caller = caller_of(request, required=False)
        if caller is None:
            return None
        ident = f"tenant-{caller.tenant.pk}" if caller.tenant is not None else f"user-{request.user.pk}"
        return self.cache_format % {"scope": self.scope, "ident": ident}
