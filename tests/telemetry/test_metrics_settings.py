"""/metrics' settings stop start-up when they would leave it open or guessable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def settings_error(**env) -> str:
    result = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT,
                            env={**os.environ, "DJANGO_SETTINGS_MODULE": "retryops.settings", **env},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    return result.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_an_open_endpoint_without_a_token_stops_start_up():
    assert "RETRYOPS_METRICS_ALLOW is empty (any address) and RETRYOPS_METRICS_TOKEN is unset" in settings_error(
        RETRYOPS_METRICS_ALLOW="")


@pytest.mark.slow
def test_a_short_token_stops_start_up_naming_the_variable():
    assert "RETRYOPS_METRICS_TOKEN must be at least 16 printable ASCII characters" in settings_error(
        RETRYOPS_METRICS_TOKEN="short")
