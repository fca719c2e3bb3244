"""Feature flags from the environment: on by default, off by name, unknown names refused."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from retryops import flags


def test_every_flag_is_on_when_the_environment_turns_none_off():
    assert flags.parse_off(None) == frozenset()
    assert all(flags.enabled(name) for name in ("task-retry-queue", "dlq-inspector", "audit-streaming"))


def test_the_environment_turns_flags_off_by_their_operator_names():
    assert flags.parse_off(" task-retry-queue, audit-streaming ,") == {"task-retry-queue", "audit-streaming"}


def test_an_unknown_flag_in_the_environment_is_refused_with_its_name():
    with pytest.raises(ImproperlyConfigured) as refused:
        flags.parse_off("task-retry-queue,task_retry_queue,dlq")
    message = str(refused.value)
    assert "RETRYOPS_FLAGS_OFF=" in message
    assert "unknown feature flags 'dlq', 'task_retry_queue'" in message
    assert "task-retry-queue, dlq-inspector, audit-streaming" in message


def test_a_flag_turned_off_in_the_settings_reads_off(settings):
    settings.RETRYOPS_FLAGS_OFF = frozenset({"dlq-inspector"})
    assert not flags.enabled("dlq-inspector")
    assert flags.enabled("task-retry-queue")


def test_asking_for_an_unknown_flag_raises_instead_of_reading_off():
    with pytest.raises(ImproperlyConfigured, match="unknown feature flag 'audit_streaming'"):
        flags.enabled("audit_streaming")


def test_an_unknown_flag_put_in_the_settings_is_refused(settings):
    settings.RETRYOPS_FLAGS_OFF = frozenset({"retry-queue"})
    with pytest.raises(ImproperlyConfigured, match="settings.RETRYOPS_FLAGS_OFF: unknown feature flag 'retry-queue'"):
        flags.enabled("task-retry-queue")


def test_start_up_stops_on_an_unknown_flag(monkeypatch):
    """The settings module itself refuses it, so no process starts with a typo."""
    import subprocess
    import sys

    from django.conf import settings

    env = {"RETRYOPS_FLAGS_OFF": "task-retry-queu", "DJANGO_SETTINGS_MODULE": "retryops.settings",
           "PATH": "/usr/bin:/bin", "DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/x",
           "REDIS_URL": "redis://127.0.0.1:6379/0", "SECRET_KEY": "x"}
    run = subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env, cwd=settings.BASE_DIR,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "ImproperlyConfigured" in run.stderr and "unknown feature flag 'task-retry-queu'" in run.stderr
