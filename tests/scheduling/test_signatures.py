"""resources.signatures: what groups failures (work orders, the DLQ by signature)."""

import pytest

from resources.signatures import error_signature


@pytest.mark.parametrize("message, signature", [
    ("read timed out after 30s", "TimeoutError: read timed out after <n>s"),
    ("user 'alice@x' not found (id 812)", "TimeoutError: user <str> not found (id <n>)"),
    ("token 3f2a9c1e-5b7d-4e8f-9a0b-1c2d3e4f5a6b revoked", "TimeoutError: token <id> revoked"),
    ("mail bob@example.com bounced", "TimeoutError: mail <email> bounced"),
])
def test_error_signatures_strip_what_varies(message, signature):
    assert error_signature("TimeoutError", message) == signature


def test_identical_failures_share_a_signature():
    assert error_signature("E", "order 17 failed at 10:42") == error_signature("E", "order 99 failed at 11:03")
