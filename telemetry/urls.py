"""/metrics, /healthz and /readyz: for Prometheus and load balancers, outside the admin and the API."""

from django.urls import path

from telemetry import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
]
