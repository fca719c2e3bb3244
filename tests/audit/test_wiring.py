"""Every operator, API or command action leaves exactly one audit entry, written by its service;
a refused action leaves none, and the workers' and the system's routine work leaves none."""

from datetime import timedelta

import pytest
import yaml
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from audit.context import acting_as
from audit.management.base import os_user
from audit.models import AuditEntry
import resources.services
from resources.choices import FailureCategory, Outcome, ResourceState
from resources.classification import Classification
from resources.models import Resource, ResourcePool
from retryops.errors import DomainError
from scheduling import services
from scheduling.models import BatchConfig, RetryPolicy, Task
from scheduling.policies import clean_policy
from tests.factories import ResourceFactory
from tests.resources.test_admin import submitted

POLICY = {"name": "careful", "max_attempts": 3, "backoff": "fixed", "initial_delay_seconds": 60, "multiplier": 2,
          "max_delay_seconds": 60, "same_resource_on_retry": True, "retryable_error_patterns": ["timeout"],
          "non_retryable_error_patterns": []}


def new_entries(since: int) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(id__gt=since).order_by("id"))


def last_id() -> int:
    return AuditEntry.objects.order_by("-id").values_list("id", flat=True).first() or 0


def the_entry(since: int = 0) -> AuditEntry:
    entries = new_entries(since)
    assert len(entries) == 1, [str(entry) for entry in entries]
    return entries[0]


def failed(resource: Resource) -> Resource:
    lease = resources.services.claim_by_id(resource_id=resource.pk, holder="task 812")
    return resources.services.release(resource=resource.pk, lease_token=lease.lease_token, outcome=Outcome.FAILURE,
                                      error="TimeoutError: upstream slow")


def later(seconds: int):
    return timezone.now() + timedelta(seconds=seconds)


def start(pool, **kwargs):
    return services.start_task(flow="demo", pool_name=pool, created_by="shop", policy="instant", **kwargs)


# resources


def test_a_reset_records_its_state_before_and_after_its_reason_and_actor(alice):
    failed(alice)
    with acting_as(actor="carol", channel="admin"):
        resources.services.reset(resource=alice.pk, actor="carol", reason="customer called")

    entry = the_entry()
    assert (entry.action, entry.actor, entry.channel, entry.target_type, entry.target_id, entry.target_label) == (
        "resource.reset", "carol", "admin", "resources.resource", str(alice.pk), "alice@x")
    assert (entry.before, entry.after, entry.reason) == ({"state": "failed"}, {"state": "available"}, "customer called")


def test_a_refused_reset_records_nothing(alice):
    with pytest.raises(DomainError):
        resources.services.reset(resource=alice.pk, actor="carol")  # it is available
    assert not AuditEntry.objects.exists()


def test_a_quarantine_records_the_state_and_reason_it_set(alice):
    resources.services.quarantine(resource=alice.pk, actor="carol", reason="leaked key")

    entry = the_entry()
    assert (entry.action, entry.actor, entry.channel, entry.reason) == (
        "resource.quarantine", "carol", "system", "leaked key")
    assert entry.before["state"] == "available" and entry.after["state"] == "quarantined"
    assert entry.after["quarantine_reason"] == "leaked key" and entry.after["quarantined_at"]




def test_an_unquarantine_records_the_quarantine_it_ended(alice):
    resources.services.quarantine(resource=alice.pk, actor="carol", reason="leaked key")
    mark = last_id()

    resources.services.unquarantine(resource=alice.pk, actor="dave", reason="key rotated")

    entry = the_entry(mark)
    assert (entry.action, entry.actor, entry.reason) == ("resource.unquarantine", "dave", "key rotated")
    assert (entry.before["state"], entry.before["quarantine_reason"]) == ("quarantined", "leaked key")
    assert (entry.after["state"], entry.after["quarantine_reason"]) == ("available", "")


def test_unquarantining_a_resource_not_in_quarantine_records_nothing(alice):
    with pytest.raises(DomainError):
        resources.services.unquarantine(resource=alice.pk, actor="dave")
    assert not AuditEntry.objects.exists()


