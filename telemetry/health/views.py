"""/healthz and /readyz, for load balancers and orchestrators: JSON, open, never a secret in them."""

from django.db import DatabaseError
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from retryops import migrated, probes
from telemetry.health import heartbeats, readiness


@never_cache
@require_safe
def healthz(request):
    """The process is up and serves requests: 200 whatever PostgreSQL and Redis say (a liveness
    probe that failed with them would restart every web process during a database outage)."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_safe
def readyz(request):
    """Ready to serve: PostgreSQL answers and has every migration. 200 when it does, else 503;
    each check says its state, and `failing` names the checks that make it not ready.

    Redis and the read replica are reported, never failing it: the console and the API serve
    without Redis (the throttles let requests through, a task started waits in the database for
    the dispatcher), and a Redis outage, a silent worker or a bad row, which every web process
    shares, would take them all off the balancer: an outage. The workers', schedulers' and ops
    processes' liveness and the invariant counts are metrics with alerts (telemetry.health.heartbeats,
    telemetry.health.readiness)."""
    database = probes.database_ok()
    checks = {"database": {"state": "ok" if database else "down"}}
    missing = None
    if database:
        try:
            missing = migrated.missing_migrations()
        except DatabaseError:  # it stopped answering between the two
            database, checks["database"] = False, {"state": "down"}
    if missing is None:
        checks["migrations"] = {"state": "unknown"}
    elif missing:
        checks["migrations"] = {"state": "missing", "count": len(missing), "missing": missing[:migrated.NAMED],
                                "hint": "manage.py migrate"}
    else:
        checks["migrations"] = {"state": "ok"}
    checks["redis"] = {"state": "ok" if probes.redis_ok(heartbeats.TIMEOUT) else "unreachable"}
    # Reported, never failing: the primary serves the replica's reads while it is down or behind.
    checks["replica"] = readiness.replica_report()
    failing = [name for name, check in checks.items() if check["state"] in ("down", "missing")]
    ready = not failing
    response = JsonResponse({"status": "ready" if ready else "not_ready", "checks": checks, "failing": failing},
                            status=200 if ready else 503)
    # Django logs every 5xx as an error; a balancer probing every few seconds would fill the log
    # with them while the database is down (the alerts say that once). The flag is Django's own.
    response._has_been_logged = True
    return response
