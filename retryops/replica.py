"""A read replica for the console's heavy read-only pages (DATABASE_REPLICA_URL).

Only what runs inside `replica_reads()` reads from the `replica` alias: the acceptance figures, the
"which errors are really transient" report and the `policy_whatif` command, each seconds of
aggregates over days of attempts that need not see the last second's writes. Everything else reads
the primary, so nobody decides on a lagging copy; and even inside `replica_reads()` a read stays on
the primary when it locks rows (select_for_update) or runs in a transaction on the primary, which
must see its own writes. With no replica configured, every read is the primary's.

A replica that fails must not take those pages down: they then read the primary. Each process
remembers what it last found (`replica_health()`): a replica that did not answer is not tried again
for RETRYOPS_REPLICA_RETRY_SECONDS (a blackholed host costs a whole connect timeout), one that
answered is asked again for its lag after CHECK_EVERY_SECONDS, and one more than
RETRYOPS_REPLICA_MAX_LAG_SECONDS behind is not read. `from_replica()` also reads again on the
primary when the replica fails in the middle of a read. A change of state is logged once.
"""

import logging
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, InterfaceError, OperationalError, connections

log = logging.getLogger(__name__)

REPLICA = "replica"
OK, UNREACHABLE, LAGGING = "ok", "unreachable", "lagging"
# A replica that answered is asked for its lag again after this long: a query per process every
# few seconds, while a page's aggregates take seconds.
CHECK_EVERY_SECONDS = 5
# What a replica says of itself. Caught up: it has replayed all it received, and it is receiving
# (a walreceiver is running; its pid is visible without pg_read_all_stats). On an idle primary the
# last replayed transaction grows old while nothing is missing, so its age counts only when the
# replica is not caught up.
_LAG_SQL = """
SELECT pg_is_in_recovery(),
       pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() AND EXISTS (SELECT FROM pg_stat_wal_receiver),
       EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp())::float8
"""
# What a failed read may raise, Django's errors and psycopg's own from a cursor used directly
# (scheduling.whatif streams with one); _lost_on_replica says which of them to read again.
_OPERATIONAL = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)
# The SQLSTATEs, besides none (psycopg's own "server closed the connection") and class 08, of a
# replica's connection lost or refused: its server shutting down (57P01 admin, as
# pg_terminate_backend and a failover end sessions; 57P02 crash; 57P03 starting up), too many
# connections (53300); and of a recovery conflict, which a standby raises to cancel a query
# holding up the replay of the primary's changes (40001, 40P01 for a buffer-pin deadlock).
_READ_AGAIN_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300", "40001", "40P01"})

_replica_reads: ContextVar[bool] = ContextVar("retryops_replica_reads", default=False)
_health_lock = threading.Lock()
_health: "Health | None" = None

T = TypeVar("T")


@dataclass(frozen=True)
class Health:
    """What a check of the replica found, and when (time.monotonic())."""

    state: str  # OK, UNREACHABLE or LAGGING
    checked_at: float
    lag_seconds: float | None = None  # None: not known (unreachable, or nothing replayed yet)
    error: str = ""  # the error's class, for /readyz (its text, which names hosts, is only logged)

    def fresh(self, now: float) -> bool:
        valid = settings.RETRYOPS_REPLICA_RETRY_SECONDS if self.state == UNREACHABLE else CHECK_EVERY_SECONDS
        return now - self.checked_at < valid


def replication_lag(*, in_recovery: bool, caught_up: bool | None, replay_age: float | None) -> float | None:
    """Seconds the replica is behind, from what _LAG_SQL returns; None when it cannot say (it
    has replayed nothing since it started and is not caught up). A server that is not a replica
    (a test's alias on the primary) is never behind."""
    if not in_recovery or caught_up:
        return 0.0
    if replay_age is None:
        return None
    return max(0.0, replay_age)


def check_replica() -> Health:
    """Ask the replica for its lag now, on this thread's connection, and remember the answer."""
    connection = connections[REPLICA]
    try:
        with connection.cursor() as cursor:
            cursor.execute(_LAG_SQL)
            in_recovery, caught_up, replay_age = cursor.fetchone()
    except DatabaseError as exc:
        # A broken connection would fail the next check too, even once the replica is back.
        with suppress(DatabaseError):
            connection.close()
        return _remember(Health(UNREACHABLE, time.monotonic(), error=type(exc).__name__), reason=_said(exc))
    lag = replication_lag(in_recovery=in_recovery, caught_up=caught_up, replay_age=replay_age)
    limit = settings.RETRYOPS_REPLICA_MAX_LAG_SECONDS
    state = LAGGING if limit and (lag is None or lag > limit) else OK
    return _remember(Health(state, time.monotonic(), lag_seconds=lag))


