"""Which workers and schedulers were seen: what RQ's own classes leave in the tests' Redis, and
real processes started as `manage.py up` starts them."""

from datetime import timedelta

import django_rq
import pytest
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from rq import Worker
from rq.cron import CronScheduler
from rq.scheduler import RQScheduler

from retryops.management.commands.up import Command as Up
from telemetry import heartbeats
from telemetry.heartbeats import (
    CRON_CONFIGS,
    QUEUES,
    HeartbeatCollector,
    sightings,
    silent_components,
)
from tests.telemetry.processes import running, wait_for, worker_command


def worker_on(*queues: str) -> Worker:
    worker = Worker([django_rq.get_queue(name) for name in queues], connection=django_rq.get_connection("flows"))
    worker.register_birth()
    return worker


def rq_scheduler_of(*queues: str) -> RQScheduler:
    scheduler = RQScheduler(list(queues), connection=django_rq.get_connection("flows"))
    scheduler.acquire_locks()
    scheduler.register_birth()
    return scheduler


def cron_running(config: str) -> CronScheduler:
    cron = CronScheduler(django_rq.get_connection("scheduler"))
    cron.config_file = config
    cron.register_birth()
    cron.heartbeat()
    return cron


def everything_running() -> Worker:
    """A worker on every queue (returned), RQ's scheduler of the delayed queues, every cron."""
    worker = worker_on(*QUEUES)
    rq_scheduler_of(*heartbeats.DELAYED_QUEUES)
    for config in CRON_CONFIGS:
        cron_running(config)
    return worker


def test_a_worker_is_counted_on_each_queue_it_takes_from(redis_conn):
    worker_on("retries", "flows")
    worker_on("flows")
    assert sightings().workers == {"retries": 1, "flows": 2, "default": 0, "scheduler": 0}


def test_nothing_is_silent_when_every_worker_and_scheduler_heartbeats(redis_conn):
    everything_running()
    assert silent_components() == []


def test_a_worker_whose_last_heartbeat_is_over_a_minute_old_is_silent(redis_conn):
    everything_running()
    in_61_seconds = timezone.now() + timedelta(seconds=61)
    assert silent_components(now=in_61_seconds) == [f"worker:{queue}" for queue in QUEUES] + [
        "scheduler:rq:retries", "scheduler:rq:flows"]


def test_a_cron_scheduler_sleeping_its_longest_round_is_still_seen_and_then_silent(redis_conn):
    # RQ's cron heartbeats after each round and sleeps up to 60 s: it gets 15 s on top of the minute.
    everything_running()
    assert not any("cron" in name for name in silent_components(now=timezone.now() + timedelta(seconds=70)))
    assert [name for name in silent_components(now=timezone.now() + timedelta(seconds=76)) if "cron" in name] == [
        f"scheduler:cron:{config}" for config in CRON_CONFIGS]


def test_a_worker_that_stopped_is_silent_at_once(redis_conn):
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


def test_a_cron_started_with_a_file_path_counts_as_its_module(redis_conn):
    cron_running("/srv/retryops/scheduling/cron.py")
    cron_running("compensation.cron")
    cron_running("reports.cron")  # not one of ours: counts for nothing
    assert {name: count for name, count in sightings().schedulers.items() if name.startswith("cron:")} == {
        "cron:scheduling.cron": 1, "cron:compensation.cron": 1, "cron:audit.cron": 0, "cron:telemetry.cron": 0}


def test_every_component_is_silent_when_redis_does_not_answer(settings, redis_conn):
    everything_running()
    settings.RQ_QUEUES = {name: {**config, "URL": "redis://127.0.0.1:9/0"} for name, config in settings.RQ_QUEUES.items()}
    assert silent_components() == heartbeats.NOBODY.silent
    assert len(heartbeats.NOBODY.silent) == len(QUEUES) + 2 + len(CRON_CONFIGS)


def test_the_collector_exports_the_workers_by_queue_and_each_scheduler(redis_conn):
    worker_on("retries", "flows", "default")
    rq_scheduler_of("retries", "flows")
    cron_running("scheduling.cron")
    registry = CollectorRegistry()
    registry.register(HeartbeatCollector())
    exported = generate_latest(registry).decode()
    for line in ['retryops_workers_seen{queue="flows"} 1.0', 'retryops_workers_seen{queue="scheduler"} 0.0',
                 'retryops_schedulers_seen{scheduler="rq:retries"} 1.0',
                 'retryops_schedulers_seen{scheduler="cron:scheduling.cron"} 1.0',
                 'retryops_schedulers_seen{scheduler="cron:audit.cron"} 0.0']:
        assert line in exported


def test_up_starts_a_worker_for_every_queue_the_scheduler_and_every_cron_the_checks_expect():
    children = [command for command, _ in Up().child_processes("127.0.0.1:8000", receiver_port=None).values()]
    crons = {command[command.index("rqcron") + 1] for command in children if "rqcron" in command}
    workers = [command for command in children if "rqworker" in command]
    assert crons == set(CRON_CONFIGS)
    assert {queue for command in workers for queue in QUEUES if queue in command} == set(QUEUES)
    assert any("--with-scheduler" in command for command in workers)
    assert all(command[command.index("--worker-ttl") + 1] == str(heartbeats.WORKER_TTL) for command in workers)


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
