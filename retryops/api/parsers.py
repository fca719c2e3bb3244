"""The API's JSON parser: DRF's, strict (no NaN, no Infinity), and answering a body nested past
Python's recursion limit as bad input rather than a server error (json.loads raises
RecursionError, which DRF does not catch)."""

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply") from None
