"""Error signatures: the error class and its message with the varying parts stripped, so that
identical failures group together in lists, work orders, statistics and the resource diagnosis.

The rules are written once, here, and run in two places: in Python on an attempt's error
(scheduling) and in PostgreSQL on a resource's last failure reason (the generated column
Resource.last_failure_signature, see `signature_sql`), so that the console can group and filter
by signature without running a regex per row at read time. Both read the rules below; a rule
must therefore mean the same in Python's `re` and PostgreSQL's ARE (tests/resources compare
them): no lookarounds, no lazy quantifiers, and `\\b` (which `signature_sql` writes as ARE's `\\y`)."""

import re

from django.db.models import CharField, Func, TextField, Value
from django.db.models.functions import Left, Trim

# (pattern, case-insensitive, replacement), applied in order.
RULES = (
    ("'[^']*'|\"[^\"]*\"", False, "<str>"),
    (r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", True, "<id>"),
    (r"\b[\w.+-]+@[\w-]+(\.[\w-]+)*\b", False, "<email>"),
    (r"\b0x[0-9a-f]+\b|\b[0-9a-f]*\d[0-9a-f]*[a-f][0-9a-f]*\b|\b[0-9a-f]*[a-f][0-9a-f]*\d[0-9a-f]*\b", True, "<id>"),
    (r"\d+(\.\d+)?", False, "<n>"),
    (r"\s+", False, " "),
)
MAX_LENGTH = 500

_COMPILED = tuple((re.compile(pattern, re.IGNORECASE if folded else 0), replacement)
                  for pattern, folded, replacement in RULES)


def text_signature(text: str) -> str:
    """The signature of an error as one text, "ClassName: message" (a resource's failure reason)."""
    for regex, replacement in _COMPILED:
        text = regex.sub(replacement, text)
    return text.strip()[:MAX_LENGTH]


def error_signature(error_class: str, message: str) -> str:
    """`TimeoutError: read timed out after <n>s` for `TimeoutError("read timed out after 30s")`."""
    text = text_signature(message)
    return (f"{error_class}: {text}" if text else error_class)[:MAX_LENGTH]


def signature_sql(expression) -> Func:
    """The same rules as a PostgreSQL expression over a text column (immutable, so it can be a
    stored generated column): about 15 microseconds a row, paid once per failure written."""
    for pattern, folded, replacement in RULES:
        expression = Func(expression, Value(pattern.replace(r"\b", r"\y")), Value(replacement),
                          Value("gi" if folded else "g"), function="regexp_replace", output_field=TextField())
    return Left(Trim(expression), MAX_LENGTH, output_field=CharField(max_length=MAX_LENGTH))
