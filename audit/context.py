"""Who is acting, through which channel, in which request: set once at the door (the middleware,
AuditedCommand, a job's `acting_as`), read by record_audit, so services take no extra arguments.

A ContextVar rather than a thread-local: each thread and each asyncio task sees its own value,
and `acting_as` puts the previous one back even when the body raises.
"""

import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import structlog

from audit.choices import Channel
from retryops.errors import BadInput
from retryops.jsonsafe import clean_text

SYSTEM_ACTOR = "system"
MAX_ACTOR_LENGTH = 200
MAX_REQUEST_ID_LENGTH = 100
# What we accept from a client's X-Request-ID: a token a log search can match exactly. Anything
# else (spaces, control characters, a novel) is replaced by our own id rather than stored.
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,%d}" % MAX_REQUEST_ID_LENGTH)


@dataclass(frozen=True)
class AuditContext:
    """The actor, channel and request id that audit entries written now are attributed to."""

    channel: str
    request_id: str
    # A callable for web requests: an API view authenticates (token, basic) after the middleware
    # has run, so the user is read when the entry is written, not when the request came in.
    actor_source: str | Callable[[], str]
    # The username of the Django user behind the actor (a console user; an API client's service
    # user), read the same way; "" where no user acts (a command, a job).
    user_source: str | Callable[[], str] = ""

    @property
    def actor(self) -> str:
        source = self.actor_source
        return clean_actor(source() if callable(source) else source)

    @property
    def user(self) -> str:
        source = self.user_source
        return str(source() if callable(source) else source)


_SYSTEM = AuditContext(channel=Channel.SYSTEM, request_id="", actor_source=SYSTEM_ACTOR)
_current: ContextVar[AuditContext] = ContextVar("retryops_audit_context", default=_SYSTEM)


def current() -> AuditContext:
    """The context in force; "system" on the system channel when nobody set one."""
    return _current.get()


def is_set() -> bool:
    """Whether someone set a context (a request, a command, a job), rather than the default."""
    return _current.get() is not _SYSTEM


def clean_actor(actor: str) -> str:
    """An actor name a text column holds: trimmed, NUL-free, at most MAX_ACTOR_LENGTH; empty is "system"."""
    text = clean_text(str(actor)).strip()
    return text[:MAX_ACTOR_LENGTH] or SYSTEM_ACTOR


def identity_of(actor: str) -> str:
    """Who a rule about people (four eyes) sees behind `actor`: the Django user the current request
    acts as (a console user's login; an API client's service user, so that two clients of one user
    are one person), else `actor` itself (a command's --actor, a job, a caller in the shell)."""
    return clean_actor(current().user or actor)


def new_request_id() -> str:
    return uuid.uuid4().hex


def accepted_request_id(value: str | None) -> str | None:
    """`value` if it is usable as a request id, else None (the caller makes a new one)."""
    if value and _REQUEST_ID.fullmatch(value):
        return value
    return None


def checked_channel(channel: str) -> str:
    """`channel` if it is one of Channel, else BadInput."""
    if channel not in Channel.values:
        raise BadInput(f"channel must be one of {', '.join(Channel.values)}, got {channel!r}", field="channel")
    return channel


@contextmanager
def acting_as(*, actor: str | Callable[[], str], channel: str, request_id: str | None = None,
              user: str | Callable[[], str] = "") -> Iterator[AuditContext]:
    """Attribute the audit entries written inside to `actor` on `channel`, acting as the Django
    user named `user` if any. Without a request id a new one is made, so every entry of one job
    or command run shares it."""
    if not callable(actor) and (not isinstance(actor, str) or not actor.strip()):
        raise BadInput("actor must name who acts (a user name, a command, a job)", field="actor")
    if request_id is not None and accepted_request_id(request_id) is None:
        raise BadInput(f"request id {request_id!r} is not a token of at most {MAX_REQUEST_ID_LENGTH} characters",
                       field="request_id")
    context = AuditContext(channel=checked_channel(channel), request_id=request_id or new_request_id(),
                           actor_source=actor, user_source=user)
    token = _current.set(context)
    try:
        # Log lines written meanwhile carry the request id too (telemetry/logs.py).
        with structlog.contextvars.bound_contextvars(request_id=context.request_id):
            yield context
    finally:
        _current.reset(token)
