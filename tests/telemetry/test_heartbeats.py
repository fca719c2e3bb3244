"""Which workers and schedulers were seen: what RQ's own classes leave in the tests' Redis, and
real processes started as `manage.py up` starts them; and which ops processes PostgreSQL sees."""

from datetime import timedelta

import django_rq
import psycopg
import pytest
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from rq import Worker
from rq.scheduler import RQScheduler

from retryops import ops
from retryops.management.commands.up import Command as Up
from telemetry.health import heartbeats
from telemetry.health.heartbeats import (
    OPS_APPLICATION_NAME,
    OPS_LOCK_KEY,
    QUEUES,
    HeartbeatCollector,
    ops_processes,
    sightings,
    silent_components,
)
from tests.telemetry.processes import running, wait_for, worker_command

pytestmark = pytest.mark.django_db


def worker_on(*queues: str) -> Worker:
    worker = Worker([django_rq.get_queue(name) for name in queues], connection=django_rq.get_connection("flows"))
    worker.register_birth()
    return worker


def rq_scheduler_of(*queues: str) -> RQScheduler:
    scheduler = RQScheduler(list(queues), connection=django_rq.get_connection("flows"))
    scheduler.acquire_locks()
    scheduler.register_birth()
    return scheduler


def ops_session(*, leading: bool) -> psycopg.Connection:
    """A session as an ops process opens it: named, and holding the ops lock when it leads."""
    session = ops.connect(application_name=OPS_APPLICATION_NAME)
    if leading:
        assert session.execute("SELECT pg_try_advisory_lock(%s)", [OPS_LOCK_KEY]).fetchone()[0]
    return session


@pytest.fixture
def ops_leader():
    with ops_session(leading=True) as session:
        yield session


def everything_running() -> Worker:
    """A worker on every queue (returned) and RQ's scheduler of the delayed queues."""
    worker = worker_on(*QUEUES)
    rq_scheduler_of(*heartbeats.DELAYED_QUEUES)
    return worker


def test_a_worker_is_counted_on_each_queue_it_takes_from(redis_conn):
    worker_on("retries", "flows")
    worker_on("flows")
    assert sightings().workers == {"retries": 1, "flows": 2, "default": 0}


def test_nothing_is_silent_when_every_worker_and_scheduler_heartbeats_and_an_ops_process_leads(redis_conn, ops_leader):
    everything_running()
    assert silent_components() == []


def test_ops_is_silent_while_no_ops_process_holds_the_lock(redis_conn):
    everything_running()
    with ops_session(leading=False):
        assert ops_processes() == (1, 0)
        assert silent_components() == ["ops"]
    with ops_session(leading=False), ops_session(leading=True):
        assert ops_processes() == (2, 1)
        assert silent_components() == []


def test_a_worker_whose_last_heartbeat_is_over_a_minute_old_is_silent(redis_conn, ops_leader):
    everything_running()
    in_61_seconds = timezone.now() + timedelta(seconds=61)
    assert silent_components(now=in_61_seconds) == [f"worker:{queue}" for queue in QUEUES] + [
        "scheduler:rq:retries", "scheduler:rq:flows"]


def test_a_worker_that_stopped_is_silent_at_once(redis_conn, ops_leader):
    everything_running().register_death()
    assert silent_components() == [f"worker:{queue}" for queue in QUEUES]


def test_the_rq_scheduler_counts_only_for_the_queues_whose_lock_it_holds(redis_conn):
    rq_scheduler_of("flows")
    assert [name for name in silent_components() if name.startswith("scheduler:rq")] == ["scheduler:rq:retries"]


def test_an_rq_scheduler_whose_lock_outlived_its_heartbeat_is_silent(redis_conn):
    scheduler = rq_scheduler_of("retries", "flows")
    redis_conn.hset(scheduler.key, "last_heartbeat", "2026-01-01T00:00:00.000000Z")
    assert [name for name in silent_components() if name.startswith("scheduler:rq")] == [
        "scheduler:rq:retries", "scheduler:rq:flows"]