def test_creating_a_pool_records_its_settings(db):
    with acting_as(actor="erin", channel="api"):
        pool = resources.services.create_pool(name="keys", resource_noun="key", lease_seconds=60)

    entry = the_entry()
    assert (entry.action, entry.actor, entry.channel, entry.target_type, entry.target_id) == (
        "pool.create", "erin", "api", "resources.resourcepool", str(pool.pk))
    assert entry.before is None
    assert entry.after == {"name": "keys", "resource_noun": "key", "lease_seconds": 60, "consume_on_success": False,
                           "description": ""}


def test_creating_a_pool_with_a_taken_name_records_nothing(pool):
    with pytest.raises(DomainError):
        resources.services.create_pool(name=pool.name)
    assert not AuditEntry.objects.exists()


def test_adding_resources_records_one_entry_on_the_pool_with_their_keys(pool):
    resources.services.add_resources(pool=pool, actor="erin", resources=[{"key": f"user{n}@x"} for n in range(50)])

    entry = the_entry()
    assert (entry.action, entry.actor, entry.target_type, entry.target_id) == (
        "resource.create", "erin", "resources.resourcepool", str(pool.pk))
    assert entry.before is None
    assert entry.after == {"count": 50, "keys": [f"user{n}@x" for n in range(50)]}


def test_adding_a_taken_key_records_nothing(alice):
    with pytest.raises(DomainError):
        resources.services.add_resources(pool=alice.pool, resources=[{"key": "new@x"}, {"key": "alice@x"}])
    assert not AuditEntry.objects.exists()


def test_changing_a_resource_records_just_the_fields_that_changed(alice):
    changed = resources.services.change_resource(resource=alice.pk, actor="carol", label="Alice (VIP)", attributes={})

    entry = the_entry()
    assert (entry.action, entry.actor, entry.target_id) == ("resource.change", "carol", str(alice.pk))
    assert (entry.before, entry.after) == ({"label": "alice"}, {"label": "Alice (VIP)"})
    assert Resource.objects.get(pk=alice.pk).label == changed.label == "Alice (VIP)"


def test_a_resource_change_that_changes_nothing_records_nothing(alice):
    resources.services.change_resource(resource=alice.pk, actor="carol", label=alice.label)
    assert not AuditEntry.objects.exists()




def test_changing_a_pool_records_just_the_fields_that_changed(pool):
    resources.services.change_pool(pool=pool.pk, actor="carol", lease_seconds=600, resource_noun=pool.resource_noun)

    entry = the_entry()
    assert (entry.action, entry.actor, entry.target_id) == ("pool.change", "carol", str(pool.pk))
    assert (entry.before, entry.after) == ({"lease_seconds": 300}, {"lease_seconds": 600})
    assert ResourcePool.objects.get(pk=pool.pk).lease_seconds == 600


def test_a_pool_change_to_a_taken_name_records_nothing(pool):
    resources.services.create_pool(name="keys")
    mark = last_id()
    with pytest.raises(DomainError, match="exists already"):
        resources.services.change_pool(pool=pool.pk, actor="carol", name="keys")
    assert new_entries(mark) == []


def test_a_pool_change_with_a_bad_lease_records_nothing(pool):
    with pytest.raises(DomainError):
        resources.services.change_pool(pool=pool.pk, actor="carol", lease_seconds=0)
    assert not AuditEntry.objects.exists()


def test_claims_releases_holds_and_sweeps_record_nothing(alice, bob):
    failed(alice)
    lease = resources.services.claim_next(pool=alice.pool, holder="task 1", lease_seconds=1)
    resources.services.release(resource=lease.pk, lease_token=lease.lease_token, outcome=Outcome.SUCCESS)
    lease = resources.services.claim_by_id(resource_id=bob.pk, holder="task 2", reserve=True)
    resources.services.release_unused(resource=bob.pk, lease_token=lease.lease_token, actor="task 2",
                                      reason="cancelled")
    resources.services.claim_by_id(resource_id=bob.pk, holder="task 3", lease_seconds=1)
    resources.services.sweep_expired_leases(now=later(60))

    assert not AuditEntry.objects.exists()


# tasks


