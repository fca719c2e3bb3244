"""Answers the probes before the rest of the middleware."""

from telemetry import views

PROBES = {"/healthz": views.healthz, "/readyz": views.readyz}


class ProbeMiddleware:
    """Serves /healthz and /readyz first, whatever the Host header: a load balancer or a kubelet
    probes a process by its address (Host: 10.0.3.7), which ALLOWED_HOSTS would refuse with a 400,
    and nothing else in the stack (sessions, the language, the audit context) is needed to
    answer. The paths are also in telemetry.urls, so they can be reversed."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        probe = PROBES.get(request.path_info)
        return probe(request) if probe is not None else self.get_response(request)
