"""Quick looks at the servers RetryOps needs, shared by /readyz and the console's
RQ panel: each answers within a short timeout, never hangs a request."""

import functools

from django.conf import settings
from django.db import DatabaseError, connection
from redis import Redis
from redis.exceptions import RedisError

from retryops import redis_servers


@functools.lru_cache(maxsize=8)
def redis_client(server: "str | redis_servers.SentinelMaster", timeout: float) -> Redis:
    """A client of `server` (a URL, or the master of REDIS_SENTINELS) that gives up after `timeout`
    seconds, kept per process so a check polled every few seconds reuses its connections instead
    of opening new ones."""
    return redis_servers.client(server, timeout)


def queue_server(queue: str) -> "str | redis_servers.SentinelMaster":
    """The Redis of an RQ queue, for redis_client."""
    return redis_servers.queue_server(settings.RQ_QUEUES[queue])


def queues_redis(timeout: float = 1.0) -> Redis:
    """The Redis of the RQ queues (all of them share RQ_QUEUES["default"]'s server)."""
    return redis_client(queue_server("default"), timeout)


def database_ok() -> bool:
    """Whether PostgreSQL answers a query."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except DatabaseError:
        return False


def redis_ok(timeout: float = 1.0) -> bool:
    """Whether the queues' Redis answers a PING within `timeout` seconds."""
    try:
        return bool(queues_redis(timeout).ping())
    except (RedisError, OSError):
        return False
