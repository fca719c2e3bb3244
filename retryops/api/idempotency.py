"""Idempotency-Key on every POST (draft-ietf-httpapi-idempotency-key-header): a client that lost
an answer on a bad network sends the same request with the same key again and gets the first
answer, with nothing done twice.

The first request's row is committed before its work starts (audit.services.begin_idempotent_request),
so a duplicate arriving meanwhile is told 409; its answer is stored once it is known, and
replayed with `Idempotent-Replayed: true` to every repeat; the same key with another method,
path (a trailing slash aside) or body is refused with 422. A 5xx or a crash releases the key, so
the client may try again. Every answer below 500 is stored, refusals too: the key names the
request, and its answer was the refusal (a new attempt is a new request, with a new key)."""

from django.http.request import RawPostDataException
from rest_framework import exceptions
from rest_framework.response import Response

from audit.models import IdempotencyKey
from audit.services import (
    begin_idempotent_request,
    finish_idempotent_request,
    release_idempotent_request,
)
from retryops.api.authentication import api_client_of

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"


class _Replay(Exception):
    """Ends a repeat's processing before its handler runs; answered with the stored response."""

    def __init__(self, record: IdempotencyKey):
        super().__init__(record.key)
        self.record = record


def replayed(record: IdempotencyKey) -> Response:
    headers = {REPLAYED_HEADER: "true"}
    if record.location:
        headers["Location"] = record.location
    return Response(record.response_body, status=record.status_code, headers=headers)


def endpoint_of(request) -> str:
    """The request's path and query as the endpoint it names: without its trailing slash, which
    every route takes or leaves (docs/api.md), so /claim and /claim/ with one key are one request."""
    path, mark, query = request.get_full_path().partition("?")
    return path.rstrip("/") + mark + query


class Idempotent:
    """Mixed into an APIView: POSTs with an Idempotency-Key header are processed once per key.
    Runs after authentication, permissions and throttling (a refused request stores nothing)."""

    idempotent_methods = ("POST",)

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        self._idempotency = None
        raw = request.headers.get(IDEMPOTENCY_HEADER)
        if raw is None or request.method not in self.idempotent_methods or not request.user.is_authenticated:
            return
        try:
            body = request._request.body
        except RawPostDataException:
            raise exceptions.UnsupportedMediaType(request.content_type) from None
        client = api_client_of(request)
        record, first = begin_idempotent_request(
            key=raw, method=request.method, path=endpoint_of(request), body=body, client=client,
            user=None if client is not None else request.user)
        if not first:
            raise _Replay(record)
        self._idempotency = record

    def handle_exception(self, exc):
        if isinstance(exc, _Replay):
            return replayed(exc.record)
        try:
            return super().handle_exception(exc)
        except Exception:
            self._release_idempotency()
            raise

    def _release_idempotency(self) -> None:
        record, self._idempotency = getattr(self, "_idempotency", None), None
        if record is not None:
            release_idempotent_request(record=record)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        record = getattr(self, "_idempotency", None)
        if record is not None:
            if response.status_code >= 500:
                self._release_idempotency()
            else:
                self._idempotency = None
                finish_idempotent_request(record=record, status_code=response.status_code,
                                          body=getattr(response, "data", None), location=response.get("Location", ""))
        return response
