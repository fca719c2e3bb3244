"""API keys: `Authorization: Bearer <key>` or `X-API-Key: <key>`, one key per external system
(audit.models.ApiClient). The request then acts as the client's service user, whose permissions
decide what it may do, and the audit log names the client ("api:<name>")."""

from rest_framework import authentication, exceptions

from audit.selectors import cached_api_client_for_key
from audit.services import note_api_client_use

API_KEY_HEADER = "X-API-Key"


def presented_key(request) -> str | None:
    """The key a request presents, or None when it presents none (another authentication may
    apply); an Authorization header of another scheme is not ours either."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    key = request.headers.get(API_KEY_HEADER)
    return key.strip() if key is not None else None


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """Authenticates a presented API key; a bad, unknown or revoked one is refused (401), never
    passed over to the next authentication."""

    def authenticate(self, request):
        key = presented_key(request)
        if key is None:
            return None
        if not key:
            raise exceptions.AuthenticationFailed("the API key is empty")
        check = cached_api_client_for_key(key)
        if check.client is None:
            raise exceptions.AuthenticationFailed(check.problem)
        client = check.client
        note_api_client_use(client)
        # On the Django request too, where the audit middleware reads who acts (audit.middleware).
        request._request.api_client = client
        return client.user, client

    def authenticate_header(self, request):
        # Makes DRF answer 401 (with this challenge), not 403, to a request without credentials.
        return 'Bearer realm="api"'


def api_client_of(request):
    """The API client that authenticated the request, or None (a session user)."""
    return getattr(request._request if hasattr(request, "_request") else request, "api_client", None)


def actor_of(request) -> str:
    """Who acts, as services record it: "api:<client name>", else the session user's name."""
    client = api_client_of(request)
    return client.actor if client is not None else request.user.get_username()


def key_prefix_of(request) -> str:
    """The prefix of the key the request came with ("rok_1a2b3c4d"), "" for a session user: a
    claim's and a release's timeline row keeps it (resources.services.client_claim_next)."""
    client = api_client_of(request)
    return client.key_prefix if client is not None else ""
