"""Scheduling's endpoints under /api/: a resource's retry and retry history, by id or by pool and key."""

from resources.api.urls import resource_paths
from scheduling.api import views

urlpatterns = [
    *resource_paths("retry", views.Retry.as_view(), "retry"),
    *resource_paths("retry_history", views.RetryHistory.as_view(), "retry-history"),
]
