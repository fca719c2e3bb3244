"""Checks of what the operators hand the compensation services: names, texts, ids."""

from django.db import models

from compensation.errors import BadInput, NotFound
from retryops.jsonsafe import clean_text

NAME_LENGTH = 200
MAX_ID = 2**63 - 1


def actor_name(actor, *, field: str = "actor") -> str:
    """Who acts: a non-empty line of text without NUL characters."""
    if not isinstance(actor, str) or not actor.strip():
        raise BadInput(f"{field} must name who acts, got {actor!r}", field=field)
    if clean_text(actor) != actor:
        raise BadInput(f"{field} contains a NUL character (\\u0000): {actor!r}", field=field)
    return actor.strip()[:NAME_LENGTH]


def text(value, *, field: str, max_length: int | None = None, required: bool = False) -> str:
    """Free text an operator typed (notes, a reason): NUL characters refused, length checked."""
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise BadInput(f"{field} must be text, got {type(value).__name__}", field=field)
    if clean_text(value) != value:
        raise BadInput(f"{field} contains a NUL character (\\u0000)", field=field)
    value = value.strip()
    if required and not value:
        raise BadInput(f"{field} must not be empty", field=field)
    if max_length is not None and len(value) > max_length:
        raise BadInput(f"{field} is {len(value)} characters long; at most {max_length} fit", field=field)
    return value


def locked(model: type[models.Model], row: models.Model | int, *, kind: str) -> models.Model:
    """The row of `model`, locked for this transaction (`row` an instance or an id)."""
    row_id = row.pk if isinstance(row, model) else row
    if isinstance(row_id, bool) or not isinstance(row_id, int) or not 0 < row_id <= MAX_ID:
        raise BadInput(f"{kind} must be a {kind} or its id, got {row!r}", field=kind)
    found = model.objects.select_for_update(of=("self",)).filter(pk=row_id).first()
    if found is None:
        raise NotFound(f"no {kind.replace('_', ' ')} with id {row_id}", kind=kind, id=row_id)
    return found
