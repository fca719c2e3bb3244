"""The OpenAPI 3.1 schema (drf-spectacular): what every endpoint answers when it fails, in the one
error shape, added to each operation by ApiSchema so that no view documents it by hand; the
headers every request may send (Idempotency-Key, X-Request-ID) and every answer carries; and the
limits the server enforces, each stated from the field, setting or constant that enforces it (the
text and JSON a column can hold, lengths, ranges, page sizes, body size, rates, gunicorn's limits).
tests/test_api_fuzz.py sends every request the schema calls valid to the deployed server, which
must take it."""

from django.conf import settings
from django.core.exceptions import FieldDoesNotExist
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent, force_instance
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from jsonschema import Draft202012Validator
from rest_framework import serializers
from rest_framework.permissions import AllowAny

from audit.services import IDEMPOTENCY_KEY_LENGTH
from retryops.api.fields import JsonObject, Text
from retryops.api.idempotency import IDEMPOTENCY_HEADER, REPLAYED_HEADER
from retryops.gunicorn_worker import HEADER_FIELD_BYTES, HEADER_FIELDS, REQUEST_LINE_BYTES
from retryops.jsonsafe import MAX_SAFE_INTEGER


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable, for machines: bad_input, resource_unavailable, pool_exhausted, "
                                           "lease_mismatch, not_found, throttled, ...")
    message = serializers.CharField(help_text="The sentence an operator reads.")
    details = serializers.DictField(help_text="What was wrong: `fields` ({field: [messages]}) for bad input; the "
                                              "reason, holder and until when of an unavailable resource; ...")


class ErrorSerializer(serializers.Serializer):
    """Every answer that is not a success."""

    error = ErrorDetailSerializer()


def _rates() -> str:
    rates = {"reads": settings.RETRYOPS_API_READ_RATE, "writes": settings.RETRYOPS_API_WRITE_RATE,
             "requests without a key": settings.RETRYOPS_API_ANON_RATE}
    return ", ".join(f"{what} {rate}" for what, rate in rates.items() if rate) or "none"


ERRORS = {
    400: lambda: "Bad input: `details.fields` names each bad field (body, query or header) with what is wrong; "
                 f"too_many_parameters: more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} query parameters.",
    401: "No API key (`Authorization: Bearer <key>` or `X-API-Key`), or an unknown or revoked one.",
    403: "The client's service user lacks the permission this needs (`message` names it).",
    404: "No such object (or an unknown pool or resource named in the body).",
    409: "The state does not allow it now: resource_unavailable (reason, holder, until), pool_exhausted (counts), "
         "lease_mismatch (why), illegal_transition, task_live, name_taken and key_taken (a pool's name, a key in its "
         "pool); or idempotency_key_in_progress (the first request with this Idempotency-Key is still being "
         "processed).",
    411: "length_required: a body must be sent with a Content-Length header; one sent with Transfer-Encoding "
         "(chunked) alone is not read.",
    413: lambda: f"request_too_large: the body is longer than the {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes the "
                "server takes (`details.limit_bytes`).",
    414: f"request_line_too_long: the request line (method, path and query string) is longer than "
         f"{REQUEST_LINE_BYTES} bytes (`details.limit_bytes`).",
    422: "idempotency_key_reused: this Idempotency-Key was first sent with another request.",
    429: lambda: f"throttled: too many requests from this client ({_rates()}); `Retry-After` says in how many "
                 "seconds to try again.",
    431: f"header_fields_too_large: more than {HEADER_FIELDS} header fields, or one longer than {HEADER_FIELD_BYTES} "
         "bytes.",
    503: "A server this needs does not answer.",
}

# What only some endpoints answer: a view names it in `error_notes` ({status: note}), added to
# that status's description.
INSTANCE_SUCCEEDED = ("instance_succeeded: a run of this business instance succeeded already (`details.task_id`); "
                      "send `\"as_new_instance\": true` to run it again as a new instance.")

WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
# What the web server refuses of any request, before the app sees it (retryops.gunicorn_worker).
SERVER_LIMITS = {414, 431}


def _ranges(codes: list[int]) -> str:
    """Code points as a regex character class's ranges: \\u0009-\\u000d..."""
    runs: list[list[int]] = []
    for code in codes:
        if runs and code == runs[-1][1] + 1:
            runs[-1][1] = code
        else:
            runs.append([code, code])
    return "".join(f"\\u{a:04x}" if a == b else f"\\u{a:04x}-\\u{b:04x}" for a, b in runs)


