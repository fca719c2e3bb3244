"""gunicorn's gthread worker, answering the requests gunicorn refuses itself (a request line or
header fields past its limits) in the API's error shape, as JSON, instead of gunicorn's HTML page:
a client of the API reads every refusal the same way (retryops.api.errors).

gunicorn refuses these before the request reaches Django, and before it knows the request's path:
the answer is the same JSON for every path (a browser shows it as text; the console has no page of
its own for them). deploy/gunicorn.conf.py names this worker and sets the limits below, which the
API's schema states (retryops.api.schema)."""

import json

from gunicorn import util
from gunicorn.http.errors import LimitRequestHeaders, LimitRequestLine
from gunicorn.workers.gthread import ThreadWorker

from audit.context import new_request_id
from audit.middleware import REQUEST_ID_HEADER
from retryops.api.errors import error_body

# gunicorn's defaults, named here so that the schema states the values the server runs with.
REQUEST_LINE_BYTES = 4094
HEADER_FIELDS = 100
HEADER_FIELD_BYTES = 8190


def _refusal(exc: Exception, cfg) -> tuple[int, str, dict] | None:
    """The status, reason and body of a request gunicorn refused by a limit; None for any other error."""
    if isinstance(exc, LimitRequestLine):
        limit = cfg.limit_request_line
        return 414, "URI Too Long", error_body(
            "request_line_too_long", f"the request line (method, path and query string) is longer than the "
            f"{limit} bytes this server reads: send long filters in fewer or shorter query parameters",
            {"limit_bytes": limit})
    if isinstance(exc, LimitRequestHeaders):
        fields, size = cfg.limit_request_fields, cfg.limit_request_field_size
        return 431, "Request Header Fields Too Large", error_body(
            "header_fields_too_large", f"the request has more than {fields} header fields, or one longer than "
            f"{size} bytes (its name, value and separator)", {"limit_fields": fields, "limit_field_bytes": size})
    return None


class Worker(ThreadWorker):
    """gthread, with its limit refusals (414, 431) in the API's JSON error shape."""

    def handle_error(self, req, client, addr, exc):
        refusal = _refusal(exc, self.cfg)
        if refusal is None:
            return super().handle_error(req, client, addr, exc)
        status, reason, body = refusal
        # The line gunicorn writes for these (at warning: a client's mistake, not the server's).
        self.log.warning("Invalid request from ip=%s: %s", (addr or ("",))[0], exc)
        content = json.dumps(body).encode()
        head = (f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(content)}\r\n{REQUEST_ID_HEADER}: {new_request_id()}\r\n\r\n")
        try:
            util.write_nonblock(client, head.encode("latin-1") + content)
        except Exception:
            self.log.debug("Failed to send error message.")
