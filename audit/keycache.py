"""The API clients this process authenticated lately, by the sha256 of their key: the REST API
then authenticates most requests without a query (audit.selectors.cached_api_client_for_key).

An entry lives KEY_CACHE_SECONDS from the moment its row was read, well under the second a
revocation may take to reach every process; the process that revokes a key (or changes a user,
a group or a permission) empties its own cache at once (`forget`). That bound needs nothing
between processes: a broadcast (Redis pub/sub, a version row read on every request) would add
a round trip or a mechanism to every web process to save the one query per client and process
that a re-read twice a second costs."""

import threading
import time

from django.db import connection, transaction

# Well under 1 s: a key revoked in another process stops working at most this long after the
# revocation committed (tests/audit/test_key_cache.py shows it with two processes).
KEY_CACHE_SECONDS = 0.5
# Past this many entries (keys of many clients, or a flood of requests) the expired ones go; the
# cache never holds refusals, so a stream of made-up keys cannot grow it.
MAX_ENTRIES = 1000

_lock = threading.Lock()
# sha256 of a key -> (the KeyCheck of its active client, time.monotonic() when its row was read)
_entries: dict[str, tuple[object, float]] = {}


def get(key_hash: str):
    """The cached check of the key with this hash, or None when there is none or it is too old."""
    entry = _entries.get(key_hash)
    if entry is None or time.monotonic() - entry[1] >= KEY_CACHE_SECONDS:
        return None
    return entry[0]


def put(key_hash: str, check, read_at: float) -> None:
    """Keep a check whose row was read starting at `read_at` (time.monotonic()): its life counts
    from before the query, so a revocation that committed while it ran is seen within the bound."""
    with _lock:
        if len(_entries) >= MAX_ENTRIES:
            now = time.monotonic()
            for stale in [h for h, (_, at) in _entries.items() if now - at >= KEY_CACHE_SECONDS]:
                del _entries[stale]
            if len(_entries) >= MAX_ENTRIES:
                _entries.clear()
        _entries[key_hash] = (check, read_at)


def forget(*args, **kwargs) -> None:
    """Empty this process's cache: a key was revoked, or who may do what changed. Now, and again
    when the change's transaction commits: until then another thread's request still reads the
    rows as they were, and would keep them. (Takes any arguments, so it can receive a model
    signal too.)"""
    _clear()
    if connection.in_atomic_block:
        transaction.on_commit(_clear)


def _clear() -> None:
    with _lock:
        _entries.clear()
