"""Values Python's json accepts and PostgreSQL's jsonb and text columns refuse.

`json.loads` reads `NaN`, `Infinity`, `\\u0000` and a lone `\\ud800`; jsonb refuses all four, a
text column refuses a NUL character, and psycopg cannot even send a lone surrogate (UTF-8 has no
encoding for one: UnicodeEncodeError, before PostgreSQL sees anything). `check_text` is the one
guard on text, for JSON strings and keys as for plain columns. Input from people and systems is
refused with the place named (`refuse_unstorable`); what a flow hands back after its side effects
have happened is made storable instead (`make_storable`), because refusing it would turn a
success into a rerun.
"""

import json
import math
import re
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.utils.translation import gettext, gettext_noop

# Past this, PostgreSQL's jsonb numeric is fine but every consumer (JavaScript, RQ's JSON) is not.
MAX_SAFE_INTEGER = 2**53 - 1


class UnstorableValue(ValueError):
    """A value that cannot be stored as it is; `path` says where in it (payload.items[2].price)."""

    def __init__(self, message: str, *, path: str):
        super().__init__(message)
        self.path = path


# A NUL, or any UTF-16 surrogate code point: json.loads turns a "\\ud800" without its partner
# into one, and Python strings hold it where UTF-8 cannot.
_UNSTORABLE_CHARACTER = re.compile("[\x00\ud800-\udfff]")


def _as_stored(message: str) -> str:
    """The English text, for notes that are stored (repairs): stored data stays language-neutral."""
    return message


def _text_problem(text: str, say: Callable[[str], str]) -> str | None:
    found = _UNSTORABLE_CHARACTER.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return say(gettext_noop("contains a NUL character (\\u0000)"))
    return say(gettext_noop("contains a lone surrogate (\\u%(code)s), which UTF-8 cannot encode")) % {
        "code": f"{ord(found.group()):04x}"}


def check_text(text: str) -> str | None:
    """What keeps a text column from holding `text`, as the end of a sentence naming it ("contains
    a NUL character (\\u0000)"), in the current language; None when it can be stored."""
    return _text_problem(text, gettext)


def storable_text(text: str) -> None:
    """check_text as a form field's validator: the console's forms call the same guard as the API's
    fields (retryops.api.fields.Text)."""
    problem = check_text(text)
    if problem:  # shown under the field it names, as "contains a NUL character (\\u0000)"
        raise ValidationError(problem, code="unstorable")


def _problem(value: Any, say: Callable[[str], str]) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return say(gettext_noop("is %(value)s, which JSON cannot hold")) % {"value": repr(value)}
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SAFE_INTEGER:
        # Its length, not its value: a note is stored and logged, and a long number may be a
        # card number or a PIN under a key that masking only meets later.
        return say(gettext_noop("is an integer of %(digits)s digits, larger than %(max)s")) % {
            "digits": len(str(abs(value))), "max": MAX_SAFE_INTEGER}
    if isinstance(value, str):
        return _text_problem(value, say)
    return None


def _walk(value: Any, path: str, visit: Callable[[Any, str], Any]) -> Any:
    if isinstance(value, dict):
        # The path is stored too (in a repair note, an error's text): a bad key is shown cleaned.
        return {visit(key, f"{path} key {key!r}") if isinstance(key, str) else key:
                _walk(item, f"{path}.{clean_text(key) if isinstance(key, str) else key}", visit)
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_walk(item, f"{path}[{n}]", visit) for n, item in enumerate(value)]
    return visit(value, path)


def refuse_unstorable(value: Any, *, name: str) -> Any:
    """Return `value` unchanged if PostgreSQL can store it; else raise UnstorableValue naming
    the first bad place, e.g. "payload.amount is nan, which JSON cannot hold"."""

    def check(item: Any, path: str) -> Any:
        problem = _problem(item, gettext)
        if problem:
            raise UnstorableValue(gettext("%(place)s %(problem)s") % {"place": path, "problem": problem}, path=path)
        return item

    _walk(value, name, check)
    try:
        json.dumps(value, cls=DjangoJSONEncoder, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UnstorableValue(gettext("%(place)s cannot be stored as JSON: %(error)s") % {
            "place": name, "error": exc}, path=name) from None
    return value


def clean_text(text: str) -> str:
    """Text a PostgreSQL text column can hold: NUL characters and lone surrogates become U+FFFD."""
    return _UNSTORABLE_CHARACTER.sub("\ufffd", text) if _UNSTORABLE_CHARACTER.search(text) else text


def make_storable(value: Any) -> tuple[Any, list[str]]:
    """`value` as jsonb can hold it, and notes on what had to change: non-finite floats become
    null, huge integers strings, NUL characters and lone surrogates (in values and keys) U+FFFD,
    anything JSON cannot express its repr."""
    notes: list[str] = []

    def fix(item: Any, path: str) -> Any:
        problem = _problem(item, _as_stored)
        if problem is None:
            return item
        notes.append(f"{path} {problem}")
        if isinstance(item, float):
            return None
        if isinstance(item, int):
            return str(item)
        return clean_text(item)

    try:
        plain = json.loads(json.dumps(value, cls=DjangoJSONEncoder))
    except (TypeError, ValueError, RecursionError):
        notes.append(f"result of type {type(value).__name__} is not JSON; kept as its repr")
        return {"repr": clean_text(repr(value)[:2000])}, notes
    return _walk(plain, "result", fix), notes
