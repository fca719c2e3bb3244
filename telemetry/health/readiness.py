"""The data's health as metrics, read-only: the invariant checker's fast checks
(telemetry.health.invariants), counted by the ops process every INVARIANTS_EVERY seconds in one read-only
transaction whose statements together get BUDGET_MS at most, and kept in the shared cache for
/metrics (`InvariantCollector`). A violation is a data problem: an alert, never a reason to take
web processes off the balancer.

It also says how this process last found the read replica (retryops.replica), which /readyz
reports, never failing for it: the primary serves its reads meanwhile."""

import logging
import threading
import time
from contextlib import closing
from dataclasses import replace

from django.core.cache import cache
from django.db import DatabaseError, connection, connections, transaction
from django.utils import timezone
from redis import Redis
from redis.exceptions import RedisError

from retryops import probes, redis_servers, replica
from scheduling.queueing import FLOW_QUEUE
from telemetry.health.invariants import CHECKS, DEEP, Horizons

log = logging.getLogger(__name__)

REPORT_KEY = "invariants:report"
INVARIANTS_EVERY = 60
# The fast checks' statements together get this many milliseconds.
BUDGET_MS = 2000
# The checks a probe may run: every one but the full scans.
FAST = tuple(name for name in CHECKS if name not in DEEP)


# One check of the replica at a time in this process.
_checking_replica = threading.Lock()


class _OutOfTime(Exception):
    pass


def _jobs_redis(timeout: float) -> Redis:
    """The flow queue's Redis, giving up after `timeout` seconds. Not the queue's own connection:
    that one has no read timeout of ours (a worker's blocking pop waits on it longer than a probe
    may; redis-py before 8 sets none at all), and on a Redis host that drops packets this thread
    would wait on it, its transaction open, for as long as the kernel retries."""
    return redis_servers.client(probes.queue_server(FLOW_QUEUE), timeout)


def check_now(*, budget_ms: int | None = None) -> dict:
    """Run the fast checks now in this thread, in one read-only transaction, each statement, and
    each read of Redis, limited to what is left of the budget; count each check's violations."""
    budget = (budget_ms or BUDGET_MS) / 1000
    started, counts, state, detail = time.monotonic(), {}, "ok", ""
    try:
        own_transaction = not connection.in_atomic_block
        with transaction.atomic():
            with connection.cursor() as cursor:
                if own_transaction:  # (a caller's transaction, a test's, is left as it was)
                    # Whatever a check does, this transaction cannot write.
                    cursor.execute("SET TRANSACTION READ ONLY")
                cursor.execute("SHOW statement_timeout")
                [(timeout_before,)] = cursor.fetchall()
                horizons = Horizons.from_settings()
                for name in FAST:
                    left = int((budget - (time.monotonic() - started)) * 1000)
                    if left < 1:
                        raise _OutOfTime
                    cursor.execute("SELECT set_config('statement_timeout', %s, true)", [f"{left}ms"])
                    with closing(_jobs_redis(left / 1000)) as redis:
                        counts[name] = len(CHECKS[name](replace(horizons, jobs_redis=redis)))
                cursor.execute("SELECT set_config('statement_timeout', %s, true)", [timeout_before])
    except _OutOfTime:
        state = "timeout"
    except DatabaseError as exc:
        # 57014 query_canceled: the statement timeout; anything else (a lost connection) is an error.
        timed_out = getattr(getattr(exc, "__cause__", None), "sqlstate", None) == "57014"
        state, detail = ("timeout", "") if timed_out else ("error", type(exc).__name__)
    except RedisError as exc:  # the overdue check's read of RQ's jobs: Redis, not the data, is the problem
        state, detail = "error", f"redis: {type(exc).__name__}"
    if state == "ok" and any(counts.values()):
        state = "violations"
    report = {"state": state, "violations": counts, "unfinished": [n for n in FAST if n not in counts],
              "checked_at": timezone.now().isoformat(), "took_ms": round((time.monotonic() - started) * 1000)}
    if detail:
        report["error"] = detail
    if state != "ok":
        report["hint"] = "manage.py check_invariants"
    return report


def check_invariants_job() -> dict:
    """Periodic: count the fast checks' violations, for /metrics."""
    report = check_now()
    cache.set(REPORT_KEY, report, timeout=3 * INVARIANTS_EVERY)
    return report


class InvariantCollector:
    """/metrics: retryops_invariant_violations{check}, what the last run of the checks counted
    (one read of the shared cache; no sample before the first run, nor for a check it did not
    finish)."""

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily("retryops_invariant_violations", "Rows breaking an invariant, by check, as "
                                   "the last run of the invariant checker's fast checks counted them.",
                                   labels=["check"])
        try:
            report = cache.get(REPORT_KEY)
        except Exception:  # the cache's Redis: the heartbeats' gauges say it is down
            report = None
        for name, count in (report or {}).get("violations", {}).items():
            family.add_metric([name], count)
        yield family


def _check_replica() -> None:
    try:
        replica.check_replica()
    except Exception:  # a thread's exception would only reach stderr; the next probe tries again
        log.exception("readyz: checking the read replica failed")
    finally:
        connections[replica.REPLICA].close()  # this thread's own connection, which nothing else would close
        _checking_replica.release()


def replica_report() -> dict:
    """The read replica as this process last found it: ok, unreachable, or lagging (lag_seconds
    behind; absent when it cannot say). Checked again, when stale, in a thread of its own: a replica
    whose host drops packets would hold the probe for a whole connect timeout. off: none
    configured; pending: not checked yet."""
    if replica.REPLICA not in connections.settings:
        return {"state": "off"}
    health = replica.replica_health(check=False)
    if (health is None or not health.fresh(time.monotonic())) and _checking_replica.acquire(blocking=False):
        threading.Thread(target=_check_replica, name="readyz-replica", daemon=True).start()
    if health is None:
        return {"state": "pending"}
    report = {"state": health.state}
    if health.lag_seconds is not None:
        report["lag_seconds"] = round(health.lag_seconds, 1)
    if health.error:
        report["error"] = health.error
    return report


class ReplicaCollector:
    """/metrics: retryops_replica_in_use (1: the heavy pages read the replica; 0: it is unreachable
    or lagging and they read the primary) and retryops_replica_lag_seconds, as the process answering
    the scrape last found them (what /readyz reports; no sample without a replica, nor before its
    first check, nor a lag the replica could not say)."""

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        in_use = GaugeMetricFamily("retryops_replica_in_use", "1 when the console's heavy pages read the read "
                                   "replica, 0 when it is unreachable or lagging and they read the primary.")
        lag = GaugeMetricFamily("retryops_replica_lag_seconds", "Seconds the read replica is behind the primary "
                                "(0 when it has replayed all it received).")
        report = replica_report()
        if report["state"] in (replica.OK, replica.UNREACHABLE, replica.LAGGING):
            in_use.add_metric([], 1 if report["state"] == replica.OK else 0)
        if "lag_seconds" in report:
            lag.add_metric([], report["lag_seconds"])
        yield in_use
        yield lag
