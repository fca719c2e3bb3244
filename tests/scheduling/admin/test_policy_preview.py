"""The retry policy page's "Preview the effect": the what-if of the edited values, validated as Save
validates them, and nothing written."""

import re

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from audit.models import AuditEntry
from scheduling.models import RetryPolicy, RetryPolicyChange
from tests.scheduling.whatif_history import build, checkout_policy

pytestmark = pytest.mark.django_db

WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.I)


@pytest.fixture
def policy(pool):
    policy = checkout_policy()
    build(pool, policy)
    return policy


def form(**changes) -> dict:
    """The change form as the page posts it, with `changes` typed in."""
    return {"description": "", "max_attempts": 3, "backoff": "fixed", "initial_delay_seconds": 60,
            "multiplier": 2, "max_delay_seconds": 60,
            "retryable_error_patterns": '[{"pattern": "timed out", "action": "retry_same_resource"}]',
            "non_retryable_error_patterns": '[{"pattern": "banned", "action": "quarantine"}]',
            "same_resource_on_retry": "on", "deadline_seconds": "", "probation_cooldown_seconds": 1800,
            "changes-TOTAL_FORMS": 0, "changes-INITIAL_FORMS": 0, **changes}


def url(policy) -> str:
    return reverse("admin:scheduling_retrypolicy_change", args=[policy.pk])


def row(response, key: str) -> list[str]:
    """The cells of one row of the preview's table."""
    found = re.search(rf'<tr data-key="{key}">(.*?)</tr>', response.content.decode(), re.S)
    assert found, f"no row {key}"
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", found.group(1),
                                                                          re.S)]


def test_the_change_page_offers_the_preview_next_to_save(admin_client, policy):
    page = admin_client.get(url(policy)).content.decode()
    assert 'name="_save"' in page and 'name="_preview"' in page and 'name="_preview_days" id="id__preview_days"' in page


def test_the_add_page_has_no_preview(admin_client, db):
    assert 'name="_preview"' not in admin_client.get(reverse("admin:scheduling_retrypolicy_add")).content.decode()


def test_the_preview_shows_the_edited_values_beside_the_saved_policy(admin_client, policy):
    response = admin_client.post(url(policy), form(max_attempts=2, _preview="Preview the effect"))
    assert response.status_code == 200
    assert row(response, "retries_scheduled") == ["Retries scheduled", "6", "4", "-2"]
    assert row(response, "dead_max_attempts") == ["of which: all attempts failed", "1", "2", "+1"]
    assert row(response, "recovered") == ["Recovered tasks (succeeded after a retry)", "2", "1", "-1"]
    # The form shows what was typed, so that Save saves it.
    assert response.context["adminform"].form["max_attempts"].value() == "2"


def test_the_preview_writes_nothing(admin_client, policy):
    before, entries = list(RetryPolicy.objects.values()), AuditEntry.objects.count()  # the admin user's creation
    with CaptureQueriesContext(connection) as queries:
        admin_client.post(url(policy), form(max_attempts=2, description="typed", _preview="Preview the effect"))
    assert [q["sql"] for q in queries.captured_queries if WRITE.search(q["sql"])
            and "django_session" not in q["sql"]] == []
    assert list(RetryPolicy.objects.values()) == before
    assert not RetryPolicyChange.objects.exists() and not LogEntry.objects.exists()
    assert AuditEntry.objects.count() == entries


def test_a_value_save_would_refuse_is_refused_by_the_preview_on_its_field(admin_client, policy):
    response = admin_client.post(url(policy), form(non_retryable_error_patterns='["(unclosed"]',
                                                   _preview="Preview the effect"))
    assert "invalid error pattern" in " ".join(response.context["adminform"].form.errors["non_retryable_error_patterns"])
    assert "whatif" not in response.context


def test_save_after_the_preview_saves_as_usual(admin_client, policy):
    # As a browser posts it: with the hidden copy of the value the page first showed, which the
    # preview's page carries on, so that Save sees the typed value as a change.
    preview = admin_client.post(url(policy), form(max_attempts=2, _preview="Preview the effect",
                                                  **{"initial-max_attempts": 3}))
    assert re.search(r'name="initial-max_attempts" value="3"', preview.content.decode())
    response = admin_client.post(url(policy), form(max_attempts=2, _save="Save", **{"initial-max_attempts": 3}))
    assert response.status_code == 302
    assert RetryPolicy.objects.get(pk=policy.pk).max_attempts == 2
    assert RetryPolicyChange.objects.get().after["max_attempts"] == 2


def test_the_preview_replays_the_days_asked_for(admin_client, policy):
    response = admin_client.post(url(policy), form(_preview="Preview the effect", _preview_days="1"))
    assert response.context["whatif"].days == 1
    assert 'value="1"' in response.content.decode()


@pytest.mark.parametrize("days", ["0", "many", "367"])
def test_bad_days_are_named(admin_client, policy, days):
    response = admin_client.post(url(policy), form(_preview="Preview the effect", _preview_days=days), follow=True)
    assert "whatif" not in response.context
    assert any("days must be a whole number from 1 to 366" in str(m) for m in response.context["messages"])


def test_the_preview_reads_in_chinese(admin_client, policy):
    response = admin_client.post(url(policy), form(max_attempts=2, _preview="Preview the effect"),
                                 headers={"accept-language": "zh-hans"})
    page = response.content.decode()
    assert "预览" in page and row(response, "retries_scheduled")[0] != "Retries scheduled"
