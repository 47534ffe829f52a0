"""Who is calling: an operator (staff, sees everything) or a member acting for one tenant.

Default deny: an authenticated user who is neither staff nor a member of an active tenant
gets 403 everywhere.  A user in several tenants picks one with the ``X-Tenant`` header
(tenant name).  The resolved :class:`Caller` is cached on the request, and every view passes
``caller.tenant`` (None for operators) to the selectors and services, which is where the
isolation is enforced, in the queryset, not after the fact.
"""
from __future__ import annotations

from dataclasses import dataclass

from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import BasePermission

from queues_app import selectors
from queues_app.models import Tenant

TENANT_HEADER = "X-Tenant"
NOT_A_MEMBER = "You are not a member of an active tenant."
PICK_A_TENANT = f"You are a member of several tenants; choose one with the {TENANT_HEADER} header."
UNKNOWN_TENANT = f"{TENANT_HEADER} does not name a tenant you are a member of."
OPERATORS_ONLY = "This endpoint is for operators only."


@dataclass(frozen=True)
class Caller:
    user: object
    tenant: Tenant | None

    @property
    def is_operator(self) -> bool:
        return self.tenant is None


def _resolve(request) -> Caller:
    user = request.user
    if getattr(user, "is_staff", False) and user.is_active:
        return Caller(user=user, tenant=None)
    tenants = list(selectors.tenant_list_for_user(user=user)[:50])
    wanted = request.headers.get(TENANT_HEADER)
    if wanted:
        for t in tenants:
            if t.name == wanted:
                return Caller(user=user, tenant=t)
        raise PermissionDenied(UNKNOWN_TENANT)
    if not tenants:
        raise PermissionDenied(NOT_A_MEMBER)
    if len(tenants) > 1:
        raise PermissionDenied(PICK_A_TENANT)
    return Caller(user=user, tenant=tenants[0])


def caller_of(request, *, required: bool = True) -> Caller | None:
    """The request's Caller (resolved once).  ``required=False`` returns None instead of raising."""
    cached = getattr(request, "_kai_caller", None)
    if cached is not None:
        return cached
    if not getattr(request.user, "is_authenticated", False):
        if required:
            raise PermissionDenied(NOT_A_MEMBER)
        return None
    try:
        caller = _resolve(request)
    except PermissionDenied:
        if required:
            raise
        return None
    request._kai_caller = caller
    return caller


class IsTenantMemberOrOperator(BasePermission):
    """Authenticated, and either staff or a member of an active tenant."""

    message = NOT_A_MEMBER

    def has_permission(self, request, view) -> bool:
        if not getattr(request.user, "is_authenticated", False):
            return False
        caller_of(request)  # raises PermissionDenied with the precise reason
        return True


class IsOperator(BasePermission):
    """Staff only (nodes, queue and quota writes, cycle triggers)."""

    message = OPERATORS_ONLY

    def has_permission(self, request, view) -> bool:
        if not getattr(request.user, "is_authenticated", False):
            return False
        caller = caller_of(request, required=False)
        return caller is not None and caller.is_operator


class ReadForMembersWriteForOperators(BasePermission):
    """Members may read (GET/HEAD/OPTIONS); only operators may write."""

    message = OPERATORS_ONLY

    def has_permission(self, request, view) -> bool:
        if not getattr(request.user, "is_authenticated", False):
            return False
        caller = caller_of(request)
        return request.method in ("GET", "HEAD", "OPTIONS") or caller.is_operator
