"""Which RQ workers and schedulers were seen lately, read from the heartbeats they leave in Redis,
and which ops processes (retryops.ops) are connected to PostgreSQL: for the alerts' "component
silent" rule (`silent_components`) and /metrics (`HeartbeatCollector`).

What each one leaves (rq 2.12):
- a worker: its hash `rq:worker:<name>` (its queues, `last_heartbeat`), listed in `rq:workers`. An
  idle worker heartbeats each time its blocking pop times out, every worker_ttl - 15 s: 405 s with
  RQ's default TTL, far past "seen in the last minute". Ours are started with `--worker-ttl
  WORKER_TTL` (`manage.py up`, docs/deployment.md's deploy commands), so an idle one heartbeats every
  30 s; a busy forking worker heartbeats every 30 s while it watches its work horse. A
  SimpleWorker (RETRYOPS_WORKER_CLASS) does not heartbeat while it runs a job: one flow longer
  than a minute makes it look silent.
- RQ's scheduler (`rqworker --with-scheduler`): the lock `rq:scheduler-lock:<queue>` of each queue
  it moves delayed jobs for, naming it, and its hash `rq:scheduler:<name>` with `last_heartbeat`,
  refreshed every second.
- an ops process (`manage.py ops`): no heartbeat of its own. Its lock's connection carries
  OPS_APPLICATION_NAME, and the leader's holds the advisory lock OPS_LOCK_KEY, so PostgreSQL says
  who is alive and who leads, and a dead one vanishes with its connection.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import DatabaseError, connection
from django.utils import timezone
from redis.exceptions import RedisError
from rq.scheduler import SCHEDULER_KEY_TEMPLATE, SCHEDULER_LOCKING_KEY_TEMPLATE
from rq.utils import utcparse
from rq.worker_registration import REDIS_WORKER_KEYS

from retryops.probes import queue_server, redis_client
from scheduling.queueing import FLOW_QUEUE, RETRY_QUEUE, WORKER_QUEUES

SEEN_WITHIN = timedelta(seconds=60)
# Passed to every `rqworker` as --worker-ttl: an idle worker then heartbeats every 30 s (RQ's
# blocking pop times out at TTL - 15 s), twice within SEEN_WITHIN.
WORKER_TTL = 45
# Each queue needs a worker that takes from it.
QUEUES = WORKER_QUEUES
# The queues that get delayed jobs (queueing.enqueue_attempt's enqueue_at): RQ's scheduler must
# hold their locks, or a retry waits until the dispatcher's sweep finds it overdue.
DELAYED_QUEUES = (RETRY_QUEUE, FLOW_QUEUE)
# The ops processes' lock (pg_try_advisory_lock's one bigint key) and their connections' name.
OPS_LOCK_KEY = 230_001
OPS_APPLICATION_NAME = "retryops ops"
# Redis is asked with this timeout: a check must answer a load balancer quickly.
TIMEOUT = 1.0


@dataclass(frozen=True)
class Sightings:
    """How many live workers take from each queue, and how many live schedulers of each kind."""

    workers: dict[str, int]
    schedulers: dict[str, int]

    @property
    def silent(self) -> list[str]:
        """The components nobody saw: "worker:<queue>", "scheduler:rq:<queue>"."""
        return ([f"worker:{queue}" for queue, seen in self.workers.items() if not seen]
                + [f"scheduler:{name}" for name, seen in self.schedulers.items() if not seen])


SCHEDULERS = [f"rq:{queue}" for queue in DELAYED_QUEUES]
NOBODY = Sightings(workers=dict.fromkeys(QUEUES, 0), schedulers=dict.fromkeys(SCHEDULERS, 0))


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")


def _recent(raw, *, since: datetime) -> bool:
    try:
        return bool(raw) and utcparse(_text(raw)) >= since
    except ValueError:
        return False


def sightings(*, now: datetime | None = None, timeout: float = TIMEOUT) -> Sightings:
    """Who heartbeated within SEEN_WITHIN of `now`: two pipelined round trips per Redis (the list,
    then each one's hash), whatever the number of jobs. Raises RedisError when Redis does not
    answer within `timeout` seconds."""
    now = now or timezone.now()
    since = now - SEEN_WITHIN
    workers, schedulers = dict.fromkeys(QUEUES, 0), dict.fromkeys(SCHEDULERS, 0)
    # RQ keeps a worker and its scheduler in the Redis of their queues.
    for server in dict.fromkeys(map(queue_server, QUEUES)):
        redis = redis_client(server, timeout)
        delayed = [queue for queue in DELAYED_QUEUES if queue_server(queue) == server]
        with redis.pipeline(transaction=False) as pipe:
            pipe.smembers(REDIS_WORKER_KEYS)
            for queue in delayed:
                pipe.get(SCHEDULER_LOCKING_KEY_TEMPLATE % queue)
            worker_keys, *rest = pipe.execute()
        holders = dict(zip(delayed, map(_text, rest)))
        worker_keys = sorted(map(_text, worker_keys))
        with redis.pipeline(transaction=False) as pipe:
            for key in worker_keys:
                pipe.hmget(key, "queues", "last_heartbeat")
            for holder in holders.values():
                pipe.hget(SCHEDULER_KEY_TEMPLATE % holder, "last_heartbeat")
            answers = pipe.execute()
        for queues, beat in answers[:len(worker_keys)]:
            if _recent(beat, since=since):
                for queue in _text(queues).split(","):
                    if queue in workers and queue_server(queue) == server:
                        workers[queue] += 1
        answers = answers[len(worker_keys):]
        for (queue, holder), beat in zip(holders.items(), answers):
            schedulers[f"rq:{queue}"] = int(bool(holder) and _recent(beat, since=since))
    return Sightings(workers=workers, schedulers=schedulers)


def ops_processes() -> tuple[int, int]:
    """(ops processes connected, those holding the ops lock: 1 while one leads)."""
    with connection.cursor() as cursor:
        # pg_stat_activity is read once per transaction otherwise, and a caller's may be long.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*), count(*) FILTER (WHERE EXISTS (SELECT FROM pg_locks l WHERE l.pid = a.pid "
            "AND l.locktype = 'advisory' AND l.classid = 0 AND l.objid = %s AND l.objsubid = 1 AND l.granted)) "
            "FROM pg_stat_activity a WHERE a.application_name = %s", [OPS_LOCK_KEY, OPS_APPLICATION_NAME])
        return cursor.fetchone()


def silent_components(*, now: datetime | None = None) -> list[str]:
    """The queues without a live worker ("worker:flows"), the schedulers not seen
    ("scheduler:rq:retries") in the last minute, and "ops" when no ops process leads; every worker
    and scheduler when Redis does not answer, since then nobody can be seen."""
    try:
        silent = sightings(now=now).silent
    except RedisError:
        silent = NOBODY.silent
    try:
        leading = ops_processes()[1]
    except DatabaseError:
        leading = 0
    return silent if leading else [*silent, "ops"]


class HeartbeatCollector:
    """/metrics: retryops_workers_seen{queue} and retryops_schedulers_seen{scheduler}, the live
    workers and schedulers of the last minute (all 0 when Redis does not answer); retryops_ops_processes
    and retryops_ops_leader (no sample when PostgreSQL does not answer)."""

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        try:
            seen = sightings()
        except RedisError:
            seen = NOBODY
        workers = GaugeMetricFamily("retryops_workers_seen", "RQ workers that heartbeated in the last minute, by "
                                    "queue they take from.", labels=["queue"])
        for queue, count in seen.workers.items():
            workers.add_metric([queue], count)
        schedulers = GaugeMetricFamily("retryops_schedulers_seen", "RQ's schedulers of a queue's delayed jobs "
                                       "that heartbeated in the last minute.", labels=["scheduler"])
        for name, count in seen.schedulers.items():
            schedulers.add_metric([name], count)
        yield workers
        yield schedulers
        try:
            alive, leading = ops_processes()
        except DatabaseError:
            return
        yield GaugeMetricFamily("retryops_ops_processes", "Ops processes (manage.py ops) connected to the "
                                "database, the leader and its standbys.", value=alive)
        yield GaugeMetricFamily("retryops_ops_leader", "1 while an ops process holds the ops lock and runs "
                                "the periodic steps, else 0.", value=leading)
