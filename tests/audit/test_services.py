"""record_audit: one entry per call, attributed from the audit context, in the caller's transaction,
storing what PostgreSQL can hold without ever failing the action it records."""

import math
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone, translation
from django.utils.dateparse import parse_datetime

from audit.context import acting_as
from audit.models import AuditEntry
from retryops.errors import BadInput, DomainError
from audit.services import Target, record_audit
from resources.models import Resource
from retryops.masking import MASK
from scheduling.models import RetryPolicyChange


def test_an_entry_names_the_actor_channel_and_request_of_the_context(alice):
    with acting_as(actor="carol", channel="admin", request_id="req-1"):
        entry = record_audit(action="resource.reset", target=alice, before={"state": "failed"},
                             after={"state": "available"}, reason="customer called")

    entry = AuditEntry.objects.get(pk=entry.pk)
    assert (entry.actor, entry.channel, entry.request_id, entry.action, entry.reason) == (
        "carol", "admin", "req-1", "resource.reset", "customer called")
    assert (entry.before, entry.after) == ({"state": "failed"}, {"state": "available"})


def test_a_model_target_is_named_by_its_model_id_and_label(alice):
    entry = record_audit(action="resource.quarantine", target=alice)
    assert (entry.target_type, entry.target_id, entry.target_label) == ("resources.resource", str(alice.pk), "alice@x")


def test_a_target_label_is_stored_in_english_whatever_the_readers_language(instant_policy):
    change = RetryPolicyChange.objects.create(policy=instant_policy, changed_by="alice", before={}, after={})
    with translation.override("zh-hans"):
        entry = record_audit(action="resource.quarantine", target=change)
    assert entry.target_label == f"change {change.pk} of retry policy {instant_policy.pk} by alice"


def test_a_target_can_be_named_without_a_model_instance(db):
    entry = record_audit(action="policy.change", target=Target(type="scheduling.retrypolicy", id=7, label="default"))
    assert (entry.target_type, entry.target_id, entry.target_label) == ("scheduling.retrypolicy", "7", "default")


def test_without_a_context_the_system_acts_on_the_system_channel(alice):
    entry = record_audit(action="resource.reset", target=alice)
    assert (entry.actor, entry.channel, entry.request_id) == ("system", "system", "")


def test_an_actor_given_by_the_service_overrides_the_context_actor_but_not_its_channel(alice):
    with acting_as(actor="carol", channel="api"):
        entry = record_audit(action="resource.reset", target=alice, actor="dave")
    assert (entry.actor, entry.channel) == ("dave", "api")


def test_a_channel_given_by_the_service_overrides_the_context_channel(alice):
    with acting_as(actor="carol", channel="api"):
        entry = record_audit(action="resource.reset", target=alice, channel="system")
    assert (entry.actor, entry.channel) == ("carol", "system")


def test_an_unknown_channel_is_refused(alice):
    with pytest.raises(BadInput) as error:
        record_audit(action="resource.reset", target=alice, channel="web")
    assert (error.value.code, error.value.details["field"]) == ("bad_input", "channel")


def test_the_context_is_restored_after_acting_as_even_when_the_body_raises(alice):
    with pytest.raises(RuntimeError), acting_as(actor="carol", channel="command"):
        raise RuntimeError("the job failed")
    assert record_audit(action="resource.reset", target=alice).actor == "system"


def test_acting_as_without_a_request_id_gives_the_run_one_id_for_all_its_entries(alice, bob):
    with acting_as(actor="nightly job", channel="system"):
        first = record_audit(action="resource.reset", target=alice)
        second = record_audit(action="resource.reset", target=bob)
    assert first.request_id and first.request_id == second.request_id
    assert list(AuditEntry.objects.filter(request_id=first.request_id).order_by("id")) == [first, second]


def test_acting_as_refuses_an_empty_actor(db):
    with pytest.raises(BadInput) as error, acting_as(actor="  ", channel="command"):
        pass
    assert error.value.details["field"] == "actor"


def test_an_unknown_action_is_refused_with_its_name(alice):
    with pytest.raises(BadInput, match="resource.rest") as error:
        record_audit(action="resource.rest", target=alice)
    assert error.value.details["field"] == "action"
    assert not AuditEntry.objects.exists()


def test_an_unsaved_target_is_refused(pool):
    with pytest.raises(BadInput, match="unsaved") as error:
        record_audit(action="resource.create", target=Resource(pool=pool, key="new@x"))
    assert error.value.details["field"] == "target"


