"""Throttling per client: each API client (or session user, or anonymous address) may send
RETRYOPS_API_READ_RATE reads and RETRYOPS_API_WRITE_RATE writes, counted in Redis (the cache
RETRYOPS_API_THROTTLE_CACHE) so every web process shares the count.

A fixed window counter: one INCR per request, in one round trip (_counted), where DRF's
SimpleRateThrottle reads and rewrites the list of every request's time in the window (6,000
floats per request at 6,000/min). A client
may send up to twice its rate across a window's boundary, which is the price of that. A Redis
that does not answer lets requests through: throttling protects the service, and a Redis outage
must not refuse a retry that the database can take (see scheduling.queueing)."""

import logging
import math
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
        key = f"throttle:{scope}:{self._who(request)}:{seconds}:{window}"
        try:
            count = _counted(caches[settings.RETRYOPS_API_THROTTLE_CACHE], key, seconds + 1)
        except (RedisError, OSError) as exc:
            log.warning("throttle not counted, request let through: %s", exc)
            return True
        if count > limit:
            self._wait = (window + 1) * seconds - now
            return False
        return True

    def wait(self) -> float:
        return math.ceil(getattr(self, "_wait", 1.0))


def _counted(cache, key: str, timeout: int) -> int:
    """The window's count with this request, in one round trip to Redis: the cache's add, then
    incr (which asks EXISTS before its INCR), took three on every request but a window's first.
    The key is the cache's (its prefix and version) and holds a plain integer, as cache.add
    would write it."""
    name = cache.make_and_validate_key(key)
    # Django's RedisCache has no pipeline of its own; its client reaches the same server (or
    # Sentinel's master) as every other cache call.
    pipe = cache._cache.get_client(name, write=True).pipeline(transaction=True)
    pipe.set(name, 0, nx=True, ex=timeout)
    pipe.incr(name)
    return pipe.execute()[1]
