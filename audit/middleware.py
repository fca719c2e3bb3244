"""Sets the audit context for each web request: the actor and the user behind it, the channel, a
request id."""

from audit.choices import Channel
from audit.context import accepted_request_id, acting_as, new_request_id

REQUEST_ID_HEADER = "X-Request-ID"
ANONYMOUS_ACTOR = "anonymous"


def channel_of(path: str) -> str:
    """/api/... is the API; every other page (the admin, the console around it) is the admin channel."""
    return Channel.API if path.startswith("/api/") else Channel.ADMIN


def actor_of(request) -> str:
    """The API client ("api:<name>") when the API authenticated one (retryops.api sets
    `api_client` on the request), else the logged-in user's name, else anonymous."""
    client = getattr(request, "api_client", None)
    return client.actor if client is not None else user_of(request) or ANONYMOUS_ACTOR


def user_of(request) -> str:
    """The username of the Django user the request acts as: an API client's service user, else
    the logged-in user; "" for nobody."""
    client = getattr(request, "api_client", None)
    user = client.user if client is not None else getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return ""
    return user.get_username()


class AuditContextMiddleware:
    """Attributes the audit entries a request writes to its user, on the admin or API channel,
    under its X-Request-ID (kept when the client or proxy sent a usable one, else a new uuid),
    and answers with that id in X-Request-ID so a report can quote it. Sits after
    AuthenticationMiddleware; the user is read when an entry is written, because DRF
    authenticates API requests (token, basic) only in the view."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request_id = accepted_request_id(request.headers.get(REQUEST_ID_HEADER)) or new_request_id()
        request.request_id = request_id
        with acting_as(actor=lambda: actor_of(request), channel=channel_of(request.path_info),
                       request_id=request_id, user=lambda: user_of(request)):
            response = self.get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        return response
