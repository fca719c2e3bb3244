"""Which errors are really transient, in the console: the page of every policy, a policy's own page
and the foot of its change page, each row linking to the attempts and tasks behind it."""

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.urls import reverse

from scheduling import services
from scheduling.models import Attempt, Task
from tests.scheduling.admin.conftest import another, order_42, run, staff_user

SLOW = "TimeoutError: upstream slow"


@pytest.fixture
def history(alice, bob, once, later):
    """Order 42 died of a timeout on alice under "once"; order 43 failed so on bob under "later" and waits."""
    dead = run(order_42(alice), error=TimeoutError("upstream slow"))
    waiting = run(services.start_task(flow="demo", pool_name=bob.pool, payload={"order": 43}, resource=bob,
                                      created_by="shop", policy="later"), error=TimeoutError("upstream slow"))
    return {"dead": dead, "waiting": waiting}


def transience_url(policy=None) -> str:
    if policy is None:
        return reverse("admin:scheduling_retrypolicy_transience")
    return reverse("admin:scheduling_retrypolicy_transience_of", args=[policy.pk])


def rows_of(response) -> list[tuple]:
    return [(row["stats"].policy.name, row["stats"].signature, row["stats"].failures, row["stats"].retries,
             row["stats"].dead) for row in response.context["rows"]]


def test_the_page_of_every_policy_lists_each_policys_signatures(dave, history):
    response = dave.get(transience_url())
    assert response.status_code == 200
    assert rows_of(response) == [("once", SLOW, 1, 0, 1), ("later", SLOW, 1, 1, 0)]


def test_a_policys_page_lists_only_its_tasks_failures(dave, history, once):
    response = dave.get(transience_url(once))
    assert rows_of(response) == [("once", SLOW, 1, 0, 1)]


def test_a_rows_failures_link_lists_exactly_the_attempts_behind_it(dave, history, once):
    carl = another(history["dead"].pool, "carl@x")
    run(services.start_task(flow="demo", pool_name=carl.pool, payload={"order": 44}, resource=carl, created_by="shop",
                            policy="once"), error=TimeoutError("upstream slow"))
    [row] = dave.get(transience_url(once)).context["rows"]
    listed = dave.get(row["attempts_url"]).context["cl"].result_list
    assert sorted(a.pk for a in listed) == sorted(
        Attempt.objects.filter(task__policy=once, error_signature=SLOW).values_list("pk", flat=True))
    assert len(listed) == row["stats"].failures == 2


def test_a_rows_dead_link_lists_the_dead_tasks_of_its_policy_only(dave, history, once):
    [row] = dave.get(transience_url(once)).context["rows"]
    listed = dave.get(row["dead_url"]).context["cl"].result_list
    assert [task.pk for task in listed] == [history["dead"].pk]


def plan_of(changelist) -> str:
    sql, params = changelist.queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        # A test's few rows are cheapest to read whole: forbid that, to see which index the planner
        # reaches for when it must use one.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.parametrize("link", ["attempts_url", "dead_url"])
def test_the_lists_behind_a_row_read_the_signatures_failures_not_the_windows(dave, history, once, link):
    [row] = dave.get(transience_url(once)).context["rows"]
    plan = plan_of(dave.get(row[link]).context["cl"])
    assert "attempt_failure_signature_idx" in plan
    assert "attempt_failure_time_idx" not in plan


def test_the_policy_page_shows_its_signatures_below_the_form_and_links_its_own_page(dave, history, later):
    response = dave.get(reverse("admin:scheduling_retrypolicy_change", args=[later.pk]))
    page = response.content.decode()
    assert [row["stats"].signature for row in response.context["transience"]["rows"]] == [SLOW]
    assert 'id="transience"' in page and transience_url(later) in page


def test_the_policy_list_links_the_page_of_every_policy(dave, history):
    assert transience_url() in dave.get(reverse("admin:scheduling_retrypolicy_changelist")).content.decode()


@pytest.mark.parametrize("policy", [None, "once"])
def test_the_pages_need_the_policys_view_permission(client, history, once, policy):
    client.force_login(staff_user("erin", ["view_task", "view_attempt"]))
    assert client.get(transience_url(once if policy else None)).status_code == 403


def test_an_unknown_policy_has_no_page(dave, history):
    assert dave.get(reverse("admin:scheduling_retrypolicy_transience_of", args=[987654])).status_code == 404


def test_a_bad_window_is_named_and_the_default_window_shown(dave, history, settings):
    response = dave.get(transience_url() + "?days=abc")
    assert response.context["report"].days == settings.RETRYOPS_TRANSIENCE_WINDOW_DAYS
    assert ["days must be a whole number from 1 to 90, got 'abc'"] == [str(m) for m in get_messages(response.wsgi_request)]


def test_a_window_can_be_chosen(dave, history):
    Attempt.objects.filter(task=history["dead"]).update(started_at=history["dead"].created_at.replace(year=2020))
    assert rows_of(dave.get(transience_url() + "?days=30")) == [("later", SLOW, 1, 1, 0)]


def test_a_bad_window_in_the_task_lists_filter_lists_nothing_and_says_why(dave, history):
    response = dave.get(reverse("admin:scheduling_task_changelist") + f"?signature={SLOW}&failed_within_days=0")
    assert list(response.context["cl"].result_list) == []
    assert ["days must be a whole number from 1 to 90, got 0"] == [str(m) for m in get_messages(response.wsgi_request)]
    assert Task.objects.count() == 2


# "²" is a digit to str.isdigit() but not to int(): each place reading a number from the address says
# what was wrong, never a server error.
def test_a_window_of_a_digit_int_cannot_read_is_named(dave, history):
    response = dave.get(transience_url() + "?days=²")
    assert response.status_code == 200
    assert ["days must be a whole number from 1 to 90, got '²'"] == [str(m) for m in get_messages(response.wsgi_request)]


def test_a_policy_filter_of_a_digit_int_cannot_read_lists_nothing_and_says_why(dave, history):
    response = dave.get(reverse("admin:scheduling_task_changelist") + "?policy=²")
    assert list(response.context["cl"].result_list) == []
    assert ["policy must be a retry policy's id, got '²'"] == [str(m) for m in get_messages(response.wsgi_request)]


def test_a_policy_page_address_of_a_digit_int_cannot_read_is_no_policy(dave, history):
    response = dave.get(reverse("admin:scheduling_retrypolicy_change", args=["²"]))
    assert response.status_code == 302  # the admin's own "doesn't exist", back to the list
