"""What the telemetry tests build on: retries that ended, open dead letters, a clock to move, the SLAs of the figures."""

import types
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.choices import TaskEventKind
from tests.factories import DeadLetterFactory, ResourcePoolFactory, TaskEventFactory
from tests.retryops.conftest import console_groups  # noqa: F401  (the console's groups, for the admin tests)


def retries(*, succeeded: int = 0, failed: int = 0, dead: int = 0, ago: timedelta = timedelta(0)) -> None:
    """Retries (second attempts) that ended `ago`: succeeded, failed with another retry scheduled,
    or failed for the last time (the task dead)."""
    pool = ResourcePoolFactory(name="accounts")
    at = timezone.now() - ago
    for kind, n in ((TaskEventKind.RETRY_SUCCEEDED, succeeded), (TaskEventKind.RETRY_SCHEDULED, failed),
                    (TaskEventKind.DEAD, dead)):
        for _ in range(n):
            TaskEventFactory(kind=kind, attempt_number=2, task__pool=pool, created_at=at)


def open_dead_letters(n: int) -> list:
    pool = ResourcePoolFactory(name="accounts")
    return [DeadLetterFactory(task__pool=pool) for _ in range(n)]


def settle_dead_letters(n: int) -> None:
    """Leave `n` dead letters open: an operator discards the others (oldest first)."""
    from compensation.services.dead_letters import discard_dead_letter
    from compensation.models import DeadLetter

    letters = DeadLetter.objects.filter(state="open").order_by("id")
    for letter in letters[: max(0, letters.count() - n)]:
        discard_dead_letter(dead_letter=letter, actor="ops:carol")


@pytest.fixture
def heartbeats(monkeypatch):
    """The health checks' heartbeats, saying who is silent: `heartbeats.silent = [...]`."""
    said = types.SimpleNamespace(silent=[])
    monkeypatch.setattr("telemetry.health.heartbeats.silent_components", lambda *, now: list(said.silent))
    return said


@pytest.fixture
def levels(settings):
    """Alert settings with round numbers: the DLQ alert fires above 10 open dead letters and
    resolves at 8 or fewer, once they have stayed there 60 s."""
    settings.RETRYOPS_ALERT_DLQ_LENGTH = 10
    settings.RETRYOPS_ALERT_CLEAR_RATIO = 0.8
    settings.RETRYOPS_ALERT_CLEAR_SECONDS = 60
    settings.RETRYOPS_ALERT_FAILURE_RATE = 0.15
    settings.RETRYOPS_ALERT_FAILURE_MIN_RETRIES = 20
    settings.RETRYOPS_ALERT_FAILURE_WINDOW_SECONDS = 600
    return settings


@pytest.fixture
def figure_slas(settings):
    """The SLAs the hand calculations of tests/telemetry/history.py assume."""
    settings.RETRYOPS_RETRY_SLA_GRACE_SECONDS = 30
    settings.RETRYOPS_SLA_NOTICE_SECONDS = 300
    settings.RETRYOPS_SLA_COMPENSATE_SECONDS = 3600
