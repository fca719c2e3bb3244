"""/healthz and /readyz, for load balancers and orchestrators: JSON, open, never a secret in them."""

from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from redis.exceptions import RedisError

from retryops import probes
from telemetry import heartbeats


@never_cache
@require_safe
def healthz(request):
    """The process is up and serves requests: 200 whatever PostgreSQL and Redis say (a liveness
    probe that failed with them would restart every web process during a database outage)."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_safe
def readyz(request):
    """Ready to do the work: PostgreSQL and Redis answer, every queue has a worker and every
    scheduler was seen in the last minute (telemetry.heartbeats). 200 when all is well, else 503;
    each check says its state, and `silent` names the components nobody saw."""
    database = probes.database_ok()
    checks = {"database": {"state": "ok" if database else "down"}}
    try:
        seen = heartbeats.sightings() if probes.redis_ok(heartbeats.TIMEOUT) else None
    except RedisError:  # it stopped answering between the two
        seen = None
    if seen is None:
        checks["redis"] = {"state": "down"}
        checks["workers"] = checks["schedulers"] = {"state": "unknown"}
        silent = heartbeats.NOBODY.silent
    else:
        checks["redis"] = {"state": "ok"}
        checks["workers"] = {"state": "ok" if all(seen.workers.values()) else "silent", "seen": seen.workers}
        checks["schedulers"] = {"state": "ok" if all(seen.schedulers.values()) else "silent",
                                "seen": seen.schedulers}
        silent = seen.silent
    ready = database and seen is not None and not silent
    response = JsonResponse({"status": "ready" if ready else "not_ready", "checks": checks, "silent": silent},
                            status=200 if ready else 503)
    # Django logs every 5xx as an error; a balancer probing every few seconds would fill the log
    # with them while a worker is down (the alerts say that once). The flag is Django's own.
    response._has_been_logged = True
    return response
