"""Log lines as JSON, one object a line (or as plain text for development, LOG_FORMAT=text), from
the web app, the workers and the commands alike.

Django's LOGGING hands every record of the standard library's loggers (`logging.getLogger(...)`,
Django's, RQ's) to structlog's ProcessorFormatter, which adds what the process has bound for the
code running now: `request_id` (audit.context.acting_as: a web request's X-Request-ID, a command
or job run's id; an attempt's is the one of the request that enqueued it, see
scheduling.queueing), `task_id`, `attempt` and `resource_key` (scheduling.runner, around an
attempt). Search the logs of every process for a task_id, or a request_id, to follow one task.
`extra={...}` of a call becomes keys of its line.
"""

from contextvars import ContextVar
from urllib.parse import parse_qsl

import structlog

from retryops import masking

FORMATS = ("json", "text")
# The X-Request-ID of the response this thread answered last (telemetry.middleware.AnsweredRequestId),
# for runserver's request line, which Django writes once the response is sent, outside every middleware.
_answered_request_id: ContextVar[str | None] = ContextVar("answered_request_id", default=None)


def remember_answered_request_id(request_id: str | None) -> None:
    _answered_request_id.set(request_id)


class RunserverRequestLine:
    """A logging filter for runserver's request lines (django.server): adds the request id the
    response carried, taken once so a later line on the thread never shows it, and drops the
    `request` Django puts there, the connection's socket, which would print as its repr."""

    def filter(self, record):
        # Each dictConfig of the same LOGGING adds the filter again (logging keeps a logger's
        # filters), so a record may pass it more than once: only the first pass takes the id.
        if "request_id" not in record.__dict__:
            record.request_id = _answered_request_id.get()
            _answered_request_id.set(None)
            record.__dict__.pop("request", None)
        return True


def query_fields(query_string: str) -> dict:
    """A URL's query string as a log line's `query`: each parameter by its name, where the formatter
    masks a secret one by its name (retryops.masking), as in every other line; a repeated one
    (?state=failed&state=cancelled) keeps all its values."""
    values = {}
    for key, value in parse_qsl(query_string or "", keep_blank_values=True):
        values.setdefault(key, []).append(value)
    return {key: found[0] if len(found) == 1 else found for key, found in values.items()}


class DjangoRequestLine:
    """A logging filter for Django's line of each 4xx/5xx answer (django.request): the `request`
    Django puts there prints as its repr, the whole URL with its query string, so a
    ?token=... would be written as it is. It becomes the access line's `method`, `path` and
    `query`, whose secret parameters the formatter masks."""

    def filter(self, record):
        from django.http import HttpRequest  # (not at the top: settings.py imports this module)

        request = record.__dict__.get("request")
        if isinstance(request, HttpRequest):  # (a second pass, see RunserverRequestLine, finds it gone)
            del record.request
            record.method, record.path = request.method, request.path
            record.query = query_fields(request.META.get("QUERY_STRING", ""))
        return True


# gunicorn's line for a request its worker could not answer (gunicorn.workers.base.handle_error).
_GUNICORN_ERROR = "Error handling request %s %s"


class GunicornErrorLine:
    """A logging filter for gunicorn's error log: its "Error handling request GET <uri>" line
    carries the URI with its query string; the path stays in the line and the parameters go
    under `query`, masked as in the access line."""

    def filter(self, record):
        # Once: the filter may sit on both the logger and a handler, and a second pass would find the
        # path alone and replace the parameters with none.
        if (record.msg == _GUNICORN_ERROR and isinstance(record.args, tuple) and len(record.args) == 2
                and not hasattr(record, "query")):
            method, uri = record.args
            path, _, query = str(uri).partition("?")
            record.args = (method, path)
            record.query = query_fields(query)
        return True


def _shared() -> list:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        masking.mask_log_secrets,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


def logging_config(*, log_format: str, level: str) -> dict:
    """Django's LOGGING: every record through one console handler (standard error), in `log_format`."""
    if log_format == "json":
        render = [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        render = [structlog.dev.ConsoleRenderer(colors=False)]
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"runserver_request_line": {"()": RunserverRequestLine},
                    "django_request_line": {"()": DjangoRequestLine},
                    "gunicorn_error_line": {"()": GunicornErrorLine}},
        "formatters": {
            "structured": {
                "()": structlog.stdlib.ProcessorFormatter,
                "foreign_pre_chain": _shared(),
                "processors": [structlog.stdlib.ProcessorFormatter.remove_processors_meta, *render],
            },
        },
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "structured"}},
        "root": {"handlers": ["console"], "level": level},
        # Django's own handlers (its debug-only console, runserver's request lines) write plain
        # text: without handlers of their own, its records reach the root's.
        "loggers": {
            "django": {"handlers": [], "level": level, "propagate": True},
            "django.server": {"handlers": [], "level": level, "propagate": True, "filters": ["runserver_request_line"]},
            "django.request": {"handlers": [], "level": level, "propagate": True, "filters": ["django_request_line"]},
            # gunicorn's (deploy/gunicorn.conf.py hands it this config): its error log and the
            # access lines of telemetry.gunicorn_logs reach the root's handler too, instead of
            # the plain-text handlers gunicorn gives them. No level: gunicorn's --log-level sets it.
            "gunicorn.error": {"handlers": [], "propagate": True, "filters": ["gunicorn_error_line"]},
            "gunicorn.access": {"handlers": [], "propagate": True},
        },
    }


def configure_structlog() -> None:
    """structlog's own loggers (`structlog.get_logger()`), should code use them, end in the same handler."""
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, structlog.stdlib.add_log_level,
                    structlog.stdlib.add_logger_name, masking.mask_log_secrets,
                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
