"""Replay, discard and resolve in the console: discard and resolve ask for a reason on a
confirmation page first; each checks its permission on the server; a refusal says why."""

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from compensation.admin import DeadLetterAdmin
from compensation.models import DeadLetter
import resources.services
from tests.compensation.admin.conftest import said, states

pytestmark = pytest.mark.django_db

LIST = reverse("admin:compensation_deadletter_changelist")


def act(client, action, letters, **extra):
    return client.post(LIST, {"action": action, "index": 0, "_selected_action": [str(d.pk) for d in letters],
                              **extra}, follow=True)


def page_url(letter, verb: str) -> str:
    return reverse(f"admin:compensation_deadletter_{verb}", args=[letter.pk])


def test_discard_from_the_list_asks_for_a_reason_and_changes_nothing_yet(carol, letters):
    response = act(carol, "discard", letters[:2])
    assert response.status_code == 200
    assert "Discard these 2 dead letters?" in response.content.decode()
    assert [str(d) for d in response.context["letters"]] == [str(d) for d in sorted(letters[:2], key=lambda d: -d.pk)]
    assert states(letters) == ["open", "open", "open"]


def test_discard_confirmed_with_a_reason_discards_each_with_the_reason_in_its_audit_entry(carol, letters):
    response = act(carol, "discard", letters[:2], post="yes", reason="duplicate orders, refunded by hand")
    assert said(response) == "Discarded 2 dead letters."
    assert states(letters) == ["discarded", "discarded", "open"]
    entries = AuditEntry.objects.filter(action="dead_letter.discard")
    assert {(e.actor, e.reason) for e in entries} == {("carol", "duplicate orders, refunded by hand")}
    assert entries.count() == 2


def test_discard_without_a_reason_is_refused_on_the_form_and_changes_nothing(carol, letters):
    response = act(carol, "discard", letters[:1], post="yes", reason="  ")
    assert response.context["form"].errors == {"reason": ["This field is required."]}
    assert states(letters) == ["open", "open", "open"]


def test_resolve_confirmed_with_a_reason_resolves_them(carol, letters):
    act(carol, "resolve", letters, post="yes", reason="charged by hand")
    assert states(letters) == ["resolved", "resolved", "resolved"]
    assert AuditEntry.objects.filter(action="dead_letter.resolve", reason="charged by hand").count() == 3


@pytest.mark.parametrize("action", ["discard", "resolve"])
def test_settling_from_the_list_without_the_permission_is_refused_and_changes_nothing(dave, letters, action):
    response = act(dave, action, letters, post="yes", reason="not mine to decide")
    assert "No action selected." in said(response)
    assert states(letters) == ["open", "open", "open"]
    assert not AuditEntry.objects.filter(action__startswith="dead_letter.").exists()


@pytest.mark.parametrize("action", ["replay", "replay_on_any_resource"])
def test_replay_from_the_list_of_more_than_a_page_replays_none_and_points_to_a_bulk_replay(carol, letters, action,
                                                                                         monkeypatch):
    monkeypatch.setattr(DeadLetterAdmin, "list_per_page", 2)
    response = act(carol, action, letters)
    assert "At most 2 dead letters are replayed from the list at once" in said(response)
    assert states(letters) == ["open", "open", "open"]


def test_replay_from_the_list_of_more_than_a_page_is_refused_in_the_readers_language(carol, letters, monkeypatch):
    monkeypatch.setattr(DeadLetterAdmin, "list_per_page", 2)
    response = carol.post(LIST, {"action": "replay", "index": 0, "_selected_action": [str(d.pk) for d in letters]},
                          follow=True, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert "从列表一次最多重放 2 个死信" in said(response)


def test_replay_from_the_list_without_the_permission_is_refused_and_changes_nothing(dave, letters):
    act(dave, "replay", letters)
    assert states(letters) == ["open", "open", "open"]


def test_the_list_offers_a_viewer_no_action_that_changes_dead_letters(dave, letters):
    offered = {name for name, _ in dave.get(LIST).context["action_form"].fields["action"].choices}
    assert offered & {"replay", "replay_on_any_resource", "discard", "resolve"} == set()


def test_a_dead_letter_page_offers_replay_discard_and_resolve(carol, letters):
    page = carol.get(reverse("admin:compensation_deadletter_change", args=[letters[0].pk])).content.decode()
    assert all(page_url(letters[0], verb) in page for verb in ("replay", "discard", "resolve"))


def test_a_dead_letter_page_offers_a_viewer_no_button(dave, letters):
    page = dave.get(reverse("admin:compensation_deadletter_change", args=[letters[0].pk])).content.decode()
    assert not any(page_url(letters[0], verb) in page for verb in ("replay", "discard", "resolve"))


def test_replaying_one_dead_letter_asks_first_then_replays_it_and_comes_back_to_it(carol, letters):
    assert carol.get(page_url(letters[0], "replay")).status_code == 200
    assert states(letters[:1]) == ["open"]
    response = carol.post(page_url(letters[0], "replay"), {"reason": "upstream is back"})
    assert response.url == reverse("admin:compensation_deadletter_change", args=[letters[0].pk])
    letter = DeadLetter.objects.get(pk=letters[0].pk)
    assert (letter.state, letter.replay_task.pinned_resource_id) == ("replaying", letter.resource_id)
    assert AuditEntry.objects.get(action="dead_letter.replay").reason == "upstream is back"


def test_a_replay_refused_on_its_page_says_why_and_starts_nothing(carol, letters, alice):
    resources.services.quarantine(resource=alice, actor="ops", reason="banned upstream")
    response = carol.post(page_url(letters[0], "replay"), {})
    assert response.status_code == 200
    assert "quarantined" in str(response.context["form"].non_field_errors())
    assert states(letters[:1]) == ["open"]


def test_discarding_one_dead_letter_takes_the_reason_and_comes_back_to_it(carol, letters):
    response = carol.post(page_url(letters[0], "discard"), {"reason": "test order"})
    assert response.url == reverse("admin:compensation_deadletter_change", args=[letters[0].pk])
    assert states(letters) == ["discarded", "open", "open"]
    assert AuditEntry.objects.get(action="dead_letter.discard").reason == "test order"


@pytest.mark.parametrize("verb", ["replay", "discard", "resolve"])
def test_a_dead_letter_button_without_the_permission_answers_403_and_changes_nothing(dave, letters, verb):
    assert dave.get(page_url(letters[0], verb)).status_code == 403
    assert dave.post(page_url(letters[0], verb), {"reason": "x"}).status_code == 403
    assert states(letters) == ["open", "open", "open"]


def test_replay_from_the_list_names_each_new_task_with_a_link_to_it(carol, letters):
    response = act(carol, "replay_on_any_resource", letters[:2])

    message = said(response)
    assert message.startswith("Replaying dead letter")
    for task_id in DeadLetter.objects.filter(pk__in=[d.pk for d in letters[:2]]).values_list("replay_task", flat=True):
        assert f'<a href="/admin/scheduling/task/{task_id}/change/">task {task_id}</a>' in message
