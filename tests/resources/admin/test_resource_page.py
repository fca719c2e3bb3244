"""A resource's page in the console: its diagnosis explained, and its timeline newest first,
paginated, in a fixed number of queries however long it is."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from resources import services
from resources.choices import EventKind
from resources.models import ResourceEvent
from tests.resources.admin.conftest import change_url, failed


def fail(resource, error="TimeoutError: read timed out after 30s"):
    lease = services.claim_by_id(resource_id=resource.pk, holder="task 812")
    return services.release(resource=resource, lease_token=lease.lease_token, outcome="failure", error=error)


def add_events(resource, n):
    ResourceEvent.objects.bulk_create(
        ResourceEvent(resource=resource, kind=EventKind.CLAIMED, actor=f"task {i}") for i in range(n))


def shown(response) -> list[str]:
    return [f"{event.kind} by {event.actor}" for event in response.context["timeline"].object_list]


def test_the_timeline_shows_claims_failures_with_reasons_and_quarantines_newest_first(viewer, alice):
    fail(alice)
    services.quarantine(resource=alice, actor="olga", reason="reported as stolen")
    response = viewer.get(change_url(alice))
    assert shown(response) == ["quarantined by olga", "released_failure by ", "claimed by task 812"]
    page = response.content.decode()
    assert "TimeoutError: read timed out after 30s" in page and "reported as stolen" in page


def test_the_timeline_is_paginated_and_a_page_is_asked_for_by_number(viewer, alice):
    add_events(alice, 60)
    first, second = viewer.get(change_url(alice)), viewer.get(change_url(alice), {"timeline": 2})
    assert shown(first)[0] == "claimed by task 59" and len(shown(first)) == 50
    assert shown(second) == [f"claimed by task {i}" for i in range(9, -1, -1)]
    assert "Timeline: 60 events, newest first" in first.content.decode()


def test_a_page_number_past_the_end_shows_the_last_page(viewer, alice):
    add_events(alice, 60)
    assert shown(viewer.get(change_url(alice), {"timeline": 99}))[-1] == "claimed by task 0"


def test_the_page_costs_the_same_queries_with_5_and_with_500_events(viewer, alice):
    add_events(alice, 5)
    with CaptureQueriesContext(connection) as few:
        viewer.get(change_url(alice))
    add_events(alice, 495)
    with CaptureQueriesContext(connection) as many:
        response = viewer.get(change_url(alice), {"timeline": 3})
    assert len(shown(response)) == 50
    assert len(many.captured_queries) == len(few.captured_queries)


def test_a_reset_shows_in_the_timeline_and_erases_nothing(viewer, alice):
    fail(alice)
    services.reset(resource=alice, actor="olga", reason="upstream fixed")
    response = viewer.get(change_url(alice))
    assert shown(response) == ["reset by olga", "released_failure by ", "claimed by task 812"]
    page = response.content.decode()
    assert "upstream fixed" in page and "TimeoutError: read timed out after 30s" in page
    assert response.context["original"].failure_count == 1


def test_the_page_explains_the_diagnosis_and_states_the_rule_in_one_sentence(viewer, pool, settings):
    settings.RETRYOPS_DIAGNOSIS_MIN_RESOURCES = 3
    alice = failed(pool, "alice@x", "ConnectionError: upstream 10.0.0.7 down")
    failed(pool, "bob@x", "ConnectionError: upstream 10.0.0.8 down")
    failed(pool, "carol@x", "ConnectionError: upstream 10.0.0.9 down")
    page = viewer.get(change_url(alice)).content.decode()
    assert ">Environment</span>" in page
    assert "3 resources of its pool failed last with “ConnectionError: upstream <n>.<n> down”" in page.replace(
        "&lt;", "<").replace("&gt;", ">")
    assert "Environment when the signature of a resource&#x27;s latest failure was also the latest failure of at " \
           "least 3 resources" in page


def test_a_healthy_resource_is_said_not_to_be_failing(viewer, alice):
    assert "Not failing" in viewer.get(change_url(alice)).content.decode()


def test_the_signature_is_shown_read_only(viewer, pool):
    alice = failed(pool, "alice@x", "TimeoutError: read timed out after 30s")
    page = viewer.get(change_url(alice)).content.decode()
    assert "TimeoutError: read timed out after &lt;n&gt;s" in page and 'name="last_failure_signature"' not in page
