"""Feature flags, named as the operators name them, all on unless the environment turns them off.

    RETRYOPS_FLAGS_OFF=task-retry-queue,audit-streaming

One variable listing what is off, rather than one variable per flag: a typo in a flag's name is
then an unknown name that start-up refuses, not a variable nobody reads. The settings hold the
parsed set (`RETRYOPS_FLAGS_OFF`), so tests switch a flag with override_settings.
"""

from collections.abc import Iterable

from django.core.exceptions import ImproperlyConfigured

TASK_RETRY_QUEUE = "task-retry-queue"
DLQ_INSPECTOR = "dlq-inspector"
AUDIT_STREAMING = "audit-streaming"

FLAGS = {
    TASK_RETRY_QUEUE: "failed attempts are retried by their policy; off, a failure goes straight to dead "
                      "(and so to the dead-letter queue)",
    DLQ_INSPECTOR: "the dead-letter queue's pages, endpoints and commands",
    AUDIT_STREAMING: "audit entries and task events are also published to the Redis streams "
                     "retryops:audit and retryops:events",
}

ENV_VAR = "RETRYOPS_FLAGS_OFF"


def _refuse_unknown(names: Iterable[str], where: str) -> None:
    unknown = sorted(set(names) - FLAGS.keys())
    if unknown:
        raise ImproperlyConfigured(
            f"{where}: unknown feature flag{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"the flags are {', '.join(FLAGS)}")


def parse_off(raw: str | None) -> frozenset[str]:
    """The flags a RETRYOPS_FLAGS_OFF value turns off: comma-separated names, blanks ignored."""
    if raw is None:
        return frozenset()
    names = [name.strip() for name in raw.split(",") if name.strip()]
    _refuse_unknown(names, f"{ENV_VAR}={raw!r}")
    return frozenset(names)


def enabled(name: str) -> bool:
    """Whether the flag `name` is on. An unknown name raises (a typo would otherwise read as off)."""
    from django.conf import settings

    _refuse_unknown([name], "flags.enabled()")
    off = getattr(settings, ENV_VAR, frozenset())
    _refuse_unknown(off, f"settings.{ENV_VAR}")
    return name not in off
