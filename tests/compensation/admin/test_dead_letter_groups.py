"""The open dead letters grouped by flow and error signature: counts, deaths, work orders, and
links to the list and to a bulk replay of each group."""

from urllib.parse import parse_qsl, urlsplit

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from compensation.models import DeadLetter
from compensation.services.dead_letters import collect_dead_letters, discard_dead_letter
from tests.compensation.conftest import dead_tasks

pytestmark = pytest.mark.django_db

GROUPS = reverse("admin:compensation_deadletter_groups")
LIST = reverse("admin:compensation_deadletter_changelist")


@pytest.fixture
def mixed(pool, alice, instant_policy):
    """demo timed out 3 times, demo was refused twice, signup timed out once."""
    dead_tasks(pool=pool, policy=instant_policy, n=3, resource=alice, signature="TimeoutError: slow")
    dead_tasks(pool=pool, policy=instant_policy, n=2, resource=alice, signature="PermissionError: HTTP 403")
    dead_tasks(pool=pool, policy=instant_policy, n=1, flow="signup", signature="TimeoutError: slow")
    return collect_dead_letters()


def groups(client) -> list[dict]:
    response = client.get(GROUPS)
    assert response.status_code == 200
    return response.context["groups"]


def test_groups_count_open_dead_letters_by_flow_and_signature_biggest_first(carol, mixed):
    assert [(g["flow"], g["error_signature"], g["count"]) for g in groups(carol)] == [
        ("demo", "TimeoutError: slow", 3), ("demo", "PermissionError: HTTP 403", 2),
        ("signup", "TimeoutError: slow", 1)]


def test_a_group_shows_its_oldest_and_newest_death_and_its_work_order(carol, mixed):
    timeouts = DeadLetter.objects.filter(flow="demo", error_signature="TimeoutError: slow")
    group = groups(carol)[0]
    assert (group["oldest"], group["newest"]) == (min(d.died_at for d in timeouts), max(d.died_at for d in timeouts))
    assert group["work_orders"] == [timeouts[0].work_order]


def test_groups_leave_out_dead_letters_that_are_no_longer_open(carol, mixed):
    signup = DeadLetter.objects.get(flow="signup")
    discard_dead_letter(dead_letter=signup, actor="ops", reason="duplicate signup")
    assert [g["flow"] for g in groups(carol)] == ["demo", "demo"]


def test_show_these_lists_exactly_the_open_dead_letters_of_the_group(carol, mixed):
    refused = next(g for g in groups(carol) if g["error_signature"] == "PermissionError: HTTP 403")
    listed = carol.get(refused["list_url"])
    assert {d.pk for d in listed.context["cl"].result_list} == set(
        DeadLetter.objects.filter(error_signature="PermissionError: HTTP 403").values_list("pk", flat=True))


def test_bulk_replay_these_opens_the_start_page_filled_in_with_the_group(carol, mixed):
    group = groups(carol)[0]
    url = urlsplit(group["bulk_replay_url"])
    assert url.path == reverse("admin:compensation_bulkreplay_add")
    page = carol.get(group["bulk_replay_url"])
    assert page.context["form"].initial == {"flow": "demo", "error_signature": "TimeoutError: slow"}
    assert dict(parse_qsl(url.query)) == page.context["form"].initial


def test_a_group_without_a_signature_offers_no_bulk_replay(carol, pool, instant_policy):
    dead_tasks(pool=pool, policy=instant_policy, n=1, signature="")
    collect_dead_letters()
    assert groups(carol)[0]["bulk_replay_url"] == ""


def test_a_viewer_sees_the_groups_without_the_bulk_replay_links(dave, mixed):
    assert [g["bulk_replay_url"] for g in groups(dave)] == ["", "", ""]
    assert reverse("admin:compensation_bulkreplay_add") not in dave.get(GROUPS).content.decode()


def test_the_groups_page_costs_the_same_queries_for_one_group_as_for_many(carol, pool, instant_policy):
    dead_tasks(pool=pool, policy=instant_policy, n=2, signature="TimeoutError: slow")
    collect_dead_letters()
    with CaptureQueriesContext(connection) as one:
        groups(carol)
    for n in range(6):
        dead_tasks(pool=pool, policy=instant_policy, n=1, signature=f"ValueError: bad amount {n}")
    collect_dead_letters()
    with CaptureQueriesContext(connection) as many:
        assert len(groups(carol)) == 7
    assert len(many) == len(one)


def test_the_dead_letter_list_links_to_the_groups(carol, mixed):
    assert f'href="{GROUPS}"' in carol.get(LIST).content.decode()


def test_with_the_dlq_inspector_off_the_groups_answer_403(carol, mixed, settings):
    settings.RETRYOPS_FLAGS_OFF = frozenset({"dlq-inspector"})
    assert carol.get(GROUPS).status_code == 403
