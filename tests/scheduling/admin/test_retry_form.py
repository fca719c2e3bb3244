"""The console's "retry this resource" form and its empty twin, "run a flow with a specified resource"."""

import json

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from compensation.services.dead_letters import collect_dead_letters
from compensation.services.replay import replay_dead_letter
import resources.services
from resources.choices import ResourceState
from resources.models import Resource
from resources.selectors import when
from scheduling import services
from scheduling.models import Task
from tests.scheduling.admin.conftest import another, run

RETRY = reverse("admin:scheduling_task_retry")
KEYS = reverse("admin:scheduling_task_retry_keys")


def form_of(response):
    return response.context["form"]


def posted(form, **changes) -> dict:
    """What submitting the rendered form sends, with `changes` typed over it."""
    data = {**{name: form[name].value() for name in form.fields}, **changes}
    for box in ("strict", "as_new_instance"):
        if data.pop(box, False):
            data[box] = "on"  # an unchecked box sends nothing
    return {k: v for k, v in data.items() if v is not None}


def retry_page(client, resource):
    return client.get(f"{RETRY}?resource={resource.pk}")


def submit(client, resource, **changes):
    form = form_of(retry_page(client, resource))
    return client.post(f"{RETRY}?resource={resource.pk}", posted(form, **changes))


def field_errors(response, field) -> str:
    return " ".join(form_of(response).errors.get(field, []))


def test_the_form_for_a_resource_is_prefilled_from_its_last_task_with_strict_checked(carol, failed_alice, dead_order):
    form = form_of(retry_page(carol, failed_alice))
    assert (form["flow"].value(), json.loads(form["payload"].value()), form["policy"].value()) == (
        "demo", {"order": 42}, "once")
    assert form["strict"].value() is True


def test_the_form_for_a_resource_shows_its_pool_and_key_read_only(carol, failed_alice, dead_order):
    form = form_of(retry_page(carol, failed_alice))
    assert (form["pool"].value(), form["key"].value()) == (failed_alice.pool_id, "alice@x")
    assert form.fields["pool"].disabled and form.fields["key"].disabled


def test_submitting_the_form_starts_one_strict_task_on_the_resource_and_lands_on_it(carol, failed_alice, dead_order):
    response = submit(carol, failed_alice)
    task = Task.objects.exclude(pk=dead_order.pk).get()
    assert response.status_code == 302
    assert response.url == reverse("admin:scheduling_task_change", args=[task.pk])
    assert (task.strict, task.requested_resource_id, task.flow, task.payload, task.created_by) == (
        True, failed_alice.pk, "demo", {"order": 42}, "carol")


def test_the_task_page_after_a_retry_says_what_started(carol, failed_alice, dead_order):
    page = carol.get(submit(carol, failed_alice).url).content.decode()
    task = Task.objects.exclude(pk=dead_order.pk).get()
    assert f"Started {task} (demo) on account alice@x, strict." in page


def test_a_posted_key_cannot_switch_the_form_to_another_resource(carol, failed_alice, dead_order, bob):
    submit(carol, failed_alice, key="bob@x")
    assert Task.objects.exclude(pk=dead_order.pk).get().requested_resource_id == failed_alice.pk


def test_edited_flow_payload_and_policy_are_the_ones_started(carol, failed_alice, dead_order, later):
    submit(carol, failed_alice, payload='{"order": 43}', policy="later")
    task = Task.objects.exclude(pk=dead_order.pk).get()
    assert (task.payload, task.policy.name) == ({"order": 43}, "later")


def test_a_resource_in_use_shows_the_reason_and_starts_nothing(carol, claimed_alice, dead_order):
    tasks, entries = Task.objects.count(), AuditEntry.objects.count()
    response = submit(carol, claimed_alice)
    leased_until = Resource.objects.get(pk=claimed_alice.pk).leased_until
    assert response.status_code == 200
    assert f"account alice@x is in use by task 812 until {when(leased_until)}" in response.content.decode()
    assert (Task.objects.count(), AuditEntry.objects.count()) == (tasks, entries)


@pytest.fixture
def claimed_alice(failed_alice):
    resources.services.reset(resource=failed_alice, actor="ops")
    return resources.services.claim_by_id(resource_id=failed_alice.pk, holder="task 812")


