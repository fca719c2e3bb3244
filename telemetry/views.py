"""/healthz and /readyz, for load balancers and orchestrators: JSON, open, never a secret in them."""

from django.conf import settings
from django.db import DatabaseError
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from redis.exceptions import RedisError

from retryops import migrated, probes
from telemetry import heartbeats, readiness


@never_cache
@require_safe
def healthz(request):
    """The process is up and serves requests: 200 whatever PostgreSQL and Redis say (a liveness
    probe that failed with them would restart every web process during a database outage)."""
    return JsonResponse({"status": "ok"})


# /readyz?scope=web: what a web process needs to serve the console and the API, for load balancers.
# A query parameter rather than a path of its own: one probe view, one path in ProbeMiddleware and
# telemetry.urls, as Kubernetes' own /readyz takes its options.
WEB_SCOPE = "web"


@never_cache
@require_safe
def readyz(request):
    """Ready to do the work: PostgreSQL and Redis answer, the database has every migration, every
    queue has a worker and every scheduler was seen in the last minute (telemetry.heartbeats).
    200 when all is well, else 503; each check says its state, `failing` names the checks that make
    it not ready, and `silent` the components nobody saw. The invariant checker's counts are
    reported (telemetry.readiness), and fail it only when RETRYOPS_READYZ_FAIL_ON_INVARIANTS is set;
    the read replica's state is reported only.

    With ?scope=web, for load balancers: PostgreSQL and its migrations only (Redis and the replica
    reported). A silent worker, scheduler or cron (a worker deploy, RQ's scheduler after a Redis
    failover) does not stop this process serving the console and the API, so it must not take it
    off the balancer; nor does Redis down (the throttles let requests through, a task started waits
    in the database for the dispatcher), which every web process shares: failing them all would
    turn it into an outage. Nor is a data problem looked for here."""
    scope = request.GET.get("scope")
    if scope is not None and scope != WEB_SCOPE:
        return JsonResponse({"error": f"scope={scope!r} is not known: use scope={WEB_SCOPE} (what a web process "
                                      "needs, for load balancers) or no scope (the whole deployment)"}, status=400)
    web_only = scope == WEB_SCOPE
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
    body = {}
    if web_only:
        # Reported, never failing: see the docstring ("down" would fail it).
        checks["redis"] = {"state": "ok" if probes.redis_ok(heartbeats.TIMEOUT) else "unreachable"}
    else:
        checks["invariants"] = readiness.invariants_report() if missing == [] else {"state": "unknown"}
        try:
            seen = heartbeats.sightings() if probes.redis_ok(heartbeats.TIMEOUT) else None
        except RedisError:  # it stopped answering between the two
            seen = None
        if seen is None:
            checks["redis"] = {"state": "down"}
            checks["workers"] = checks["schedulers"] = {"state": "unknown"}
            body["silent"] = heartbeats.NOBODY.silent
        else:
            checks["redis"] = {"state": "ok"}
            checks["workers"] = {"state": "ok" if all(seen.workers.values()) else "silent", "seen": seen.workers}
            checks["schedulers"] = {"state": "ok" if all(seen.schedulers.values()) else "silent",
                                    "seen": seen.schedulers}
            body["silent"] = seen.silent
    # Reported, never failing: the primary serves the replica's reads while it is down or behind.
    checks["replica"] = readiness.replica_report()
    fail_on_invariants = settings.RETRYOPS_READYZ_FAIL_ON_INVARIANTS
    failing = [name for name, check in checks.items()
               if check["state"] in ("down", "missing", "silent")
               or (name == "invariants" and fail_on_invariants and check["state"] == "violations")]
    ready = not failing
    response = JsonResponse({"status": "ready" if ready else "not_ready", "checks": checks, "failing": failing,
                             **body}, status=200 if ready else 503)
    # Django logs every 5xx as an error; a balancer probing every few seconds would fill the log
    # with them while a worker is down (the alerts say that once). The flag is Django's own.
    response._has_been_logged = True
    return response
