"""Programs the tests start that a developer's machine may lack (Debian's chromium, prometheus).

Without one, its tests skip saying why on a developer's machine; in CI (`RETRYOPS_E2E=required`,
which `.ci/run` exports, or `CI=true`) they fail instead, so a CI run that never used it cannot pass."""

import os

import pytest


def required() -> bool:
    """Whether a missing program must fail the run rather than skip it (CI)."""
    return (os.environ.get("RETRYOPS_E2E", "").lower() == "required"
            or os.environ.get("CI", "").lower() in ("1", "true", "yes"))


def missing(reason: str, *, install: str):
    """Skip the test (a developer's machine) or fail it (CI), naming what is missing and how to get it."""
    if required():
        pytest.fail(f"{reason}; these tests are required here (RETRYOPS_E2E=required or CI=true)", pytrace=False)
    pytest.skip(f"{reason}; {install} or let .ci/run do it")
