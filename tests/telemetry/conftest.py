import pytest


@pytest.fixture
def figure_slas(settings):
    """The SLAs the hand calculations of tests/telemetry/history.py assume."""
    settings.RETRYOPS_RETRY_SLA_GRACE_SECONDS = 30
    settings.RETRYOPS_SLA_NOTICE_SECONDS = 300
    settings.RETRYOPS_SLA_COMPENSATE_SECONDS = 3600
