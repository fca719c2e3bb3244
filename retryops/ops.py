"""The ops process (`manage.py ops`): every periodic step of every app, in one process.

Run two, the second on another host: only the holder of a PostgreSQL session-level advisory lock
runs steps; the other tries for the lock every LOCK_RETRY_SECONDS and takes over within seconds of
the holder's death. PostgreSQL rather than Redis or a coordinator of our own: it is the one clock
and the one source of truth every step already depends on, so a leader that cannot reach it could
do no step anyway; no second coordinator is added; and the lock lives as long as the lock's
connection, so a process that dies (SIGKILL included) frees it with its connection. The lock's
session is ended by the server after IDLE_SESSION_SECONDS without a query, so a leader paused that
long loses the lock too; before each step the process asks that connection whether it still holds
the lock, so a leader that woke up without it runs nothing more.

Each step has a thread of its own, running it every `every` seconds: a step that hangs (a
notification's HTTP call waiting out its timeout) never delays another. A step never runs twice at
once, not even in two processes: the held() check cannot stop a leader that lost the lock between
the check and the step's end (paused, or its lock's connection gone), so each run also holds a lock
of its own step on its own connection, and a run that finds it taken waits for the next try. A
statement of a step is bounded by STATEMENT_TIMEOUT, and a paused step's session (so its step lock)
ends after as long without a query; a run past its budget is hung, and the process stops. Each run is one log line (which
process, which step, when, how long, ok or failed), which bench/ops_handover.py tabulates.
"""

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Callable

import psycopg
from django.db import connection, connections

from audit import jobs as audit
from compensation import jobs as compensation
from compensation.notifications import jobs as notifications
from scheduling import jobs as scheduling
from telemetry.health import readiness
from telemetry.alerts import jobs as alerts
from telemetry.figures import selectors as figures
from telemetry.figures import services as figures_services
from telemetry.health.heartbeats import OPS_APPLICATION_NAME, OPS_LOCK_KEY
from telemetry.metrics import jobs as metrics

log = logging.getLogger(__name__)

LOCK_RETRY_SECONDS = 1.0
IDLE_SESSION_SECONDS = 10
STATEMENT_TIMEOUT = "60s"
# A run of a step longer than this is hung (its statements are bounded by STATEMENT_TIMEOUT, its HTTP
# calls by their own timeouts): the process stops, so that the standby, or its restart, runs the steps.
STEP_BUDGET_SECONDS = 600
# On SIGTERM, the steps under way get this long to end (under the 10 s a container stop gives);
# a step still running then (one that never returns) ends with the process.
STOP_WAIT_SECONDS = 8


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[], object]
    every: float
    budget: float = STEP_BUDGET_SECONDS


STEPS = (
    Step("dispatch", scheduling.dispatch_job, scheduling.DISPATCH_EVERY),
    Step("batch_ticks", scheduling.batch_tick_job, scheduling.BATCH_TICK_EVERY),
    Step("dead_letters", compensation.dead_letters_job, compensation.DEAD_LETTERS_EVERY),
    Step("dlq_cleanup", compensation.dlq_cleanup_job, compensation.DLQ_CLEANUP_EVERY),
    Step("notifications", notifications.send_notifications_job, notifications.SEND_NOTIFICATIONS_EVERY),
    Step("escalate", compensation.escalate_job, compensation.ESCALATE_EVERY),
    Step("publish_stream", audit.publish_stream_job, audit.PUBLISH_STREAM_EVERY),
    Step("prune_stream", audit.prune_stream_job, audit.PRUNE_STREAM_EVERY),
    Step("prune_idempotency_keys", audit.prune_idempotency_keys_job, audit.PRUNE_IDEMPOTENCY_KEYS_EVERY),
    Step("metrics_rollup", metrics.roll_up_metrics_job, metrics.ROLL_UP_METRICS_EVERY),
    # Its first pass counts the whole kept history in one transaction: an hour, not ten minutes, is hung.
    Step("attempt_rollups", scheduling.roll_up_attempts_job, scheduling.ROLL_UP_ATTEMPTS_EVERY, budget=3600),
    Step("figures_refresh", figures_services.refresh_figures_job, figures.REFRESH_FIGURES_EVERY),
    Step("alerts", alerts.evaluate_alerts_job, alerts.EVALUATE_ALERTS_EVERY),
    Step("invariants", readiness.check_invariants_job, readiness.INVARIANTS_EVERY),
)


def with_cadences(cadences: dict[str, float], steps: tuple[Step, ...] = STEPS) -> tuple[Step, ...]:
    """`steps` with some cadences changed (`manage.py ops --every dispatch=1`, for tests and benches)."""
    unknown = set(cadences) - {step.name for step in steps}
    if unknown:
        raise ValueError(f"no step {', '.join(sorted(unknown))}; the steps: {', '.join(s.name for s in steps)}")
    return tuple(replace(step, every=cadences.get(step.name, step.every)) for step in steps)


def connect(**options) -> psycopg.Connection:
    """A PostgreSQL connection of its own to the database Django uses, in autocommit."""
    params = {key: value for key, value in connection.get_connection_params().items()
              if key not in ("cursor_factory", "context")}  # Django's own adapters
    return psycopg.connect(**params, autocommit=True, **options)