def test_a_target_without_a_type_or_id_is_refused_before_the_database_would(db):
    with pytest.raises(BadInput, match="needs a type and an id") as error:
        record_audit(action="policy.change", target=Target(type="scheduling.retrypolicy", id=""))
    assert error.value.details["field"] == "target"


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_nothing_is_recorded(alice):
    with pytest.raises(DomainError) as error:
        record_audit(action="resource.reset", target=alice)
    assert error.value.code == "not_in_transaction"
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_entry_rolls_back_with_the_change_it_records(alice):
    with pytest.raises(RuntimeError), transaction.atomic():
        record_audit(action="resource.reset", target=alice)
        raise RuntimeError("the change failed after its audit row was written")
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_entry_commits_with_the_change_it_records(alice):
    with transaction.atomic():
        record_audit(action="resource.reset", target=alice)
    assert AuditEntry.objects.count() == 1


def test_a_nan_in_a_snapshot_is_stored_as_null_and_noted_not_refused(alice):
    entry = record_audit(action="resource.change", target=alice, before={"score": 1.5},
                         after={"score": math.nan, "limits": [1, math.inf]})

    entry = AuditEntry.objects.get(pk=entry.pk)
    assert entry.after == {"score": None, "limits": [1, None]}
    assert entry.repairs == ["after.score is nan, which JSON cannot hold", "after.limits[1] is inf, which JSON cannot hold"]


def test_nul_characters_and_huge_numbers_in_snapshots_are_repaired(alice):
    entry = record_audit(action="resource.change", target=alice, before={"label": "a\x00b", "n": 2**64})
    entry = AuditEntry.objects.get(pk=entry.pk)
    assert entry.before == {"label": "a\ufffdb", "n": str(2**64)}
    assert len(entry.repairs) == 2


def test_dates_decimals_and_uuids_in_snapshots_are_stored_as_text(alice):
    when, token = timezone.now(), uuid.uuid4()
    entry = record_audit(action="resource.change", target=alice, after={"at": when, "price": Decimal("1.10"), "reference": token})
    entry = AuditEntry.objects.get(pk=entry.pk)
    assert (entry.after["price"], entry.after["reference"]) == ("1.10", str(token))
    assert abs(parse_datetime(entry.after["at"]) - when) < timedelta(milliseconds=1)  # JSON keeps milliseconds
    assert entry.repairs == []


def test_a_snapshot_json_cannot_express_is_kept_as_its_repr(alice):
    entry = record_audit(action="resource.change", target=alice, after={"tags": {"vip"}})
    entry = AuditEntry.objects.get(pk=entry.pk)
    assert entry.after == {"repr": "{'tags': {'vip'}}"}
    assert entry.repairs == ["after of type dict is not JSON; kept as its repr"]


def test_nul_characters_in_reason_label_and_actor_are_replaced(pool):
    resource = Resource.objects.create(pool=pool, key="k", label="")
    with acting_as(actor="car\x00ol", channel="admin"):
        entry = record_audit(action="resource.quarantine", target=Target(type="resources.resource", id=resource.pk,
                                                                           label="al\x00ice"), reason="bad\x00 key")
    entry = AuditEntry.objects.get(pk=entry.pk)
    assert (entry.actor, entry.target_label, entry.reason) == ("car\ufffdol", "al\ufffdice", "bad\ufffd key")


def test_an_overlong_actor_and_label_are_cut_to_fit_not_refused(alice):
    entry = record_audit(action="resource.reset", target=Target(type="resources.resource", id=alice.pk, label="L" * 500),
                         actor="A" * 500)
    entry = AuditEntry.objects.get(pk=entry.pk)
    assert (len(entry.actor), len(entry.target_label)) == (200, 200)


def test_missing_snapshots_stay_null_for_a_target_that_did_not_or_no_longer_exists(alice):
    entry = record_audit(action="resource.create", target=alice, after={"key": "alice@x"})
    entry = AuditEntry.objects.get(pk=entry.pk)
    assert entry.before is None and entry.after == {"key": "alice@x"}


def test_entries_are_numbered_in_the_order_they_are_written_and_read_newest_first(alice, bob):
    first = record_audit(action="resource.quarantine", target=alice, reason="first")
    record_audit(action="resource.reset", target=bob)
    second = record_audit(action="resource.unquarantine", target=alice, reason="second")
    assert first.pk < second.pk
    assert list(AuditEntry.objects.filter(target_id=str(alice.pk)).order_by("-id")) == [second, first]
    assert second.created_at >= first.created_at


def test_a_huge_integer_under_a_secret_key_is_masked_and_in_no_repair_note(alice):
    entry = record_audit(action="resource.change", target=alice, before={"secret_pin": 4111111111111111111},
                         after={"secret_pin": 4111111111111111112, "count": 2**60})
    assert (entry.before, entry.after["secret_pin"]) == ({"secret_pin": MASK}, MASK)
    assert entry.repairs == ["after.count is an integer of 19 digits, larger than 9007199254740991"]