def _lost_on_replica(exc: Exception) -> bool:
    """Whether `exc`, raised by a read on the replica, is its connection lost (or a recovery
    conflict), worth the same read on the primary; not a query cancelled by the replica's
    statement_timeout (57014), which the primary would run as long, nor any other error."""
    if isinstance(exc, (InterfaceError, psycopg.InterfaceError)):  # a connection already closed
        return True
    error = exc if isinstance(exc, psycopg.Error) else exc.__cause__  # Django's wraps psycopg's
    sqlstate = getattr(error, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith("08") or sqlstate in _READ_AGAIN_SQLSTATES


def _said(exc: Exception) -> str:
    """An error's first line (psycopg's go on with hints), or its class when it says nothing."""
    return next(iter(str(exc).strip().splitlines()), "") or type(exc).__name__


def _remember(health: Health, *, reason: str = "") -> Health:
    """Keep `health` as this process's view of the replica; log when the state changes (not for
    every request of an outage)."""
    global _health
    with _health_lock:
        before = _health.state if _health else OK
        _health = health
    if health.state == before:
        return health
    lag = "unknown" if health.lag_seconds is None else f"{health.lag_seconds:.0f}"
    if health.state == UNREACHABLE:
        log.warning("read replica unreachable: its reads go to the primary, and it is tried again every %s s",
                    settings.RETRYOPS_REPLICA_RETRY_SECONDS, extra={"replica_error": reason})
    elif health.state == LAGGING:
        log.warning("read replica %s s behind the primary (RETRYOPS_REPLICA_MAX_LAG_SECONDS=%s): its reads go to "
                    "the primary", lag, settings.RETRYOPS_REPLICA_MAX_LAG_SECONDS, extra={"replica_lag_seconds": lag})
    else:
        log.info("read replica %s again (%s s behind): its reads go to it", "answering" if before == UNREACHABLE
                 else "caught up", lag)
    return health


def replica_health(*, check: bool = True) -> Health | None:
    """This process's view of the replica (None: none configured), checked again first when it
    is stale, unless `check` is false."""
    if REPLICA not in connections.settings:
        return None
    health = _health
    if check and (health is None or not health.fresh(time.monotonic())):
        health = check_replica()
    return health


def forget_replica_health() -> None:
    """Forget what the replica was found to be (the next read checks it again): for a changed
    DATABASE_REPLICA_URL, such as a test's."""
    global _health
    with _health_lock:
        _health = None


@contextmanager
def replica_reads():
    """Reads inside go to the replica, when there is one, it answers, is not too far behind, and
    no transaction is open on the primary. Prefer `from_replica()`, which also survives a replica
    that fails during the reads."""
    health = replica_health() if REPLICA in connections.settings else None
    token = _replica_reads.set(health is not None and health.state == OK)
    try:
        yield
    finally:
        _replica_reads.reset(token)


def from_replica(read: Callable[..., T], /, *args, **kwargs) -> T:
    """read(*args, **kwargs) in replica_reads(); if the replica's connection fails during it (the
    server died after connecting, a reset, a recovery conflict that cancels the query), the same
    read once more on the primary, so a page is whole rather than half-computed. Any other error,
    a statement_timeout's cancel included, is raised: the replica answers, and the primary would
    take as long. `read` must only read: it may run twice."""
    with replica_reads():
        on_replica = read_alias() == REPLICA
        try:
            return read(*args, **kwargs)
        except _OPERATIONAL as exc:
            if not (on_replica and _lost_on_replica(exc)):
                raise
            failure = exc
    log.warning("a read on the read replica failed; read again on the primary",
                extra={"replica_error": _said(failure)})
    # Whichever connection failed, the replica's is dropped and the replica checked again on a new
    # one: if it is down, the next requests read the primary without trying it.
    with suppress(DatabaseError):
        connections[REPLICA].close()
    check_replica()
    return read(*args, **kwargs)


def read_alias() -> str:
    """The database a read should use now: see the module's docstring."""
    if (_replica_reads.get() and REPLICA in connections.settings
            and not connections[DEFAULT_DB_ALIAS].in_atomic_block):
        return REPLICA
    return DEFAULT_DB_ALIAS


class ReplicaRouter:
    """Routes the ORM's reads by read_alias(); writes, and reads that lock (Django routes a
    select_for_update as a write), always to the primary; migrations never to the replica."""

    def db_for_read(self, model, **hints):
        return read_alias()

    def db_for_write(self, model, **hints):
        return DEFAULT_DB_ALIAS

    def allow_relation(self, obj1, obj2, **hints):
        return True  # the same rows, copied

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        return db == DEFAULT_DB_ALIAS
