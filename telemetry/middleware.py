"""Answers the probes before the rest of the middleware; notes the request id each response carried."""

from audit.middleware import REQUEST_ID_HEADER
from telemetry.health import views
from telemetry.logs import remember_answered_request_id

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


class AnsweredRequestId:
    """Outermost: notes the X-Request-ID each response carries (audit.middleware sets it; a probe's
    and a static file's have none) for runserver's request line (telemetry.logs), which Django
    writes after the response, outside the middleware. gunicorn's access line reads the header
    itself (telemetry.gunicorn_logs)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        remember_answered_request_id(response.get(REQUEST_ID_HEADER))
        return response
