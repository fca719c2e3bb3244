"""The console's resource list: each resource's statistics and diagnosis, its filters, search and
sorts, in a fixed number of queries whatever the page's size, without counting a big table."""

from datetime import timedelta

import pytest
from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from resources import admin_changelist
from resources.models import Resource
from tests.factories import ResourceFactory, ResourcePoolFactory
from tests.resources.admin.conftest import failed


def keys(response) -> list[str]:
    return [resource.key for resource in response.context["cl"].result_list]


def many(pool, n, start=0):
    """`n` resources of `pool` in all the shapes the list renders: healthy, failing alone, failing
    together with others (an outage), quarantined."""
    now = timezone.now()
    rows = []
    for i in range(start, start + n):
        shape = i % 4
        rows.append(Resource(
            pool=pool, key=f"r{i}@x", state=("available", "failed", "failed", "quarantined")[shape],
            failure_count=shape * 2, consecutive_failures=shape, success_count=5 - shape,
            last_failure_reason=("", "AccountLocked: locked", f"TimeoutError: timed out after {i}s", "Banned")[shape],
            last_failure_category=("", "retryable", "retryable", "non_retryable")[shape],
            last_failure_at=None if shape == 0 else now - timedelta(seconds=i),
            last_success_at=now - timedelta(minutes=1),
            quarantine_reason="Banned" if shape == 3 else "", quarantined_at=now if shape == 3 else None,
        ))
    Resource.objects.bulk_create(rows)


@pytest.fixture
def big_pages(monkeypatch):
    """The whole list on one page, so the page's size is the list's."""
    monkeypatch.setattr(admin.site._registry[Resource], "list_per_page", 1000)


def test_a_row_shows_the_resources_statistics(viewer, list_url, pool):
    failed(pool, "alice@x", "TimeoutError: read timed out after 30s " + "x" * 100, in_a_row=2, success_count=7)
    page = viewer.get(list_url).content.decode()
    assert "alice@x" in page and ">Failed</span>" in page
    assert 'title="TimeoutError: read timed out after 30s xxxx' in page  # the full reason on hover
    assert ">TimeoutError: read timed out after 30s " + "x" * 20 + "…</span>" in page  # cut to 60 characters
    assert '<td class="field-failures">2</td>' in page and '<td class="field-successes">7</td>' in page
    assert '<td class="field-in_a_row">2</td>' in page and '<td class="field-category">Retryable</td>' in page


def test_a_row_shows_its_diagnosis(viewer, list_url, pool):
    for key in ("alice@x", "bob@x", "carol@x", "dave@x", "erin@x"):
        failed(pool, key, "ConnectionError: upstream down")
    page = viewer.get(list_url).content.decode()
    assert page.count(">Environment</span>") == 5


def test_the_list_with_its_diagnoses_costs_the_same_queries_at_10_and_at_1000_rows(viewer, list_url, pool,
                                                                                    big_pages):
    other = ResourcePoolFactory(name="numbers")
    many(pool, 5)
    many(other, 5, start=5)
    with CaptureQueriesContext(connection) as ten:
        response = viewer.get(list_url)
    assert len(response.context["cl"].result_list) == 10
    many(pool, 495, start=10)
    many(other, 495, start=505)
    with CaptureQueriesContext(connection) as thousand:
        response = viewer.get(list_url)
    assert len(response.context["cl"].result_list) == 1000
    assert response.content.decode().count('class="field-diagnosis_badge"><span') == 750  # the failing ones
    assert len(thousand.captured_queries) == len(ten.captured_queries)


def test_the_unfiltered_list_of_a_big_table_estimates_its_count_instead_of_counting(viewer, list_url, pool,
                                                                                     monkeypatch):
    many(pool, 30)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Resource._meta.db_table}")
    monkeypatch.setattr(admin_changelist, "ESTIMATE_ABOVE", 20)
    with CaptureQueriesContext(connection) as queries:
        page = viewer.get(list_url).content.decode()
    assert not [q for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]
    assert "about 30" in page


def test_a_filtered_list_is_counted_exactly(viewer, list_url, pool, monkeypatch):
    many(pool, 30)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Resource._meta.db_table}")
    monkeypatch.setattr(admin_changelist, "ESTIMATE_ABOVE", 20)
    response = viewer.get(list_url, {"state__exact": "quarantined"})
    assert response.context["cl"].result_count == 7 and not response.context["cl"].paginator.estimated


