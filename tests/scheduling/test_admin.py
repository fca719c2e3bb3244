"""The scheduling admin: tasks and attempts are read-only records, policies change through the
service that records each change, batch configs refuse what run_batches could not use."""

import pytest
from django.apps import apps
from django.db import connection
from django.db.models.signals import pre_save
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone, translation

from scheduling import services
from scheduling.choices import TaskState
from scheduling.models import (
    Attempt,
    BatchConfig,
    RetryPolicy,
    RetryPolicyChange,
    Task,
    TaskEvent,
)

POLICY_FORM = {
    "name": "edited", "description": "", "max_attempts": 4, "backoff": "fixed", "initial_delay_seconds": 120,
    "multiplier": 2, "max_delay_seconds": 600, "retryable_error_patterns": '["timeout"]',
    "non_retryable_error_patterns": "[]", "same_resource_on_retry": "on", "deadline_seconds": "",
    "probation_cooldown_seconds": 1800,
    "changes-TOTAL_FORMS": 0, "changes-INITIAL_FORMS": 0,
}


@pytest.fixture
def staff(admin_client):
    return admin_client


@pytest.fixture
def batch_form(alice, instant_policy):
    return {"name": "b", "pool": alice.pool_id, "flow": "demo", "policy": instant_policy.pk, "payload": "{}",
            "enabled": "on", "tasks_per_tick": 5, "recent_window_seconds": 60, "retryable_error_patterns": "[]"}


def start(pool, **kwargs):
    return services.start_task(flow="demo", pool_name=pool, created_by="test", policy="instant", **kwargs)


def run(task, *, error=None):
    """One attempt of `task` as a worker would run it, failing with `error` or succeeding."""
    started = services.begin_attempt(task_id=task.pk, attempt_number=Task.objects.get(pk=task.pk).attempt_count + 1)
    services.finish_attempt(attempt=started.attempt, error=error, result=None if error else {"ok": True})
    return Task.objects.get(pk=task.pk)


def errors(response, field):
    return " ".join(response.context["adminform"].form.errors.get(field, []))


# retry policies


def test_a_policy_with_a_bad_regex_is_refused_naming_the_field(staff, db):
    response = staff.post(reverse("admin:scheduling_retrypolicy_add"),
                          {**POLICY_FORM, "retryable_error_patterns": '["(oops"]'})
    assert response.status_code == 200
    assert "retryable_error_patterns[0]: invalid error pattern" in errors(response, "retryable_error_patterns")
    assert not RetryPolicy.objects.exists()


def test_a_policy_saved_in_the_admin_records_who_changed_what(staff, admin_user, db):
    staff.post(reverse("admin:scheduling_retrypolicy_add"), POLICY_FORM)
    policy = RetryPolicy.objects.get(name="edited")
    staff.post(reverse("admin:scheduling_retrypolicy_change", args=[policy.pk]), {**POLICY_FORM, "max_attempts": 7})
    change = RetryPolicyChange.objects.filter(policy=policy).first()
    assert (change.changed_by, change.before["max_attempts"], change.after["max_attempts"]) == (admin_user.username, 4, 7)


def test_a_policy_saved_unchanged_records_no_change(staff, db):
    staff.post(reverse("admin:scheduling_retrypolicy_add"), POLICY_FORM)
    policy = RetryPolicy.objects.get(name="edited")
    staff.post(reverse("admin:scheduling_retrypolicy_change", args=[policy.pk]), POLICY_FORM)
    assert RetryPolicyChange.objects.filter(policy=policy).count() == 1  # its creation


def test_the_policy_page_shows_what_each_change_changed(staff, db):
    staff.post(reverse("admin:scheduling_retrypolicy_add"), POLICY_FORM)
    policy = RetryPolicy.objects.get(name="edited")
    staff.post(reverse("admin:scheduling_retrypolicy_change", args=[policy.pk]), {**POLICY_FORM, "max_attempts": 7})
    page = staff.get(reverse("admin:scheduling_retrypolicy_change", args=[policy.pk])).content.decode()
    assert "max_attempts: 4 → 7" in page


