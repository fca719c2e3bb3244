"""The invariant checker (telemetry.health.invariants, manage.py check_invariants): a system built through
the real services passes; each kind of corruption, made by writing rows directly, is reported with
its ids, and the command exits non-zero."""

import json
import threading
import uuid
from datetime import timedelta

import django_rq
import pytest
from django.core.management import CommandError, call_command
from django.db.models import F
from django.utils import timezone
from rq import SimpleWorker, Worker
from rq.job import Job

from compensation.models import DeadLetter
from compensation.services.dead_letters import collect_dead_letters
from compensation.work_orders.models import WorkOrder
from compensation.work_orders.services import acknowledge_work_order, open_work_order
import resources.services
from resources.models import Resource
from scheduling import services
from scheduling.choices import TaskEventKind, TaskState
from scheduling.models import Task
from scheduling.queueing import WORKER_QUEUES, enqueue_attempt
from telemetry.health.invariants import CHECKS, STRANDED_SECOND_LOOK, check_invariants
from tests.factories import (
    AttemptFactory,
    ResourceFactory,
    TaskEventFactory,
    TaskFactory,
)
from tests.scheduling.helpers import work

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def short_intervals(monkeypatch):
    """Periodic steps every second: each grace the checker allows is a few seconds."""
    monkeypatch.setattr("scheduling.jobs.DISPATCH_EVERY", 1)
    monkeypatch.setattr("compensation.jobs.ESCALATE_EVERY", 1)
    monkeypatch.setattr("compensation.jobs.DEAD_LETTERS_EVERY", 1)


@pytest.fixture
def system(redis_conn, pool, alice, bob, instant_policy, default_policy, short_intervals):
    """Through the services: a task that succeeded on alice, one dead on bob (its dead letter on a work
    order an operator acknowledged), one holding carol for its retry in two minutes, dave claimed by an
    external client, and a work order an operator opened."""
    carol, dave = ResourceFactory(pool=pool, key="carol@x"), ResourceFactory(pool=pool, key="dave@x")
    start = services.start_task
    succeeded = start(flow="demo", pool_name=pool, created_by="test", policy="instant", resource=alice)
    dead = start(flow="demo", pool_name=pool, created_by="test", policy="instant", resource=bob,
                 payload={"script": ["TimeoutError: slow"]})
    held = start(flow="demo", pool_name=pool, created_by="test", policy="default", resource=carol,
                 payload={"script": ["TimeoutError: slow", "ok"]})
    work()
    resources.services.claim_by_id(resource_id=dave.pk, holder="billing-sync")
    collect_dead_letters()  # what the consumer has not collected on the task's commit already
    letter = DeadLetter.objects.get(task=dead)
    acknowledge_work_order(work_order=letter.work_order_id, actor="ops:carol")
    manual = open_work_order(title="refund by hand", actor="ops:carol")
    return {"succeeded": succeeded, "dead": dead, "held": held, "carol": carol, "dave": dave, "letter": letter,
            "manual": manual}


def later():
    """A moment past every grace of short_intervals, and before the held task's retry is due."""
    return timezone.now() + timedelta(seconds=10)


def found(name, **kwargs):
    (result,) = check_invariants(names=[name], now=kwargs.pop("now", None) or later(), **kwargs)
    return [v.ids for v in result.violations]


def test_a_system_built_through_the_services_passes_every_check(system):
    assert Task.objects.get(pk=system["held"].pk).state == TaskState.RETRYING
    assert Task.objects.get(pk=system["dead"].pk).state == TaskState.DEAD
    results = check_invariants(deep=True, now=later())
    assert [r.name for r in results] == list(CHECKS)
    assert {r.name: r.count for r in results} == dict.fromkeys(CHECKS, 0)


def test_the_command_prints_ok_per_check_and_exits_zero_on_a_clean_system(system, capsys):
    call_command("check_invariants", "--deep")
    assert capsys.readouterr().out.splitlines() == [f"{name}: ok" for name in CHECKS]


def test_a_lease_its_task_no_longer_holds_is_reported(system):
    held, carol = system["held"], system["carol"]
    Task.objects.filter(pk=held.pk).update(held_lease_token=None)
    assert found("lease_holders") == [{"resource": carol.pk, "task": held.pk}]


def test_a_reservation_its_task_no_longer_holds_is_reported_before_any_attempt_ran_on_it(system):
    erin = ResourceFactory(pool=system["carol"].pool, key="erin@x")
    retry = services.retry_resource(resource=erin, actor="ops:carol", flow="demo")  # reserved, not run yet
    Task.objects.filter(pk=retry.pk).update(held_lease_token=None)
    assert found("lease_holders") == [{"resource": erin.pk, "task": None}]


