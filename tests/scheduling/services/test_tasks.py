"""Starting tasks: what a task is asked to do is checked before anything is written."""

from datetime import datetime, timedelta

import pytest
from django.db import IntegrityError
from django.utils import timezone

import resources.services
from resources.models import Resource
from retryops.errors import BadInput, DomainError
from scheduling import services
from scheduling.choices import TaskState
from scheduling.models import BatchConfig, Task
from scheduling.services.tasks import start_batch_task
from tests.factories import ResourceFactory
from tests.scheduling.helpers import work


def start(pool, **kwargs):
    kwargs.setdefault("created_by", "shop")
    kwargs.setdefault("policy", "instant")
    return services.start_task(flow="demo", pool_name=pool, **kwargs)


def refused(call) -> DomainError:
    with pytest.raises(DomainError) as caught:
        call()
    assert not Task.objects.exists()
    return caught.value


@pytest.mark.django_db
def test_a_task_without_a_named_resource_is_not_strict(pool, instant_policy):
    assert start(pool).strict is False


@pytest.mark.django_db
def test_a_task_on_a_named_resource_is_strict_by_default(pool, alice, instant_policy):
    assert start(pool, resource=alice).strict is True


@pytest.mark.django_db
def test_the_database_refuses_a_strict_task_without_a_named_resource(pool, alice, instant_policy):
    task = start(pool)
    with pytest.raises(IntegrityError):
        Task.objects.filter(pk=task.pk).update(strict=True)


@pytest.mark.django_db(transaction=True)
def test_an_unnamed_tasks_retry_after_a_swept_hold_falls_back_to_a_free_resource(redis_conn, pool, default_policy):
    first = ResourceFactory(pool=pool, key="r0")
    task = start(pool, payload={"script": ["TimeoutError: slow", "ok"]}, policy="default")
    work()
    resources.services.sweep_expired_leases(now=timezone.now() + timedelta(hours=3))
    resources.services.claim_by_id(resource_id=first.pk, holder="another scheduler")  # r0 is taken meanwhile
    ResourceFactory(pool=pool, key="r1")
    services.run_task_now(task=task, actor="ops:carol")
    work()
    task.refresh_from_db()
    assert task.state == TaskState.SUCCEEDED
    assert list(task.attempts.values_list("resource__key", flat=True)) == ["r0", "r1"]


@pytest.mark.django_db
def test_a_payload_with_nan_is_refused_naming_the_place(pool, instant_policy):
    error = refused(lambda: start(pool, payload='{"order": {"amount": NaN}}'))
    assert (error.code, error.details["path"]) == ("bad_payload", "payload.order.amount")
    assert "payload.order.amount is nan" in str(error)


@pytest.mark.django_db
def test_a_payload_with_a_nul_character_is_refused(pool, instant_policy):
    error = refused(lambda: start(pool, payload={"note": "a\x00b"}))
    assert (error.code, error.details["path"]) == ("bad_payload", "payload.note")


@pytest.mark.django_db
def test_a_payload_that_is_not_an_object_is_refused_with_its_code(pool, instant_policy):
    assert refused(lambda: start(pool, payload="[1, 2]")).code == "bad_payload"


@pytest.mark.django_db
def test_an_unknown_flow_is_refused_with_its_code(pool, instant_policy):
    error = refused(lambda: services.start_task(flow="signup", pool_name=pool, created_by="shop", policy="instant"))
    assert (error.code, error.details["flow"]) == ("unknown_flow", "signup")


@pytest.mark.django_db
def test_an_unknown_policy_is_refused_with_its_code(pool):
    error = refused(lambda: start(pool, policy="nope"))
    assert (error.code, error.details["policy"]) == ("unknown_policy", "nope")


@pytest.mark.django_db
def test_an_idempotency_key_longer_than_the_column_is_refused(pool, instant_policy):
    error = refused(lambda: start(pool, idempotency_key="k" * 201))
    assert (error.code, error.details["field"]) == ("bad_input", "idempotency_key")


@pytest.mark.parametrize("field, value", [
    ("created_by", "shop\x00"), ("created_by", "  "), ("idempotency_key", "order\x0042"), ("policy", "inst\x00ant"),
    ("flow", "de\x00mo"), ("pool_name", "acc\x00ounts"),
])
@pytest.mark.django_db
def test_text_no_column_can_hold_is_refused_naming_the_field(pool, instant_policy, field, value):
    kwargs = {"flow": "demo", "pool_name": pool, "created_by": "shop", "policy": "instant", field: value}
    error = refused(lambda: services.start_task(**kwargs))
    assert error.details.get("field", error.details.get("flow")) in (field, value)


@pytest.mark.django_db
def test_a_run_at_years_ahead_is_refused(pool, instant_policy):
    error = refused(lambda: start(pool, run_at=timezone.now() + timedelta(days=3650)))
    assert (error.code, error.details["field"]) == ("bad_input", "run_at")