def test_a_resource_a_waiting_task_holds_names_that_task_and_until_when(carol, waiting_order):
    tasks, entries = Task.objects.count(), AuditEntry.objects.count()
    alice = Resource.objects.get(pk=waiting_order.pinned_resource_id)
    page = submit(carol, alice).content.decode()
    assert f"account alice@x is in use by {waiting_order} (demo) until {when(alice.leased_until)}" in page
    assert (Task.objects.count(), AuditEntry.objects.count()) == (tasks, entries)


@pytest.mark.parametrize("typed, named", [
    ("{not json", "payload is not JSON"),
    ('{"x": %s}' % ("9" * 5000), "payload is not JSON"),
    ('{"x": NaN}', "payload.x is nan"),
    ('{"x": "a\\u0000b"}', "payload.x contains a NUL character"),
    ("{\"x\": \"a\x00b\"}", "payload contains a NUL character"),
    ("[1, 2]", "payload must be a JSON object"),
])
def test_a_bad_payload_is_an_error_naming_the_payload_and_starts_nothing(carol, failed_alice, dead_order, typed,
                                                                         named):
    response = submit(carol, failed_alice, payload=typed)
    assert response.status_code == 200
    assert named in field_errors(response, "payload")
    assert Task.objects.count() == 1


def test_an_empty_payload_starts_the_task_with_an_empty_object(carol, failed_alice, dead_order):
    submit(carol, failed_alice, payload="  ")
    assert Task.objects.exclude(pk=dead_order.pk).get().payload == {}


def test_without_the_permission_the_form_is_forbidden(dave, failed_alice, dead_order):
    assert retry_page(dave, failed_alice).status_code == 403


def test_without_the_permission_a_submitted_form_is_forbidden_and_changes_nothing(dave, failed_alice, dead_order):
    data = {"flow": "demo", "payload": "{}", "strict": "on", "token": "0" * 32}
    entries = AuditEntry.objects.count()
    assert dave.post(f"{RETRY}?resource={failed_alice.pk}", data).status_code == 403
    assert Task.objects.count() == 1 and AuditEntry.objects.count() == entries
    assert Resource.objects.get(pk=failed_alice.pk).state == ResourceState.FAILED


def test_unchecked_strict_starts_a_task_that_asks_for_the_resource_and_may_move(carol, failed_alice, dead_order):
    submit(carol, failed_alice, strict=False)
    task = Task.objects.exclude(pk=dead_order.pk).get()
    assert (task.strict, task.requested_resource_id) == (False, failed_alice.pk)
    assert Resource.objects.get(pk=failed_alice.pk).state == ResourceState.FAILED  # not reset, not reserved


def test_the_same_non_strict_page_submitted_twice_starts_one_task(carol, failed_alice, dead_order):
    form = form_of(retry_page(carol, failed_alice))
    for _ in range(2):
        carol.post(f"{RETRY}?resource={failed_alice.pk}", posted(form, strict=False))
    assert Task.objects.count() == 2


def test_the_same_strict_page_submitted_twice_starts_one_task_and_shows_it_both_times(carol, failed_alice,
                                                                                      dead_order):
    form = form_of(retry_page(carol, failed_alice))
    first, second = (carol.post(f"{RETRY}?resource={failed_alice.pk}", posted(form)) for _ in range(2))

    task = Task.objects.exclude(pk=dead_order.pk).get()
    assert first.url == second.url == reverse("admin:scheduling_task_change", args=[task.pk])


def test_unchecked_strict_starts_nothing_when_the_order_succeeded_since_elsewhere(carol, dead_order, bob):
    [letter] = collect_dead_letters()
    replay_dead_letter(dead_letter=letter, actor="olga", any_resource=True)
    assert run(Task.objects.get(first_run=dead_order)).state == "succeeded"
    tasks = Task.objects.count()

    page = carol.get(f"{RETRY}?task={dead_order.pk}")  # left out; typed back in, it is refused all the same
    response = carol.post(f"{RETRY}?task={dead_order.pk}", posted(form_of(page), strict=False,
                                                                  payload='{"order": 42}'))

    assert "succeeded already" in field_errors(response, "as_new_instance")
    assert Task.objects.count() == tasks


