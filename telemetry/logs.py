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

import structlog

from retryops import masking

FORMATS = ("json", "text")


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
            **{name: {"handlers": [], "level": level, "propagate": True} for name in ("django", "django.server")},
            # gunicorn's (deploy/gunicorn.conf.py hands it this config): its error log and the
            # access lines of telemetry.gunicorn_logs reach the root's handler too, instead of
            # the plain-text handlers gunicorn gives them. No level: gunicorn's --log-level sets it.
            **{name: {"handlers": [], "propagate": True} for name in ("gunicorn.error", "gunicorn.access")},
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
