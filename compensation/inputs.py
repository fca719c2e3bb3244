"""Checks of what the operators hand the compensation services: texts (the rules on their length and
whether they may be empty) and ids. Who acts comes from the interface (a login, an API client, a
command's cleaned --actor), unchecked here."""

from django.db import models
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from retryops.errors import BadInput, NotFound
from retryops.inputs import record_id
from retryops.jsonsafe import check_text


# The fields an operator fills in, as a refusal names them in the operator's language; the
# error's `field` detail stays the field's own name.
FIELD_NAMES = {
    "actor": gettext_lazy("actor"),
    "reason": gettext_lazy("reason"),
    "resolution": gettext_lazy("resolution"),
    "title": gettext_lazy("title"),
    "flow": gettext_lazy("flow"),
    "runbook": gettext_lazy("runbook"),
    "notes": gettext_lazy("notes"),
    "assignee": gettext_lazy("assignee"),
    "token": gettext_lazy("token"),
    "error_signature": gettext_lazy("error signature"),
    "filter.flow": gettext_lazy("flow"),
    "filter.error_signature": gettext_lazy("error signature"),
    "filter.died_after": gettext_lazy("died after"),
    "filter.died_before": gettext_lazy("died before"),
    "rate": gettext_lazy("rate"),
}

# What `locked` names in "no work order with id 7".
KIND_NAMES = {
    "work_order": gettext_lazy("work order"),
    "dead_letter": gettext_lazy("dead letter"),
    "bulk_replay": gettext_lazy("bulk replay"),
    "runbook_run": gettext_lazy("runbook run"),
}


def field_name(field: str) -> str:
    """A field as a sentence for operators names it."""
    return str(FIELD_NAMES.get(field, field))




def text(value, *, field: str, max_length: int | None = None, required: bool = False) -> str:
    """Free text an operator typed (notes, a reason): NUL characters refused, length checked."""
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise BadInput(_("%(field)s must be text, got %(type)s") % {
            "field": field_name(field), "type": type(value).__name__}, field=field)
    problem = check_text(value)
    if problem:
        raise BadInput(_("%(field)s %(problem)s") % {"field": field_name(field), "problem": problem}, field=field)
    value = value.strip()
    if required and not value:
        raise BadInput(_("%(field)s must not be empty") % {"field": field_name(field)}, field=field)
    if max_length is not None and len(value) > max_length:
        raise BadInput(_("%(field)s is %(length)d characters long; at most %(limit)d fit") % {
            "field": field_name(field), "length": len(value), "limit": max_length}, field=field)
    return value


def locked(model: type[models.Model], row: models.Model | int, *, kind: str) -> models.Model:
    """The row of `model`, locked for this transaction (`row` an instance or an id)."""
    row_id = row.pk if isinstance(row, model) else record_id(row, field=kind, error=BadInput)
    found = model.objects.select_for_update(of=("self",)).filter(pk=row_id).first()
    if found is None:
        raise NotFound(_("no %(kind)s with id %(id)s") % {"kind": KIND_NAMES.get(kind, kind.replace("_", " ")),
                                                          "id": row_id}, kind=kind, id=row_id)
    return found