def test_a_lease_is_judged_by_its_token_not_by_its_holders_name(system):
    carol, dave = system["carol"], system["dave"]
    Resource.objects.filter(pk=carol.pk).update(lease_holder="billing-sync")
    Resource.objects.filter(pk=dave.pk).update(lease_holder="task 999999")
    assert found("lease_holders") == []


def test_a_lease_expired_past_the_sweepers_grace_is_reported(system):
    dave = system["dave"]
    Resource.objects.filter(pk=dave.pk).update(leased_until=timezone.now() - timedelta(minutes=5), lapse_seen_at=timezone.now() - timedelta(hours=1))
    assert found("lease_holders") == [{"resource": dave.pk}]


def test_a_lease_expired_within_the_sweepers_grace_is_left_to_the_sweeper(system):
    now = timezone.now()
    Resource.objects.filter(pk=system["dave"].pk).update(leased_until=now - timedelta(seconds=1), lapse_seen_at=now - timedelta(hours=1))
    assert found("lease_holders", now=now) == []


def test_a_second_running_attempt_on_a_held_resource_is_reported(system):
    carol, held = system["carol"], system["held"]
    other = AttemptFactory(resource=carol, lease_token=uuid.uuid4())
    assert found("double_leases") == [
        {"resource": carol.pk, "holders": ",".join(sorted([f"task {other.task_id}", f"task {held.pk}"]))}]


def test_another_tasks_running_attempt_on_a_held_lease_is_reported(system):
    carol, held = Resource.objects.get(pk=system["carol"].pk), system["held"]
    other = AttemptFactory(resource=carol, lease_token=carol.lease_token)
    assert found("double_leases") == [
        {"resource": carol.pk, "holders": ",".join(sorted([f"task {other.task_id}", f"task {held.pk}"]))}]


def test_an_attempt_running_on_the_resources_lease_is_its_one_holder_whatever_the_holder_text(system):
    dave = Resource.objects.get(pk=system["dave"].pk)  # its holder text reads "billing-sync"
    AttemptFactory(resource=dave, lease_token=dave.lease_token)
    assert found("double_leases") == []


def test_counters_that_disagree_with_the_timeline_are_reported_by_a_deep_check_only(system):
    alice = Resource.objects.get(key="alice@x")
    Resource.objects.filter(pk=alice.pk).update(success_count=F("success_count") + 1)
    assert "counters" not in [r.name for r in check_invariants(now=later())]
    (result,) = [r for r in check_invariants(deep=True, now=later()) if r.name == "counters"]
    assert [v.ids for v in result.violations] == [{"resource": alice.pk}]
    assert result.violations[0].message == "counts 2 successes and 0 failures, its timeline 1 and 0"


def test_a_waiting_task_overdue_past_the_dispatchers_horizon_is_reported(system):
    held = system["held"]
    Task.objects.filter(pk=held.pk).update(next_run_at=timezone.now() - timedelta(minutes=5))
    assert found("overdue_tasks") == [{"task": held.pk}]


def test_an_overdue_task_whose_wake_up_is_queued_behind_a_backlog_passes(system):
    held = system["held"]
    past = timezone.now() - timedelta(minutes=5)
    Task.objects.filter(pk=held.pk).update(next_run_at=past)
    assert enqueue_attempt(task_id=held.pk, attempt_number=2, at=past)
    assert found("overdue_tasks") == []


def test_an_overdue_task_whose_queued_job_a_dead_worker_took_off_its_queue_is_reported(system, redis_conn):
    held = system["held"]
    past = timezone.now() - timedelta(minutes=5)
    Task.objects.filter(pk=held.pk).update(next_run_at=past)
    job_id = enqueue_attempt(task_id=held.pk, attempt_number=2, at=past)
    # A flow worker (serving several queues: BLPOP) takes it and its host dies before the job starts.
    assert redis_conn.lpop("rq:queue:retries") == job_id.encode()
    (result,) = check_invariants(names=["overdue_tasks"], now=later())
    assert [v.ids for v in result.violations] == [{"task": held.pk}]
    assert result.violations[0].message.endswith(f"RQ job {job_id} stranded")


