"""Decide whether a failure is worth retrying, from the error's class and message.

Patterns are regular expressions matched, case-insensitively, against "ClassName: message".
Non-retryable patterns are checked first: an error that says "banned" stays banned even when
it also mentions a timeout. An error no pattern recognises is retryable, because a transient
failure retried once costs less than a good resource lost to quarantine.
"""

import logging
from dataclasses import dataclass
from functools import lru_cache

import regex

from resources.choices import FailureCategory

log = logging.getLogger(__name__)

DEFAULT_RETRYABLE_PATTERNS = (
    r"time(d)?[ _-]?out",
    r"connection (reset|refused|aborted|closed)",
    r"temporar(y|ily)",
    r"\b(HTTP|status)[ :]*(429|5\d\d)\b",
    r"too many requests",
    r"service unavailable",
    r"bad gateway",
    r"rate[ _-]?limit",
)
DEFAULT_NON_RETRYABLE_PATTERNS = (
    r"\bbanned\b",
    r"\bsuspended\b",
    r"(invalid|revoked|expired) (credentials?|token|api[ _-]?key|password)",
    r"\b(HTTP|status)[ :]*(401|403)\b",
    r"unauthori[sz]ed",
    r"forbidden",
)


@dataclass(frozen=True)
class Classification:
    """The verdict on one error: its category, the pattern that decided, and the text it was read from."""

    category: str
    pattern: str | None
    text: str

    @property
    def retryable(self) -> bool:
        return self.category == FailureCategory.RETRYABLE


def error_text(error: BaseException | str) -> str:
    """The text classification reads: "ClassName: message" for exceptions, the string itself otherwise."""
    if isinstance(error, BaseException):
        message = str(error)
        return f"{type(error).__name__}: {message}" if message else type(error).__name__
    return str(error)


# Patterns read at most this many characters of an error: what says whether a failure is
# transient is in its first lines, and a bounded text bounds a pattern's work on it.
MATCHED_TEXT_LENGTH = 4000
# How long one pattern may search one error; past it, the pattern counts as not matching.
MATCH_TIMEOUT_SECONDS = 0.1
# A near miss as long as the longest text a pattern reads: a pattern that cannot finish on it
# within MATCH_TIMEOUT_SECONDS ("(a+)+$", "(a|aa)+") is refused where it is defined.
PROBE_TEXT = "a" * (MATCHED_TEXT_LENGTH - 1) + "!"


def matches(compiled: regex.Pattern, text: str) -> bool:
    """Whether `compiled` is found in the start of `text` (MATCHED_TEXT_LENGTH characters). A
    search past MATCH_TIMEOUT_SECONDS is logged and counts as no match: a pattern saved before the
    probe existed, or slow on this one text, must not hang the worker writing the outcome."""
    try:
        return compiled.search(text[:MATCHED_TEXT_LENGTH], timeout=MATCH_TIMEOUT_SECONDS) is not None
    except TimeoutError:
        log.warning("error pattern %r took longer than %ss on an error of %d characters; counted as not matching",
                    compiled.pattern, MATCH_TIMEOUT_SECONDS, len(text))
        return False


def times_out_on_probe(compiled: regex.Pattern) -> bool:
    """Whether `compiled` needs more than MATCH_TIMEOUT_SECONDS on PROBE_TEXT: at run time it would
    count as not matching on such an error."""
    try:
        compiled.search(PROBE_TEXT, timeout=MATCH_TIMEOUT_SECONDS)
    except TimeoutError:
        return True
    return False


def compile_pattern(pattern: str) -> regex.Pattern:
    """One error pattern as every match compiles it: case-insensitive, with the `regex` module,
    whose searches take a timeout. A bad one raises regex.error."""
    return regex.compile(pattern, regex.IGNORECASE)


@lru_cache(maxsize=256)
def compile_patterns(patterns: tuple[str, ...]) -> tuple[regex.Pattern, ...]:
    """Compile patterns once; a bad one raises ValueError naming it."""
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(compile_pattern(pattern))
        except regex.error as exc:
            raise ValueError(f"invalid error pattern {pattern!r}: {exc}") from None
    return tuple(compiled)


def classify(
    error: BaseException | str,
    *,
    retryable_patterns: tuple[str, ...] | list[str] = DEFAULT_RETRYABLE_PATTERNS,
    non_retryable_patterns: tuple[str, ...] | list[str] = DEFAULT_NON_RETRYABLE_PATTERNS,
) -> Classification:
    """Classify an exception or error text as retryable or non_retryable."""
    text = error_text(error)
    for compiled in compile_patterns(tuple(non_retryable_patterns)):
        if matches(compiled, text):
            return Classification(FailureCategory.NON_RETRYABLE, compiled.pattern, text)
    for compiled in compile_patterns(tuple(retryable_patterns)):
        if matches(compiled, text):
            return Classification(FailureCategory.RETRYABLE, compiled.pattern, text)
    return Classification(FailureCategory.RETRYABLE, None, text)


@lru_cache(maxsize=1)
def _any_default_non_retryable() -> regex.Pattern:
    # The default non-retryable patterns as one alternation: none has a backreference or an inline
    # flag, so it is found exactly where one of them is.
    return compile_pattern("|".join(f"(?:{pattern})" for pattern in DEFAULT_NON_RETRYABLE_PATTERNS))


def default_category(text: str) -> str:
    """classify(text).category with the default patterns, in one search instead of one per pattern:
    what decides is only whether a non-retryable one matches (the policy what-if judges every
    distinct error text of a million attempts, tens of thousands when the texts carry ids)."""
    try:
        found = _any_default_non_retryable().search(text[:MATCHED_TEXT_LENGTH], timeout=MATCH_TIMEOUT_SECONDS)
    except TimeoutError:
        return classify(text).category  # one pattern at a time, each within its own timeout
    return FailureCategory.NON_RETRYABLE if found is not None else FailureCategory.RETRYABLE