def test_starting_a_task_records_what_was_started_and_by_whom(alice, instant_policy):
    with acting_as(actor="shop", channel="api"):
        task = start(alice.pool, resource=alice, payload={"order": 42})

    entry = the_entry()
    assert (entry.action, entry.actor, entry.channel, entry.target_type, entry.target_id) == (
        "task.start", "shop", "api", "scheduling.task", str(task.pk))
    assert entry.before is None
    assert {k: entry.after[k] for k in ("flow", "pool", "payload", "policy", "resource", "strict", "state")} == {
        "flow": "demo", "pool": "accounts", "payload": {"order": 42}, "policy": "instant", "resource": alice.pk,
        "strict": True, "state": "pending"}


def test_a_start_repeating_an_idempotency_key_records_nothing_more(alice, instant_policy):
    first = start(alice.pool, idempotency_key="order-42")
    again = start(alice.pool, idempotency_key="order-42")

    assert again.pk == first.pk
    assert the_entry().action == "task.start"


def test_a_refused_start_records_nothing(alice, instant_policy):
    with pytest.raises(DomainError):
        services.start_task(flow="no-such-flow", pool_name=alice.pool, created_by="shop", policy="instant")
    with pytest.raises(DomainError):
        start(alice.pool, payload={"price": float("nan")})
    assert not AuditEntry.objects.exists() and not Task.objects.exists()


def test_an_attempt_and_its_retry_record_nothing(alice, instant_policy):
    task = start(alice.pool, resource=alice)
    mark = last_id()

    for number in (1, 2):
        started = services.begin_attempt(task_id=task.pk, attempt_number=number)
        services.finish_attempt(attempt=started.attempt, error=TimeoutError("slow") if number == 1 else None,
                                result={"ok": True})

    assert Task.objects.get(pk=task.pk).state == "succeeded"
    assert new_entries(mark) == []


def test_a_batch_tick_records_no_starts_even_from_a_command(pool, instant_policy):
    ResourceFactory.create_batch(3, pool=pool)
    BatchConfig.objects.create(name="signups", pool=pool, flow="demo", policy=instant_policy, tasks_per_tick=2)

    with acting_as(actor="ops", channel="command"):
        ticks = services.run_batches()

    assert ticks.started == {"signups": 2}
    assert not AuditEntry.objects.exists()


def test_a_probation_probe_records_no_start(alice, instant_policy):
    task = start(alice.pool, resource=alice)
    recorded = AuditEntry.objects.count()  # its start's
    started = services.begin_attempt(task_id=task.pk, attempt_number=1)
    resources.services.release(resource=alice.pk, lease_token=started.attempt.lease_token, outcome=Outcome.FAILURE,
                               error="risk control", probation_seconds=60,
                               classification=Classification(FailureCategory.NON_RETRYABLE, None, "risk control"))
    # A quarantining failure ends its task; a probe would not repeat a task still running.
    Task.objects.filter(pk=task.pk).update(state="dead", finished_at=timezone.now(), held_lease_token=None)
    Resource.objects.filter(pk=alice.pk).update(probe_after=timezone.now() - timedelta(seconds=1))  # cooled down

    with acting_as(actor="ops", channel="command"):
        probes = services.start_probes()

    assert len(probes) == 1
    assert AuditEntry.objects.count() == recorded


def test_an_operator_retry_records_one_retry_with_its_task_and_no_reset_or_start(alice, instant_policy):
    failed(alice)

    with acting_as(actor="carol", channel="admin"):
        task = services.retry_resource(resource=alice, actor="carol", flow="demo", policy="instant")

    entry = the_entry()
    assert (entry.action, entry.actor, entry.channel, entry.target_type, entry.target_id) == (
        "resource.retry", "carol", "admin", "resources.resource", str(alice.pk))
    assert entry.before == {"state": "failed"}
    assert entry.after == {"state": "in_use", "task": task.pk, "flow": "demo", "policy": "instant"}


