"""The ops dashboard: the admin index's panel and the fragment it fetches, with its figures read
from seeded rows and from the test Redis."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from rq import Queue, Worker

from scheduling.models import Attempt, Task, TaskEvent
from tests.factories import (
    AttemptFactory,
    DeadLetterFactory,
    TaskEventFactory,
    TaskFactory,
    WorkOrderFactory,
)

pytestmark = pytest.mark.django_db

FRAGMENT = reverse("ops_dashboard")
INDEX = reverse("admin:index")


def staff(username: str, *codenames: str) -> User:
    user = User.objects.create_user(username=username, password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return user


def figures(client):
    response = client.get(FRAGMENT)
    assert response.status_code == 200
    return response


def ended_retry(kind: str, *, at, attempt: int = 2) -> TaskEvent:
    return TaskEventFactory(kind=kind, attempt_number=attempt, created_at=at)


# Retries and attempts.

def test_scheduled_retries_count_the_retrying_tasks_and_the_overdue_ones(admin_client):
    now = timezone.now()
    TaskFactory(state="retrying", next_run_at=now + timedelta(minutes=2))
    TaskFactory(state="retrying", next_run_at=now + timedelta(minutes=1))
    TaskFactory(state="retrying", next_run_at=now - timedelta(minutes=1))
    TaskFactory(state="pending", next_run_at=now - timedelta(minutes=5))  # a new task, not a retry

    retries = figures(admin_client).context["retries"]

    assert (retries["count"], retries["overdue"], retries["next_due"]) == (3, 1, now - timedelta(minutes=1))


def test_a_retry_due_within_the_dispatchers_grace_is_not_overdue_yet(admin_client):
    TaskFactory(state="retrying", next_run_at=timezone.now() - timedelta(seconds=1))

    assert figures(admin_client).context["retries"]["overdue"] == 0


def test_running_attempts_are_counted_with_the_oldest_start(admin_client):
    started = timezone.now() - timedelta(minutes=3)
    AttemptFactory(started_at=started)
    AttemptFactory()
    AttemptFactory(outcome="succeeded", finished_at=timezone.now())

    assert figures(admin_client).context["running"] == {"count": 2, "oldest_started_at": started}


def test_retries_of_the_last_ten_minutes_are_counted_by_outcome_with_their_failure_rate(admin_client):
    now = timezone.now()
    for _ in range(3):
        ended_retry("task.retry.succeeded", at=now - timedelta(minutes=2))
    ended_retry("task.retry.scheduled", at=now - timedelta(minutes=9))
    ended_retry("task.dead", at=now - timedelta(minutes=1), attempt=3)
    ended_retry("task.retry.succeeded", at=now - timedelta(minutes=11))  # too long ago
    ended_retry("task.retry.scheduled", at=now, attempt=1)  # a first attempt failed: not a retry
    ended_retry("task.execution.failed", at=now)  # the failure itself: counted by what followed it

    response = figures(admin_client)

    assert response.context["recent"] == {"succeeded": 3, "failed": 1, "dead": 1}
    assert response.context["failure_rate"] == 40.0
    assert b"40.0%" in response.content


def test_without_retries_the_failure_rate_is_a_dash_not_zero(admin_client):
    response = figures(admin_client)

    assert response.context["failure_rate"] is None
    assert "–</strong>" in response.content.decode()


def test_retry_outcomes_fall_into_the_hour_they_ended_in_over_the_last_24_hours(admin_client):
    now = timezone.now()
    ended_retry("task.retry.succeeded", at=now)
    ended_retry("task.retry.succeeded", at=now - timedelta(hours=3))
    ended_retry("task.retry.succeeded", at=now - timedelta(hours=3))
    ended_retry("task.retry.scheduled", at=now - timedelta(hours=3))
    ended_retry("task.dead", at=now - timedelta(hours=22), attempt=3)
    ended_retry("task.retry.succeeded", at=now - timedelta(hours=24))  # before the first hour shown

    bars = figures(admin_client).context["chart"]["bars"]

    def hour_of(at):
        return timezone.localtime(at).replace(minute=0, second=0, microsecond=0)

    by_hour = {bar["start"]: (bar["succeeded"], bar["failed"], bar["dead"]) for bar in bars}
    assert len(bars) == 24 and list(by_hour) == sorted(by_hour)
    assert by_hour[hour_of(now)] == (1, 0, 0)
    assert by_hour[hour_of(now - timedelta(hours=3))] == (2, 1, 0)
    assert by_hour[hour_of(now - timedelta(hours=22))] == (0, 0, 1)
    assert sum(map(sum, by_hour.values())) == 5


def test_the_hours_are_labelled_in_the_operators_time_zone(admin_client, settings):
    settings.TIME_ZONE = "Asia/Shanghai"

    context = figures(admin_client).context
    bars = context["chart"]["bars"]

    current_hour = timezone.localtime(context["now"], timezone.get_fixed_timezone(8 * 60)).strftime("%H:00")
    assert bars[-1]["label"] == current_hour
    assert bars[-1]["title"].startswith(f"{current_hour}–")


def test_each_hours_bar_says_its_figures_in_its_title_and_in_the_table(admin_client):
    ended_retry("task.retry.succeeded", at=timezone.now())
    ended_retry("task.retry.scheduled", at=timezone.now())

    html = figures(admin_client).content.decode()

    assert html.count("<title>") == 24
    assert "1 succeeded, 1 failed, 0 dead</title>" in html
    assert '<td class="ops-dash-num">1</td><td class="ops-dash-num">1</td><td class="ops-dash-num">0</td>' in html


# Dead letters and work orders.

def test_the_dead_letter_queue_counts_open_and_replaying_dead_letters_by_flow(admin_client):
    oldest = timezone.now() - timedelta(hours=5)
    DeadLetterFactory(task__flow="charge", died_at=oldest)
    DeadLetterFactory(task__flow="charge")
    DeadLetterFactory(task__flow="charge", state="replaying", replay_task=TaskFactory())
    DeadLetterFactory(task__flow="signup")
    DeadLetterFactory(task__flow="refund", state="resolved", settled_at=timezone.now())

    response = figures(admin_client)

    assert [(row["flow"], row["open"], row["replaying"]) for row in response.context["dead_letters"]] == [
        ("charge", 2, 1), ("signup", 1, 0)]
    assert response.context["dead_letters"][0]["oldest"] == oldest
    assert response.context["dead_letters_open"] == 3


def test_with_the_dlq_inspector_off_the_dead_letter_queue_is_not_shown(admin_client, settings):
    settings.RETRYOPS_FLAGS_OFF = frozenset({"dlq-inspector"})
    DeadLetterFactory(task__flow="charge")

    response = figures(admin_client)

    assert response.context["dead_letters"] is None
    assert b"Dead-letter queue" not in response.content


def test_live_work_orders_are_counted_by_state_and_by_the_sla_clock_they_are_past(admin_client):
    now = timezone.now()
    # Open 20 minutes after its first dead letter with nobody acknowledging: past acknowledge (15 min).
    late = WorkOrderFactory(first_dead_at=now - timedelta(minutes=20), created_at=now - timedelta(minutes=19))
    # Acknowledged in time.
    WorkOrderFactory(state="acknowledged", first_dead_at=now - timedelta(minutes=2),
                     acknowledged_at=now - timedelta(minutes=1), created_at=now - timedelta(minutes=2))
    # In progress in time now, but escalation marked its compensate clock: the mark stays.
    marked = WorkOrderFactory(state="in_progress", first_dead_at=now - timedelta(hours=1),
                              created_at=now - timedelta(minutes=59), acknowledged_at=now - timedelta(minutes=50),
                              compensate_breached_at=now - timedelta(minutes=30))
    # Closed: nothing left to do, whatever its clocks.
    WorkOrderFactory(state="closed", first_dead_at=now - timedelta(days=3), ended_at=now,
                     created_at=now - timedelta(days=2))

    board = figures(admin_client).context["work_orders"]

    assert (board["live"], board["past_sla"]) == (3, 2)
    assert [(state, n) for state, _, n in board["by_state"]] == [("open", 1), ("acknowledged", 1),
                                                                  ("in_progress", 1)]
    assert [(clock, n) for clock, _, n in board["past_by_clock"]] == [("notice", 0), ("acknowledge", 1),
                                                                       ("compensate", 1)]
    assert [(order.pk, [str(c) for c in clocks]) for order, clocks in board["worst"]] == [
        (marked.pk, ["compensate"]), (late.pk, ["acknowledge"])]


# RQ.

def test_queue_depth_and_workers_come_from_rq(admin_client, redis_conn):
    Queue("retries", connection=redis_conn).enqueue("os.getpid")  # at once, not on a commit that never comes
    worker = Worker(["flows", "default"], connection=redis_conn, name="flow-worker-1")
    worker.register_birth()

    rq = figures(admin_client).context["rq"]

    queues = {queue["name"]: queue for queue in rq["queues"]}
    assert (queues["retries"]["waiting"], queues["retries"]["workers"]) == (1, 0)
    assert (queues["flows"]["waiting"], queues["flows"]["workers"]) == (0, 1)
    [shown] = rq["workers"]
    assert (shown["name"], shown["queues"], shown["late"]) == ("flow-worker-1", ["flows", "default"], False)


def test_a_worker_silent_for_longer_than_its_ttl_is_shown_late(admin_client, redis_conn):
    worker = Worker(["flows"], connection=redis_conn, name="stuck")
    worker.register_birth()
    redis_conn.hset(worker.key, "last_heartbeat", "2020-01-01T00:00:00.000000Z")

    html = figures(admin_client).content.decode()

    assert figures(admin_client).context["rq"]["workers"][0]["late"] is True
    assert "(late)" in html


def test_a_redis_that_does_not_answer_is_named_and_the_database_figures_still_show(admin_client, settings):
    settings.RQ_QUEUES = {name: {**config, "URL": "redis://127.0.0.1:1/0"}
                          for name, config in settings.RQ_QUEUES.items()}
    TaskFactory(state="retrying", next_run_at=timezone.now())

    response = figures(admin_client)

    assert response.context["retries"]["count"] == 1
    assert all("error" in queue for queue in response.context["rq"]["queues"])
    assert b"Redis did not answer" in response.content


def test_the_fragment_links_to_the_rq_dashboard(admin_client):
    assert f'href="{reverse("django_rq:home")}"'.encode() in figures(admin_client).content


# Cost.

def seed_attempts(n: int) -> None:
    """`n` tasks, each with a failed first attempt and a retry that succeeded or runs, and their
    events, with dead letters and live work orders."""
    now = timezone.now()
    pool_task = TaskFactory(state="succeeded", next_run_at=None, finished_at=now)
    tasks = Task.objects.bulk_create(
        Task(flow=f"flow{i % 3}", pool=pool_task.pool, policy=pool_task.policy, strict=False,
             state="running" if i % 10 == 0 else "succeeded", finished_at=None if i % 10 == 0 else now,
             idempotency_key=f"seeded-{n}-{i}", created_by="test") for i in range(n // 2))
    Attempt.objects.bulk_create(
        Attempt(task=task, number=number, started_at=now, outcome=outcome, finished_at=None if outcome == "running"
                else now) for task in tasks
        for number, outcome in ((1, "failed"), (2, "running" if task.state == "running" else "succeeded")))
    TaskEvent.objects.bulk_create(TaskEvent(task=task, kind=kind, attempt_number=number) for task in tasks
                                  for kind, number in (("task.retry.scheduled", 1), ("task.retry.succeeded", 2)))
    for i in range(max(1, n // 100)):
        DeadLetterFactory(task__flow=f"flow{i % 3}")
        WorkOrderFactory(first_dead_at=now - timedelta(hours=i))


def test_the_fragment_costs_the_same_queries_at_10_and_at_1000_attempts(admin_client):
    seed_attempts(10)
    admin_client.get(FRAGMENT)  # the session's first read
    with CaptureQueriesContext(connection) as at_10:
        figures(admin_client)
    seed_attempts(990)
    assert Attempt.objects.count() == 1000
    with CaptureQueriesContext(connection) as at_1000:
        figures(admin_client)

    assert len(at_10.captured_queries) == len(at_1000.captured_queries)


# Who may see it, and where.

def test_an_anonymous_visitor_is_sent_to_the_login_page(client):
    response = client.get(FRAGMENT)

    assert response.status_code == 302
    assert response.url == f"{reverse('admin:login')}?next={FRAGMENT}"


def test_staff_without_the_permission_to_view_tasks_is_refused(client):
    client.force_login(staff("erin", "view_deadletter", "view_workorder"))

    assert client.get(FRAGMENT).status_code == 403


def test_staff_with_the_permission_to_view_tasks_sees_the_figures(client):
    client.force_login(staff("dave", "view_task"))

    assert figures(client).context["retries"]["count"] == 0


def test_the_fragment_answers_only_reads(admin_client):
    assert admin_client.post(FRAGMENT).status_code == 405


def test_the_fragment_is_the_panels_content_without_the_admin_page_around_it(admin_client):
    html = figures(admin_client).content.decode()

    assert html.lstrip().startswith('<div class="ops-dash"')
    assert "<html" not in html and 'id="header"' not in html and "app-list" not in html
    assert "Refreshed at" in html


def test_the_admin_index_shows_the_panel_that_fetches_the_fragment_above_the_app_list(admin_client):
    html = admin_client.get(INDEX).content.decode()

    assert f'data-url="{FRAGMENT}"' in html
    assert "compensation/dashboard.js" in html
    assert 'class="ops-dashboard-stale" role="alert" hidden' in html
    assert html.index('id="ops-dashboard"') < html.index('id="content-main"')
    assert reverse("admin:scheduling_task_changelist") in html


def test_the_admin_index_has_no_panel_for_staff_who_may_not_view_tasks(client):
    client.force_login(staff("erin", "view_deadletter"))

    html = client.get(INDEX).content.decode()

    assert 'id="ops-dashboard"' not in html
    assert 'id="content-main"' in html
