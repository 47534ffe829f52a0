"""What the ModelAdmins share: service errors shown as messages, not 500s; read-only pages.

Its own module so that the admin modules (``admin``, ``admin_devices``) can all use it without
importing each other.
"""
from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from queues_app.errors import ApplicationError


class ServiceErrorsMixin:
    """Turn an ApplicationError escaping a service (e.g. a concurrent edit made the change
    invalid after the form validated) into an error message instead of a 500."""

    def changeform_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return super().changeform_view(request, *args, **kwargs)  # type: ignore[misc]
        except ApplicationError as exc:
            self.message_user(request, str(exc), level=messages.ERROR)  # type: ignore[attr-defined]
            return HttpResponseRedirect(request.get_full_path())

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: Any = None) -> HttpResponse:
        try:
            return super().delete_view(request, object_id, extra_context)  # type: ignore[misc]
        except ApplicationError as exc:
            self.message_user(request, str(exc), level=messages.ERROR)  # type: ignore[attr-defined]
            opts = self.model._meta  # type: ignore[attr-defined]
            return HttpResponseRedirect(reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[object_id]))

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        try:
            return super().changelist_view(request, extra_context)  # type: ignore[misc]
        except ApplicationError as exc:
            self.message_user(request, str(exc), level=messages.ERROR)  # type: ignore[attr-defined]
            return HttpResponseRedirect(request.get_full_path())


class NoAddOrChangeMixin:
    """Rows written only by services, the cycle or the accounting task: operators read them here
    (admin pages and inlines alike: ``obj`` is the inline's parent)."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ViewOnlyMixin(NoAddOrChangeMixin):
    """Audit trails and history: not even deletable from the admin."""

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
