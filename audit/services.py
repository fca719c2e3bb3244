"""Writing the audit log. Services call record_audit inside their own transaction, next to the
change it describes, so the entry commits with the change or not at all.

Also the writes of the REST API's own rows, which sit here because an API client is an actor:
its clients (create, revoke, last use) and the requests sent with an Idempotency-Key."""

import hashlib
import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import IntegrityError, connection, models, transaction
from django.utils import timezone, translation

from audit import context, keycache
from audit.choices import AuditAction, IdempotencyState
from audit.errors import IdempotencyKeyInProgress, IdempotencyKeyReused
from retryops.errors import BadInput, DomainError, IllegalTransition, NotFound
from audit.models import ApiClient, AuditEntry, IdempotencyKey
from audit.streaming import delete_in_batches, stream_audit_entry
from retryops.inputs import record_id
from retryops.jsonsafe import check_text, clean_text, make_storable
from retryops.masking import mask_secrets

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
            raise BadInput(f"a target needs a type and an id, got {obj!r}", field="target")
        return obj
    if isinstance(obj, models.Model):
        if obj.pk is None:
            raise BadInput(f"cannot audit an unsaved {obj._meta.verbose_name}: it has no id yet", field="target")
        with translation.override(None):  # stored: the label stays English whoever reads the log
            return Target(type=obj._meta.label_lower, id=obj.pk, label=str(obj))
    raise BadInput(f"target must be a saved model instance or an audit Target, got {type(obj).__name__}",
                   field="target")


def _storable(value: Any, name: str, repairs: list[str]) -> Any:
    if value is None:
        return None
    # Masked, and before the repairs, whose notes name what they repaired: the audit log is read
    # by people and streamed to other systems, and a secret attribute an operator changed must
    # not be copied into it.
    stored, notes = make_storable(mask_secrets(value))
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
        raise DomainError(f"record_audit({action!r}) must run inside the transaction of the change it records",
                          code="not_in_transaction", action=action)
    if action not in AuditAction.values:
        raise BadInput(f"unknown audit action {action!r}: add it to audit.choices.AuditAction", field="action")
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


# API clients. A key reads "rok_" + 8 hex characters (its prefix, shown and looked up) + "_" + 32
# random bytes in URL-safe base64: the prefix finds the row, the hash of the whole key decides.
KEY_TAG = "rok_"
PREFIX_LENGTH = len(KEY_TAG) + 8
KEY_LENGTH = PREFIX_LENGTH + 1 + 43
# last_used_at is written once a minute at most.
TOUCH_EVERY = timedelta(minutes=1)


def hash_key(key: str) -> str:
    """sha256 of a key, in hex: what ApiClient.key_hash holds."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _client_name(name) -> str:
    if not isinstance(name, str) or not name.strip():
        raise BadInput("name must name the external system", field="name")
    name = name.strip()
    limit = ApiClient._meta.get_field("name").max_length
    try:
        validate_slug(name)
    except ValidationError:
        raise BadInput(f"name {name!r} must be letters, digits, hyphens or underscores", field="name") from None
    if len(name) > limit:
        raise BadInput(f"name is {len(name)} characters long; at most {limit} fit", field="name")
    return name


def _service_user(user):
    users = get_user_model()
    if isinstance(user, users):
        return user
    if isinstance(user, str):
        if check_text(user):
            raise BadInput(f"user {check_text(user)}", field="user")
        lookup = {users.USERNAME_FIELD: user}
    else:
        lookup = {"pk": record_id(user, field="user", error=BadInput)}
    found = users.objects.filter(**lookup).first()
    if found is None:
        raise BadInput(f"no user {user!r}: create the service user first", field="user")
    return found


def create_api_client(*, name: str, user, actor: str | None = None) -> tuple[ApiClient, str]:
    """A new API client acting as `user` (an instance, a username or an id), and its key: the only
    time the key exists outside the client's hands, so show it once and forget it. A name another
    active client has is bad input. `actor`: who creates it (default: the audit context's actor)."""
    name, user = _client_name(name), _service_user(user)
    actor = context.clean_actor(actor) if actor else context.current().actor
    for _ in range(3):
        prefix = KEY_TAG + secrets.token_hex(4)
        key = f"{prefix}_{secrets.token_urlsafe(32)}"
        try:
            with transaction.atomic():
                client = ApiClient.objects.create(name=name, key_prefix=prefix, key_hash=hash_key(key), user=user,
                                                  created_by=actor)
                record_audit(action=AuditAction.API_CLIENT_CREATE, target=client, before=None,
                             after={"name": name, "key_prefix": prefix, "user": user.get_username()}, actor=actor)
                return client, key
        except IntegrityError as exc:
            constraint = getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None)
            if constraint == "api_client_active_name_unique":
                raise BadInput(f"an active API client named {name!r} exists already: revoke it first, or "
                                   "choose another name", field="name") from None
            if constraint != "audit_apiclient_key_prefix_key":
                raise
    raise BadInput("three new key prefixes in a row were taken; try again", field="name")