def test_every_worker_and_scheduler_is_silent_when_redis_does_not_answer(settings, redis_conn, ops_leader):
    everything_running()
    settings.RQ_QUEUES = {name: {**config, "URL": "redis://127.0.0.1:9/0"} for name, config in settings.RQ_QUEUES.items()}
    assert silent_components() == heartbeats.NOBODY.silent
    assert len(heartbeats.NOBODY.silent) == len(QUEUES) + 2


def test_the_collector_exports_the_workers_by_queue_each_scheduler_and_the_ops_processes(redis_conn, ops_leader):
    worker_on("retries", "flows")
    rq_scheduler_of("retries", "flows")
    registry = CollectorRegistry()
    registry.register(HeartbeatCollector())
    with ops_session(leading=False):
        exported = generate_latest(registry).decode()
    for line in ['retryops_workers_seen{queue="flows"} 1.0', 'retryops_workers_seen{queue="default"} 0.0',
                 'retryops_schedulers_seen{scheduler="rq:retries"} 1.0',
                 "retryops_ops_processes 2.0", "retryops_ops_leader 1.0"]:
        assert line in exported


def test_up_starts_a_worker_for_every_queue_the_scheduler_and_the_ops_process():
    children = [command for command, _ in Up().child_processes("127.0.0.1:8000", receiver_port=None).values()]
    workers = [command for command in children if "rqworker" in command]
    assert {queue for command in workers for queue in QUEUES if queue in command} == set(QUEUES)
    assert any("--with-scheduler" in command for command in workers)
    assert all(command[command.index("--worker-ttl") + 1] == str(heartbeats.WORKER_TTL) for command in workers)
    assert [command[2:] for command in children if "ops" in command] == [["ops"]]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_idle_worker_started_as_up_starts_heartbeats_again_within_the_minute_it_is_seen_for(redis_conn):
    command = Up().child_processes("127.0.0.1:8000", receiver_port=None)["worker"][0]
    with running(command[command.index("rqworker"):]):
        wait_for(lambda: sightings().workers["flows"] == 1)
        # It beats at birth and again as it starts to wait for a job; the next beat comes only when
        # that wait times out: after 30 s with up's --worker-ttl, 405 s with RQ's default. Seeing
        # that beat proves the interval without sleeping past a minute.
        worker = Worker.all(connection=redis_conn)[0]

        def beat_after_the_wait():
            worker.refresh()
            return worker.last_heartbeat - worker.birth_date > timedelta(seconds=10) and worker.last_heartbeat

        beat = wait_for(beat_after_the_wait, timeout=heartbeats.SEEN_WITHIN.total_seconds() + 15)
        seen = sightings()
    assert beat - worker.birth_date < heartbeats.SEEN_WITHIN
    assert [seen.workers[queue] for queue in ("retries", "flows", "default")] == [1, 1, 1]
    assert (seen.schedulers["rq:retries"], seen.schedulers["rq:flows"]) == (1, 1)


def test_the_worker_command_of_the_tests_is_the_one_up_runs():
    command = Up().child_processes("127.0.0.1:8000", receiver_port=None)["worker"][0]
    assert set(worker_command()) >= set(command[command.index("rqworker"):])


def test_up_s_children_log_plain_text_unless_log_format_is_set(monkeypatch):
    monkeypatch.delenv("LOG_FORMAT", raising=False)
    assert {env["LOG_FORMAT"] for _, env in Up().child_processes("127.0.0.1:8000", receiver_port=None).values()} == {
        "text"}
    monkeypatch.setenv("LOG_FORMAT", "json")
    assert {env["LOG_FORMAT"] for _, env in Up().child_processes("127.0.0.1:8000", receiver_port=None).values()} == {
        "json"}
