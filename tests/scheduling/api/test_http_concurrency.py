"""20 external systems retry the same failed resource at once, through real HTTP (gunicorn on
loopback): exactly one starts a task; the others are told why not."""

from collections import Counter

import httpx
import pytest

from scheduling.models import Task
from tests.http_server import gunicorn
from tests.resources.api.test_http_concurrency import all_at_once
from tests.scheduling.api.test_retry import fail_on

RETRIERS = 20


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_retries_of_one_failed_resource_start_exactly_one_task(operator_key, alice,
                                                                                 default_policy, redis_conn):
    first = fail_on(alice)
    headers = {"Authorization": f"Bearer {operator_key}"}
    with gunicorn() as base:
        responses = all_at_once(RETRIERS, lambda n: httpx.post(
            f"{base}/api/resources/{alice.pk}/retry", json={}, headers=headers, timeout=60))
    assert Counter(r.status_code for r in responses) == {201: 1, 409: RETRIERS - 1}
    [started] = [r.json() for r in responses if r.status_code == 201]
    assert set(Task.objects.values_list("pk", flat=True)) == {first.pk, started["id"]}
    refusals = [r.json()["error"] for r in responses if r.status_code == 409]
    assert {error["code"] for error in refusals} == {"task_live"}
    assert {error["details"]["task_id"] for error in refusals} == {started["id"]}
