"""Failed-first batch ticks: which failed resources a tick reclaims before fresh ones."""

from datetime import timedelta

import pytest
from django.utils import timezone

from resources.models import Resource
from scheduling import services
from scheduling.models import BatchConfig
from tests.factories import ResourceFactory

pytestmark = pytest.mark.django_db(transaction=True)


def failed(pool, key, reason, category="retryable", ago=timedelta(minutes=5), state="failed"):
    resource = ResourceFactory(pool=pool, key=key, failure_count=1, consecutive_failures=1)
    Resource.objects.filter(pk=resource.pk).update(
        state=state, last_failure_reason=reason, last_failure_category=category,
        last_failure_at=timezone.now() - ago,
        quarantine_reason=reason if state == "quarantined" else "",
        quarantined_at=timezone.now() if state == "quarantined" else None,
    )
    return resource


@pytest.fixture
def batch(pool, instant_policy):
    return BatchConfig.objects.create(name="signups", pool=pool, flow="demo", policy=instant_policy,
                                      tasks_per_tick=2, retry_failed_first=True, recent_window_seconds=3600)


def picked(tasks):
    return [t.resource.key for t in tasks]


def test_failed_first_reclaims_recent_retryable_failures_before_fresh_resources(redis_conn, pool, batch):
    ResourceFactory(pool=pool, key="fresh")
    failed(pool, "older", "TimeoutError: slow", ago=timedelta(minutes=30))
    failed(pool, "newer", "TimeoutError: slow", ago=timedelta(minutes=1))
    assert picked(services.run_batch(config=batch)) == ["newer", "older"]


def test_failed_first_skips_old_and_non_retryable_failures_and_quarantine(redis_conn, pool, batch):
    failed(pool, "stale", "TimeoutError", ago=timedelta(hours=5))
    failed(pool, "permanent", "banned", category="non_retryable")
    failed(pool, "quarantined", "banned", category="non_retryable", state="quarantined")
    ResourceFactory(pool=pool, key="fresh")
    assert picked(services.run_batch(config=batch)) == ["fresh"]


def test_failed_first_honours_the_configs_patterns(redis_conn, pool, batch):
    batch.retryable_error_patterns = ["timeout"]
    batch.save()
    failed(pool, "network", "TimeoutError: read timeout")
    failed(pool, "captcha", "captcha required")
    ResourceFactory(pool=pool, key="fresh")
    assert picked(services.run_batch(config=batch)) == ["network", "fresh"]


def test_without_failed_first_only_fresh_resources_are_taken(redis_conn, pool, batch):
    batch.retry_failed_first = False
    batch.save()
    failed(pool, "newer", "TimeoutError: slow")
    ResourceFactory(pool=pool, key="fresh")
    assert picked(services.run_batch(config=batch)) == ["fresh"]


def test_a_tick_stops_when_the_pool_is_empty(redis_conn, pool, batch):
    ResourceFactory(pool=pool, key="only")
    assert picked(services.run_batch(config=batch)) == ["only"]


def test_a_resource_held_by_a_batch_task_is_not_picked_twice(redis_conn, pool, batch):
    failed(pool, "newer", "TimeoutError: slow")
    ResourceFactory(pool=pool, key="fresh")
    first = services.run_batch(config=batch)
    assert picked(first) == ["newer", "fresh"]
    assert services.run_batch(config=batch) == []
