"""Mounted at /api/v1/fairshare/ by kaiplatform/urls.py."""
from django.urls import path

from fairshare_app.api import views

app_name = "fairshare"

urlpatterns = [
    path("usage/", views.UsageReportApi.as_view(), name="usage"),
    path("usage/series/", views.UsageSeriesApi.as_view(), name="usage-series"),
    path("usage/normalized/", views.NormalizedUsageApi.as_view(), name="usage-normalized"),
    path("sshare/", views.SshareApi.as_view(), name="sshare"),
    path("budgets/", views.BudgetListApi.as_view(), name="budgets"),
    path("budgets/<str:pk>/", views.BudgetDetailApi.as_view(), name="budget-detail"),
    path("settings/", views.SettingsApi.as_view(), name="settings"),
    path("accounting/", views.AccountingStateApi.as_view(), name="accounting"),
]
