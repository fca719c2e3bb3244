"""Bulk replay in the admin: count first, then start; service errors on the field they name;
cancel; the progress on the bulk replay's page; "bulk replay like these" from the dead letters."""

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from audit.models import AuditEntry
from compensation.choices import BulkReplayState
from compensation.models import BulkReplay, DeadLetter
from compensation.services.bulk_replay import DEFAULT_RATE
from compensation.services.bulk_replay import start_bulk_replay
from compensation.services.dead_letters import collect_dead_letters
from tests.compensation.conftest import dead_tasks

pytestmark = pytest.mark.django_db

START = reverse("admin:compensation_bulkreplay_add")
TIMEOUTS = {"flow": "demo", "error_signature": "TimeoutError: slow"}


@pytest.fixture
def letters(pool, alice, instant_policy):
    dead_tasks(pool=pool, policy=instant_policy, n=3, resource=alice, signature="TimeoutError: slow")
    dead_tasks(pool=pool, policy=instant_policy, n=2, resource=alice, signature="PermissionError: HTTP 403")
    return collect_dead_letters()


def form_data(**fields) -> dict:
    return {"flow": "", "error_signature": "", "pool": "", "resource": "", "died_after_0": "", "died_after_1": "",
            "died_before_0": "", "died_before_1": "", "rate": "10", **fields}


def count(client, **fields):
    return client.post(START, {**form_data(**fields), "_preview": "1"})


def count_and_start(client, **fields):
    counted = count(client, **fields)
    assert counted.context["count"] is not None, counted.context["form"].errors
    return client.post(START, {**form_data(**fields), "previewed": counted.context["previewed"], "_start": "1"})


def said(response) -> str:
    return " | ".join(str(m) for m in response.context["messages"])


def test_counting_shows_how_many_open_dead_letters_match_and_writes_nothing(admin_client, letters):
    response = count(admin_client, **TIMEOUTS)
    assert response.status_code == 200
    assert b"3 open dead letters match" in response.content
    assert b'name="_start"' in response.content
    assert not BulkReplay.objects.exists()
    assert not AuditEntry.objects.filter(action__startswith="bulk_replay").exists()


def test_starting_after_the_count_starts_one_bulk_replay_of_that_filter(admin_client, letters, pool):
    response = count_and_start(admin_client, **TIMEOUTS, pool=str(pool.pk), rate="2.5", any_resource="on")
    bulk = BulkReplay.objects.get()
    assert response.status_code == 302 and response.url == reverse("admin:compensation_bulkreplay_change",
                                                                   args=[bulk.pk])
    assert (bulk.filter, bulk.rate, bulk.any_resource, bulk.selected, bulk.requested_by) == (
        {**TIMEOUTS, "pool": pool.pk}, 2.5, True, 3, "admin")
    assert AuditEntry.objects.get(action="bulk_replay.start").channel == "admin"


def test_a_start_for_a_filter_other_than_the_one_counted_only_counts_again(admin_client, letters):
    counted = count(admin_client, **TIMEOUTS)
    response = admin_client.post(START, {**form_data(flow="demo"), "previewed": counted.context["previewed"],
                                         "_start": "1"})
    assert not BulkReplay.objects.exists()
    assert b"5 open dead letters match" in response.content
    assert "The filter changed since the count" in said(response)


def test_the_page_offers_the_default_rate(admin_client):
    assert admin_client.get(START).context["form"]["rate"].value() == DEFAULT_RATE


@pytest.mark.parametrize("rate", ["0", "501"])
def test_a_rate_out_of_range_is_shown_on_the_rate_field(admin_client, letters, rate):
    response = count_and_start(admin_client, **TIMEOUTS, rate=rate)
    assert response.status_code == 200
    assert response.context["form"].errors["rate"] == [
        f"rate must be a number of replays per second from 1 to 500, got {float(rate)!r}"]
    assert not BulkReplay.objects.exists()


def test_a_bad_resource_id_is_shown_on_the_resource_field(admin_client, letters):
    response = count(admin_client, resource="0")
    assert response.context["form"].errors["resource"] == ["filter.resource must be a whole number from 1 to "
                                                           "9223372036854775807, got 0"]
    assert response.context["count"] is None


def test_a_second_start_with_the_same_filter_says_another_bulk_replay_is_running(admin_client, letters):
    running = start_bulk_replay(filter=TIMEOUTS, actor="ops:carol")
    response = count_and_start(admin_client, **TIMEOUTS)
    assert response.status_code == 200
    assert response.context["form"].non_field_errors() == [
        f'Another bulk replay with this filter is running: <a href="/admin/compensation/bulkreplay/{running.pk}/'
        f'change/">bulk replay {running.pk}</a>. Cancel it or wait for it to finish.']
    assert BulkReplay.objects.get() == running