@pytest.mark.django_db
def test_a_run_at_at_the_end_of_time_is_refused_not_overflowed(pool, instant_policy):
    error = refused(lambda: start(pool, run_at=datetime.max.replace(tzinfo=timezone.get_current_timezone())))
    assert error.details["field"] == "run_at"


@pytest.mark.django_db
def test_a_resource_of_another_pool_is_refused_with_its_code(pool, instant_policy):
    stranger = ResourceFactory(key="carol@y")
    error = refused(lambda: start(pool, resource=stranger))
    assert (error.code, error.details["field"]) == ("bad_input", "resource")
    assert Resource.objects.get(pk=stranger.pk).lease_token is None


@pytest.fixture
def waiting(redis_conn, pool, alice, default_policy):
    """A task on alice that failed once and waits two minutes for its retry, holding alice."""
    task = start(pool, resource=alice, payload={"script": ["TimeoutError: slow", "ok"]}, policy="default")
    work()
    task.refresh_from_db()
    assert task.state == TaskState.RETRYING and task.held_lease_token is not None
    return task


@pytest.mark.django_db(transaction=True)
def test_cancelling_a_waiting_task_gives_back_its_held_resource(waiting, alice):
    from resources.choices import EventKind, ResourceState
    from resources.models import ResourceEvent
    from scheduling.choices import TaskEventKind

    task = services.cancel_task(task=waiting, actor="ops:carol", reason="customer withdrew")
    row = Task.objects.get(pk=waiting.pk)
    assert (row.state, row.held_lease_token, row.finished_at is not None) == (TaskState.CANCELLED, None, True)
    assert task.state == TaskState.CANCELLED
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.FAILED
    assert ResourceEvent.objects.filter(resource=alice).latest("id").kind == EventKind.RELEASED_UNUSED
    cancelled = row.events.get(kind=TaskEventKind.CANCELLED)
    assert cancelled.details["actor"] == "ops:carol" and cancelled.details["reason"] == "customer withdrew"


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_task_never_runs_again(redis_conn, pool, alice, instant_policy):
    task = start(pool)
    services.cancel_task(task=task, actor="ops:carol")
    work()
    assert Task.objects.get(pk=task.pk).state == TaskState.CANCELLED
    assert not task.attempts.exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("action, name", [("cancel_task", "cancel"), ("run_task_now", "run_now")])
def test_a_finished_task_cannot_be_cancelled_or_run_now(redis_conn, pool, alice, instant_policy, action, name):
    task = start(pool)
    work()
    with pytest.raises(DomainError) as refused:
        getattr(services, action)(task=task, actor="ops:carol")
    assert refused.value.code == "illegal_transition"
    assert refused.value.details == {"task_id": task.pk, "state": "succeeded", "action": name}


@pytest.mark.django_db(transaction=True)
def test_a_running_task_cannot_be_cancelled(redis_conn, pool, alice, instant_policy):
    task = start(pool)
    services.begin_attempt(task_id=task.pk, attempt_number=1)
    with pytest.raises(DomainError) as refused:
        services.cancel_task(task=task, actor="ops:carol")
    assert (refused.value.code, refused.value.details["state"]) == ("illegal_transition", "running")


@pytest.mark.django_db
def test_cancelling_an_unknown_task_names_it():
    with pytest.raises(DomainError) as refused:
        services.cancel_task(task=987654, actor="ops:carol")
    assert (refused.value.code, refused.value.details["task_id"]) == ("task_not_found", 987654)


@pytest.mark.django_db(transaction=True)
def test_run_now_runs_a_waiting_retry_at_once(waiting):
    from scheduling.choices import TaskEventKind

    services.run_task_now(task=waiting, actor="ops:carol")
    work()
    task = Task.objects.get(pk=waiting.pk)
    assert (task.state, task.attempt_count) == (TaskState.SUCCEEDED, 2)
    assert task.events.get(kind=TaskEventKind.RUN_NOW).details["actor"] == "ops:carol"


@pytest.mark.django_db(transaction=True)
def test_run_now_makes_a_scheduled_task_pending(redis_conn, pool, alice, instant_policy):
    task = start(pool, run_at=timezone.now() + timedelta(hours=1))
    assert task.state == TaskState.SCHEDULED
    services.run_task_now(task=task, actor="ops:carol")
    row = Task.objects.get(pk=task.pk)
    assert row.state == TaskState.PENDING and row.next_run_at <= timezone.now()


@pytest.mark.parametrize("field, value", [
    ("created_by", "shop\ud800"), ("idempotency_key", "order\udc0042"), ("policy", "inst\ud800ant"),
    ("flow", "de\ud800mo"), ("pool_name", "acc\ud800ounts"),
])
@pytest.mark.django_db
def test_text_with_a_lone_surrogate_is_refused_naming_the_field(pool, instant_policy, field, value):
    kwargs = {"flow": "demo", "pool_name": pool, "created_by": "shop", "policy": "instant", field: value}
    error = refused(lambda: services.start_task(**kwargs))
    assert error.code == "bad_input" and error.details["field"] == field


