import pytest

from scheduling import services
from scheduling.models import Task
from scheduling.signatures import error_signature


def test_an_unknown_flow_is_refused_naming_the_known_ones(alice, instant_policy):
    with pytest.raises(services.TaskError, match=r"unknown flow 'signup'; known flows: .*demo.*http_call"):
        services.start_task(flow="signup", pool_name=alice.pool, created_by="t", policy="instant")
    assert not Task.objects.exists()


def test_a_payload_that_is_not_json_is_refused(alice, instant_policy):
    with pytest.raises(services.TaskError, match="payload is not JSON: Expecting"):
        services.start_task(flow="demo", pool_name=alice.pool, payload="{oops", created_by="t", policy="instant")


def test_a_payload_that_is_not_an_object_is_refused(alice, instant_policy):
    with pytest.raises(services.TaskError, match="payload must be a JSON object, got list"):
        services.start_task(flow="demo", pool_name=alice.pool, payload="[1, 2]", created_by="t", policy="instant")


def test_an_unknown_policy_says_how_to_load_them(alice):
    with pytest.raises(services.TaskError, match="no retry policy 'nope'; load them with manage.py load_retry_policies"):
        services.start_task(flow="demo", pool_name=alice.pool, created_by="t", policy="nope")


def test_a_resource_of_another_pool_is_refused(alice, instant_policy):
    from tests.factories import ResourceFactory

    stranger = ResourceFactory(key="carol@y")
    with pytest.raises(services.TaskError, match=f"resource carol@y belongs to pool {stranger.pool.name}, not accounts"):
        services.start_task(flow="demo", pool_name=alice.pool, resource=stranger, created_by="t", policy="instant")


def test_the_same_idempotency_key_returns_the_first_task(alice, instant_policy):
    first = services.start_task(flow="demo", pool_name=alice.pool, created_by="t", policy="instant",
                                idempotency_key="order-42")
    again = services.start_task(flow="demo", pool_name=alice.pool, created_by="t", policy="instant",
                                idempotency_key="order-42")
    assert again.pk == first.pk and Task.objects.count() == 1


def test_start_task_command_names_the_bad_payload(alice, instant_policy):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="payload is not JSON"):
        call_command("start_task", flow="demo", pool="accounts", payload="nope", policy="instant")


@pytest.mark.parametrize("message, signature", [
    ("read timed out after 30s", "TimeoutError: read timed out after <n>s"),
    ("user 'alice@x' not found (id 812)", "TimeoutError: user <str> not found (id <n>)"),
    ("token 3f2a9c1e-5b7d-4e8f-9a0b-1c2d3e4f5a6b revoked", "TimeoutError: token <id> revoked"),
    ("mail bob@example.com bounced", "TimeoutError: mail <email> bounced"),
])
def test_error_signatures_strip_what_varies(message, signature):
    assert error_signature("TimeoutError", message) == signature


def test_identical_failures_share_a_signature():
    assert error_signature("E", "order 17 failed at 10:42") == error_signature("E", "order 99 failed at 11:03")
