"""/api/: the schema and its docs pages, open to all; each app's endpoints are included beside these
from retryops/urls.py."""

from django.urls import path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerView,
)
from rest_framework.permissions import AllowAny

OPEN = {"authentication_classes": [], "permission_classes": [AllowAny]}

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(**OPEN), name="api-schema"),
    # Swagger UI and Redoc from drf-spectacular-sidecar's vendored assets (SPECTACULAR_SETTINGS).
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema", **OPEN), name="api-docs"),
    # Its own template: drf-spectacular's loads Google Fonts.
    path("redoc/", SpectacularRedocView.as_view(url_name="api-schema", template_name="api/redoc.html", **OPEN),
         name="api-redoc"),
]
