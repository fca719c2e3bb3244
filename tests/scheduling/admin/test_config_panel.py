"""The scheduling configuration panel: batch configs and retry policies change through their
services, each change audited with what it was before and after."""

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from scheduling.models import BatchConfig
from tests.scheduling.test_admin import POLICY_FORM


@pytest.fixture
def batch(alice, once):
    return BatchConfig.objects.create(name="nightly", pool=alice.pool, flow="demo", policy=once)


def batch_form(config, **changes):
    return {"name": config.name, "pool": config.pool_id, "flow": config.flow, "policy": config.policy_id,
            "payload": "{}", "enabled": "on", "tasks_per_tick": config.tasks_per_tick,
            "recent_window_seconds": config.recent_window_seconds, "retryable_error_patterns": "[]", **changes}


def test_a_batch_config_cannot_be_deleted_where_no_audit_entry_would_record_it(admin_client, batch):
    response = admin_client.post(reverse("admin:scheduling_batchconfig_delete", args=[batch.pk]), {"post": "yes"})
    assert response.status_code == 403
    assert BatchConfig.objects.filter(pk=batch.pk).exists()


def test_a_batch_config_change_is_audited_with_the_fields_before_and_after(admin_client, batch):
    admin_client.post(reverse("admin:scheduling_batchconfig_change", args=[batch.pk]),
                      batch_form(batch, retry_failed_first="on", recent_window_seconds=600,
                                 retryable_error_patterns='["timeout"]'))
    entry = AuditEntry.objects.get(action="batch.change")
    assert entry.before == {"retry_failed_first": False, "recent_window_seconds": 3600, "retryable_error_patterns": []}
    assert entry.after == {"retry_failed_first": True, "recent_window_seconds": 600,
                           "retryable_error_patterns": ["timeout"]}


def test_a_policy_change_is_audited_with_the_fields_before_and_after(admin_client, db):
    admin_client.post(reverse("admin:scheduling_retrypolicy_add"), POLICY_FORM)
    policy_url = reverse("admin:scheduling_retrypolicy_change", args=[AuditEntry.objects.get(action="policy.create").target_id])
    admin_client.post(policy_url, {**POLICY_FORM, "max_attempts": 7})
    entry = AuditEntry.objects.get(action="policy.change")
    assert (entry.before, entry.after, entry.actor) == ({"max_attempts": 4}, {"max_attempts": 7}, "admin")


def test_a_bad_regex_in_a_batch_config_is_refused_naming_the_pattern(admin_client, batch):
    response = admin_client.post(reverse("admin:scheduling_batchconfig_change", args=[batch.pk]),
                                 batch_form(batch, retryable_error_patterns='["timeout", "HTTP 5(\\\\d"]'))
    errors = " ".join(response.context["adminform"].form.errors["retryable_error_patterns"])
    assert "retryable_error_patterns[1]: invalid error pattern 'HTTP 5(\\\\d'" in errors
    assert not AuditEntry.objects.filter(action="batch.change").exists()
