"""Refuses a query string that PostgreSQL could not take, before any view reads it."""

from django.http import HttpResponseBadRequest
from django.utils.translation import gettext as _


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