def _client(client: ApiClient | int | str) -> ApiClient:
    """The client row under its lock: by instance or id, or by name (the active client of that name)."""
    queryset = ApiClient.objects.select_for_update()
    if isinstance(client, ApiClient):
        found = queryset.filter(pk=client.pk).first()
    elif isinstance(client, str):
        if check_text(client):
            raise BadInput(f"client {check_text(client)}", field="client")
        found = queryset.filter(name=client, revoked_at__isnull=True).first()
    else:
        found = queryset.filter(pk=record_id(client, field="client", error=BadInput)).first()
    if found is None:
        raise NotFound(f"no active API client {client!r}" if isinstance(client, str) else f"no API client {client!r}",
                       code="api_client_not_found", client=str(client))
    return found


def revoke_api_client(*, client: ApiClient | int | str, actor: str | None = None, reason: str = "") -> ApiClient:
    """Revoke a client's key at once: its next request is refused (401). The row stays, so the
    audit log's entries keep naming it; a revoked client cannot be revived (create a new one)."""
    actor = context.clean_actor(actor) if actor else None
    reason = clean_text(str(reason or "")).strip()
    with transaction.atomic():
        current = _client(client)
        if current.revoked_at is not None:
            raise IllegalTransition(f"API client {current.name} ({current.key_prefix}) was revoked already, at "
                                    f"{current.revoked_at.isoformat()}", client=current.pk)
        current.revoked_at = timezone.now()
        current.save(update_fields=["revoked_at"])
        record_audit(action=AuditAction.API_CLIENT_REVOKE, target=current, before={"revoked_at": None},
                     after={"revoked_at": current.revoked_at}, reason=reason, actor=actor)
        # This process stops answering from its cache at once (and again at the commit); every
        # other process within keycache.KEY_CACHE_SECONDS.
        keycache.forget()
    return current


def note_api_client_use(client: ApiClient, *, now=None) -> None:
    """Record that the client was just used, unless that was recorded less than a minute ago
    (checked on the row in hand, then again by the conditional update, so concurrent requests
    write it once)."""
    now = now or timezone.now()
    if client.last_used_at is not None and now - client.last_used_at < TOUCH_EVERY:
        return
    ApiClient.objects.filter(pk=client.pk).filter(
        models.Q(last_used_at__isnull=True) | models.Q(last_used_at__lt=now - TOUCH_EVERY)).update(last_used_at=now)
    client.last_used_at = now


# Idempotency keys (draft-ietf-httpapi-idempotency-key-header).

IDEMPOTENCY_KEY_LENGTH = IdempotencyKey._meta.get_field("key").max_length
# A request still in progress after this long was cut off with its server (gunicorn's worker
# timeout is 30 s): its outcome is unknown, which a repeat is told (stale) rather than run again.
IDEMPOTENCY_STALE_AFTER = timedelta(minutes=2)
# A key is answered for a day (a client retrying after a day sends a new request), then pruned.
IDEMPOTENCY_KEY_LIFETIME = timedelta(hours=24)
PRUNE_BATCH = 5000


