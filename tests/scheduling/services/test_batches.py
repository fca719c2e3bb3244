"""Batch ticks: one bad config never stops the others; a waiting task keeps its resource."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

import resources.services
from retryops.errors import DomainError
from scheduling import services
from scheduling.choices import TaskState
from scheduling.models import BatchConfig, Task
from tests.factories import ResourceFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_failing_config_does_not_stop_the_others(redis_conn, pool, instant_policy):
    ResourceFactory.create_batch(3, pool=pool)
    BatchConfig.objects.create(name="a-broken", pool=pool, flow="demo", policy=instant_policy, payload=[1, 2],
                               tasks_per_tick=1)
    BatchConfig.objects.create(name="b-good", pool=pool, flow="demo", policy=instant_policy, tasks_per_tick=2)

    services.run_batches()

    assert Task.objects.filter(created_by="batch b-good").count() == 2


def test_a_failing_config_records_its_error_and_tick(redis_conn, pool, instant_policy):
    broken = BatchConfig.objects.create(name="a-broken", pool=pool, flow="demo", policy=instant_policy,
                                        payload=[1, 2], tasks_per_tick=1)
    services.run_batches()
    broken.refresh_from_db()
    assert "payload must be a JSON object" in broken.last_error
    assert broken.last_tick_at is not None


def test_a_good_tick_clears_the_configs_last_error(redis_conn, pool, instant_policy):
    ResourceFactory(pool=pool)
    config = BatchConfig.objects.create(name="mended", pool=pool, flow="demo", policy=instant_policy,
                                        tasks_per_tick=1, last_error="payload must be a JSON object, got list")
    services.run_batches()
    config.refresh_from_db()
    assert config.last_error == ""


def test_failed_first_skips_a_resource_pinned_by_a_waiting_task(redis_conn, pool, default_policy):
    first = ResourceFactory(pool=pool, key="r0")
    task = services.start_task(flow="demo", pool_name=pool, payload={"script": ["TimeoutError: slow", "ok"]},
                               created_by="shop", policy="default")
    from tests.scheduling.helpers import work
    work()
    resources.services.sweep_expired_leases(now=timezone.now() + timedelta(hours=3))  # the hold ran out; r0 is failed
    task.refresh_from_db()
    assert (task.state, task.pinned_resource_id) == (TaskState.RETRYING, first.pk)
    ResourceFactory(pool=pool, key="fresh")
    config = BatchConfig.objects.create(name="signups", pool=pool, flow="demo", policy=default_policy,
                                        tasks_per_tick=1, retry_failed_first=True)

    started = services.run_batch(config=config)

    assert [t.resource.key for t in started] == ["fresh"]



def test_a_failed_first_task_is_not_strict_but_holds_its_candidate(redis_conn, pool, default_policy):
    failed = resources.services.claim_by_id(resource_id=ResourceFactory(pool=pool, key="r0").pk, holder="shop")
    resources.services.release(resource=failed, lease_token=failed.lease_token, outcome="failure", error="TimeoutError")
    config = BatchConfig.objects.create(name="signups", pool=pool, flow="demo", policy=default_policy,
                                        tasks_per_tick=1, retry_failed_first=True)

    [task] = services.run_batch(config=config)

    assert (task.strict, task.resource_id, task.held_lease_token) == (False, failed.pk, task.resource.lease_token)


# saving a batch config: only the fields given, under the row's lock


def test_a_batch_config_change_keeps_the_tick_time_it_did_not_edit(pool, instant_policy):
    config = services.save_batch_config(actor="carol", data={"name": "signups", "pool": pool, "flow": "demo",
                                                             "policy": instant_policy})
    ticked = timezone.now()
    BatchConfig.objects.filter(pk=config.pk).update(last_tick_at=ticked)

    services.save_batch_config(config=config, data={"enabled": False}, actor="dave")  # `config` read before the tick

    assert BatchConfig.objects.get(pk=config.pk).last_tick_at == ticked


def test_a_batch_config_name_taken_is_refused_naming_the_field(pool, instant_policy):
    data = {"name": "signups", "pool": pool, "flow": "demo", "policy": instant_policy}
    services.save_batch_config(actor="carol", data=data)
    with pytest.raises(DomainError) as refused:
        services.save_batch_config(actor="carol", data=data)
    assert (refused.value.code, refused.value.details["field"]) == ("bad_input", "name")


def test_a_new_batch_config_without_a_policy_is_refused_naming_it(pool):
    with pytest.raises(DomainError) as refused:
        services.save_batch_config(actor="carol", data={"name": "signups", "pool": pool, "flow": "demo"})
    assert refused.value.details["field"] == "policy"
    assert not BatchConfig.objects.exists()




def test_batch_config_patterns_with_a_lone_surrogate_are_refused_naming_the_field(pool, instant_policy):
    with pytest.raises(DomainError) as refused:
        services.save_batch_config(data={"name": "signups", "pool": pool, "flow": "demo", "policy": "instant",
                                         "retryable_error_patterns": ["time\ud800out"]}, actor="ops:carol")
    assert refused.value.details["field"].startswith("retryable_error_patterns")
    assert not BatchConfig.objects.exists()


def test_a_batch_config_field_that_is_not_text_is_named(pool, instant_policy):
    with pytest.raises(DomainError) as refused:
        services.save_batch_config(data={1: "one"}, actor="ops:carol")
    assert (refused.value.code, refused.value.details["field"]) == ("bad_input", "1")


@pytest.mark.parametrize("value", ["abc", True, 2**70])
def test_a_batch_config_id_that_names_no_row_is_bad_input(pool, instant_policy, value):
    with pytest.raises(DomainError) as refused:
        services.save_batch_config(config=value, data={"enabled": False}, actor="ops:carol")
    assert (refused.value.code, refused.value.details["field"]) == ("bad_input", "config")


def test_a_second_run_within_the_cadence_starts_no_second_batch(redis_conn, pool, instant_policy):
    ResourceFactory.create_batch(4, pool=pool)
    BatchConfig.objects.create(name="steady", pool=pool, flow="demo", policy=instant_policy, tasks_per_tick=1)

    services.run_batches(every=60)
    services.run_batches(every=60)  # a new ops leader's first run, seconds after the old one's

    assert Task.objects.filter(created_by="batch steady").count() == 1


def test_a_run_a_cadence_after_the_last_tick_ticks_again(redis_conn, pool, instant_policy):
    ResourceFactory.create_batch(4, pool=pool)
    config = BatchConfig.objects.create(name="steady", pool=pool, flow="demo", policy=instant_policy,
                                        tasks_per_tick=1)
    services.run_batches(every=60)
    BatchConfig.objects.filter(pk=config.pk).update(last_tick_at=timezone.now() - timedelta(seconds=60))

    services.run_batches(every=60)

    assert Task.objects.filter(created_by="batch steady").count() == 2


def test_a_tick_that_takes_a_tenth_of_the_cadence_still_ticks_at_the_next_cadence(redis_conn, pool, instant_policy,
                                                                                 monkeypatch):
    ResourceFactory.create_batch(4, pool=pool)
    BatchConfig.objects.create(name="slow", pool=pool, flow="demo", policy=instant_policy, tasks_per_tick=1)
    start = services.batches.start_batch_task

    def slow_start(**kwargs):  # a tick as long as a busy database makes a big one
        time.sleep(0.4)
        return start(**kwargs)

    monkeypatch.setattr(services.batches, "start_batch_task", slow_start)
    began = time.monotonic()
    services.run_batches(every=2)
    time.sleep(max(0.0, began + 2 - time.monotonic()))  # the ops process's cadence: start to start

    services.run_batches(every=2)

    assert Task.objects.filter(created_by="batch slow").count() == 2
