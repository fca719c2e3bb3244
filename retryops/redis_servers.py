"""Where RetryOps's Redis is: one server at REDIS_URL, or whichever server a set of Redis Sentinels
says is the master (REDIS_SENTINELS), found again after a failover with no setting changed.

Settings build the queues' and the cache's configuration here; the probes, the heartbeats and the
console's RQ panel open their short-timeout clients through `client()`. Nothing here reads
Django's settings at import, so settings.py can use it.
"""

from dataclasses import dataclass

from redis import Redis
from redis.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection

# A sentinel that does not answer within this is skipped for the next one: a host that drops
# packets would otherwise hang every enqueue while it asks who the master is.
SENTINEL_TIMEOUT_SECONDS = 1.0
# Connecting to the master; no read timeout here, as a worker's BLPOP waits on the socket for long.
CONNECT_TIMEOUT_SECONDS = 2.0


class SentinelConnection(SentinelManagedConnection):
    """redis-py's sentinel connection keeps a connection whose reply was never read (a read that
    timed out, a worker's BLPOP cut by SIGTERM) in its pool, and the next command on it reads the
    previous command's reply (redis/redis-py#4292, open): a stopping worker then hangs until its
    BLPOP times out. Every other redis-py connection drops such a connection, as this one does."""

    def read_response(self, disable_decoding=False, *, disconnect_on_error=True, **kwargs):
        return super().read_response(disable_decoding, disconnect_on_error=disconnect_on_error, **kwargs)


@dataclass(frozen=True)
class SentinelMaster:
    """The Redis a set of sentinels watches under `name`: an address that moves on failover."""

    sentinels: tuple[tuple[str, int], ...]
    name: str
    db: int = 0
    # The master's (and its replicas') password, and the sentinels' own, if they have one.
    password: str = ""
    sentinel_password: str = ""

    def sentinel_kwargs(self, timeout: float = SENTINEL_TIMEOUT_SECONDS) -> dict:
        return {"socket_timeout": timeout, "socket_connect_timeout": timeout,
                "password": self.sentinel_password or None}

    def rq_connection(self) -> dict:
        """A queue's connection in django-rq's keys (django_rq.connection_utils.get_redis_connection)."""
        return {"SENTINELS": [list(address) for address in self.sentinels], "MASTER_NAME": self.name, "DB": self.db,
                "PASSWORD": self.password or None, "SENTINEL_KWARGS": self.sentinel_kwargs(),
                "CONNECTION_KWARGS": {"socket_connect_timeout": CONNECT_TIMEOUT_SECONDS,
                                      "connection_class": SentinelConnection}}

    @classmethod
    def of_rq_connection(cls, config: dict) -> "SentinelMaster":
        return cls(sentinels=tuple((host, int(port)) for host, port in config["SENTINELS"]),
                   name=config["MASTER_NAME"], db=config.get("DB") or 0, password=config.get("PASSWORD") or "",
                   sentinel_password=(config.get("SENTINEL_KWARGS") or {}).get("password") or "")

    def cache_options(self) -> dict:
        """OPTIONS of Django's RedisCache for this master (LOCATION is then only a label)."""
        return {"pool_class": "retryops.redis_servers.SentinelCachePool", "master": self}

    def client(self, timeout: float) -> Redis:
        """A client of the current master that gives up after `timeout` seconds."""
        sentinel = Sentinel(self.sentinels, sentinel_kwargs=self.sentinel_kwargs(timeout), db=self.db,
                            password=self.password or None, socket_timeout=timeout, socket_connect_timeout=timeout)
        return sentinel.master_for(self.name, connection_class=SentinelConnection)


class SentinelCachePool(SentinelConnectionPool):
    """Django's RedisCache builds its pools with `pool_class.from_url(LOCATION, **OPTIONS)`: here
    OPTIONS carries the SentinelMaster, and the URL is not used."""

    @classmethod
    def from_url(cls, url: str, *, master: SentinelMaster, parser_class=None, **options):
        if parser_class is not None:
            options["parser_class"] = parser_class
        sentinel = Sentinel(master.sentinels, sentinel_kwargs=master.sentinel_kwargs())
        return cls(master.name, sentinel, db=master.db, password=master.password or None,
                   connection_class=SentinelConnection, **options)


def queue_server(config: dict) -> "str | SentinelMaster":
    """Which Redis an RQ_QUEUES entry names: its URL, or its sentinels' master. Equal for queues on
    the same server, so callers can visit each server once."""
    return config["URL"] if "URL" in config else SentinelMaster.of_rq_connection(config)


def client(server: "str | SentinelMaster", timeout: float) -> Redis:
    """A client of `server` (a URL or a SentinelMaster) that gives up after `timeout` seconds."""
    if isinstance(server, SentinelMaster):
        return server.client(timeout)
    return Redis.from_url(server, socket_timeout=timeout, socket_connect_timeout=timeout)
