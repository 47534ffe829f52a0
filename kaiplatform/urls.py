"""Root URLconf.  App URLconfs are included only if they exist, so the API engineer can add
``queues_app/api/urls.py`` (and fairshare_app its own) without editing this file."""
from __future__ import annotations

from importlib.util import find_spec

from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from kaiplatform.health import readyz
from queues_app.metrics import metrics_view


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness probe: the process serves requests (no database round trip)."""
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),  # Prometheus; KAI_METRICS_TOKEN requires a bearer token
    # OpenAPI 3 schema (public, like the docs page) and its browsable UI; session login for
    # DRF's browsable API (tenants' scripts use tokens from /api/v1/auth/token/).
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/auth/", include("rest_framework.urls")),
]

for _module, _prefix in (("queues_app.api.urls", "api/v1/"), ("fairshare_app.api.urls", "api/v1/fairshare/")):
    try:
        _found = find_spec(_module) is not None
    except ModuleNotFoundError:
        _found = False
    if _found:
        urlpatterns.append(path(_prefix, include(_module)))
