"""Refuses, before any view reads it, a request it would misread: a query string PostgreSQL could
not take, or a body sent without a length."""

from django.http import HttpResponse, HttpResponseBadRequest, JsonResponse
from django.utils.translation import gettext as _

from retryops.api.errors import error_body


class RefuseNulInQuery:
    """A NUL character in a query parameter answers 400 naming the parameter.

    The admin's list filters and search hand their parameters to the database as they are, and
    PostgreSQL refuses a NUL in text: without this, `?state__exact=%00` is a server error. The REST
    API checks its own filters and answers in its own error shape (`details.fields`), so /api/ is
    left to it.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if not request.path.startswith("/api/"):
            for name, values in request.GET.lists():
                if "\x00" in name or any("\x00" in value for value in values):
                    shown = name.replace("\x00", "\\x00")
                    return HttpResponseBadRequest(
                        _("The query parameter “%(name)s” contains a NUL character, which cannot be searched for.")
                        % {"name": shown}, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


class RefuseUnframedBody:
    """A body sent without Content-Length (Transfer-Encoding: chunked) answers 411.

    Django reads a request's body by its Content-Length and takes a missing one for an empty body:
    a chunked dry run of a bulk replay then read as `{}`, "replay everything for real", and a
    chunked reset ran without its reason. Refused, nothing is read, and the client learns why.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.META.get("HTTP_TRANSFER_ENCODING") and not request.META.get("CONTENT_LENGTH"):
            message = _("A request body must be sent with a Content-Length header; a body sent with "
                        "Transfer-Encoding alone is not read.")
            if request.path.startswith("/api/"):
                return JsonResponse(error_body("length_required", message), status=411)
            return HttpResponse(message, status=411, content_type="text/plain; charset=utf-8")
        return self.get_response(request)