def test_a_small_table_is_counted_exactly(viewer, list_url, pool):
    many(pool, 30)
    response = viewer.get(list_url)
    assert response.context["cl"].result_count == 30 and not response.context["cl"].paginator.estimated


# filters


def test_filtering_by_diagnosis_lists_only_resources_so_diagnosed(viewer, list_url, pool):
    for key in ("a@x", "b@x", "c@x", "d@x", "e@x"):
        failed(pool, key, "ConnectionError: upstream down")
    failed(pool, "lonely@x", "AccountLocked: locked")
    ResourceFactory(pool=pool, key="fine@x")
    assert sorted(keys(viewer.get(list_url, {"diagnosis": "environment"}))) == ["a@x", "b@x", "c@x", "d@x", "e@x"]
    assert keys(viewer.get(list_url, {"diagnosis": "unclear"})) == ["lonely@x"]


def test_an_unknown_diagnosis_in_the_address_is_an_incorrect_lookup_not_a_crash(rf, pool):
    diagnosis = admin_changelist.DiagnosisFilter(rf.get("/"), {"diagnosis": ["weather"]}, Resource,
                                                 admin.site._registry[Resource])
    with pytest.raises(IncorrectLookupParameters):
        diagnosis.queryset(rf.get("/"), Resource.objects.all())


@pytest.mark.parametrize("within, expected", [("hour", ["now@x"]), ("day", ["now@x", "morning@x"])])
def test_filtering_by_failures_in_the_last_hour_or_day(viewer, list_url, pool, within, expected):
    now = timezone.now()
    failed(pool, "now@x", at=now - timedelta(minutes=5))
    failed(pool, "morning@x", at=now - timedelta(hours=5))
    failed(pool, "last-week@x", at=now - timedelta(days=6))
    assert keys(viewer.get(list_url, {"failed_within": within})) == expected


# search and sorts


def test_searching_finds_resources_by_a_part_of_their_last_failure_reason(viewer, list_url, pool):
    failed(pool, "alice@x", "AccountLocked: account locked after 3 tries")
    failed(pool, "bob@x", "TimeoutError: read timed out")
    assert keys(viewer.get(list_url, {"q": "LOCKED after"})) == ["alice@x"]


def column(response, name: str) -> int:
    """The `o` index of a list column, as the admin numbers them (the checkbox column first)."""
    return list(response.context["cl"].list_display).index(name)


def test_the_list_shows_the_latest_failures_first_and_never_failed_resources_last(viewer, list_url, pool):
    now = timezone.now()
    ResourceFactory(pool=pool, key="never@x")
    failed(pool, "old@x", at=now - timedelta(days=2))
    failed(pool, "new@x", at=now)
    assert keys(viewer.get(list_url)) == ["new@x", "old@x", "never@x"]


def test_sorting_by_last_failure_oldest_first_puts_never_failed_resources_first(viewer, list_url, pool):
    now = timezone.now()
    failed(pool, "new@x", at=now)
    ResourceFactory(pool=pool, key="never@x")
    failed(pool, "old@x", at=now - timedelta(days=2))
    by = column(viewer.get(list_url), "failed_at")
    assert keys(viewer.get(list_url, {"o": str(by)})) == ["never@x", "old@x", "new@x"]


def test_sorting_by_failure_count(viewer, list_url, pool):
    failed(pool, "twice@x", in_a_row=2)
    failed(pool, "often@x", in_a_row=9)
    failed(pool, "once@x", in_a_row=1)
    by = column(viewer.get(list_url), "failures")
    assert keys(viewer.get(list_url, {"o": f"-{by}"})) == ["often@x", "twice@x", "once@x"]


def offered(response) -> set[str]:
    form = response.context["action_form"]
    return set(dict(form.fields["action"].choices)) if form else set()


def test_an_operator_is_offered_the_bulk_actions(operator, list_url, pool):
    ResourceFactory(pool=pool)
    assert {"reset_selected", "quarantine_selected", "unquarantine_selected"} <= offered(operator.get(list_url))