@pytest.mark.parametrize("field, typed", [
    ("max_attempts", "5000"),
    ("initial_delay_seconds", "inf"),
    ("multiplier", "nan"),
    ("multiplier", "1000"),
    ("max_delay_seconds", "1e12"),
    ("deadline_seconds", "1e300"),
    ("probation_cooldown_seconds", "99999999"),
])
def test_a_policy_number_the_scheduler_cannot_use_is_refused_in_the_form_with_its_field_named(staff, db, field, typed):
    response = staff.post(reverse("admin:scheduling_retrypolicy_add"), {**POLICY_FORM, field: typed})
    assert response.status_code == 200
    assert errors(response, field)
    assert not RetryPolicy.objects.exists()


# batch configs


def test_a_batch_config_with_a_bad_regex_is_refused(staff, batch_form):
    response = staff.post(reverse("admin:scheduling_batchconfig_add"), {**batch_form, "retryable_error_patterns": '["[x"]'})
    assert "invalid error pattern" in errors(response, "retryable_error_patterns")


def test_a_valid_batch_config_is_saved_with_its_payload(staff, batch_form):
    response = staff.post(reverse("admin:scheduling_batchconfig_add"), {**batch_form, "payload": '{"fail_rate": 0.1}'})
    assert response.status_code == 302
    assert BatchConfig.objects.get(name="b").payload == {"fail_rate": 0.1}


@pytest.mark.parametrize("typed, named", [
    ('{"x": NaN}', "payload.x is nan"),
    ('{"x": -Infinity}', "payload.x is -inf"),
    ('{"x": "a\\u0000b"}', "payload.x contains a NUL character"),
    ('[1, 2]', "payload must be a JSON object"),
    ('"text"', "payload must be a JSON object"),
])
def test_a_batch_payload_run_batches_could_not_use_is_refused_with_the_field_named(staff, batch_form, typed, named):
    response = staff.post(reverse("admin:scheduling_batchconfig_add"), {**batch_form, "payload": typed})
    assert response.status_code == 200
    assert named in errors(response, "payload")
    assert not BatchConfig.objects.exists()


@pytest.mark.parametrize("field, typed, named", [
    ("payload", '{"\\ud800": 1}', "contains a lone surrogate"),
    ("payload", "[" * 5000 + "]" * 5000, "nested too deeply"),
    ("retryable_error_patterns", '["a\\ud800"]', "contains a lone surrogate"),
    # More digits than int() reads: a ValueError that is not a JSONDecodeError.
    ("payload", '{"n": %s}' % ("9" * 5000), "Enter a valid JSON"),
    ("retryable_error_patterns", "[%s]" % ("9" * 5000), "Enter a valid JSON"),
])
def test_batch_json_the_page_cannot_show_back_is_refused_with_the_field_named_not_a_server_error(staff, batch_form,
                                                                                                field, typed, named):
    response = staff.post(reverse("admin:scheduling_batchconfig_add"), {**batch_form, field: typed})
    assert response.status_code == 200
    assert named in errors(response, field)
    assert not BatchConfig.objects.exists()


@pytest.mark.parametrize("typed, named", [
    ('["time\\ud800out"]', "contains a lone surrogate"),
    ("[%s]" % ("9" * 5000), "Enter a valid JSON"),  # more digits than int() reads
])
def test_policy_patterns_the_page_cannot_show_back_are_refused_with_the_field_named_not_a_server_error(staff, db,
                                                                                                      typed, named):
    response = staff.post(reverse("admin:scheduling_retrypolicy_add"),
                          {**POLICY_FORM, "retryable_error_patterns": typed})
    assert response.status_code == 200
    assert named in errors(response, "retryable_error_patterns")
    assert not RetryPolicy.objects.exists()


@pytest.mark.parametrize("model, field", [
    ("retrypolicy", "retryable_error_patterns"),
    ("retrypolicy", "non_retryable_error_patterns"),
    ("batchconfig", "retryable_error_patterns"),
])
def test_a_new_policy_or_batch_config_shows_its_pattern_lists_empty_not_null(staff, db, model, field):
    form = staff.get(reverse(f"admin:scheduling_{model}_add")).context["adminform"].form
    assert form[field].value() == "[]"


@pytest.mark.parametrize("field, typed", [("name", "b\x00"), ("flow", "demo\x00")])
def test_a_nul_character_in_a_batch_config_name_or_flow_is_refused(staff, batch_form, field, typed):
    response = staff.post(reverse("admin:scheduling_batchconfig_add"), {**batch_form, field: typed})
    assert errors(response, field)
    assert not BatchConfig.objects.exists()