def test_a_refused_retry_records_nothing(alice, instant_policy):
    failed(alice)
    with pytest.raises(DomainError):
        services.retry_resource(resource=alice, actor="carol")  # no task ran on it: the flow must be named
    resources.services.quarantine(resource=alice.pk, actor="carol", reason="leaked key")
    mark = last_id()
    with pytest.raises(DomainError):
        services.retry_resource(resource=alice, actor="carol", flow="demo")
    assert [entry.action for entry in new_entries(0)] == ["resource.quarantine"] and new_entries(mark) == []


def test_cancelling_a_task_records_its_state_before_and_after(alice, instant_policy):
    task = start(alice.pool, run_at=later(3600))
    mark = last_id()

    services.cancel_task(task=task.pk, actor="carol", reason="customer gave up")

    entry = the_entry(mark)
    assert (entry.action, entry.actor, entry.target_id, entry.reason) == (
        "task.cancel", "carol", str(task.pk), "customer gave up")
    assert (entry.before, entry.after["state"]) == ({"state": "scheduled"}, "cancelled")


@pytest.mark.parametrize("action", [services.cancel_task, services.run_task_now], ids=["cancel", "run_now"])
def test_an_action_on_a_cancelled_task_is_refused_and_records_nothing(alice, instant_policy, action):
    task = start(alice.pool, run_at=later(3600))
    services.cancel_task(task=task.pk, actor="carol")
    mark = last_id()

    with pytest.raises(DomainError):
        action(task=task.pk, actor="carol")
    assert new_entries(mark) == []


def test_running_a_task_now_records_when_it_was_due(alice, instant_policy):
    task = start(alice.pool, run_at=later(3600))
    mark = last_id()

    services.run_task_now(task=task.pk, actor="carol")

    entry = the_entry(mark)
    assert (entry.action, entry.actor, entry.target_id) == ("task.run_now", "carol", str(task.pk))
    assert (entry.before["state"], entry.after["state"]) == ("scheduled", "pending")
    assert entry.before["next_run_at"] > entry.after["next_run_at"]


# policies


def test_a_new_policy_records_its_fields(db):
    policy = services.save_retry_policy(data=clean_policy(POLICY), actor="carol")

    entry = the_entry()
    assert (entry.action, entry.actor, entry.target_type, entry.target_id) == (
        "policy.create", "carol", "scheduling.retrypolicy", str(policy.pk))
    assert entry.before is None and entry.after["max_attempts"] == 3


def test_a_changed_policy_records_just_the_fields_that_changed(db):
    services.save_retry_policy(data=clean_policy(POLICY), actor="carol")
    mark = last_id()

    services.save_retry_policy(data=clean_policy({**POLICY, "max_attempts": 5}), actor="dave")

    entry = the_entry(mark)
    assert (entry.action, entry.actor, entry.before, entry.after) == (
        "policy.change", "dave", {"max_attempts": 3}, {"max_attempts": 5})


def test_a_policy_saved_unchanged_records_nothing(db):
    services.save_retry_policy(data=clean_policy(POLICY), actor="carol")
    mark = last_id()
    services.save_retry_policy(data=clean_policy(POLICY), actor="carol")
    assert new_entries(mark) == []


def test_a_refused_policy_load_records_nothing(db):
    text = yaml.safe_dump({"policies": [POLICY, {**POLICY, "name": "broken", "backoff": "sometimes"}]})
    with pytest.raises(DomainError):
        services.load_retry_policies(text=text, source="t.yaml", actor="carol")
    assert not AuditEntry.objects.exists() and not RetryPolicy.objects.exists()


# batch configs


def batch_data(pool, policy, **changes):
    return {"name": "signups", "pool": pool, "flow": "demo", "policy": policy, "payload": {"rate": 0.1},
            "tasks_per_tick": 5, **changes}


def test_a_new_batch_config_records_its_fields(pool, instant_policy):
    config = services.save_batch_config(data=batch_data(pool, instant_policy), actor="carol")

    entry = the_entry()
    assert (entry.action, entry.actor, entry.target_type, entry.target_id) == (
        "batch.create", "carol", "scheduling.batchconfig", str(config.pk))
    assert entry.before is None
    assert {k: entry.after[k] for k in ("name", "pool", "flow", "policy", "payload", "tasks_per_tick", "enabled")} == {
        "name": "signups", "pool": "accounts", "flow": "demo", "policy": "instant", "payload": {"rate": 0.1},
        "tasks_per_tick": 5, "enabled": True}


