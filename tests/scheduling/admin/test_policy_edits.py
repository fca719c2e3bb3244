"""Two editors on one retry policy: a page saves only what was changed on it."""

import pytest
from django.urls import reverse

from scheduling import services
from scheduling.errors import BadPolicy
from scheduling.models import RetryPolicy
from scheduling.services.policies import policy_snapshot

pytestmark = pytest.mark.django_db

PAGE = {
    "name": "edited", "description": "", "max_attempts": "4", "backoff": "fixed", "initial_delay_seconds": "120.0",
    "multiplier": "2.0", "max_delay_seconds": "600.0", "retryable_error_patterns": '["timeout"]',
    "non_retryable_error_patterns": "[]", "same_resource_on_retry": "on", "deadline_seconds": "",
    "probation_cooldown_seconds": "1800",
}


@pytest.fixture
def policy(admin_client):
    admin_client.post(reverse("admin:scheduling_retrypolicy_add"),
                      {**PAGE, "changes-TOTAL_FORMS": 0, "changes-INITIAL_FORMS": 0})
    return RetryPolicy.objects.get(name="edited")


def post_page(client, policy, **typed):
    """What the change page posts when it was read with PAGE's values and `typed` was changed on it:
    every field, plus the hidden copy of the value the page showed."""
    data = {**PAGE, **typed, "changes-TOTAL_FORMS": 0, "changes-INITIAL_FORMS": 0}
    data.update({f"initial-{field}": value for field, value in PAGE.items() if field != "name"})
    return client.post(reverse("admin:scheduling_retrypolicy_change", args=[policy.pk]), data)


def someone_else_sets(policy, **changes):
    services.save_retry_policy(data={"name": policy.name, **policy_snapshot(policy), **changes}, actor="bob")


def test_a_page_read_before_another_edit_keeps_that_edit(admin_client, policy):
    someone_else_sets(policy, max_attempts=9)

    response = post_page(admin_client, policy, initial_delay_seconds="60")

    assert response.status_code == 302
    policy.refresh_from_db()
    assert (policy.max_attempts, policy.initial_delay_seconds) == (9, 60.0)


def test_the_change_record_names_only_the_field_changed_on_the_page(admin_client, policy):
    someone_else_sets(policy, max_attempts=9)

    post_page(admin_client, policy, initial_delay_seconds="60")

    change = policy.changes.order_by("-id").first()
    assert (change.changed_by, change.before["max_attempts"], change.after["max_attempts"]) == ("admin", 9, 9)
    assert (change.before["initial_delay_seconds"], change.after["initial_delay_seconds"]) == (120.0, 60.0)


def test_an_edit_that_no_longer_fits_the_policy_as_it_is_now_is_refused_naming_the_field(admin_client, policy):
    someone_else_sets(policy, initial_delay_seconds=500.0, max_delay_seconds=900.0)

    response = post_page(admin_client, policy, max_delay_seconds="300")

    assert response.status_code == 200
    assert "max_delay_seconds must be at least initial_delay_seconds" in response.content.decode()
    policy.refresh_from_db()
    assert policy.max_delay_seconds == 900.0


def test_an_edit_made_invalid_between_check_and_save_is_refused_by_the_service(policy):
    someone_else_sets(policy, initial_delay_seconds=500.0, max_delay_seconds=900.0)
    page_data = {"name": policy.name, **policy_snapshot(policy), "max_delay_seconds": 300.0,
                 "initial_delay_seconds": 120.0}

    with pytest.raises(BadPolicy, match="max_delay_seconds must be at least"):
        services.save_retry_policy(data=page_data, actor="alice", fields=["max_delay_seconds"])
    policy.refresh_from_db()
    assert policy.max_delay_seconds == 900.0
