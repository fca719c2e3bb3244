"""Writing the audit log. Services call record_audit inside their own transaction, next to the
change it describes, so the entry commits with the change or not at all."""

import logging
from dataclasses import dataclass
from typing import Any

from django.db import connection, models

from audit import context
from audit.choices import AuditAction
from audit.errors import AuditError
from audit.models import AuditEntry
from audit.streaming import stream_audit_entry
from retryops.jsonsafe import clean_text, make_storable

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Target:
    """What an entry is about, when it is not a saved model instance (or its __str__ would query)."""

    type: str
    id: str | int
    label: str = ""


def target_of(obj: models.Model | Target) -> Target:
    """The target of a model instance: its model as app_label.model_name, its pk, its str()."""
    if isinstance(obj, Target):
        if not str(obj.type).strip() or not str(obj.id).strip():
            raise AuditError(f"a target needs a type and an id, got {obj!r}", code="bad_input", field="target")
        return obj
    if isinstance(obj, models.Model):
        if obj.pk is None:
            raise AuditError(f"cannot audit an unsaved {obj._meta.verbose_name}: it has no id yet",
                             code="bad_input", field="target")
        return Target(type=obj._meta.label_lower, id=obj.pk, label=str(obj))
    raise AuditError(f"target must be a saved model instance or an audit Target, got {type(obj).__name__}",
                     code="bad_input", field="target")


def _storable(value: Any, name: str, repairs: list[str]) -> Any:
    if value is None:
        return None
    stored, notes = make_storable(value)
    # make_storable names the top of what it walked "result"; here it is before or after.
    repairs += [name + note.removeprefix("result") if note.startswith("result") else f"{name}: {note}"
                for note in notes]
    return stored


def record_audit(*, action: str, target: models.Model | Target, before: Any = None, after: Any = None,
                 reason: str = "", actor: str | None = None, channel: str | None = None) -> AuditEntry:
    """Append one audit entry for an operator action, in the caller's transaction.

    Actor, channel and request id come from audit.context (the middleware, AuditedCommand or
    `acting_as`); `actor` and `channel` override them, for a service that was told who acts.
    `before`/`after` are JSON snapshots (None: the target did not exist / no longer exists);
    values PostgreSQL cannot store are repaired and the repairs noted on the entry, never
    refused, because refusing would undo the operator's action."""
    if not connection.in_atomic_block:
        # Outside a transaction the entry would commit on its own: an entry for a change that
        # then rolled back, or a change without its entry.
        raise AuditError(f"record_audit({action!r}) must run inside the transaction of the change it records",
                         code="not_in_transaction", action=action)
    if action not in AuditAction.values:
        raise AuditError(f"unknown audit action {action!r}: add it to audit.choices.AuditAction",
                         code="bad_input", field="action")
    what = target_of(target)
    acting = context.current()
    repairs: list[str] = []
    entry = AuditEntry.objects.create(
        actor=context.clean_actor(actor) if actor is not None else acting.actor,
        channel=context.checked_channel(channel) if channel is not None else acting.channel,
        action=action,
        target_type=clean_text(what.type)[:100],
        target_id=clean_text(str(what.id))[:100],
        target_label=clean_text(str(what.label))[:200],
        before=_storable(before, "before", repairs),
        after=_storable(after, "after", repairs),
        reason=clean_text(str(reason or "")),
        request_id=acting.request_id,
        repairs=repairs,
    )
    stream_audit_entry(entry)
    if repairs:
        logger.warning("audit entry %s (%s) stored with repairs: %s", entry.pk, action, "; ".join(repairs))
    return entry