def test_a_batch_config_is_disabled_in_the_admin_not_deleted_without_an_audit_entry(staff, batch_form):
    from audit.models import AuditEntry

    staff.post(reverse("admin:scheduling_batchconfig_add"), batch_form)
    config = BatchConfig.objects.get(name="b")
    entries = AuditEntry.objects.count()

    response = staff.post(reverse("admin:scheduling_batchconfig_delete", args=[config.pk]), {"post": "yes"})

    assert response.status_code == 403
    assert BatchConfig.objects.filter(pk=config.pk).exists() and AuditEntry.objects.count() == entries


def test_a_batch_tick_during_an_admin_edit_keeps_its_time(staff, batch_form):
    staff.post(reverse("admin:scheduling_batchconfig_add"), batch_form)
    config = BatchConfig.objects.get(name="b")
    ticked = timezone.now()

    def tick_meanwhile(sender, instance, **kwargs):
        BatchConfig.objects.filter(pk=config.pk).update(last_tick_at=ticked)

    pre_save.connect(tick_meanwhile, sender=BatchConfig, weak=False, dispatch_uid="tick_meanwhile")
    try:
        staff.post(reverse("admin:scheduling_batchconfig_change", args=[config.pk]), {**batch_form, "tasks_per_tick": 9})
    finally:
        pre_save.disconnect(sender=BatchConfig, dispatch_uid="tick_meanwhile")
    config.refresh_from_db()
    assert (config.tasks_per_tick, config.last_tick_at) == (9, ticked)


# tasks and attempts are read-only


@pytest.mark.parametrize("model", ["task", "attempt"])
def test_task_and_attempt_pages_show_but_do_not_offer_changes(staff, alice, instant_policy, model):
    task = run(start(alice.pool), error=TimeoutError("upstream slow"))
    obj = task if model == "task" else Attempt.objects.get(task=task)
    page = staff.get(reverse(f"admin:scheduling_{model}_change", args=[obj.pk])).content.decode()
    assert 'name="state"' not in page and 'name="outcome"' not in page and 'name="_save"' not in page
    assert "upstream slow" in page


@pytest.mark.parametrize("model", ["task", "attempt"])
def test_task_and_attempt_writes_are_forbidden(staff, alice, instant_policy, model):
    task = run(start(alice.pool), error=TimeoutError("upstream slow"))
    obj = task if model == "task" else Attempt.objects.get(task=task)
    before = Task.objects.filter(pk=task.pk).values().get()
    assert staff.post(reverse(f"admin:scheduling_{model}_change", args=[obj.pk]), {"state": "dead"}).status_code == 403
    assert staff.post(reverse(f"admin:scheduling_{model}_delete", args=[obj.pk]), {"post": "yes"}).status_code == 403
    assert staff.get(reverse(f"admin:scheduling_{model}_add")).status_code == 403
    assert Task.objects.filter(pk=task.pk).values().get() == before


def test_a_succeeded_task_shows_no_last_error_in_the_list(staff, alice, instant_policy):
    run(run(start(alice.pool), error=TimeoutError("upstream slow")))
    page = staff.get(reverse("admin:scheduling_task_changelist")).content.decode()
    assert "upstream slow" not in page


def test_a_retrying_task_shows_its_last_error_in_the_list(staff, alice, instant_policy):
    assert run(start(alice.pool), error=TimeoutError("upstream slow")).state == TaskState.RETRYING
    page = staff.get(reverse("admin:scheduling_task_changelist")).content.decode()
    assert "upstream slow" in page


def field_row(page: str, label: str) -> str:
    """The text of one read-only row of an admin change page."""
    import re

    match = re.search(rf"<label>{label}:</label>\s*<div class=\"readonly\">(.*?)</div>", page, re.S)
    assert match, f"no row {label!r}"
    return match.group(1).strip()


def test_strict_shows_as_not_applicable_for_a_task_without_a_requested_resource(staff, alice, instant_policy):
    task = start(alice.pool)
    page = staff.get(reverse("admin:scheduling_task_change", args=[task.pk])).content.decode()
    assert field_row(page, "Strict") == "n/a (no resource requested)"


def test_strict_shows_yes_for_a_task_that_names_its_resource(staff, alice, instant_policy):
    task = start(alice.pool, resource=alice)
    page = staff.get(reverse("admin:scheduling_task_change", args=[task.pk])).content.decode()
    assert field_row(page, "Strict") == "yes"


# list pages


LISTS = ["scheduling_task", "scheduling_attempt", "scheduling_retrypolicy", "scheduling_batchconfig"]


