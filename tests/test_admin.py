import pytest
from django.urls import reverse

from scheduling.models import RetryPolicy, RetryPolicyChange

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


@pytest.mark.parametrize("model", ["resources_resource", "resources_resourcepool", "scheduling_task",
                                   "scheduling_attempt", "scheduling_retrypolicy", "scheduling_batchconfig"])
def test_admin_lists_render(staff, alice, model):
    assert staff.get(reverse(f"admin:{model}_changelist")).status_code == 200


def test_resource_page_shows_its_statistics_read_only(staff, alice):
    page = staff.get(reverse("admin:resources_resource_change", args=[alice.pk])).content.decode()
    assert "Failure count" in page and 'name="failure_count"' not in page


def test_a_policy_with_a_bad_regex_is_refused_naming_the_field(staff, db):
    response = staff.post(reverse("admin:scheduling_retrypolicy_add"),
                          {**POLICY_FORM, "retryable_error_patterns": '["(oops"]'})
    assert response.status_code == 200
    assert "retryable_error_patterns[0]: invalid error pattern" in response.content.decode()
    assert not RetryPolicy.objects.exists()


def test_a_policy_saved_in_the_admin_records_who_changed_what(staff, admin_user, db):
    staff.post(reverse("admin:scheduling_retrypolicy_add"), POLICY_FORM)
    policy = RetryPolicy.objects.get(name="edited")
    staff.post(reverse("admin:scheduling_retrypolicy_change", args=[policy.pk]), {**POLICY_FORM, "max_attempts": 7})
    change = RetryPolicyChange.objects.filter(policy=policy).first()
    assert (change.changed_by, change.before["max_attempts"], change.after["max_attempts"]) == (admin_user.username, 4, 7)


def test_a_batch_config_with_a_bad_regex_is_refused(staff, alice, instant_policy):
    response = staff.post(reverse("admin:scheduling_batchconfig_add"), {
        "name": "b", "pool": alice.pool_id, "flow": "demo", "policy": instant_policy.pk, "payload": "{}",
        "enabled": "on", "tasks_per_tick": 5, "recent_window_seconds": 60, "retryable_error_patterns": '["[x"]',
    })
    assert "invalid error pattern" in response.content.decode()