def test_unchecked_strict_with_a_changed_payload_is_a_new_order_and_starts(carol, dead_order, bob):
    [letter] = collect_dead_letters()
    replay_dead_letter(dead_letter=letter, actor="olga", any_resource=True)
    assert run(Task.objects.get(first_run=dead_order)).state == "succeeded"

    page = carol.get(f"{RETRY}?task={dead_order.pk}")
    carol.post(f"{RETRY}?task={dead_order.pk}", posted(form_of(page), strict=False, payload='{"order": 43}'))

    task = Task.objects.order_by("-id").first()
    assert (task.payload, task.strict, task.first_run_id) == ({"order": 43}, False, None)


def test_a_quarantined_resource_form_warns_that_a_strict_retry_is_refused(carol, quarantined_bob):
    page = retry_page(carol, quarantined_bob).content.decode()
    assert "account bob@x is quarantined since" in page and "banned upstream" in page
    assert "A strict retry is refused until it is released from quarantine" in page


def test_the_form_opened_from_a_dead_task_is_prefilled_with_its_resource_flow_and_payload(carol, dead_order, once):
    form = form_of(carol.get(f"{RETRY}?task={dead_order.pk}"))
    assert (form["key"].value(), form["flow"].value(), json.loads(form["payload"].value())) == (
        "alice@x", "demo", {"order": 42})


def test_the_form_opened_from_a_dead_task_starts_nothing_when_its_order_succeeded_since_elsewhere(carol, dead_order,
                                                                                                 bob):
    [letter] = collect_dead_letters()
    replay_dead_letter(dead_letter=letter, actor="olga", any_resource=True)
    replay = run(Task.objects.get(first_run=dead_order))
    assert (replay.state, replay.resource_id) == ("succeeded", bob.pk)
    alice = resources.services.reset(resource=dead_order.resource_id, actor="ops")
    order_43 = services.start_task(flow="demo", pool_name=alice.pool, payload={"order": 43}, resource=alice,
                                   created_by="shop", policy="once")
    assert run(order_43).state == "succeeded"  # the dead task is no longer alice's last
    tasks = Task.objects.count()

    page = carol.get(f"{RETRY}?task={dead_order.pk}")  # left out; typed back in, it is refused all the same
    response = carol.post(f"{RETRY}?task={dead_order.pk}", posted(form_of(page), payload='{"order": 42}'))

    assert "succeeded already" in field_errors(response, "as_new_instance")
    assert Task.objects.count() == tasks


@pytest.mark.parametrize("strict", [True, False])
def test_run_it_again_as_a_new_instance_starts_an_order_that_succeeded_since_as_a_new_one(carol, dead_order, bob,
                                                                                         strict):
    [letter] = collect_dead_letters()
    replay_dead_letter(dead_letter=letter, actor="olga", any_resource=True)
    assert run(Task.objects.get(first_run=dead_order)).state == "succeeded"

    page = carol.get(f"{RETRY}?task={dead_order.pk}")
    response = carol.post(f"{RETRY}?task={dead_order.pk}", posted(form_of(page), strict=strict, as_new_instance=True))

    task = Task.objects.order_by("-id").first()
    assert response.status_code == 302 and response.url == reverse("admin:scheduling_task_change", args=[task.pk])
    assert (task.payload, task.strict, task.first_run_id, task.created_by) == ({"order": 42}, strict, None, "carol")
    entry = AuditEntry.objects.order_by("-id").first()
    assert (entry.after["new_instance"], entry.after["runs_again"], entry.actor) == (True, dead_order.pk, "carol")


def test_the_form_offers_run_it_again_as_a_new_instance_unchecked_saying_what_it_does(carol, failed_alice,
                                                                                     dead_order):
    form = form_of(retry_page(carol, failed_alice))
    assert form["as_new_instance"].value() is False
    assert form.fields["as_new_instance"].label == "Run it again as a new instance"
    assert "its own idempotency key" in form.fields["as_new_instance"].help_text


def test_the_form_for_a_resource_without_history_asks_for_a_flow(carol, alice, once):
    response = retry_page(carol, alice)
    assert "No task has run on this resource yet" in response.content.decode()


@pytest.mark.parametrize("query", ["resource=abc", "resource=0", "task=99999999", "resource=99999999"])
def test_the_form_for_something_that_does_not_exist_is_not_found(carol, db, query):
    assert carol.get(f"{RETRY}?{query}").status_code == 404


# the empty form: run a flow with a specified resource


