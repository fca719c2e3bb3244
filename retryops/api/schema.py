"""The OpenAPI 3.1 schema (drf-spectacular): what every endpoint answers when it fails, in the one
error shape, added to each operation by ApiSchema so that no view documents it by hand; the
headers every request may send (Idempotency-Key, X-Request-ID) and every answer carries."""

from django.core.exceptions import FieldDoesNotExist
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers
from rest_framework.permissions import AllowAny

from retryops.api.idempotency import IDEMPOTENCY_HEADER, REPLAYED_HEADER


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable, for machines: bad_input, resource_unavailable, pool_exhausted, "
                                           "lease_mismatch, not_found, throttled, ...")
    message = serializers.CharField(help_text="The sentence an operator reads.")
    details = serializers.DictField(help_text="What was wrong: `fields` ({field: [messages]}) for bad input; the "
                                              "reason, holder and until when of an unavailable resource; ...")


class ErrorSerializer(serializers.Serializer):
    """Every answer that is not a success."""

    error = ErrorDetailSerializer()


ERRORS = {
    400: "Bad input: `details.fields` names each bad field (body, query or header) with what is wrong.",
    401: "No API key (`Authorization: Bearer <key>` or `X-API-Key`), or an unknown or revoked one.",
    403: "The client's service user lacks the permission this needs (`message` names it).",
    404: "No such object (or an unknown pool or resource named in the body).",
    409: "The state does not allow it now: resource_unavailable (reason, holder, until), pool_exhausted (counts), "
         "lease_mismatch (why), illegal_transition, task_live; or idempotency_key_in_progress (the first request "
         "with this Idempotency-Key is still being processed).",
    413: "request_too_large: the body is larger than the server takes (DATA_UPLOAD_MAX_MEMORY_SIZE).",
    422: "idempotency_key_reused: this Idempotency-Key was first sent with another request.",
    429: "Too many requests from this client: `Retry-After` says in how many seconds to try again.",
    503: "A server this needs does not answer.",
}

# What only some endpoints answer: a view names it in `error_notes` ({status: note}), added to
# that status's description.
INSTANCE_SUCCEEDED = ("instance_succeeded: a run of this business instance succeeded already (`details.task_id`); "
                      "send `\"as_new_instance\": true` to run it again as a new instance.")

WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


def error_response(status: int, description: str | None = None) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description or ERRORS.get(status, ""))


def _model_field_is_blank(field) -> bool:
    """Whether a ModelSerializer's field stands for a model field that may hold ""."""
    model = getattr(getattr(field.parent, "Meta", None), "model", None)
    if model is None or not isinstance(field.source, str) or "." in field.source:
        return False
    try:
        return model._meta.get_field(field.source).blank
    except FieldDoesNotExist:
        return False


class ApiSchema(AutoSchema):
    """AutoSchema with the errors an operation can answer, in the one shape: 429 if throttled; 401 and
    403 unless the endpoint is public; 404 with an id in the path or a body; 400 with a body, a
    query or a path parameter; 409 and 422 for a POST (idempotency, and the services' refusals). A
    view adds more in `error_statuses`, and a note to a status's description in `error_notes`."""

    def get_request_serializer(self):
        # An action view names what it parses and what it answers (input_serializer,
        # output_serializer) instead of one serializer_class for both.
        return getattr(self.view, "input_serializer", None) or super().get_request_serializer()

    def get_response_serializers(self):
        return getattr(self.view, "output_serializer", None) or super().get_response_serializers()

    def _map_serializer_field(self, field, direction, bypass_extensions=False):
        # DRF drops allow_blank from a ModelSerializer's read-only fields, so a choice column that
        # may be empty (a resource's lease_kind) would be documented without "": put it back, and
        # drf-spectacular documents the blank choice as it does for a writable field.
        if isinstance(field, serializers.ChoiceField) and field.read_only and not field.allow_blank \
                and _model_field_is_blank(field):
            field.allow_blank = True
        return super()._map_serializer_field(field, direction, bypass_extensions)

    def _is_public(self) -> bool:
        permissions = self.view.get_permissions()
        return bool(permissions) and all(isinstance(p, AllowAny) for p in permissions)

    def error_statuses(self) -> set[int]:
        statuses = {429} if self.view.get_throttles() else set()
        if not self._is_public():
            statuses |= {401, 403}
        if "{" in self.path or self.method in WRITE_METHODS:
            statuses.add(404)
        # A malformed path parameter (a NUL in a key) is bad input too.
        if "{" in self.path or self.method in WRITE_METHODS or self._get_filter_parameters() or \
                self._get_pagination_parameters() or \
                any(isinstance(p, OpenApiParameter) and p.location == OpenApiParameter.QUERY
                    for p in self.get_override_parameters()):
            statuses.add(400)
        if self.method in ("POST", "PATCH"):
            statuses.add(413)
        if self.method == "POST":
            statuses |= {409, 422}
        return statuses | set(getattr(self.view, "error_statuses", ()))

    def get_override_parameters(self):
        parameters = [
            OpenApiParameter("X-Request-ID", OpenApiTypes.STR, OpenApiParameter.HEADER, required=False,
                             description="Your id for this request (letters, digits and ._:@/+=-, at most 100), "
                                         "kept in the audit log; a new one is made without it."),
            OpenApiParameter("X-Request-ID", OpenApiTypes.STR, OpenApiParameter.HEADER, response=True,
                             description="The request's id, as the audit log records it."),
            OpenApiParameter("Retry-After", OpenApiTypes.INT, OpenApiParameter.HEADER, response=[429],
                             description="Seconds to wait before the next request."),
        ]
        if self.method == "POST":
            parameters += [
                OpenApiParameter(IDEMPOTENCY_HEADER, OpenApiTypes.STR, OpenApiParameter.HEADER, required=False,
                                 description="Makes this POST safe to send again: the same key with the same request "
                                             "answers the first answer and does nothing new (1 to 255 visible ASCII "
                                             "characters; a new UUID per request is best). Kept at least 24 hours."),
                OpenApiParameter(REPLAYED_HEADER, OpenApiTypes.STR, OpenApiParameter.HEADER, response=True,
                                 enum=["true"], description="This is the stored answer to the first request with "
                                                            "this Idempotency-Key."),
            ]
        return [*parameters, *super().get_override_parameters()]

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        notes = getattr(self.view, "error_notes", {})
        for status in sorted(self.error_statuses()):
            if str(status) not in responses:
                description = " ".join(filter(None, (ERRORS.get(status, ""), notes.get(status, ""))))
                responses[str(status)] = self._get_response_for_code(error_response(status, description), str(status),
                                                                     direction=direction)
        return responses


class ApiKeyScheme(OpenApiAuthenticationExtension):
    """Either header carries the key: an OR of two schemes."""

    target_class = "retryops.api.authentication.ApiKeyAuthentication"
    name = ["ApiKeyBearer", "ApiKeyHeader"]

    def get_security_requirement(self, auto_schema):
        return [{"ApiKeyBearer": []}, {"ApiKeyHeader": []}]

    def get_security_definition(self, auto_schema):
        return [
            {"type": "http", "scheme": "bearer", "description": "An API key (manage.py api_client create, or the "
                                                                "admin's API clients page) as `Authorization: Bearer <key>`."},
            {"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "The same key in `X-API-Key`."},
        ]
