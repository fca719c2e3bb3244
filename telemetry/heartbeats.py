"""Which RQ workers and schedulers were seen lately, read from the heartbeats they leave in Redis:
for /readyz, the alerts' "component silent" rule (`silent_components`) and /metrics
(`HeartbeatCollector`).

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
- a cron scheduler (`manage.py rqcron <config>`): its score (the time) in the sorted set
  `rq:cron_schedulers`, written after every round, and its hash `rq:cron_scheduler:<name>` naming its
  config. It sleeps until its next job, at most 60 s, so it gets CRON_GRACE on top of the minute.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone
from redis.exceptions import RedisError
from rq.cron_scheduler_registry import get_registry_key as cron_registry_key
from rq.scheduler import SCHEDULER_KEY_TEMPLATE, SCHEDULER_LOCKING_KEY_TEMPLATE
from rq.utils import utcparse
from rq.worker_registration import REDIS_WORKER_KEYS

from retryops.probes import queue_server, redis_client
from scheduling.queueing import FLOW_QUEUE, PERIODIC_QUEUE, RETRY_QUEUE, WORKER_QUEUES

SEEN_WITHIN = timedelta(seconds=60)
# Passed to every `rqworker` as --worker-ttl: an idle worker then heartbeats every 30 s (RQ's
# blocking pop times out at TTL - 15 s), twice within SEEN_WITHIN.
WORKER_TTL = 45
CRON_GRACE = timedelta(seconds=15)
# Each queue needs a worker that takes from it.
QUEUES = (*WORKER_QUEUES, PERIODIC_QUEUE)
# The queues that get delayed jobs (queueing.enqueue_attempt's enqueue_at): RQ's scheduler must
# hold their locks, or a retry waits until the dispatcher's sweep finds it overdue.
DELAYED_QUEUES = (RETRY_QUEUE, FLOW_QUEUE)
# The cron configs `manage.py up` runs (tests/telemetry/test_heartbeats.py checks the two agree).
CRON_CONFIGS = ("scheduling.cron", "compensation.cron", "audit.cron", "telemetry.cron")
# Redis is asked with this timeout: a check must answer a load balancer quickly.
TIMEOUT = 1.0


@dataclass(frozen=True)
class Sightings:
    """How many live workers take from each queue, and how many live schedulers of each kind."""

    workers: dict[str, int]
    schedulers: dict[str, int]

    @property
    def silent(self) -> list[str]:
        """The components nobody saw: "worker:<queue>", "scheduler:rq:<queue>", "scheduler:cron:<config>"."""
        return ([f"worker:{queue}" for queue, seen in self.workers.items() if not seen]
                + [f"scheduler:{name}" for name, seen in self.schedulers.items() if not seen])


def scheduler_names() -> list[str]:
    return [f"rq:{queue}" for queue in DELAYED_QUEUES] + [f"cron:{config}" for config in CRON_CONFIGS]


NOBODY = Sightings(workers=dict.fromkeys(QUEUES, 0), schedulers=dict.fromkeys(scheduler_names(), 0))


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")


def _recent(raw, *, since: datetime) -> bool:
    try:
        return bool(raw) and utcparse(_text(raw)) >= since
    except ValueError:
        return False


def _config_of(raw) -> str | None:
    """Which of CRON_CONFIGS a cron scheduler runs: rqcron takes a module ("scheduling.cron") or a
    file's path ("/srv/app/scheduling/cron.py")."""
    path = _text(raw).removesuffix(".py").replace("/", ".")
    return next((config for config in CRON_CONFIGS if path == config or path.endswith(f".{config}")), None)


def sightings(*, now: datetime | None = None, timeout: float = TIMEOUT) -> Sightings:
    """Who heartbeated within SEEN_WITHIN of `now`: two pipelined round trips per Redis (the list,
    then each one's hash), whatever the number of jobs. Raises RedisError when Redis does not
    answer within `timeout` seconds."""
    now = now or timezone.now()
    since = now - SEEN_WITHIN
    workers, schedulers = dict.fromkeys(QUEUES, 0), dict.fromkeys(scheduler_names(), 0)
    # RQ keeps a worker, its scheduler and the cron schedulers in the Redis of their queues.
    cron_server = queue_server(PERIODIC_QUEUE)
    for server in dict.fromkeys([*map(queue_server, QUEUES), cron_server]):
        redis = redis_client(server, timeout)
        delayed = [queue for queue in DELAYED_QUEUES if queue_server(queue) == server]
        with redis.pipeline(transaction=False) as pipe:
            pipe.smembers(REDIS_WORKER_KEYS)
            for queue in delayed:
                pipe.get(SCHEDULER_LOCKING_KEY_TEMPLATE % queue)
            if server == cron_server:
                pipe.zrangebyscore(cron_registry_key(), (now - SEEN_WITHIN - CRON_GRACE).timestamp(), "+inf")
            worker_keys, *rest = pipe.execute()
        holders = dict(zip(delayed, map(_text, rest[:len(delayed)])))
        crons = [_text(name) for name in rest[len(delayed)]] if server == cron_server else []
        worker_keys = sorted(map(_text, worker_keys))
        with redis.pipeline(transaction=False) as pipe:
            for key in worker_keys:
                pipe.hmget(key, "queues", "last_heartbeat")
            for holder in holders.values():
                pipe.hget(SCHEDULER_KEY_TEMPLATE % holder, "last_heartbeat")
            for name in crons:
                pipe.hget(f"rq:cron_scheduler:{name}", "config_file")
            answers = pipe.execute()
        for queues, beat in answers[:len(worker_keys)]:
            if _recent(beat, since=since):
                for queue in _text(queues).split(","):
                    if queue in workers and queue_server(queue) == server:
                        workers[queue] += 1
        answers = answers[len(worker_keys):]
        for (queue, holder), beat in zip(holders.items(), answers):
            schedulers[f"rq:{queue}"] = int(bool(holder) and _recent(beat, since=since))
        for config in map(_config_of, answers[len(holders):]):
            if config is not None:
                schedulers[f"cron:{config}"] += 1
    return Sightings(workers=workers, schedulers=schedulers)


def silent_components(*, now: datetime | None = None) -> list[str]:
    """The queues without a live worker ("worker:flows") and the schedulers not seen
    ("scheduler:rq:retries", "scheduler:cron:scheduling.cron") in the last minute; every one of
    them when Redis does not answer, since then nobody can be seen."""
    try:
        return sightings(now=now).silent
    except RedisError:
        return NOBODY.silent


class HeartbeatCollector:
    """/metrics: retryops_workers_seen{queue} and retryops_schedulers_seen{scheduler}, the live
    workers and schedulers of the last minute (all 0 when Redis does not answer)."""

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
        schedulers = GaugeMetricFamily("retryops_schedulers_seen", "Schedulers that heartbeated in the last minute: "
                                       "rq:<queue> is RQ's scheduler of a queue's delayed jobs, cron:<config> a "
                                       "manage.py rqcron process.", labels=["scheduler"])
        for name, count in seen.schedulers.items():
            schedulers.add_metric([name], count)
        yield workers
        yield schedulers
