"""The admin site of kaiplatform: the operators' console.

``KaiAdminConfig`` replaces ``django.contrib.admin`` in ``INSTALLED_APPS`` (Django's documented
way to swap the default site), so every ``@admin.register`` keeps working.  The site's index
is the cluster dashboard (``queues_app.admin_dashboard``) instead of the list of models, which
stays in the navigation sidebar; ``admin/dashboard.json`` feeds the page's self-refresh.
"""
from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.urls import path


class KaiAdminSite(admin.AdminSite):
    site_header = "kaiplatform operator console"
    site_title = "kaiplatform"
    index_title = "Cluster"
    index_template = "admin/queues_app/dashboard/index.html"

    def get_urls(self):  # type: ignore[override]
        extra = [path("dashboard.json", self.admin_view(self.dashboard_data_view), name="dashboard_data")]
        return extra + super().get_urls()

    def index(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # imported here: this module is loaded with INSTALLED_APPS, before the models it needs exist
        from queues_app.admin_dashboard import dashboard_data

        context = {
            **self.each_context(request),
            "title": self.index_title,
            "subtitle": None,
            **dashboard_data(request),
            **(extra_context or {}),
        }
        request.current_app = self.name
        return TemplateResponse(request, self.index_template, context)

    def dashboard_data_view(self, request: HttpRequest) -> JsonResponse:
        from queues_app.admin_dashboard import dashboard_json

        return dashboard_json(request)


class KaiAdminConfig(AdminConfig):
    default_site = "kaiplatform.admin.KaiAdminSite"
