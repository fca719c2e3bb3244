"""/metrics, /healthz and /readyz: for Prometheus and load balancers, outside the admin and the API."""

from django.urls import path

from telemetry.health import views
from telemetry.metrics.access import metrics_view

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
]