def idempotency_key(raw) -> str:
    """The key of an Idempotency-Key header: the draft's quoted string ("8e03978e-...") or the bare
    token most clients send, of 1 to 255 visible ASCII characters."""
    key = raw.strip() if isinstance(raw, str) else ""
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1]
    if not key or len(key) > IDEMPOTENCY_KEY_LENGTH or not all("!" <= ch <= "~" for ch in key) or '"' in key:
        raise BadInput(f"Idempotency-Key must be 1 to {IDEMPOTENCY_KEY_LENGTH} visible ASCII characters (a UUID "
                           f"is best), got {str(raw)[:300]!r}", field="Idempotency-Key")
    return key


def request_fingerprint(*, method: str, path: str, body: bytes) -> str:
    """What makes two requests the same request: method, path and body (sha256, hex)."""
    digest = hashlib.sha256()
    for part in (method.upper().encode(), path.encode("utf-8", "surrogatepass"), body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def begin_idempotent_request(*, key: str, method: str, path: str, body: bytes, client: ApiClient | None = None,
                             user=None) -> tuple[IdempotencyKey, bool]:
    """Record the first request with `key` of the client (or of the session `user`), committed
    before the work starts so that a duplicate sent meanwhile sees it. Returns (row, True) for a
    first request, which the caller processes and then finishes or releases; (row, False) for a
    repeat of an answered one, whose stored answer the caller replays. Raises
    IdempotencyKeyReused (another request had the key) or IdempotencyKeyInProgress."""
    if (client is None) == (user is None):
        raise BadInput("an idempotency key belongs to an API client or to a user", field="client")
    key = idempotency_key(key)
    fingerprint = request_fingerprint(method=method, path=path, body=body)
    owner = {"client": client, "user": None} if client is not None else {"client": None, "user": user}
    with transaction.atomic():
        row, created = IdempotencyKey.objects.get_or_create(**owner, key=key, defaults={
            "fingerprint": fingerprint, "method": method.upper()[:10], "path": clean_text(path)[:2000]})
    if created:
        return row, True
    if row.fingerprint != fingerprint:
        raise IdempotencyKeyReused(
            f"Idempotency-Key {key!r} was first sent with another request ({row.method} {row.path} at "
            f"{row.created_at.isoformat()}); a key names one request: use a new key for a new request",
            key=key, first_seen_at=row.created_at.isoformat())
    if row.state == IdempotencyState.IN_PROGRESS:
        stale = timezone.now() - row.created_at > IDEMPOTENCY_STALE_AFTER
        message = (f"the first request with Idempotency-Key {key!r} (at {row.created_at.isoformat()}) was cut off "
                   "while it was processed, and whether its work was done is unknown: look at what it changes, "
                   "then send a new request with a new key" if stale else
                   f"the first request with Idempotency-Key {key!r} is still being processed: wait for its answer, "
                   "then repeat this request to receive it")
        raise IdempotencyKeyInProgress(message, key=key, started_at=row.created_at.isoformat(), stale=stale)
    return row, False


def finish_idempotent_request(*, record: IdempotencyKey, status_code: int, body: Any, location: str = "") -> None:
    """Store the answer to a first request, for its repeats."""
    stored, _notes = make_storable(body)
    IdempotencyKey.objects.filter(pk=record.pk, state=IdempotencyState.IN_PROGRESS).update(
        state=IdempotencyState.DONE, status_code=status_code, response_body=stored,
        location=clean_text(location or "")[:2000], finished_at=timezone.now())


def release_idempotent_request(*, record: IdempotencyKey) -> None:
    """Forget a first request that ended in a server error or a crash: a repeat is processed anew."""
    IdempotencyKey.objects.filter(pk=record.pk, state=IdempotencyState.IN_PROGRESS).delete()


def prune_idempotency_keys(*, older_than: timedelta | None = None, batch: int = PRUNE_BATCH) -> int:
    """Delete idempotency keys older than `older_than` (default IDEMPOTENCY_KEY_LIFETIME),
    `batch` rows per transaction, oldest first (idempotency_key_created_idx)."""
    cutoff = timezone.now() - (older_than or IDEMPOTENCY_KEY_LIFETIME)
    return delete_in_batches(table=IdempotencyKey._meta.db_table, where="created_at < %s", params=[cutoff],
                             order_by="created_at", batch=batch)