def test_the_permission_to_add_bulk_replays_is_what_opens_the_start_page(client, django_user_model, letters):
    operator = django_user_model.objects.create_user("carol", password="pw", is_staff=True)
    operator.user_permissions.add(Permission.objects.get(codename="view_bulkreplay"))
    client.force_login(operator)
    assert client.post(START, {**form_data(**TIMEOUTS), "_preview": "1"}).status_code == 403
    operator.user_permissions.add(Permission.objects.get(codename="add_bulkreplay"))
    assert b"3 open dead letters match" in client.post(START, {**form_data(**TIMEOUTS), "_preview": "1"}).content


def test_the_cancel_action_cancels_running_bulk_replays_through_the_service(admin_client, letters):
    bulk = start_bulk_replay(filter=TIMEOUTS, actor="ops:carol")
    response = admin_client.post(reverse("admin:compensation_bulkreplay_changelist"),
                                 {"action": "cancel", "index": 0, "_selected_action": [str(bulk.pk)]}, follow=True)
    assert said(response) == "Cancelled 1 bulk replay; the replays it started go on."
    assert BulkReplay.objects.get(pk=bulk.pk).state == BulkReplayState.CANCELLED
    assert AuditEntry.objects.get(action="bulk_replay.cancel").actor == "admin"


def test_the_cancel_button_cancels_it_and_a_second_click_says_it_is_cancelled(admin_client, letters):
    bulk = start_bulk_replay(filter=TIMEOUTS, actor="ops:carol")
    page = reverse("admin:compensation_bulkreplay_change", args=[bulk.pk])
    cancel = reverse("admin:compensation_bulkreplay_cancel", args=[bulk.pk])
    assert cancel.encode() in admin_client.get(page).content
    first = admin_client.post(cancel, follow=True)
    assert said(first) == f"Cancelled bulk replay {bulk.pk}; the replays it started go on."
    second = admin_client.post(cancel, follow=True)
    assert said(second) == f"cannot cancel bulk replay {bulk.pk}: it is cancelled"
    assert cancel.encode() not in second.content


def test_the_page_of_a_bulk_replay_shows_its_progress(admin_client, letters):
    bulk = start_bulk_replay(filter=TIMEOUTS, actor="ops:carol")
    BulkReplay.objects.filter(pk=bulk.pk).update(done=1, refused=1)  # as its runner would
    page = admin_client.get(reverse("admin:compensation_bulkreplay_change", args=[bulk.pk]))
    assert page.status_code == 200
    assert b'<progress value="2" max="3"' in page.content
    assert b"Running</b>: 2 of 3 handled &mdash; 1 replayed, 1 refused" in page.content


def test_bulk_replay_like_these_opens_the_page_with_their_common_flow_and_signature(admin_client, letters, pool):
    timeouts = DeadLetter.objects.filter(error_signature="TimeoutError: slow").values_list("pk", flat=True)
    response = admin_client.post(reverse("admin:compensation_deadletter_changelist"),
                                 {"action": "bulk_replay_like_these", "index": 0,
                                  "_selected_action": [str(pk) for pk in timeouts]})
    assert response.status_code == 302 and response.url.startswith(START)
    form = admin_client.get(response.url).context["form"]
    assert (form["flow"].value(), form["error_signature"].value(), str(form["pool"].value())) == (
        "demo", "TimeoutError: slow", str(pool.pk))


def test_bulk_replay_like_these_leaves_out_what_the_rows_do_not_share(admin_client, letters):
    response = admin_client.post(reverse("admin:compensation_deadletter_changelist"),
                                 {"action": "bulk_replay_like_these", "index": 0,
                                  "_selected_action": [str(pk) for pk in DeadLetter.objects.values_list("pk",
                                                                                                      flat=True)]})
    form = admin_client.get(response.url).context["form"]
    assert (form["flow"].value(), form["error_signature"].value()) == ("demo", None)


def test_a_finished_bulk_replay_says_how_many_were_no_longer_open_when_it_reached_them(admin_client, letters):
    bulk = start_bulk_replay(filter=TIMEOUTS, actor="ops:carol")
    BulkReplay.objects.filter(pk=bulk.pk).update(done=2, state=BulkReplayState.FINISHED, finished_at=bulk.created_at)
    page = admin_client.get(reverse("admin:compensation_bulkreplay_change", args=[bulk.pk]))
    assert b"2 of 3 handled &mdash; 2 replayed, 0 refused; the other 1 was no longer open" in page.content


def test_the_bulk_replay_list_offers_to_start_one(admin_client):
    page = admin_client.get(reverse("admin:compensation_bulkreplay_changelist"))
    assert f'<a href="{START}" class="addlink">Start a bulk replay</a>'.encode() in page.content
