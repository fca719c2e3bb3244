"""GET /metrics for Prometheus: the registry's text, to an allowed address with the right token.

Two settings protect it (retryops/settings.py): RETRYOPS_METRICS_ALLOW, the networks a scrape may
come from (loopback by default), and RETRYOPS_METRICS_TOKEN, a bearer token every scrape must send
when it is set. An address outside the list is refused with 403, a missing or wrong token with
401 and a WWW-Authenticate challenge (RFC 6750); either body says which. The client's address is
read as the API's throttle reads it (DRF's get_ident with RETRYOPS_API_NUM_PROXIES): the address
the nearest trusted proxy saw, never an X-Forwarded-For the caller wrote itself."""

import hmac
import ipaddress
from functools import lru_cache

from django.conf import settings
from django.http import HttpResponse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_safe
from rest_framework.throttling import BaseThrottle

from telemetry.metrics.registry import exposition

REALM = 'Bearer realm="metrics"'


@lru_cache(maxsize=8)
def _networks(allowed: tuple[str, ...]) -> tuple:
    return tuple(ipaddress.ip_network(network) for network in allowed)


def _refuse(status: int, message: str, challenge: str | None = None) -> HttpResponse:
    response = HttpResponse(message + "\n", status=status, content_type="text/plain; charset=utf-8")
    if challenge:
        response["WWW-Authenticate"] = challenge
    response["Cache-Control"] = "no-store"
    return response


def _address_refusal(request) -> HttpResponse | None:
    allowed = tuple(settings.RETRYOPS_METRICS_ALLOW)
    if not allowed:
        return None
    address = (BaseThrottle().get_ident(request) or "").strip()
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return _refuse(403, _("/metrics refused: the client address %(address)r is not an IP address, so it cannot "
                              "be checked against RETRYOPS_METRICS_ALLOW") % {"address": address[:100]})
    if ip.version == 6 and ip.ipv4_mapped:  # a dual-stack server's view of an IPv4 client
        ip = ip.ipv4_mapped
    if not any(ip in network for network in _networks(allowed)):
        return _refuse(403, _("/metrics refused: address %(address)s is not in RETRYOPS_METRICS_ALLOW") % {
            "address": ip})
    return None


def _token_refusal(request) -> HttpResponse | None:
    token = settings.RETRYOPS_METRICS_TOKEN
    if not token:
        return None
    header = request.headers.get("Authorization", "")
    scheme, _space, given = header.strip().partition(" ")
    if not header.strip():
        return _refuse(401, _("/metrics needs a bearer token: send the header Authorization: Bearer <token>, the "
                              "token being RETRYOPS_METRICS_TOKEN"), REALM)
    if scheme.lower() != "bearer" or not given.strip():
        return _refuse(401, _("/metrics takes only a bearer token: send the header Authorization: Bearer <token>"),
                       f'{REALM}, error="invalid_request"')
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        return _refuse(401, _("/metrics refused: the bearer token is wrong"), f'{REALM}, error="invalid_token"')
    return None


@require_safe
def metrics_view(request):
    """The metrics in Prometheus' text format (OpenMetrics when the scraper asks for it)."""
    refused = _address_refusal(request) or _token_refusal(request)
    if refused is not None:
        return refused
    body, content_type = exposition(request.headers.get("Accept", ""))
    response = HttpResponse(body, content_type=content_type)
    response["Cache-Control"] = "no-store"
    return response
