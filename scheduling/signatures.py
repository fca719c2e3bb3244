"""Error signatures: the error class and its message with the varying parts stripped, so that
identical failures group together in lists, work orders and statistics."""

import re

_RULES = (
    (re.compile(r"'[^']*'|\"[^\"]*\""), "<str>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE), "<id>"),
    (re.compile(r"\b[\w.+-]+@[\w-]+(\.[\w-]+)*\b"), "<email>"),
    (re.compile(r"\b0x[0-9a-f]+\b|\b[0-9a-f]*\d[0-9a-f]*[a-f][0-9a-f]*\b|\b[0-9a-f]*[a-f][0-9a-f]*\d[0-9a-f]*\b", re.IGNORECASE), "<id>"),
    (re.compile(r"\d+(\.\d+)?"), "<n>"),
    (re.compile(r"\s+"), " "),
)
MAX_LENGTH = 500


def error_signature(error_class: str, message: str) -> str:
    """`TimeoutError: read timed out after <n>s` for `TimeoutError("read timed out after 30s")`."""
    text = message
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    text = text.strip()
    return (f"{error_class}: {text}" if text else error_class)[:MAX_LENGTH]
