"""The audit log in the admin: read-only, filtered and searched without scanning for counts."""

import math
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from audit import admin as audit_admin
from audit import selectors as audit_selectors
from audit.choices import AuditAction
from audit.context import acting_as
from audit.management.base import os_user
from audit.models import AuditEntry
from audit.services import Target, record_audit

LIST = reverse("admin:audit_auditentry_changelist")


@pytest.fixture
def entries(admin_user, alice, bob):
    # pytest-django makes the admin outside any audit context: the OS user, on the command channel.
    admin = AuditEntry.objects.get(action=AuditAction.USER_CREATE, target_id=str(admin_user.pk))
    with acting_as(actor="carol", channel="admin", request_id="req-carol"):
        reset = record_audit(action="resource.reset", target=alice, before={"state": "failed"},
                             after={"state": "available"}, reason="customer called")
    with acting_as(actor="dave", channel="command", request_id="req-dave"):
        quarantine = record_audit(action="resource.quarantine", target=bob, reason="leaked key")
        policy = record_audit(action="policy.change", target=Target(type="scheduling.retrypolicy", id=3, label="default"))
    return {"admin": admin, "reset": reset, "quarantine": quarantine, "policy": policy}


def listed(response) -> set[int]:
    assert response.status_code == 200
    return {entry.pk for entry in response.context["cl"].result_list}


def test_the_list_shows_who_did_what_to_which_target(admin_client, entries):
    page = admin_client.get(LIST).content.decode()
    assert "carol" in page and "Resource reset" in page and "resource alice@x (id" in page
    assert "retry policy default (id 3)" in page


def test_the_list_filters_by_channel(admin_client, entries):
    assert listed(admin_client.get(LIST, {"channel__exact": "command"})) == {
        entries["admin"].pk, entries["quarantine"].pk, entries["policy"].pk}


def test_the_list_filters_by_action(admin_client, entries):
    assert listed(admin_client.get(LIST, {"action": "resource.reset"})) == {entries["reset"].pk}


def test_the_list_filters_by_target_type_offering_the_types_in_use(admin_client, entries):
    response = admin_client.get(LIST, {"target_type": "scheduling.retrypolicy"})
    assert listed(response) == {entries["policy"].pk}
    target_filter = next(f for f in response.context["cl"].filter_specs if getattr(f, "parameter_name", None) == "target_type")
    assert list(target_filter.lookup_choices) == [("auth.user", "user"), ("resources.resource", "resource"),
                                                  ("scheduling.retrypolicy", "retry policy")]


@pytest.mark.parametrize(("term", "expected"), [("req-dave", {"quarantine", "policy"}), ("Carol", {"reset"}),
                                                ("alice", {"reset"})])
def test_the_list_searches_request_ids_actors_and_target_labels(admin_client, entries, term, expected):
    assert listed(admin_client.get(LIST, {"q": term})) == {entries[name].pk for name in expected}


def test_the_detail_page_shows_before_and_after_and_offers_no_save(admin_client, entries):
    page = admin_client.get(reverse("admin:audit_auditentry_change", args=[entries["reset"].pk])).content.decode()
    assert "&quot;state&quot;: &quot;failed&quot;" in page and "&quot;state&quot;: &quot;available&quot;" in page
    assert 'name="_save"' not in page


def test_the_detail_page_shows_what_had_to_be_repaired(admin_client, alice):
    entry = record_audit(action="resource.change", target=alice, after={"score": math.nan})
    page = admin_client.get(reverse("admin:audit_auditentry_change", args=[entry.pk])).content.decode()
    assert "after.score is nan" in page


def test_entries_cannot_be_added_changed_or_deleted_from_the_admin(admin_client, entries):
    entry = entries["reset"]
    assert admin_client.get(reverse("admin:audit_auditentry_add")).status_code == 403
    assert admin_client.post(reverse("admin:audit_auditentry_change", args=[entry.pk]),
                             {"reason": "nothing happened"}).status_code == 403
    assert admin_client.post(reverse("admin:audit_auditentry_delete", args=[entry.pk]), {"post": "yes"}).status_code == 403
    assert "delete_selected" not in admin_client.get(LIST).content.decode()
    assert AuditEntry.objects.get(pk=entry.pk).reason == "customer called"


def test_the_list_counts_at_most_the_cap_and_never_the_whole_table(admin_client, entries, monkeypatch):
    monkeypatch.setattr(audit_admin, "COUNT_CAP", 2)
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(LIST)
    assert response.context["cl"].result_count == 2
    counts = [q["sql"] for q in queries if "COUNT(" in q["sql"].upper() and "audit_auditentry" in q["sql"]]
    assert counts and all("LIMIT 3" in sql for sql in counts)


def test_the_actor_filter_offers_the_actors_of_the_latest_entries_only(admin_client, entries, monkeypatch):
    def offered():
        response = admin_client.get(LIST)
        actor_filter = next(f for f in response.context["cl"].filter_specs
                            if getattr(f, "parameter_name", None) == "actor")
        return [value for value, _label in actor_filter.lookup_choices]

    assert offered() == sorted(["carol", "dave", os_user()])
    monkeypatch.setattr(audit_selectors, "RECENT_ENTRIES", 2)
    assert offered() == ["dave"]


def test_the_list_filters_to_a_recent_time_window(admin_client, entries, alice):
    old = AuditEntry.objects.create(actor="erin", channel="admin", action="resource.reset",
                                    target_type="resources.resource", target_id=str(alice.pk),
                                    created_at=timezone.now() - timedelta(hours=2))
    assert listed(admin_client.get(LIST, {"within": "1h"})) == {entry.pk for entry in entries.values()}
    assert old.pk in listed(admin_client.get(LIST, {"within": "24h"}))