def empty_form(pool, key, **changes):
    return {"pool": pool.pk, "key": key, "flow": "demo", "payload": '{"order": 7}', "policy": "once",
            "strict": "on", "token": "a" * 32, **changes}


def test_the_empty_form_runs_a_flow_on_the_typed_key_strictly(carol, alice, once):
    response = carol.post(RETRY, empty_form(alice.pool, "alice@x"))
    task = Task.objects.get()
    assert response.url == reverse("admin:scheduling_task_change", args=[task.pk])
    assert (task.requested_resource_id, task.strict, task.payload) == (alice.pk, True, {"order": 7})


def test_the_empty_form_names_a_key_the_pool_does_not_have(carol, alice, once):
    response = carol.post(RETRY, empty_form(alice.pool, "zed@x"))
    assert "pool accounts has no account with key 'zed@x'" in field_errors(response, "key")
    assert not Task.objects.exists()


def test_the_empty_form_names_an_unknown_policy(carol, alice, once):
    response = carol.post(RETRY, empty_form(alice.pool, "alice@x", policy="nope"))
    assert field_errors(response, "policy")
    assert not Task.objects.exists()


def test_the_empty_form_starts_with_strict_checked(carol, db):
    assert form_of(carol.get(RETRY))["strict"].value() is True


def test_key_autocomplete_lists_the_pools_keys_starting_with_what_was_typed(carol, alice, bob):
    another(alice.pool, "alicia@x")
    response = carol.get(KEYS, {"pool": alice.pool_id, "q": "ali"})
    assert response.json() == {"keys": ["alice@x", "alicia@x"]}


def test_key_autocomplete_stays_within_the_pool(carol, alice):
    from tests.factories import ResourcePoolFactory

    another(ResourcePoolFactory(name="numbers"), "alice-number")
    assert carol.get(KEYS, {"pool": alice.pool_id, "q": "ali"}).json() == {"keys": ["alice@x"]}


def test_key_autocomplete_refuses_a_pool_that_is_not_an_id(carol, alice):
    assert carol.get(KEYS, {"pool": "accounts", "q": "a"}).status_code == 400


def test_key_autocomplete_needs_the_permission(dave, alice):
    assert dave.get(KEYS, {"pool": alice.pool_id, "q": "a"}).status_code == 403


# a resource an external worker failed after its last task had succeeded


def test_the_form_for_a_resource_whose_last_task_succeeded_leaves_that_payload_out_and_says_why(
        carol, externally_failed_alice, succeeded_order):
    response = retry_page(carol, externally_failed_alice)
    assert not form_of(response)["payload"].value()
    assert (f"task {succeeded_order.pk} (demo), the last task on account alice@x, succeeded already: its payload "
            "again would run it a second time") in response.content.decode()


def test_the_form_left_without_the_succeeded_payload_refuses_an_empty_one_instead_of_running_an_empty_order(
        carol, externally_failed_alice, succeeded_order):
    response = submit(carol, externally_failed_alice)
    assert "type the payload to run" in field_errors(response, "payload")
    assert Task.objects.count() == 1


def test_a_new_payload_typed_into_that_form_starts_a_strict_task(carol, externally_failed_alice, succeeded_order):
    submit(carol, externally_failed_alice, payload='{"order": 43}')
    task = Task.objects.exclude(pk=succeeded_order.pk).get()
    assert (task.payload, task.strict, task.requested_resource_id) == (
        {"order": 43}, True, externally_failed_alice.pk)


def test_the_form_for_a_held_resource_names_the_holder_and_until_when_before_anything_else(carol, held_alice,
                                                                                          succeeded_order):
    page = retry_page(carol, held_alice).content.decode()
    content = page[page.index('id="content-main"'):]
    holder = f"account alice@x is in use by billing-worker-8 until {when(held_alice.leased_until)}"
    assert content.index(holder) < min(content.index("succeeded already"), content.index("of pool accounts is"),
                                       content.index("<form"))


def test_the_submitted_form_for_a_held_resource_is_refused_naming_the_holder_not_the_payload(carol, held_alice,
                                                                                            succeeded_order):
    response = submit(carol, held_alice, payload='{"order": 42}')
    page = response.content.decode()
    assert f"Nothing was started: account alice@x is in use by billing-worker-8 until {when(held_alice.leased_until)}" \
        in page
    assert page.count("is in use by billing-worker-8") == 1  # said once, first
    assert not field_errors(response, "payload")
    assert Task.objects.count() == 1


