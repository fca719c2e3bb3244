"""One error shape for every answer that is not a success:

    {"error": {"code": "resource_unavailable", "message": "account alice@x is in use by ...",
               "details": {"reason": "in_use", ...}}}

built from the domain errors' codes (retryops.errors.DomainError) and from DRF's own exceptions.
The HTTP status of a domain error is looked up by its code in STATUS_BY_CODE, the one table."""

import logging

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.settings import api_settings

from retryops.errors import BadInput, DomainError

log = logging.getLogger(__name__)

# The status of each domain error code. A code that is not here answers 400 (a refusal of what was
# asked), except *_not_found, which answers 404. Apps add their codes here, not in their views.
STATUS_BY_CODE = {
    # what was sent cannot be used
    "bad_input": 400, "bad_payload": 400, "bad_task": 400, "unknown_flow": 400, "unknown_policy": 400,
    "bad_policy": 400, "unknown_runbook": 400, "unknown_runbook_action": 400, "masked_secret_unknown": 400,
    # the state of the world does not allow it now
    "resource_unavailable": 409, "pool_exhausted": 409, "lease_mismatch": 409, "illegal_transition": 409,
    "task_live": 409, "replay_refused": 409, "bulk_replay_running": 409, "approval_required": 409,
    "token_reused": 409, "bad_runbook": 409, "idempotency_key_in_progress": 409, "instance_succeeded": 409,
    "name_taken": 409, "key_taken": 409,
    # the Idempotency-Key names another request
    "idempotency_key_reused": 422,
    # the If-Match names a version the row is no longer at
    "precondition_failed": 412,
    # allowed to nobody in this role, whatever the state (an approver approving their own request)
    "four_eyes": 403,
    # an interface switched off by a feature flag is not there
    "feature_off": 404,
    # programming errors: a service was called the wrong way, never the client's fault
    "needs_transaction": 500, "not_in_transaction": 500, "audit_error": 500, "internal_error": 500,
}

# Codes of DRF's own exceptions, as this API names them.
_DRF_CODES = {
    exceptions.ParseError: "bad_input",
    exceptions.ValidationError: "bad_input",
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
}


def status_for(code: str) -> int:
    """The HTTP status of a domain error code."""
    if code in STATUS_BY_CODE:
        return STATUS_BY_CODE[code]
    if code == "not_found" or code.endswith("_not_found"):
        return status.HTTP_404_NOT_FOUND
    return status.HTTP_400_BAD_REQUEST


def error_body(code: str, message: str, details: dict | None = None) -> dict:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def _flatten(detail, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested validation errors as {"payload.items.2": ["..."]}."""
    if isinstance(detail, dict):
        flat = {}
        for key, value in detail.items():
            flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if isinstance(detail, list) and any(isinstance(item, (dict, list)) for item in detail):
        flat = {}
        for n, value in enumerate(detail):
            flat.update(_flatten(value, f"{prefix}.{n}" if prefix else str(n)))
        return flat
    messages = detail if isinstance(detail, list) else [detail]
    return {prefix or api_settings.NON_FIELD_ERRORS_KEY: [str(message) for message in messages]}


def domain_error_body(error: DomainError) -> dict:
    """A domain error as the API answers it; bad input also names its field under `fields`, as
    DRF's validation errors do, so a client reads every 400 the same way."""
    body = error.as_dict()
    details = dict(body["details"])
    if (body["code"] == "bad_input" or isinstance(error, BadInput)) and "field" in details and "fields" not in details:
        details["fields"] = {str(details["field"]): [body["message"]]}
    return error_body(body["code"], body["message"], details)


def _drf_response(exc: exceptions.APIException) -> Response:
    code = next((name for kind, name in _DRF_CODES.items() if isinstance(exc, kind)), None)
    code = code or (exc.default_code if isinstance(exc.default_code, str) else "error")
    headers = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    details: dict = {}
    if isinstance(exc, exceptions.ValidationError):
        fields = _flatten(exc.detail)
        details["fields"] = fields
        message = "; ".join(f"{name}: {' '.join(texts)}" for name, texts in fields.items())
    elif isinstance(exc, exceptions.Throttled):
        wait = max(1, int(exc.wait or 1))
        headers["Retry-After"] = str(wait)
        details["retry_after"] = wait
        message = f"too many requests from this client: try again in {wait} s"
    else:
        message = str(exc.detail)
    return Response(error_body(code, message, details), status=exc.status_code, headers=headers)


def exception_handler(exc, context) -> Response:
    """REST_FRAMEWORK's EXCEPTION_HANDLER: every error in the one shape. An exception nobody
    expected is logged with its traceback and answered 500 in the same shape, with the request's
    id to quote."""
    if isinstance(exc, DomainError):
        code = status_for(exc.code)
        if code >= 500:
            log.error("domain error %s answered 500: %s", exc.code, exc, exc_info=exc)
        return Response(domain_error_body(exc), status=code)
    if isinstance(exc, RequestDataTooBig):
        # Django raises it when the body is read (by the parser, or to fingerprint an idempotent
        # request); DRF would let it through as a 500.
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return Response(error_body("request_too_large", f"the request's body is larger than the {limit} bytes this API "
                                   "takes", {"limit_bytes": limit}), status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if isinstance(exc, TooManyFieldsSent):
        # Django raises it when the query string is parsed (the filters read it), DRF lets it through.
        limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
        return Response(error_body("too_many_parameters", f"the request has more than the {limit} query parameters "
                                   "the server reads", {"limit": limit}), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, exceptions.APIException):
        return _drf_response(exc)
    request = context.get("request")
    request_id = getattr(request, "request_id", "") if request is not None else ""
    log.error("unexpected error in %s (request %s)", context.get("view").__class__.__name__, request_id,
              exc_info=exc)
    return Response(error_body("internal_error", "the server failed to answer this request; quote the request id "
                               "to its operators", {"request_id": request_id}),
                    status=status.HTTP_500_INTERNAL_SERVER_ERROR)