def test_an_overdue_task_whose_job_a_live_worker_took_and_starts_within_the_second_look_passes(system, redis_conn):
    held = system["held"]
    past = timezone.now() - timedelta(minutes=5)
    Task.objects.filter(pk=held.pk).update(next_run_at=past)
    job_id = enqueue_attempt(task_id=held.pk, attempt_number=2, at=past)
    # A live flow worker has popped it (BLPOP) and its work horse starts it a moment later.
    worker = django_rq.get_worker(*WORKER_QUEUES, worker_class=SimpleWorker)
    worker.register_birth()
    assert redis_conn.lpop("rq:queue:retries") == job_id.encode()
    job = Job.fetch(job_id, connection=redis_conn)

    def starts():
        worker.prepare_execution(job)
        worker.prepare_job_execution(job)

    starting = threading.Timer(STRANDED_SECOND_LOOK.total_seconds() / 4, starts)
    starting.start()
    try:
        assert found("overdue_tasks") == []
    finally:
        starting.join()
        worker.register_death()


def test_an_overdue_task_whose_job_is_gone_from_redis_is_reported(system, redis_conn):
    held = Task.objects.get(pk=system["held"].pk)
    Task.objects.filter(pk=held.pk).update(next_run_at=timezone.now() - timedelta(minutes=5))
    redis_conn.flushdb()
    (result,) = check_invariants(names=["overdue_tasks"], now=later())
    assert [v.ids for v in result.violations] == [{"task": held.pk}]
    assert result.violations[0].message.endswith(f"RQ job {held.rq_job_id} gone")


def overdue_job(task, redis_conn) -> Job:
    """`task` overdue past the dispatcher's horizon, its wake-up on a queue."""
    past = timezone.now() - timedelta(minutes=5)
    Task.objects.filter(pk=task.pk).update(next_run_at=past)
    return Job.fetch(enqueue_attempt(task_id=task.pk, attempt_number=2, at=past), connection=redis_conn)


def started_by(job, redis_conn, name: str) -> Worker:
    """A registered worker that has taken `job`, as RQ's worker does before it runs one."""
    worker = Worker([job.origin], name=name, connection=redis_conn)
    worker.register_birth()
    worker.prepare_job_execution(job)
    return worker


def test_an_overdue_task_whose_job_a_live_worker_has_started_passes(system, redis_conn):
    # In a deep backlog the worker reaches the job late; the attempt row follows in a moment.
    started_by(overdue_job(system["held"], redis_conn), redis_conn, "w-alive")
    assert found("overdue_tasks") == []


def test_an_overdue_task_whose_started_job_lost_its_worker_is_reported(system, redis_conn):
    # SIGKILLed after taking the job, before writing the attempt: its key expires with its heartbeats.
    job = overdue_job(system["held"], redis_conn)
    redis_conn.delete(started_by(job, redis_conn, "w-killed").key)
    (result,) = check_invariants(names=["overdue_tasks"], now=later())
    assert [v.ids for v in result.violations] == [{"task": system["held"].pk}]
    assert result.violations[0].message.endswith(
        f"RQ job {job.id} started by worker w-killed, which is not running it (gone, or on another job)")


def test_an_overdue_task_whose_started_job_its_worker_left_for_another_is_reported(system, redis_conn):
    job = overdue_job(system["held"], redis_conn)
    started_by(job, redis_conn, "w-moved-on").set_current_job_id("task-0-1-another")
    assert found("overdue_tasks") == [{"task": system["held"].pk}]


def test_an_overdue_task_a_worker_runs_between_the_database_and_redis_reads_passes(system, redis_conn, monkeypatch):
    from scheduling.services import recovery

    overdue_job(system["held"], redis_conn)
    read_jobs = recovery.fetch_jobs

    def worker_runs_the_job_first(job_ids, redis):
        work()  # the attempt is written and the job deleted (result_ttl=0) before Redis answers
        return read_jobs(job_ids, redis)

    monkeypatch.setattr(recovery, "fetch_jobs", worker_runs_the_job_first)
    assert found("overdue_tasks") == []
    assert Task.objects.get(pk=system["held"].pk).state == TaskState.SUCCEEDED


def test_a_dead_task_without_its_dead_letter_is_reported(system):
    dead = system["dead"]
    DeadLetter.objects.filter(task=dead).delete()
    (violation,) = found("dead_letters")
    assert violation["task"] == dead.pk


def test_a_dead_task_whose_replay_holds_the_dead_letter_passes(system, pool):
    replay = TaskFactory(pool=pool, state="dead", next_run_at=None, finished_at=timezone.now())
    DeadLetter.objects.filter(pk=system["letter"].pk).update(replay_task=replay)
    TaskEventFactory(task=replay, kind="task.dead", attempt_number=1, created_at=timezone.now() - timedelta(minutes=1))
    assert found("dead_letters") == []


