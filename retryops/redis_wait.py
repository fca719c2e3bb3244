"""Workers that outlast a Redis outage: they say once that Redis is unreachable, wait
for it (retrying at most every LONGEST_WAIT_SECONDS), and carry on when it answers, instead of
exiting and being restarted into the same outage.

Nothing a job writes to PostgreSQL depends on Redis staying up: what an outage can lose is RQ's
own record of a job (its status, its registries), which the dispatcher redoes
(scheduling.jobs.dispatch_job). So a worker keeps watching a work horse that runs while Redis is
away, and only then waits.
"""

import logging
import time

from redis import Redis
from redis.connection import SSLConnection
from redis.exceptions import ConnectionError, TimeoutError
from rq import worker_registration

# What redis-py raises when the server cannot be reached (a refused or reset connection, a
# timeout); BusyLoadingError, a server still loading its data, is a ConnectionError too.
REDIS_ERRORS = (ConnectionError, TimeoutError)
FIRST_WAIT_SECONDS = 0.25
LONGEST_WAIT_SECONDS = 5.0

logger = logging.getLogger(__name__)


def location(connection: Redis) -> str:
    """Where `connection` points, for a log line: never its password."""
    pool = connection.connection_pool
    service = getattr(pool, "service_name", None)
    if service:
        return f"the master {service!r} of the Redis sentinels"
    kwargs = pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    scheme = "rediss" if issubclass(pool.connection_class, SSLConnection) else "redis"
    return f"{scheme}://{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"


def answers(connection: Redis) -> bool:
    """Whether the server behind `connection` answers a PING."""
    try:
        return bool(connection.ping())
    except REDIS_ERRORS:
        return False


def wait_for_redis(connection: Redis, log: logging.Logger = logger, *, stopping=lambda: False,
                   announce: bool = True) -> bool:
    """Say that Redis is unreachable (unless `announce` is false: said already), then wait until it
    answers (True) or `stopping()` (False)."""
    if announce:
        log.warning("Redis unreachable at %s; waiting", location(connection))
    delay = FIRST_WAIT_SECONDS
    while not stopping():
        if answers(connection):
            log.warning("Redis at %s answers again; carrying on", location(connection))
            return True
        time.sleep(delay)
        delay = min(delay * 2, LONGEST_WAIT_SECONDS)
    return False


class WaitsForRedis:
    """A mixin for RQ's Worker (before it in the bases) that outlasts a Redis outage, at start or
    mid-run: each step of the work loop that finds Redis unreachable waits for it and carries on,
    where RQ would quit. A worker watching its work horse keeps watching it (and keeps its other
    duties, such as renewing leases) while the heartbeats it cannot send are skipped; when Redis
    is back the worker registers again (a restarted Redis may have lost it) and restarts RQ's
    scheduler, which an outage kills."""

    # RQ's own wait in its blocking pop, which already retries: at most this between tries.
    max_connection_wait_time = LONGEST_WAIT_SECONDS
    _redis_away = False

    def wait_for_redis(self) -> None:
        """Wait until Redis answers; a stop request (SIGTERM while busy) ends the wait, and SIGTERM
        while idle raises StopRequested through it, as RQ's handler does anywhere."""
        announce, self._redis_away = not self._redis_away, True
        if wait_for_redis(self.connection, self.log, stopping=lambda: self._stop_requested, announce=announce):
            self.redis_is_back(said=True)

    def skip_without_redis(self) -> None:
        """Note a Redis call that failed and go on without it (said once per outage)."""
        if not self._redis_away:
            self._redis_away = True
            self.log.warning("Redis unreachable at %s; waiting", location(self.connection))

    def redis_is_back(self, *, said: bool = False) -> None:
        """After an outage: register again and restart RQ's scheduler."""
        if not self._redis_away or self.is_horse:
            return
        self._redis_away = False
        if not said:
            self.log.warning("Redis at %s answers again; carrying on", location(self.connection))
        if self.birth_date is None:
            return  # not registered yet: bootstrap does it
        try:
            # As register_birth does, without its refusal of a live worker of our name (ourselves).
            with self.connection.pipeline() as pipeline:
                pipeline.hset(self.key, mapping=self.serialize())
                worker_registration.register(self, pipeline)
                pipeline.expire(self.key, self.worker_ttl + 60)
                pipeline.execute()
            if self.scheduler and not (self.scheduler._process and self.scheduler._process.is_alive()):
                self.scheduler.acquire_locks(auto_start=True)
        except REDIS_ERRORS:
            self._redis_away = True  # gone again: the next step waits

    def bootstrap(self, *args, **kwargs):
        while True:
            try:
                return super().bootstrap(*args, **kwargs)
            except REDIS_ERRORS:
                self.wait_for_redis()

    def check_for_suspension(self, burst: bool):
        try:
            super().check_for_suspension(burst)
        except REDIS_ERRORS:
            self.wait_for_redis()

    def run_maintenance_tasks(self):
        try:
            super().run_maintenance_tasks()
        except REDIS_ERRORS:
            self.wait_for_redis()

    def dequeue_job_and_maintain_ttl(self, timeout, max_idle_time=None):
        while True:
            try:
                return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
            except REDIS_ERRORS:
                self.wait_for_redis()
                if self._stop_requested:
                    return None  # the work loop then stops

    def execute_job(self, job, queue):
        try:
            super().execute_job(job, queue)
        except REDIS_ERRORS:
            # Raised before the work horse started or after it ended (its watch skips what fails):
            # the job wrote its outcome to PostgreSQL; RQ's record of it is the dispatcher's to redo.
            self.log.warning("Worker %s: RQ's record of job %s is incomplete (Redis unreachable)", self.name, job.id)
            self.wait_for_redis()

    def heartbeat(self, timeout=None, pipeline=None):
        if pipeline is not None:
            return super().heartbeat(timeout, pipeline)
        try:
            super().heartbeat(timeout)
        except REDIS_ERRORS:
            self.skip_without_redis()
        else:
            self.redis_is_back()

    def maintain_heartbeats(self, job):
        try:
            super().maintain_heartbeats(job)
        except REDIS_ERRORS:
            self.skip_without_redis()
        else:
            self.redis_is_back()

    def set_current_job_working_time(self, current_job_working_time, pipeline=None):
        if pipeline is not None:
            return super().set_current_job_working_time(current_job_working_time, pipeline)
        try:
            super().set_current_job_working_time(current_job_working_time)
        except REDIS_ERRORS:
            self.current_job_working_time = current_job_working_time
            self.skip_without_redis()

    def set_shutdown_requested_date(self):
        # Called by the SIGTERM handler while a job runs: it must not raise into the horse's watch.
        try:
            super().set_shutdown_requested_date()
        except REDIS_ERRORS:
            self.skip_without_redis()

    def teardown(self):
        try:
            super().teardown()
        except REDIS_ERRORS:
            self.log.warning("Worker %s: stopped without telling Redis (unreachable); its entry expires by itself",
                             self.name)
