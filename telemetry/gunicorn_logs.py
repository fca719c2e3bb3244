"""gunicorn's own log lines (its error log, and an access line a request) through the app's
formatter (telemetry/logs.py), so the web tier writes one format: deploy/gunicorn.conf.py sets
`logconfig_dict` to the app's LOGGING and `logger_class` to AccessLogger."""

from gunicorn.glogging import Logger

from audit.middleware import REQUEST_ID_HEADER
from telemetry.logs import query_fields

_REQUEST_ID = REQUEST_ID_HEADER.lower()


def access_fields(*, status, environ: dict, response_headers, sent, request_time) -> dict:
    """The keys of a request's access line. `path` is without the query string; its parameters
    are under `query`, where the formatter masks a secret one by its name (retryops.masking), as
    in every other line: the API takes only filters there, but a client may put ?api_key=... in
    a URL. `request_id` is the one the app answered with (audit.middleware's X-Request-ID), None
    for what was answered before it (the probes, static files)."""
    headers = {name.lower(): value for name, value in response_headers}
    return {
        "method": environ.get("REQUEST_METHOD"),
        "path": environ.get("PATH_INFO"),
        "query": query_fields(environ.get("QUERY_STRING", "")),
        "status": int(str(status).split(None, 1)[0]),
        "duration_ms": round(request_time.total_seconds() * 1000, 1),
        "bytes": sent,
        "remote_addr": environ.get("REMOTE_ADDR"),
        "forwarded_for": environ.get("HTTP_X_FORWARDED_FOR"),
        "user_agent": environ.get("HTTP_USER_AGENT"),
        "request_id": headers.get(_REQUEST_ID),
    }


class AccessLogger(Logger):
    """gunicorn's Logger with the access line as keys of a log record (`extra`), which the app's
    formatter renders as JSON or as a plain line; gunicorn's own line is one string of
    Apache's combined format, with no request id."""

    def access(self, resp, req, environ, request_time):
        if not self.access_log_enabled:
            return
        try:
            fields = access_fields(status=resp.status, environ=environ, response_headers=resp.headers,
                                   sent=getattr(resp, "sent", None), request_time=request_time)
            self.access_log.info("%s %s %s", fields["method"], fields["path"], fields["status"], extra=fields)
        except Exception:
            # A line that cannot be built must not fail the request it describes.
            self.exception("could not write the access line of %s %s", environ.get("REQUEST_METHOD"),
                           environ.get("PATH_INFO"))
