"""Throttling per client: each API client (or session user, or anonymous address) may send
RETRYOPS_API_READ_RATE reads and RETRYOPS_API_WRITE_RATE writes, counted in Redis (the cache
RETRYOPS_API_THROTTLE_CACHE) so every web process shares the count.

A fixed window counter, INCRBY in one round trip (_counted), where DRF's SimpleRateThrottle reads
and rewrites the list of every request's time in the window (6,000 floats per request at
6,000/min). A client may send up to twice its rate across a window's boundary, which is the price
of that. A process counts a client's requests itself and adds them to Redis a batch at a time, a
hundredth of the rate (BATCH_SHARE): a round trip per 30 writes at 3,000/min instead of one per
request, exact for rates under 200 a window, and every request counted in Redis once the count
nears the limit. A client may then pass its limit by what the other processes have not added yet,
under a batch each (1% of its rate per web process). A Redis that does not answer lets requests
through: throttling protects the service, and a Redis outage must not refuse a retry that the
database can take (see scheduling.queueing)."""

import logging
import math
import threading
import time

from django.conf import settings
from django.core.cache import caches
from redis.exceptions import RedisError
from rest_framework.throttling import BaseThrottle

from retryops.api.authentication import api_client_of

log = logging.getLogger(__name__)

READ_METHODS = ("GET", "HEAD", "OPTIONS")
_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """(requests, seconds) of a rate written as DRF writes it: "600/min", "20/s", "10000/day"."""
    count, _, period = rate.partition("/")
    return int(count), _PERIODS[period.strip()[:1].lower()]


class ClientRateThrottle(BaseThrottle):
    """Reads and writes counted apart, per client, against the rates in the settings."""

    def _rate(self, request) -> tuple[str, str]:
        if not (request.user and request.user.is_authenticated):
            return "anon", settings.RETRYOPS_API_ANON_RATE
        if request.method in READ_METHODS:
            return "read", settings.RETRYOPS_API_READ_RATE
        return "write", settings.RETRYOPS_API_WRITE_RATE

    def _who(self, request) -> str:
        client = api_client_of(request)
        if client is not None:
            return f"client:{client.pk}"
        if request.user and request.user.is_authenticated:
            return f"user:{request.user.pk}"
        return f"addr:{self.get_ident(request)}"

    def allow_request(self, request, view) -> bool:
        scope, rate = self._rate(request)
        if not rate:
            return True
        limit, seconds = parse_rate(rate)
        now = time.time()
        window = int(now // seconds)
        who = f"throttle:{scope}:{self._who(request)}:{seconds}"
        key = f"{who}:{window}"
        batch = max(1, limit // BATCH_SHARE)
        adding, known = _pending.add(who, window, batch=batch, limit=limit)
        if adding:
            try:
                known = _counted(caches[settings.RETRYOPS_API_THROTTLE_CACHE], key, seconds + 1, adding)
            except (RedisError, OSError) as exc:
                log.warning("throttle not counted, request let through: %s", exc)
                return True
            _pending.heard(who, window, known)
        if known > limit:
            self._wait = (window + 1) * seconds - now
            return False
        return True

    def wait(self) -> float:
        return math.ceil(getattr(self, "_wait", 1.0))


# A process's share of the count: how many requests a batch holds before they go to Redis.
BATCH_SHARE = 100
# Clients counted at once by one process past which its table starts again (a batch of each is lost).
MAX_COUNTED = 10_000


class _Pending:
    """This process's requests per client and window not yet added to Redis, and the count Redis
    last answered; shared by the worker's threads."""

    def __init__(self):
        self._lock = threading.Lock()
        # "throttle:<scope>:<who>:<seconds>" -> [window, requests not added yet, count Redis answered]
        self._counts: dict[str, list[int]] = {}

    def add(self, who: str, window: int, *, batch: int, limit: int) -> tuple[int, int]:
        """Count one request: (requests to add to Redis now, 0) when a batch is full or the count
        nears the limit, else (0, the count as far as this process knows it)."""
        with self._lock:
            entry = self._counts.get(who)
            if entry is None or entry[0] != window:
                if len(self._counts) >= MAX_COUNTED:
                    self._counts.clear()
                entry = self._counts[who] = [window, 0, 0]
            entry[1] += 1
            if entry[1] >= batch or entry[2] + entry[1] + batch > limit:
                adding, entry[1] = entry[1], 0
                return adding, 0
            return 0, entry[2] + entry[1]

    def heard(self, who: str, window: int, count: int) -> None:
        with self._lock:
            entry = self._counts.get(who)
            if entry is not None and entry[0] == window:
                entry[2] = max(entry[2], count)


_pending = _Pending()


def _counted(cache, key: str, timeout: int, adding: int = 1) -> int:
    """The window's count with `adding` more requests, in one round trip to Redis: the cache's
    add, then incr (which asks EXISTS before its INCR), took three. The key is the cache's (its
    prefix and version) and holds a plain integer, as cache.add would write it."""
    name = cache.make_and_validate_key(key)
    # Django's RedisCache has no pipeline of its own; its client reaches the same server (or
    # Sentinel's master) as every other cache call.
    pipe = cache._cache.get_client(name, write=True).pipeline(transaction=True)
    pipe.set(name, 0, nx=True, ex=timeout)
    pipe.incrby(name, adding)
    return pipe.execute()[1]