@pytest.mark.django_db
def test_a_payload_with_a_lone_surrogate_is_refused_naming_the_place(pool, instant_policy):
    error = refused(lambda: start(pool, payload='{"order": {"note": "\\ud800"}}'))
    assert (error.code, error.details["path"]) == ("bad_payload", "payload.order.note")
    assert "lone surrogate" in str(error)


@pytest.mark.django_db
def test_a_payload_key_with_a_lone_surrogate_is_refused(pool, instant_policy):
    error = refused(lambda: start(pool, payload={"n\udc00te": 1}))
    assert error.code == "bad_payload" and "lone surrogate" in str(error)


@pytest.mark.django_db
def test_a_batch_reservation_of_a_named_resource_never_takes_another_one(pool, claimed_alice, bob, instant_policy):
    config = BatchConfig.objects.create(name="signups", pool=pool, flow="demo", policy=instant_policy)
    error = refused(lambda: start_batch_task(config=config, resource=claimed_alice))
    assert (error.code, error.details["reason"]) == ("resource_unavailable", "in_use")
    assert Resource.objects.get(pk=bob.pk).lease_token is None


@pytest.mark.parametrize("value", ["abc", True, 1.5, 2**70, 0, -3])
@pytest.mark.django_db
def test_a_task_id_that_names_no_row_is_bad_input(value):
    for action in (services.cancel_task, services.run_task_now):
        with pytest.raises(DomainError) as caught:
            action(task=value, actor="ops:carol")
        assert (caught.value.code, caught.value.details["field"]) == ("bad_input", "task")


@pytest.mark.parametrize("value", ["abc", True, 1.5, 2**70])
@pytest.mark.django_db
def test_a_resource_id_that_names_no_row_is_bad_input_on_start(pool, instant_policy, value):
    error = refused(lambda: start(pool, resource=value))
    assert error.code == "bad_input" and error.details["field"] == "resource"
    assert isinstance(error, BadInput)


@pytest.mark.django_db
def test_strict_sent_as_text_is_refused_not_taken_as_true(pool, alice, instant_policy):
    error = refused(lambda: start(pool, resource=alice, strict="no"))
    assert (error.code, error.details["field"]) == ("bad_input", "strict")


@pytest.mark.django_db
def test_a_cancel_reason_that_is_not_text_is_refused(pool, alice, instant_policy):
    task = start(pool)
    with pytest.raises(DomainError) as caught:
        services.cancel_task(task=task, actor="ops:carol", reason=5)
    assert (caught.value.code, caught.value.details["field"]) == ("bad_input", "reason")
    assert Task.objects.get(pk=task.pk).state == TaskState.PENDING


def test_an_unknown_flow_is_refused_naming_the_known_ones(alice, instant_policy):
    with pytest.raises(DomainError, match=r"unknown flow 'signup'; known flows: .*demo.*http_call"):
        services.start_task(flow="signup", pool_name=alice.pool, created_by="t", policy="instant")
    assert not Task.objects.exists()


def test_a_payload_that_is_not_json_is_refused(alice, instant_policy):
    with pytest.raises(DomainError, match="payload is not JSON: Expecting"):
        services.start_task(flow="demo", pool_name=alice.pool, payload="{oops", created_by="t", policy="instant")


def test_a_payload_that_is_not_an_object_is_refused(alice, instant_policy):
    with pytest.raises(DomainError, match="payload must be a JSON object, got list"):
        services.start_task(flow="demo", pool_name=alice.pool, payload="[1, 2]", created_by="t", policy="instant")


def test_an_unknown_policy_says_how_to_load_them(alice):
    with pytest.raises(DomainError, match="no retry policy 'nope'; load them with manage.py load_retry_policies"):
        services.start_task(flow="demo", pool_name=alice.pool, created_by="t", policy="nope")


def test_a_resource_of_another_pool_is_refused(alice, instant_policy):
    from tests.factories import ResourceFactory

    stranger = ResourceFactory(key="carol@y")
    with pytest.raises(BadInput, match=f"resource carol@y belongs to pool {stranger.pool.name}, not accounts"):
        services.start_task(flow="demo", pool_name=alice.pool, resource=stranger, created_by="t", policy="instant")


def test_the_same_idempotency_key_returns_the_first_task(alice, instant_policy):
    first = services.start_task(flow="demo", pool_name=alice.pool, created_by="t", policy="instant",
                                idempotency_key="order-42")
    again = services.start_task(flow="demo", pool_name=alice.pool, created_by="t", policy="instant",
                                idempotency_key="order-42")
    assert again.pk == first.pk and Task.objects.count() == 1