def test_an_open_dead_letter_without_a_live_work_order_is_reported(system):
    letter = system["letter"]
    DeadLetter.objects.filter(pk=letter.pk).update(work_order=None)
    assert found("work_orders") == [{"dead_letter": letter.pk, "task": system["dead"].pk, "work_order": None}]


def cancel_long_after_the_death(letter):
    """An operator cancels the work order of a letter that died an hour ago: the letter stays open
    for the next escalation run to give a live work order."""
    DeadLetter.objects.filter(pk=letter.pk).update(died_at=timezone.now() - timedelta(hours=1))
    WorkOrder.objects.filter(pk=letter.work_order_id).update(state="cancelled", ended_at=timezone.now())


def test_an_open_dead_letter_on_a_work_order_ended_longer_than_the_grace_ago_is_reported(system):
    letter = system["letter"]
    cancel_long_after_the_death(letter)
    assert found("work_orders", now=later()) == [
        {"dead_letter": letter.pk, "task": system["dead"].pk, "work_order": letter.work_order_id}]


def test_an_open_dead_letter_on_a_work_order_ended_within_the_grace_passes(system):
    cancel_long_after_the_death(system["letter"])
    assert found("work_orders", now=timezone.now()) == []


def test_a_work_order_moved_without_its_audit_entry_is_reported(system):
    manual = system["manual"]
    WorkOrder.objects.filter(pk=manual.pk).update(state="acknowledged", acknowledged_at=timezone.now())
    assert found("audit_rows") == [{"work_order": manual.pk}]


def test_a_dead_letter_discarded_without_its_audit_entry_is_reported(system):
    letter = system["letter"]
    DeadLetter.objects.filter(pk=letter.pk).update(state="discarded", settled_at=timezone.now())
    assert found("audit_rows") == [{"dead_letter": letter.pk}]


def test_an_attempt_given_up_while_its_worker_still_ran_it_is_reported(system):
    task = system["held"]
    late = TaskEventFactory(task=task, kind=TaskEventKind.LATE_OUTCOME, attempt_number=1,
                            details={"outcome": "succeeded", "kept": True})
    assert found("late_outcomes") == [{"task_event": late.pk, "task": task.pk}]


def test_a_success_dropped_after_its_flow_reported_it_is_reported_as_such(system):
    task = system["held"]
    TaskEventFactory(task=task, kind=TaskEventKind.LATE_OUTCOME, attempt_number=1,
                     details={"outcome": "succeeded", "kept": False})
    (result,) = check_invariants(names=["late_outcomes"], now=later())
    assert "its success was dropped" in result.violations[0].message


def test_the_command_prints_each_violation_with_its_ids_and_exits_non_zero(system, capsys):
    held = system["held"]
    Task.objects.filter(pk=held.pk).update(next_run_at=timezone.now() - timedelta(minutes=5))
    with pytest.raises(CommandError) as raised:
        call_command("check_invariants")
    assert raised.value.returncode == 1
    lines = capsys.readouterr().out.splitlines()
    assert "overdue_tasks: 1 violation(s)" in lines
    assert any(line.startswith(f"  task={held.pk}: retrying, due at ") for line in lines)
    assert "lease_holders: ok" in lines


def test_the_command_runs_one_check_by_name(system, capsys):
    call_command("check_invariants", "--check", "overdue_tasks")
    assert capsys.readouterr().out.splitlines() == ["overdue_tasks: ok"]


def test_the_command_prints_json_with_each_violations_ids(system, capsys):
    letter = system["letter"]
    DeadLetter.objects.filter(pk=letter.pk).update(work_order=None, died_at=timezone.now() - timedelta(minutes=1))
    with pytest.raises(CommandError):
        call_command("check_invariants", "--json", "--check", "work_orders")
    report = json.loads(capsys.readouterr().out)
    assert (report["ok"], report["violations"]) == (False, 1)
    assert report["checks"][0]["violations"][0]["ids"] == {
        "dead_letter": letter.pk, "task": system["dead"].pk, "work_order": None}


def test_the_command_refuses_an_unknown_check_naming_the_known_ones(db):
    with pytest.raises(CommandError, match="invalid choice: 'leases'"):
        call_command("check_invariants", "--check", "leases")


def test_the_command_limits_the_lines_printed_but_counts_every_violation(db, capsys, pool, short_intervals):
    past = timezone.now() - timedelta(minutes=5)
    TaskFactory.create_batch(3, pool=pool, next_run_at=past)
    with pytest.raises(CommandError):
        call_command("check_invariants", "--check", "overdue_tasks", "--limit", "1")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "overdue_tasks: 3 violation(s)" and lines[-1] == "  ... and 2 more" and len(lines) == 3
