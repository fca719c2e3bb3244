"""The acceptance figures' page and panel: each count links to a list that selects exactly the
rows the figure counted; an empty window says "no data"; only those who may view tasks see them."""

import re

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from telemetry.figures import admin as admin_figures
from tests.telemetry import history

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("figure_slas")]


def linked_rows(client, url: str) -> set[int]:
    page = client.get(url)
    assert page.status_code == 200, url
    assert "?e=1" not in page.get("Location", "")
    return set(page.context["cl"].queryset.values_list("pk", flat=True))


def card_links(rf, user, key: str, now) -> dict[str, str]:
    request = rf.get("/")
    request.user = user
    card = next(c for c in admin_figures.cards(request, seconds=history.HOUR, now=now) if c["key"] == key)
    # The link's words start with its count; the rest names it.
    return {re.sub(r"^(of )?\d+ ", "", link.words): link.url for link in card["links"]}


def ids(rows) -> set[int]:
    return {row.pk for row in rows}


def test_retry_success_links_select_the_events_it_counted(admin_client, admin_user, rf):
    now = timezone.now()
    rows = history.retry_events(now)
    links = card_links(rf, admin_user, "retry_success_ratio", now)
    assert linked_rows(admin_client, links["succeeded"]) == ids(rows["succeeded"])
    assert linked_rows(admin_client, links["retries ended"]) == ids(rows["ended"])


def test_retry_within_sla_links_select_the_attempts_and_waiting_tasks_it_counted(admin_client, admin_user, rf):
    now = timezone.now()
    rows = history.retry_starts(now)
    links = card_links(rf, admin_user, "retry_within_sla_ratio", now)
    assert linked_rows(admin_client, links["on time"]) == ids(rows["on_time"])
    assert linked_rows(admin_client, links["started late"]) == ids(rows["late"])
    assert linked_rows(admin_client, links["still waiting, late"]) == ids(rows["waiting"])


def test_dead_letter_to_work_order_links_select_its_work_orders_and_the_unpaged(admin_client, admin_user, rf):
    now = timezone.now()
    rows = history.escalations(now)
    links = card_links(rf, admin_user, "dead_letter_to_work_order", now)
    assert linked_rows(admin_client, links["work orders"]) == ids(rows["work_orders"])
    assert linked_rows(admin_client, links["not paged yet"]) == ids(rows["not_paged"])


def test_work_order_to_compensated_link_selects_the_work_orders_it_measured(admin_client, admin_user, rf):
    now = timezone.now()
    rows = history.compensations(now)
    links = card_links(rf, admin_user, "work_order_to_compensated", now)
    assert linked_rows(admin_client, links["work orders compensated"]) == ids(rows["work_orders"])


def test_completion_links_select_the_work_orders_due_and_which_were_completed(admin_client, admin_user, rf):
    now = timezone.now()
    rows = history.completions(now)
    links = card_links(rf, admin_user, "compensation_completion_ratio", now)
    assert linked_rows(admin_client, links["due"]) == ids(rows["due"])
    assert linked_rows(admin_client, links["completed in time"]) == ids(rows["completed"])
    assert linked_rows(admin_client, links["not completed in time"]) == ids(rows["not_completed"])


def test_a_linked_list_shows_its_time_range_in_the_sidebar(admin_client, admin_user, rf):
    now = timezone.now()
    history.compensations(now)
    url = card_links(rf, admin_user, "work_order_to_compensated", now)["work orders compensated"]
    page = admin_client.get(url)
    assert "compensated at" in page.content.decode() and "Any time" in page.content.decode()


@pytest.mark.parametrize("bad", ["yesterday", "2026-13-01T00:00:00", "9999-12-31T23:59:59-23:00"])
def test_a_time_range_that_is_no_time_shows_the_admins_bad_parameters_page(admin_client, bad):
    page = admin_client.get(reverse("admin:compensation_workorder_changelist"), {"compensated_at__gte": bad})
    assert page.status_code == 302 and page["Location"].endswith("?e=1")


def test_a_figure_link_filter_refuses_an_unknown_choice(admin_client):
    page = admin_client.get(reverse("admin:scheduling_attempt_changelist"), {"retry_start": "sometimes"})
    assert page.status_code == 302 and page["Location"].endswith("?e=1")


def test_the_page_shows_no_data_for_an_empty_window(admin_client):
    page = admin_client.get(reverse("acceptance_figures"), {"window": "3600"})
    text = page.content.decode()
    assert page.status_code == 200
    cards = text.split('class="acc-cards"')[1].split("acc-defs")[0]
    assert cards.count('<span class="acc-status">no data</span>') == 5
    assert set(re.findall(r'class="acc-value[^"]*">(?:<span class="acc-label">\w+</span> )?<strong>([^<]*)</strong>',
                          cards)) == {"–"}


def test_the_page_colours_a_missed_target_and_shows_the_target(admin_client):
    history.retry_events(timezone.now())
    page = admin_client.get(reverse("acceptance_figures"), {"window": "3600"})
    text = page.content.decode()
    card = text.split('data-figure="retry_success_ratio"')[0].rsplit("<section", 1)[1]
    assert "acc-missed" in card
    assert "60.0%" in text and "target ≥ 90.0%" in text


def test_the_page_refuses_a_window_it_does_not_offer_and_says_which_it_does(admin_client):
    page = admin_client.get(reverse("acceptance_figures"), {"window": "12"})
    assert page.status_code == 400
    assert "3600, 86400, 604800" in page.content.decode()


def test_the_panel_shows_the_settings_window(admin_client, settings):
    settings.RETRYOPS_FIGURES_WINDOW_SECONDS = 7200
    page = admin_client.get(reverse("acceptance_figures_panel"))
    assert page.status_code == 200 and "Over the last 2 hours" in page.content.decode()


def test_the_admin_index_fetches_the_figures_panel(admin_client):
    page = admin_client.get(reverse("admin:index"))
    assert reverse("acceptance_figures_panel") in page.content.decode()


@pytest.mark.parametrize("name", ["acceptance_figures", "acceptance_figures_panel"])
def test_the_figures_need_the_permission_to_view_tasks(name):
    user = User.objects.create_user(username="staff", password="x", is_staff=True)
    client = Client()
    client.force_login(user)
    assert client.get(reverse(name)).status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_task"))
    assert client.get(reverse(name)).status_code == 200


def test_a_reader_who_may_not_view_a_list_gets_the_count_without_its_link(rf):
    now = timezone.now()
    user = User.objects.create_user(username="staff", password="x", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_task"))
    user = User.objects.get(pk=user.pk)
    links = card_links(rf, user, "compensation_completion_ratio", now)
    assert set(links.values()) == {""}


@pytest.mark.parametrize("seconds, words", [(None, "–"), (45, "45 s"), (252, "4 min 12 s"), (300, "5 min"),
                                            (11100, "3 h 5 min"), (86400, "1 d"), (187200, "2 d 4 h")])
def test_times_are_shown_in_their_two_largest_units(seconds, words):
    assert admin_figures.duration_words(seconds) == words