def queries_for(client, url):
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    return len(queries.captured_queries)


def some_work(pool, n):
    """n rows in every scheduling list: tasks with a failed attempt each, policies, batch configs."""
    from tests.factories import ResourceFactory, RetryPolicyFactory

    for _ in range(n):
        resource = ResourceFactory(pool=pool)
        policy = RetryPolicyFactory()
        BatchConfig.objects.create(name=f"batch-{resource.pk}", pool=pool, flow="demo", policy=policy)
        run(start(pool, resource=resource), error=TimeoutError("upstream slow"))


@pytest.mark.parametrize("model", LISTS)
def test_an_empty_list_page_renders(staff, db, model):
    assert staff.get(reverse(f"admin:{model}_changelist")).status_code == 200


@pytest.mark.parametrize("model", LISTS)
def test_a_list_page_costs_the_same_queries_for_one_row_or_many(staff, pool, instant_policy, model):
    some_work(pool, 1)
    one = queries_for(staff, reverse(f"admin:{model}_changelist"))
    some_work(pool, 4)
    assert queries_for(staff, reverse(f"admin:{model}_changelist")) == one


def test_a_task_page_costs_the_same_queries_for_one_attempt_or_many(staff, alice, instant_policy):
    task = run(start(alice.pool), error=TimeoutError("upstream slow"))
    one = queries_for(staff, reverse("admin:scheduling_task_change", args=[task.pk]))
    run(task, error=TimeoutError("upstream slow"))
    assert queries_for(staff, reverse("admin:scheduling_task_change", args=[task.pk])) == one


# names


@pytest.mark.parametrize("model", list(apps.get_app_config("scheduling").get_models()), ids=lambda m: m.__name__)
def test_every_scheduling_model_has_a_readable_name(model, alice, instant_policy):
    from scheduling.models import RetryRollup
    from scheduling.services.rollups import roll_up_attempts

    some_work(alice.pool, 1)
    RetryPolicyChange.objects.create(policy=instant_policy, changed_by="alice", before={}, after={"max_attempts": 3})
    roll_up_attempts()  # the failures' rollup and the mark; the retries' counts only ended transactions' rows
    RetryRollup.objects.create(period_start=timezone.now())
    obj = model.objects.first()
    assert obj is not None and "object (" not in str(obj)


def test_a_task_event_says_which_kind_of_which_task(alice, instant_policy):
    task = run(start(alice.pool), error=PermissionError("HTTP 403"))
    assert str(TaskEvent.objects.get(task=task, kind="task.dead")) == f"task.dead of task {task.pk}"


def test_a_policy_change_says_whose_change_of_which_policy(instant_policy):
    change = RetryPolicyChange.objects.create(policy=instant_policy, changed_by="alice", before={}, after={})
    assert str(change) == f"change {change.pk} of retry policy {instant_policy.pk} by alice"


def test_a_policy_change_is_captioned_in_the_readers_language(instant_policy):
    change = RetryPolicyChange.objects.create(policy=instant_policy, changed_by="alice", before={}, after={})
    with translation.override("zh-hans"):
        assert str(change) == f"重试策略 {instant_policy.pk} 的修改 #{change.pk}，修改人 alice"


# reading the pages


def test_the_policy_page_shows_the_name_before_the_numbers(staff, db):
    staff.post(reverse("admin:scheduling_retrypolicy_add"), POLICY_FORM)
    policy = RetryPolicy.objects.get(name="edited")
    page = staff.get(reverse("admin:scheduling_retrypolicy_change", args=[policy.pk])).content.decode()
    assert page.index("Name:") < page.index("Max attempts:")


def test_a_policy_change_lists_its_fields_in_the_forms_order(staff, db):
    staff.post(reverse("admin:scheduling_retrypolicy_add"), POLICY_FORM)
    policy = RetryPolicy.objects.get(name="edited")
    page = staff.get(reverse("admin:scheduling_retrypolicy_change", args=[policy.pk])).content.decode()
    assert page.index("max_attempts: — → 4") < page.index("backoff: — → fixed")


def test_task_event_details_read_as_fields_not_json(staff, alice, instant_policy):
    task = run(start(alice.pool), error=TimeoutError("upstream slow"))
    page = staff.get(reverse("admin:scheduling_task_change", args=[task.pk])).content.decode()
    assert "same_resource: true" in page and '"same_resource": true' not in page