def test_a_changed_batch_config_records_just_the_fields_that_changed(pool, instant_policy):
    config = services.save_batch_config(data=batch_data(pool, instant_policy), actor="carol")
    mark = last_id()

    services.save_batch_config(config=config.pk, data={"tasks_per_tick": 9, "flow": "demo"}, actor="dave")

    entry = the_entry(mark)
    assert (entry.action, entry.actor, entry.before, entry.after) == (
        "batch.change", "dave", {"tasks_per_tick": 5}, {"tasks_per_tick": 9})
    assert BatchConfig.objects.get(pk=config.pk).tasks_per_tick == 9


def test_a_batch_config_saved_unchanged_records_nothing(pool, instant_policy):
    config = services.save_batch_config(data=batch_data(pool, instant_policy), actor="carol")
    mark = last_id()
    services.save_batch_config(config=config, data={"tasks_per_tick": 5}, actor="carol")
    assert new_entries(mark) == []


@pytest.mark.parametrize("bad", [{"flow": "no-such-flow"}, {"payload": {"x": float("inf")}}, {"tasks_per_tick": 0},
                                 {"retryable_error_patterns": ["[x"]}, {"last_error": ""}, {"name": "two words"},
                                 {"name": "x" * 101}])
def test_a_batch_config_the_ticks_could_not_use_is_refused_and_records_nothing(pool, instant_policy, bad):
    with pytest.raises(DomainError):
        services.save_batch_config(data=batch_data(pool, instant_policy, **bad), actor="carol")
    assert not AuditEntry.objects.exists() and not BatchConfig.objects.exists()


# through the admin: the admin channel, the logged-in user


def test_a_resource_edited_in_the_admin_is_recorded_for_the_user_on_the_admin_channel(admin_client, admin_user,
                                                                                        alice):
    url, since = reverse("admin:resources_resource_change", args=[alice.pk]), last_id()  # after the admin's own
    admin_client.post(url, submitted(admin_client.get(url), label="Alice (VIP)"))

    entry = the_entry(since)
    assert (entry.action, entry.actor, entry.channel, entry.request_id) == (
        "resource.change", admin_user.username, "admin", entry.request_id)
    assert entry.request_id and (entry.before, entry.after) == ({"label": "alice"}, {"label": "Alice (VIP)"})


def test_a_resource_edit_the_admin_refuses_records_nothing(admin_client, alice):
    url, since = reverse("admin:resources_resource_change", args=[alice.pk]), last_id()
    response = admin_client.post(url, submitted(admin_client.get(url), attributes='{"limit": NaN}'))
    assert response.status_code == 200
    assert new_entries(since) == []


def test_a_resource_added_in_the_admin_is_recorded_on_its_pool(admin_client, admin_user, pool):
    since = last_id()
    admin_client.post(reverse("admin:resources_resource_add"), {
        "pool": pool.pk, "key": "carol@x", "label": "Carol", "attributes": "{}",
        "events-TOTAL_FORMS": 0, "events-INITIAL_FORMS": 0})

    entry = the_entry(since)
    assert (entry.action, entry.actor, entry.channel, entry.target_id, entry.after) == (
        "resource.create", admin_user.username, "admin", str(pool.pk), {"count": 1, "keys": ["carol@x"]})


def test_a_pool_added_and_edited_in_the_admin_is_recorded_for_the_user(admin_client, admin_user, db):
    since = last_id()
    admin_client.post(reverse("admin:resources_resourcepool_add"), {
        "name": "keys", "description": "", "resource_noun": "key", "lease_seconds": 60})
    pool = ResourcePool.objects.get(name="keys")
    url = reverse("admin:resources_resourcepool_change", args=[pool.pk])
    admin_client.post(url, submitted(admin_client.get(url), lease_seconds=90))

    created, changed = new_entries(since)
    assert (created.action, created.actor, created.channel) == ("pool.create", admin_user.username, "admin")
    assert (changed.action, changed.actor, changed.channel, changed.before, changed.after) == (
        "pool.change", admin_user.username, "admin", {"lease_seconds": 60}, {"lease_seconds": 90})


