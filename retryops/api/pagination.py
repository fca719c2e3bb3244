"""Cursor pagination for the large lists: a page costs the same at the millionth row as at the
first (a keyset on the ordering, never an OFFSET), and rows added meanwhile neither repeat nor
vanish between pages."""

from rest_framework import exceptions
from rest_framework.pagination import CursorPagination

from retryops.inputs import MAX_ID


class CursorPage(CursorPagination):
    """Newest first by id; `page_size` from 1 to `max_page_size` (`page_size` unless asked)."""

    ordering = "-id"
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def page_size_schema(self) -> dict:
        return {"type": "integer", "minimum": 1, "maximum": self.max_page_size}

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = self.page_size_schema()
        return parameters

    def get_page_size(self, request):
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not raw.isdigit() or not 1 <= int(raw) <= self.max_page_size:
            raise exceptions.ValidationError({self.page_size_query_param: [
                f"must be a whole number from 1 to {self.max_page_size}"]})
        return int(raw)

    def decode_cursor(self, request):
        try:
            cursor = super().decode_cursor(request)
        except exceptions.NotFound:
            # DRF answers a cursor it cannot read with 404, as if the list were missing.
            cursor = False
        # The position goes into `id < position`: a cursor made by hand must not reach PostgreSQL
        # with text or a number past bigint.
        position = getattr(cursor, "position", None)
        if cursor is False or (position is not None and not (position.isdigit() and int(position) <= MAX_ID)):
            raise exceptions.ValidationError({self.cursor_query_param: [
                "not a cursor this API gave out: follow the next and previous links"]})
        return cursor
