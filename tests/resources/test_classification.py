import pytest

from resources.classification import classify, default_category


@pytest.mark.parametrize(
    "error",
    [
        TimeoutError("read timed out"),
        ConnectionResetError("Connection reset by peer"),
        "HTTP 429 Too Many Requests",
        "upstream returned status 503",
        "HTTP 502 Bad Gateway",
    ],
)
def test_transient_errors_are_retryable(error):
    assert classify(error).category == "retryable"


@pytest.mark.parametrize(
    "error",
    [
        "account banned",
        "User suspended by risk control",
        "invalid credentials",
        "revoked token",
        "HTTP 401 Unauthorized",
        "status 403",
    ],
)
def test_permanent_errors_are_not_retryable(error):
    assert classify(error).category == "non_retryable"


def test_an_unknown_error_is_retryable_and_says_no_pattern_matched():
    verdict = classify(ValueError("something odd"))
    assert (verdict.category, verdict.pattern, verdict.text) == ("retryable", None, "ValueError: something odd")


def test_non_retryable_patterns_win_when_both_match():
    assert classify("timeout while checking: account banned").category == "non_retryable"


def test_the_exception_class_name_can_be_matched():
    verdict = classify(PermissionError("nope"), non_retryable_patterns=[r"^PermissionError"])
    assert verdict.category == "non_retryable" and verdict.pattern == "^PermissionError"


def test_patterns_are_case_insensitive():
    assert classify("ACCOUNT BANNED").category == "non_retryable"


def test_a_bad_pattern_is_named_in_the_error():
    with pytest.raises(ValueError, match=r"invalid error pattern '\(unclosed'"):
        classify("x", retryable_patterns=["(unclosed"])


@pytest.mark.parametrize("text", [
    "TimeoutError: read timed out", "HTTP 429 Too Many Requests", "account banned", "User suspended by risk control",
    "revoked token", "HTTP 401 Unauthorized", "status 403", "Forbidden: no", "unbanned user", "HTTP 4031",
    "ConnectionError: proxy refused", "HTTPError: HTTP 503 for request 9f86d081884c7d65", "", "x" * 5000 + " banned",
])
def test_the_default_category_in_one_search_is_what_classify_finds_pattern_by_pattern(text):
    assert default_category(text) == classify(text).category
