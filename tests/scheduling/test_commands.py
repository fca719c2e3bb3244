"""The scheduling commands: thin, and every bad input answered with a CommandError naming it."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from scheduling.models import BatchConfig, RetryPolicy, Task
from tests.factories import ResourceFactory
from tests.scheduling.helpers import work

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args, **options) -> str:
    out = StringIO()
    call_command(*args, stdout=out, **options)
    return out.getvalue()


def test_dispatch_tasks_enqueues_a_waiting_task_redis_lost(redis_conn, alice, instant_policy):
    from scheduling import services

    task = services.start_task(flow="demo", pool_name=alice.pool, created_by="shop", policy="instant")
    redis_conn.flushdb()
    assert "0 lost attempt(s) abandoned, 0 probe(s) started, 1 task(s) enqueued" in run("dispatch_tasks")
    work()
    assert Task.objects.get(pk=task.pk).state == "succeeded"


def test_run_batches_reports_what_each_config_started(redis_conn, pool, instant_policy):
    ResourceFactory.create_batch(3, pool=pool)
    BatchConfig.objects.create(name="signups", pool=pool, flow="demo", policy=instant_policy, tasks_per_tick=2)
    out = run("run_batches")
    assert "signups: 2 task(s) started" in out
    assert Task.objects.filter(created_by="batch signups").count() == 2


def test_run_batches_names_a_failing_config_and_ticks_the_rest(redis_conn, pool, instant_policy):
    ResourceFactory(pool=pool)
    BatchConfig.objects.create(name="a-broken", pool=pool, flow="demo", policy=instant_policy, payload=[1])
    BatchConfig.objects.create(name="b-good", pool=pool, flow="demo", policy=instant_policy, tasks_per_tick=1)
    out = StringIO()
    err = StringIO()
    call_command("run_batches", stdout=out, stderr=err)
    assert "a-broken failed: payload must be a JSON object" in err.getvalue()
    assert "b-good: 1 task(s) started" in out.getvalue()


def test_start_task_refuses_a_nan_payload_naming_the_place(alice, instant_policy):
    with pytest.raises(CommandError, match=r"payload\.x is nan"):
        call_command("start_task", flow="demo", pool="accounts", payload='{"x": NaN}', policy="instant")
    assert not Task.objects.exists()


def test_start_task_refuses_an_overlong_idempotency_key(alice, instant_policy):
    with pytest.raises(CommandError, match="idempotency_key"):
        call_command("start_task", flow="demo", pool="accounts", policy="instant", idempotency_key="k" * 300)


def test_start_task_refuses_an_actor_with_a_nul(alice, instant_policy):
    with pytest.raises(CommandError, match="created_by"):
        call_command("start_task", flow="demo", pool="accounts", policy="instant", actor="ops\x00")


def test_retry_resource_refuses_a_blank_actor(alice, instant_policy):
    with pytest.raises(CommandError, match="actor"):
        call_command("retry_resource", pool="accounts", key="alice@x", actor=" ", flow="demo")


def test_load_retry_policies_names_the_bad_field(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("policies:\n  - name: broken\n", encoding="utf-8")
    with pytest.raises(CommandError, match=r"policies\[0\] \(broken\): missing field"):
        call_command("load_retry_policies", str(path))


def policies_yaml(*names: str) -> str:
    entries = "".join(
        f"  - {{name: {name}, max_attempts: 3, backoff: fixed, initial_delay_seconds: 1, multiplier: 1,"
        f" max_delay_seconds: 1, retryable_error_patterns: [], non_retryable_error_patterns: [],"
        f" same_resource_on_retry: true}}\n" for name in names)
    return f"policies:\n{entries}...\n"


def test_load_retry_policies_only_missing_adds_new_policies_and_leaves_edited_ones(db, tmp_path):
    path = tmp_path / "policies.yaml"
    path.write_text(policies_yaml("a"))
    call_command("load_retry_policies", str(path), stdout=StringIO())
    RetryPolicy.objects.filter(name="a").update(max_attempts=9)
    path.write_text(policies_yaml("a", "b"))
    out = StringIO()
    call_command("load_retry_policies", str(path), only_missing=True, stdout=out)
    assert RetryPolicy.objects.get(name="a").max_attempts == 9
    assert RetryPolicy.objects.filter(name="b").exists()
    assert "1 missing retry policies added: b" in out.getvalue()


def test_start_task_command_names_the_bad_payload(alice, instant_policy):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="payload is not JSON"):
        call_command("start_task", flow="demo", pool="accounts", payload="nope", policy="instant")
