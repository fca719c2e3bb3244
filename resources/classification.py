"""Decide whether a failure is worth retrying, from the error's class and message.

Patterns are regular expressions matched, case-insensitively, against "ClassName: message".
Non-retryable patterns are checked first: an error that says "banned" stays banned even when
it also mentions a timeout. An error no pattern recognises is retryable, because a transient
failure retried once costs less than a good resource lost to quarantine.
"""

import re
from dataclasses import dataclass
from functools import lru_cache
from re import _constants as sre_constants
from re import _parser as sre_parser

from resources.choices import FailureCategory

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


_REPEATS = (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT)


def _repeats_within(items) -> bool:
    """Whether the parsed pattern `items` repeats something a varying number of times, in a way the
    engine may backtrack into (atomic groups and possessive repeats never give back what they took)."""
    for op, arg in items:
        if op in (sre_constants.ATOMIC_GROUP, sre_constants.POSSESSIVE_REPEAT):
            continue
        if op in _REPEATS and arg[0] != arg[1]:
            return True
        for sub in _subpatterns(op, arg):
            if _repeats_within(sub):
                return True
    return False


def _subpatterns(op, arg):
    if op in _REPEATS:
        return [arg[2]]
    if op is sre_constants.SUBPATTERN:
        return [arg[3]]
    if op is sre_constants.BRANCH:
        return arg[1]
    if op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
        return [arg[1]]
    if op is sre_constants.ATOMIC_GROUP:
        return [arg]
    if op is sre_constants.GROUPREF_EXISTS:
        return [branch for branch in arg[1:] if branch is not None]
    return []


# Any character: a first-character set that overlaps every other.
_ANY = None


def _first_characters(items):
    """The characters a match of the parsed `items` can start with (lower-cased), or _ANY when that
    is not a small known set (a class, a category, something that may match nothing)."""
    if not items:
        return _ANY
    op, arg = items[0]
    if op is sre_constants.LITERAL:
        return {chr(arg).lower()}
    if op is sre_constants.IN and all(kind is sre_constants.LITERAL for kind, _value in arg):
        return {chr(value).lower() for _kind, value in arg}
    if op is sre_constants.SUBPATTERN:
        return _first_characters(arg[3])
    if op in _REPEATS and arg[0] >= 1:
        return _first_characters(arg[2])
    if op is sre_constants.BRANCH:
        sets = [_first_characters(branch) for branch in arg[1]]
        return _ANY if any(chars is _ANY for chars in sets) else set().union(*sets)
    return _ANY


def _overlapping_branches(items) -> bool:
    """Whether `items` holds an alternation two of whose branches can start alike ("(a|aa)"): repeated,
    the engine tries every way of splitting the text between them."""
    for op, arg in items:
        if op is sre_constants.BRANCH:
            seen = set()
            for branch in arg[1]:
                chars = _first_characters(branch)
                if chars is _ANY or chars & seen:
                    return True
                seen |= chars
        if op not in _REPEATS and any(_overlapping_branches(sub) for sub in _subpatterns(op, arg)):
            return True
    return False


def _nested_repeat(items) -> bool:
    for op, arg in items:
        # A group repeated a varying number of times (or many times) around something that itself
        # repeats ("(a+)+", "(\w*\s?)*", "(a+){2,100}", "(.*a){12}"), or around an alternation whose
        # branches can start alike ("(a|a)+"): Python's backtracking engine takes exponential (or
        # high-polynomial) time on a near miss, and a worker classifying an error would hang on it.
        if op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT) and arg[1] > 1:
            varying = arg[0] != arg[1]
            if (varying or arg[1] >= 4) and _repeats_within(arg[2]):
                return True
            if varying and _overlapping_branches(arg[2]):
                return True
        if any(_nested_repeat(sub) for sub in _subpatterns(op, arg)):
            return True
    return False


def backtracking_risk(pattern: str) -> bool:
    """Whether `pattern` has the shape of catastrophic backtracking: a part repeated a varying number
    of times that itself repeats or offers alternatives starting alike. A heuristic on the parsed
    pattern (it refuses some harmless shapes, such as "(x+y)+", and cannot prove a pattern safe); a
    syntax error is not its business: compiling reports it."""
    try:
        return _nested_repeat(sre_parser.parse(pattern, re.IGNORECASE))
    except re.error:
        return False


@lru_cache(maxsize=256)
def compile_patterns(patterns: tuple[str, ...]) -> tuple[re.Pattern, ...]:
    """Compile patterns once; a bad one raises ValueError naming it."""
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern, re.IGNORECASE))
        except re.error as exc:
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
    for regex in compile_patterns(tuple(non_retryable_patterns)):
        if regex.search(text):
            return Classification(FailureCategory.NON_RETRYABLE, regex.pattern, text)
    for regex in compile_patterns(tuple(retryable_patterns)):
        if regex.search(text):
            return Classification(FailureCategory.RETRYABLE, regex.pattern, text)
    return Classification(FailureCategory.RETRYABLE, None, text)