def test_a_batch_config_added_and_edited_in_the_admin_is_recorded_for_the_user(admin_client, admin_user, alice,
                                                                                instant_policy):
    form = {"name": "b", "pool": alice.pool_id, "flow": "demo", "policy": instant_policy.pk, "payload": "{}",
            "enabled": "on", "tasks_per_tick": 5, "recent_window_seconds": 60, "retryable_error_patterns": "[]"}
    since = last_id()
    admin_client.post(reverse("admin:scheduling_batchconfig_add"), form)
    config = BatchConfig.objects.get(name="b")
    admin_client.post(reverse("admin:scheduling_batchconfig_change", args=[config.pk]), {**form, "tasks_per_tick": 9})

    created, changed = new_entries(since)
    assert (created.action, created.actor, created.channel) == ("batch.create", admin_user.username, "admin")
    assert (changed.action, changed.actor, changed.channel, changed.before, changed.after) == (
        "batch.change", admin_user.username, "admin", {"tasks_per_tick": 5}, {"tasks_per_tick": 9})


def test_a_policy_saved_in_the_admin_is_recorded_for_the_user(admin_client, admin_user, db):
    since = last_id()
    admin_client.post(reverse("admin:scheduling_retrypolicy_add"), {
        "name": "edited", "description": "", "max_attempts": 4, "backoff": "fixed", "initial_delay_seconds": 120,
        "multiplier": 2, "max_delay_seconds": 600, "retryable_error_patterns": '["timeout"]',
        "non_retryable_error_patterns": "[]", "same_resource_on_retry": "on", "deadline_seconds": "",
        "probation_cooldown_seconds": 1800, "changes-TOTAL_FORMS": 0, "changes-INITIAL_FORMS": 0})

    entry = the_entry(since)
    assert (entry.action, entry.actor, entry.channel) == ("policy.create", admin_user.username, "admin")


# through a command: the command channel


def test_retry_resource_command_records_one_retry_for_its_actor_on_the_command_channel(alice, instant_policy):
    failed(alice)
    call_command("retry_resource", pool="accounts", key="alice@x", actor="carol", flow="demo", policy="instant")

    entry = the_entry()
    assert (entry.action, entry.actor, entry.channel) == ("resource.retry", "carol", "command")


def test_start_task_command_records_its_start_for_the_os_user_on_the_command_channel(alice, instant_policy):
    call_command("start_task", flow="demo", pool="accounts", policy="instant")

    entry = the_entry()
    assert (entry.action, entry.actor, entry.channel) == ("task.start", os_user(), "command")
    assert Task.objects.get().created_by == os_user()


def test_load_retry_policies_command_records_each_new_policy_on_the_command_channel(tmp_path, db):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"policies": [POLICY, {**POLICY, "name": "patient"}]}, explicit_end=True),
                    encoding="utf-8")

    call_command("load_retry_policies", str(path), actor="carol")
    call_command("load_retry_policies", str(path), actor="carol")  # unchanged: nothing more

    entries = new_entries(0)
    assert [(e.action, e.target_label, e.actor, e.channel) for e in entries] == [
        ("policy.create", "careful", "carol", "command"), ("policy.create", "patient", "carol", "command")]
    assert entries[0].request_id == entries[1].request_id


def test_run_batches_command_records_nothing(pool, instant_policy):
    ResourceFactory.create_batch(2, pool=pool)
    BatchConfig.objects.create(name="signups", pool=pool, flow="demo", policy=instant_policy, tasks_per_tick=2)
    call_command("run_batches", actor="carol")
    assert Task.objects.count() == 2 and not AuditEntry.objects.exists()


def test_sweep_leases_command_takes_an_actor_and_records_nothing(alice):
    resources.services.claim_by_id(resource_id=alice.pk, holder="task 812", lease_seconds=1)
    Resource.objects.filter(pk=alice.pk).update(leased_until=timezone.now() - timedelta(seconds=5), lapse_seen_at=timezone.now() - timedelta(hours=1))
    call_command("sweep_leases", actor="carol")
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.FAILED and not AuditEntry.objects.exists()