# Text a column can hold: no NUL character (a lone surrogate cannot be sent in UTF-8 at all). One
# that may not be blank has a character other than those the fields trim (DRF's CharField strips
# what str.isspace() names, all below U+3001; regex's \s is not quite that in every engine).
NO_NUL = "^[^\\u0000]*$"
TRIMMED = _ranges([code for code in range(0x3001) if chr(code).isspace()])
NOT_BLANK = f"^[^\\u0000]*[^\\u0000{TRIMMED}][^\\u0000]*$"
# Visible ASCII but the double quote, which may only enclose the key (audit.services.idempotency_key).
IDEMPOTENCY_KEY = f"^[!#-~]{{1,{IDEMPOTENCY_KEY_LENGTH}}}$"


def error_description(status: int) -> str:
    """What ERRORS says of `status` (some descriptions read the settings they state)."""
    described = ERRORS.get(status, "")
    return described() if callable(described) else described


def error_response(status: int, description: str | None = None) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description or error_description(status))


def json_value_schema() -> dict:
    """A value inside a JSON object the API stores (retryops.jsonsafe.refuse_unstorable): text and
    keys without NUL, integers up to 2**53 - 1 either way, any other number, and objects and lists
    of these."""
    value = {"$ref": "#/components/schemas/JsonValue"}
    return {"anyOf": [
        {"type": "string", "pattern": NO_NUL},
        {"type": "integer", "minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER},
        {"type": "number", "not": {"type": "integer"}},
        {"type": "boolean"},
        {"type": "null"},
        {"type": "array", "items": value},
        {"type": "object", "additionalProperties": value, "propertyNames": {"pattern": NO_NUL}},
    ], "description": f"Any JSON value PostgreSQL's jsonb keeps as sent: no NUL character in text or keys, no "
                      f"integer beyond ±{MAX_SAFE_INTEGER} (2**53 - 1)."}


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
        schema = super()._map_serializer_field(field, direction, bypass_extensions)
        if schema is None:
            return schema
        if isinstance(field, JsonObject):
            self.registry.register_on_missing(ResolvedComponent(
                name="JsonValue", type=ResolvedComponent.SCHEMA, object="JsonValue", schema=json_value_schema()))
            schema.update(type="object", additionalProperties={"$ref": "#/components/schemas/JsonValue"},
                          propertyNames={"pattern": NO_NUL})
        return schema

    def _map_basic_serializer(self, serializer, direction):
        # What a body's fields cannot say alone (task or tasks, not both; each id once) is stated
        # from the serializer's `body_rules`: JSON Schema keywords, and more keywords for some of
        # its `properties`.
        schema = super()._map_basic_serializer(serializer, direction)
        for name, field in force_instance(serializer).fields.items():
            # Here, after drf-spectacular added a RegexValidator's pattern (which says more), and
            # made a blank choice of a patterned field that may be blank.
            if isinstance(field, Text) and name in schema["properties"] \
                    and "pattern" not in schema["properties"][name] and "oneOf" not in schema["properties"][name]:
                schema["properties"][name]["pattern"] = NO_NUL if field.allow_blank else NOT_BLANK
        rules = dict(getattr(serializer, "body_rules", None) or {})
        if direction == "request" and rules:
            for name, keywords in rules.pop("properties", {}).items():
                schema["properties"][name].update(keywords)
            schema.update(rules)
        return schema

    def _get_request_for_media_type(self, serializer, direction="request"):
        # A body left out is read as {}: one that {} breaks the rules of (task or tasks) is required.
        schema, required = super()._get_request_for_media_type(serializer, direction)
        rules = getattr(serializer, "body_rules", None)
        return schema, required or bool(rules and not Draft202012Validator(rules).is_valid({}))

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
            statuses |= {411, 413}
        if self.method == "POST":
            statuses |= {409, 422}
        return statuses | SERVER_LIMITS | set(getattr(self.view, "error_statuses", ()))

    def _get_parameters(self):
        # Query and path parameters are text a column can hold too (the filters refuse a NUL);
        # a path's [^/]+ (Django's str converter) says so as well.
        parameters = super()._get_parameters()
        for parameter in parameters:
            schema = parameter.get("schema", {})
            if parameter["in"] in ("query", "path") and schema.get("type") == "string" \
                    and not {"enum", "format"} & set(schema):
                schema["pattern"] = "^[^/\\u0000]+$" if schema.get("pattern") == "^[^/]+$" else \
                    schema.get("pattern", NO_NUL)
        return parameters

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
                OpenApiParameter(
                    IDEMPOTENCY_HEADER, {"type": "string", "pattern": IDEMPOTENCY_KEY}, OpenApiParameter.HEADER,
                    required=False, description="Makes this POST safe to send again: the same key with the same "
                                                "request answers the first answer and does nothing new (1 to 255 "
                                                "visible ASCII characters but \", which may enclose it; a new UUID "
                                                "per request is best). Kept at least 24 hours."),
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
                description = " ".join(filter(None, (error_description(status), notes.get(status, ""))))
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
