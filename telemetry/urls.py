"""/metrics, /healthz and /readyz: for Prometheus and load balancers, outside the admin and the API."""

urlpatterns = []