class Lock:
    """The ops lock, on a PostgreSQL connection of its own (not Django's: its connections belong
    to one thread each, and this one is asked by every step's thread)."""

    def __init__(self):
        self.conn: psycopg.Connection | None = None
        self.guard = threading.Lock()
        self.said = ""  # why the last try failed, said once: a standby that never leads says why

    def take(self) -> bool:
        """Whether this process holds the lock now, trying for it if it does not."""
        with self.guard:
            try:
                if self.conn is None:
                    self.conn = connect(application_name=OPS_APPLICATION_NAME)
                    self.conn.execute(f"SET idle_session_timeout = '{IDLE_SESSION_SECONDS}s'")
                taken = self.conn.execute("SELECT pg_try_advisory_lock(%s)", [OPS_LOCK_KEY]).fetchone()[0]
                self.said = ""
                return taken
            except psycopg.Error as exc:
                self._drop()
                if str(exc) != self.said:  # once, not every LOCK_RETRY_SECONDS of an outage
                    self.said = str(exc)
                    log.warning("ops process cannot try for the lock: %s", exc)
                return False

    def held(self) -> bool:
        """Whether the lock's connection is alive and holds the lock, asking the server."""
        with self.guard:
            if self.conn is None:
                return False
            try:
                return self.conn.execute(
                    "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
                    "AND classid = 0 AND objid = %s AND objsubid = 1 AND granted)", [OPS_LOCK_KEY]).fetchone()[0]
            except psycopg.Error:
                self._drop()
                return False

    def release(self) -> None:
        with self.guard:
            self._drop()

    def _drop(self) -> None:
        if self.conn is not None:
            self.conn, conn = None, self.conn
            conn.close()  # a session's advisory locks end with it


class Ops:
    """The process: a thread per step, and the main loop keeping (or trying for) the lock."""

    def __init__(self, steps: tuple[Step, ...] = STEPS):
        self.steps, self.lock = steps, Lock()
        self.leading = threading.Event()
        self.stopping = threading.Event()
        self.running: dict[Step, float] = {}  # the steps under way, since when (monotonic)
        self.overran: Step | None = None  # the hung step this process stopped for
        self.process = f"{socket.gethostname()}:{os.getpid()}"

    def run(self) -> None:
        threads = [threading.Thread(target=self.keep_running, args=(step,), name=f"ops-{step.name}", daemon=True)
                   for step in self.steps]
        for thread in threads:
            thread.start()
        try:
            while not self.stopping.is_set():
                leading = self.lock.held() or self.lock.take()
                if leading != self.leading.is_set():
                    log.info("ops process=%s leader=%s", self.process, str(leading).lower(),
                             extra={"ops_process": self.process, "leader": leading})
                    (self.leading.set if leading else self.leading.clear)()
                self.overran = self.hung_step()
                if self.overran:
                    log.error("ops step %s has run past its budget of %s s: this process stops, so that the "
                              "standby or its restart runs the steps", self.overran.name, self.overran.budget)
                    break
                self.stopping.wait(LOCK_RETRY_SECONDS)
        finally:
            self.leading.clear()
            self.stopping.set()
            until = time.monotonic() + STOP_WAIT_SECONDS
            for thread in threads:
                thread.join(max(0.0, until - time.monotonic()))
                if thread.is_alive():
                    log.warning("ops %s did not end within %s s of the stop: it ends with the process",
                                thread.name, STOP_WAIT_SECONDS)
            self.lock.release()

    def hung_step(self) -> Step | None:
        now = time.monotonic()
        return next((step for step, since in list(self.running.items()) if now - since > step.budget), None)

    def keep_running(self, step: Step) -> None:
        due = time.monotonic()
        while not self.stopping.is_set():
            if not self.leading.wait(LOCK_RETRY_SECONDS):
                due = time.monotonic()  # a new leader runs each step at once (a batch tick checks its own cadence)
                continue
            if self.stopping.wait(max(0.0, due - time.monotonic())):
                break
            if self.run_step(step) is None:  # not the leader, or the step still runs elsewhere
                due = time.monotonic() + LOCK_RETRY_SECONDS
            else:
                due = max(due + step.every, time.monotonic())

    def run_step(self, step: Step) -> bool | None:
        """Run `step` once if this process still holds the lock and no other process is still in
        the step: whether it went well; None when it did not run."""
        if not self.lock.held():
            self.leading.clear()
            return None
        started, began, ok = datetime.now(UTC), time.monotonic(), True
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")
                cursor.execute(f"SET idle_session_timeout = '{STATEMENT_TIMEOUT}'")
                # The two-key form: a key space apart from the ops lock's one bigint.
                cursor.execute("SELECT pg_try_advisory_lock(%s::integer, hashtext(%s))", [OPS_LOCK_KEY, step.name])
                if not cursor.fetchone()[0]:
                    return None  # the closed connection below holds nothing
            self.running[step] = began
            step.run()
        except Exception:  # the step's own failure: logged, and the next run tries again
            ok = False
            log.exception("ops step %s failed", step.name)
        finally:
            self.running.pop(step, None)
            connections.close_all()  # this thread's connections (the step's lock ends with its session)
        seconds = time.monotonic() - began
        log.info("ops step=%s process=%s started=%s seconds=%.3f ok=%s", step.name, self.process,
                 started.isoformat(timespec="milliseconds"), seconds, str(ok).lower(),
                 extra={"step": step.name, "ops_process": self.process, "seconds": round(seconds, 3), "ok": ok})
        return ok
