"""Ids and counts that come in from people and systems, checked before any query sees them: a
string, a bool, a float or a number past bigint would otherwise reach PostgreSQL (a bare
ValueError from the ORM, or a DataError that aborts the caller's transaction)."""

from django.utils.translation import gettext

from retryops.errors import BadInput

# A bigint primary key; a larger number names nothing and PostgreSQL would refuse to compare it.
MAX_ID = 2**63 - 1
# PositiveIntegerField and the ::integer the statements cast to: PostgreSQL's integer.
MAX_INTEGER = 2**31 - 1


def whole_number(value, *, field: str, minimum: int = 1, maximum: int = MAX_INTEGER,
                 error: type[BadInput] = BadInput) -> int:
    """`value` if it is a whole number (an int, not a bool) from `minimum` to `maximum`; else
    `error` (the caller's app's BadInput) naming `field`."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise error(gettext("%(field)s must be a whole number from %(minimum)d to %(maximum)d, got %(value)s") % {
            "field": field, "minimum": minimum, "maximum": maximum, "value": repr(value)}, field=field)
    return value


def flag(value, *, field: str, error: type[BadInput] = BadInput) -> bool:
    """`value` if it is True or False; else `error` naming `field`. Never bool(value): "no" and
    "false" are true strings, and a flag sent as text would flip to on."""
    if not isinstance(value, bool):
        raise error(gettext("%(field)s must be true or false, got %(value)s") % {"field": field, "value": repr(value)},
                    field=field)
    return value


def record_id(value, *, field: str, error: type[BadInput] = BadInput) -> int:
    """`value` as a primary key: a whole number from 1 to bigint's largest, else `error` naming `field`."""
    return whole_number(value, field=field, minimum=1, maximum=MAX_ID, error=error)
