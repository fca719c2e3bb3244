"""A read replica for the console's heavy read-only pages (DATABASE_REPLICA_URL).

Only what runs inside `replica_reads()` reads from the `replica` alias: the acceptance figures, the
"which errors are really transient" report and the `policy_whatif` command, each seconds of
aggregates over days of attempts that need not see the last second's writes. Everything else reads
the primary, so nobody decides on a lagging copy; and even inside `replica_reads()` a read stays on
the primary when it locks rows (select_for_update) or runs in a transaction on the primary, which
must see its own writes. With no replica configured, every read is the primary's.
"""

from contextlib import contextmanager
from contextvars import ContextVar

from django.db import DEFAULT_DB_ALIAS, connections

REPLICA = "replica"

_replica_reads: ContextVar[bool] = ContextVar("retryops_replica_reads", default=False)


@contextmanager
def replica_reads():
    """Reads inside go to the replica, when there is one and no transaction is open on the primary."""
    token = _replica_reads.set(True)
    try:
        yield
    finally:
        _replica_reads.reset(token)


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
