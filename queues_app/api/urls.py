"""Routes of the tenant / operator API (mounted at /api/v1/ by kaiplatform/urls.py)."""
from __future__ import annotations

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from queues_app.api import views
from queues_app.api.whatif import QueueWhatIfApi, ScaleUpPreviewApi

app_name = "queues-api"

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("workloads", views.WorkloadViewSet, basename="workload")
router.register("queues", views.QueueViewSet, basename="queue")
router.register("nodes", views.NodeViewSet, basename="node")
router.register("cycles", views.CycleViewSet, basename="cycle")

urlpatterns = [
    path("auth/token/", views.TokenObtainApi.as_view(), name="token"),
    path("me/", views.MeApi.as_view(), name="me"),
    path("queues/<str:pk>/whatif/", QueueWhatIfApi.as_view(), name="queue-whatif"),
    path("nodes/scale-up-preview/", ScaleUpPreviewApi.as_view(), name="node-scale-up-preview"),
    path("", include(router.urls)),
]
