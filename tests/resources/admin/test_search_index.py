"""The resource list's search reads trigram indexes, not every row (resources 0004_search_trigram)."""

import pytest
from django.contrib.admin.sites import site
from django.db import connection
from django.test import RequestFactory

from resources.models import Resource


def plan_of_search(words: str) -> str:
    request = RequestFactory().get("/", {"q": words})
    queryset, _ = site._registry[Resource].get_search_results(request, Resource.objects.all(), words)
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        # A test's small table is cheapest to read whole or along another index: forbid both to see
        # whether the planner can answer the search from an index at all.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.django_db
def test_searching_resources_by_key_or_reason_reads_their_trigram_indexes():
    plan = plan_of_search("locked")

    assert "resource_key_trgm_idx" in plan
    assert "resource_reason_trgm_idx" in plan