def test_the_form_for_a_resource_its_waiting_task_holds_names_that_task_first_and_only_once(carol, waiting_order):
    alice = Resource.objects.get(pk=waiting_order.pinned_resource_id)
    page = retry_page(carol, alice).content.decode()
    assert f"Not available now: account alice@x is in use by {waiting_order} (demo) until {when(alice.leased_until)}" \
        in page
    assert "moved on to another resource" not in page


# a page that left the payload out while a run of the order was live, submitted after that run ended


@pytest.fixture
def replay_then_page(carol, dead_order, bob):
    """Order 42's dead letter replayed (waiting elsewhere), the retry form opened for the dead
    task meanwhile (its payload left out: that run is live), then the replay cancelled: returns
    the page as the operator saw it."""
    [letter] = collect_dead_letters()
    replay_dead_letter(dead_letter=letter, actor="olga", any_resource=True)
    replay = Task.objects.get(first_run=dead_order)
    page = carol.get(f"{RETRY}?task={dead_order.pk}")
    assert not form_of(page)["payload"].value() and "Type the payload of a new run below." in page.content.decode()
    services.cancel_task(task=replay.pk, actor="ops", reason="wrong warehouse")
    return page


def test_a_payload_left_out_while_a_run_was_live_and_left_empty_is_refused_after_that_run_ended_not_run_as_empty(
        carol, dead_order, replay_then_page):
    tasks = Task.objects.count()
    response = carol.post(f"{RETRY}?task={dead_order.pk}", posted(form_of(replay_then_page)))
    started = Task.objects.filter(pk__gt=dead_order.pk).order_by("id").values_list("payload", flat=True)
    assert list(started) == [{"order": 42}]  # the cancelled replay only
    assert Task.objects.count() == tasks
    assert "type the payload to run" in field_errors(response, "payload")


@pytest.mark.parametrize("strict", [True, False])
def test_a_payload_left_out_while_a_run_was_live_runs_the_order_once_more_when_ticked_after_that_run_ended(
        carol, dead_order, replay_then_page, strict):
    response = carol.post(f"{RETRY}?task={dead_order.pk}", posted(form_of(replay_then_page), strict=strict,
                                                                  as_new_instance=True))
    task = Task.objects.order_by("-id").first()
    assert response.status_code == 302 and response.url == reverse("admin:scheduling_task_change", args=[task.pk])
    # The order never succeeded: the guard runs it as a run of itself, not as a new instance.
    assert (task.payload, task.strict, task.first_run_id) == ({"order": 42}, strict, dead_order.pk)


def test_the_page_refusing_an_empty_payload_after_the_live_run_ended_says_what_it_left_out_and_why(
        carol, dead_order, replay_then_page):
    response = carol.post(f"{RETRY}?task={dead_order.pk}", posted(form_of(replay_then_page)))
    content = response.content.decode()
    assert f"task {dead_order.pk}" in content and "its payload is not filled in" in content
    assert "a run of it was live or had succeeded when the page was opened" in content
    assert "tick “Run it again as a new instance” to run" in content


def test_a_damaged_record_of_the_payload_left_out_is_refused_asking_to_reload_and_starts_nothing(
        carol, externally_failed_alice, succeeded_order):
    response = submit(carol, externally_failed_alice, left_out="999999", as_new_instance=True)
    assert "the form&#x27;s record of the payload it left out is damaged: reload the page" in response.content.decode()
    assert Task.objects.count() == 1


def test_a_payload_emptied_on_a_page_that_showed_it_starts_an_empty_object_as_the_page_said_after_the_order_succeeded(
        carol, failed_alice, dead_order, bob):
    page = retry_page(carol, failed_alice)
    assert "empty means {}" in page.content.decode()
    [letter] = collect_dead_letters()
    replay_dead_letter(dead_letter=letter, actor="olga", any_resource=True)
    assert run(Task.objects.get(first_run=dead_order)).state == "succeeded"

    carol.post(f"{RETRY}?resource={failed_alice.pk}", posted(form_of(page), payload=""))

    task = Task.objects.order_by("-id").first()
    assert (task.payload, task.first_run_id) == ({}, None)
