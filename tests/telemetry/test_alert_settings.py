"""The alerts' settings: a bad threshold stops start-up, naming the variable."""

import subprocess
import sys

import pytest
from django.conf import settings


def start_up(**environment) -> subprocess.CompletedProcess:
    env = {"DJANGO_SETTINGS_MODULE": "retryops.settings", "PATH": "/usr/bin:/bin",
           "DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/x", "REDIS_URL": "redis://127.0.0.1:6379/0",
           "SECRET_KEY": "x", **environment}
    return subprocess.run([sys.executable, "-c", "import django; django.setup()"], env=env, cwd=settings.BASE_DIR,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name, raw, said", [
    ("RETRYOPS_ALERT_FAILURE_RATE", "15%", "RETRYOPS_ALERT_FAILURE_RATE='15%' is not a number"),
    ("RETRYOPS_ALERT_FAILURE_RATE", "NaN", "RETRYOPS_ALERT_FAILURE_RATE='NaN' is not a finite number"),
    ("RETRYOPS_ALERT_FAILURE_RATE", "15", "RETRYOPS_ALERT_FAILURE_RATE=15.0 must be at most 1"),
    ("RETRYOPS_ALERT_CLEAR_RATIO", "1.2", "RETRYOPS_ALERT_CLEAR_RATIO=1.2 must be at most 1"),
    ("RETRYOPS_ALERT_DLQ_LENGTH", "-1", "RETRYOPS_ALERT_DLQ_LENGTH=-1 must be at least 0"),
    ("RETRYOPS_ALERT_DLQ_LENGTH", "1" * 20, f"RETRYOPS_ALERT_DLQ_LENGTH={'1' * 20} must be at most 1000000000"),
    ("RETRYOPS_ALERT_FAILURE_MIN_RETRIES", "twenty", "RETRYOPS_ALERT_FAILURE_MIN_RETRIES='twenty' is not an integer"),
    ("RETRYOPS_ALERT_FAILURE_WINDOW_SECONDS", "0", "RETRYOPS_ALERT_FAILURE_WINDOW_SECONDS=0 must be at least 1"),
    ("RETRYOPS_ALERT_METRICS_WATERMARK_SECONDS", "0", "RETRYOPS_ALERT_METRICS_WATERMARK_SECONDS=0 must be at least 1"),
    ("RETRYOPS_ALERT_METRICS_WATERMARK_SECONDS", "15m",
     "RETRYOPS_ALERT_METRICS_WATERMARK_SECONDS='15m' is not an integer"),
])
def test_a_bad_alert_setting_stops_start_up_naming_the_variable(name, raw, said):
    run = start_up(**{name: raw})

    assert run.returncode != 0
    assert f"ImproperlyConfigured: {said}" in run.stderr


def test_good_alert_settings_start():
    run = start_up(RETRYOPS_ALERT_FAILURE_RATE="0.2", RETRYOPS_ALERT_DLQ_LENGTH="500")

    assert run.returncode == 0, run.stderr
