"""The console's diagnosis of a failing resource: its environment, itself, or unclear
(resources.selectors.annotate_diagnosis and friends), and the signature it groups failures by."""

from datetime import timedelta

import pytest
from django.utils import timezone

from resources import selectors, services
from resources.choices import Diagnosis
from retryops.errors import BadInput
from resources.models import Resource
from resources.signatures import error_signature, text_signature
from tests.factories import ResourceFactory, ResourcePoolFactory

WINDOW = timedelta(minutes=15)
RULE = selectors.DiagnosisRule(window=WINDOW, min_resources=3, min_failures=3)


def failing(pool, reason="TimeoutError: read timed out after 30s", *, at=None, in_a_row=1, key=None, succeeded=None):
    """A resource of `pool` whose latest failure was `reason` at `at`, after `in_a_row` failures in a row."""
    extra = {"key": key} if key else {}
    return ResourceFactory(pool=pool, state="failed", failure_count=in_a_row, consecutive_failures=in_a_row,
                           last_failure_reason=reason, last_failure_category="retryable",
                           last_failure_at=at or timezone.now(), last_success_at=succeeded, **extra)


def succeeding(pool, *, at=None):
    return ResourceFactory(pool=pool, success_count=1, last_success_at=at or timezone.now())


def diagnose(resources, rule=None) -> dict[int, str]:
    """{resource id: diagnosis} of a page of resources, as the console's list reads it."""
    rows = Resource.objects.filter(pk__in=[r.pk for r in resources])
    return dict(selectors.annotate_diagnosis(rows, rule).values_list("pk", "diagnosis"))


def diagnosis_of(resource, rule=RULE):
    return diagnose([resource], rule)[resource.pk]


# environment


def test_a_failure_that_hit_enough_resources_of_the_pool_in_the_window_is_the_environment(pool):
    now = timezone.now()
    alice = failing(pool, at=now)
    failing(pool, at=now - timedelta(minutes=10))
    failing(pool, at=now + timedelta(minutes=10))
    assert diagnosis_of(alice) == Diagnosis.ENVIRONMENT


def test_failures_that_differ_only_in_numbers_and_quoted_values_count_together(pool):
    alice = failing(pool, "TimeoutError: read timed out after 30s for 'alice@x'")
    failing(pool, "TimeoutError: read timed out after 31s for 'bob@x'")
    failing(pool, "TimeoutError: read timed out after 9s for 'carol@x'")
    assert diagnosis_of(alice) == Diagnosis.ENVIRONMENT


def test_too_few_resources_with_the_same_failure_are_not_the_environment(pool):
    alice = failing(pool)
    failing(pool)
    assert diagnosis_of(alice) == Diagnosis.UNCLEAR


def test_the_same_failure_outside_the_window_does_not_count(pool):
    now = timezone.now()
    alice = failing(pool, at=now)
    failing(pool, at=now - WINDOW - timedelta(seconds=1))
    failing(pool, at=now + WINDOW + timedelta(seconds=1))
    assert diagnosis_of(alice) == Diagnosis.UNCLEAR


def test_the_same_failure_in_another_pool_does_not_count(pool):
    other = ResourcePoolFactory(name="numbers")
    alice = failing(pool)
    failing(other)
    failing(other)
    assert diagnosis_of(alice) == Diagnosis.UNCLEAR


def test_another_failure_in_the_window_does_not_count(pool):
    alice = failing(pool, "TimeoutError: read timed out after 30s")
    failing(pool, "AccountBanned: account banned")
    failing(pool, "AccountBanned: account banned")
    assert diagnosis_of(alice) == Diagnosis.UNCLEAR


def test_resources_that_recovered_since_the_shared_failure_still_count(pool):
    now = timezone.now()
    alice = failing(pool, at=now)
    for _ in range(2):
        bob = failing(pool, at=now)
        Resource.objects.filter(pk=bob.pk).update(consecutive_failures=0, last_success_at=now + timedelta(minutes=1))
    assert diagnosis_of(alice) == Diagnosis.ENVIRONMENT


# resource


def test_a_resource_failing_again_and_again_while_its_pool_succeeds_is_the_resource(pool):
    now = timezone.now()
    alice = failing(pool, at=now, in_a_row=3)
    succeeding(pool, at=now - timedelta(minutes=5))
    assert diagnosis_of(alice) == Diagnosis.RESOURCE


def test_a_success_in_the_pool_after_the_failure_counts_too(pool):
    now = timezone.now()
    alice = failing(pool, at=now - timedelta(hours=2), in_a_row=3)
    succeeding(pool, at=now)
    assert diagnosis_of(alice) == Diagnosis.RESOURCE


def test_fewer_failures_in_a_row_than_the_threshold_are_unclear(pool):
    alice = failing(pool, in_a_row=2)
    succeeding(pool)
    assert diagnosis_of(alice) == Diagnosis.UNCLEAR


def test_a_pool_that_last_succeeded_before_the_window_is_not_succeeding(pool):
    now = timezone.now()
    alice = failing(pool, at=now, in_a_row=3)
    succeeding(pool, at=now - WINDOW - timedelta(seconds=1))
    assert diagnosis_of(alice) == Diagnosis.UNCLEAR


def test_its_own_success_is_not_the_pool_succeeding(pool):
    now = timezone.now()
    alice = failing(pool, at=now, in_a_row=3, succeeded=now - timedelta(minutes=1))
    assert diagnosis_of(alice) == Diagnosis.UNCLEAR


def test_a_failure_shared_widely_is_the_environment_even_while_the_pool_succeeds(pool):
    alice = failing(pool, in_a_row=3)
    failing(pool)
    failing(pool)
    succeeding(pool)
    assert diagnosis_of(alice) == Diagnosis.ENVIRONMENT


# not failing, thresholds, filters


def test_a_resource_whose_last_use_succeeded_has_no_diagnosis(pool):
    alice = failing(pool)
    failing(pool)
    failing(pool)
    Resource.objects.filter(pk=alice.pk).update(consecutive_failures=0, last_success_at=timezone.now())
    assert diagnosis_of(alice) == ""


def test_the_thresholds_are_settings(pool, settings):
    settings.RETRYOPS_DIAGNOSIS_MIN_RESOURCES = 2
    alice = failing(pool)
    failing(pool)
    assert diagnose([alice])[alice.pk] == Diagnosis.ENVIRONMENT


@pytest.mark.parametrize("diagnosis", Diagnosis.values)
def test_filtering_by_a_diagnosis_finds_exactly_the_resources_diagnosed_so(pool, diagnosis):
    now = timezone.now()
    for _ in range(3):
        failing(pool, "TimeoutError: upstream down", at=now)
    failing(pool, "AccountBanned: banned", in_a_row=4)
    failing(pool, "AccountBanned: banned", in_a_row=1)
    succeeding(pool)
    annotated = selectors.annotate_diagnosis(Resource.objects.all(), RULE)
    expected = {r.pk for r in annotated if r.diagnosis == diagnosis}
    assert expected
    assert set(selectors.filter_diagnosis(Resource.objects.all(), diagnosis, RULE).values_list("pk", flat=True)) == \
        expected


def test_filtering_by_an_unknown_diagnosis_names_the_field(db):
    with pytest.raises(BadInput) as caught:
        selectors.filter_diagnosis(Resource.objects.all(), "weather", RULE)
    assert caught.value.details["field"] == "diagnosis"


def test_a_page_is_diagnosed_in_one_query(pool, django_assert_num_queries):
    page = [failing(pool, in_a_row=n % 4 + 1) for n in range(20)]
    with django_assert_num_queries(1):
        diagnose(page, RULE)


# the resource page's explanation


def test_the_report_counts_the_resources_that_share_the_failure(pool):
    alice = failing(pool, "TimeoutError: read timed out after 30s")
    failing(pool, "TimeoutError: read timed out after 7s")
    failing(pool, "TimeoutError: read timed out after 8s")
    report = selectors.diagnosis_report(alice, RULE)
    assert (report.diagnosis, report.same_failure_resources, report.signature) == (
        Diagnosis.ENVIRONMENT, 3, "TimeoutError: read timed out after <n>s")
    assert "3 resources of its pool failed last with" in report.explanation()


def test_the_report_names_when_another_resource_of_the_pool_last_succeeded(pool):
    alice = failing(pool, in_a_row=3)
    bob = succeeding(pool)
    report = selectors.diagnosis_report(alice, RULE)
    assert (report.diagnosis, report.pool_succeeded_at) == (Diagnosis.RESOURCE, bob.last_success_at)


def test_the_rule_reads_as_one_sentence_with_its_thresholds():
    assert selectors.DiagnosisRule(window=timedelta(minutes=15), min_resources=5, min_failures=3).sentence() == (
        "Environment when the signature of a resource's latest failure was also the latest failure of at least 5 "
        "resources of its pool (itself included) within 15 minutes of it; resource when it failed 3 or more times "
        "in a row while another resource of its pool succeeded within 15 minutes before its latest failure, or "
        "since; unclear otherwise.")


# the signature PostgreSQL computes is the one scheduling computes


@pytest.mark.parametrize("error_class, message", [
    ("TimeoutError", "read timed out after 30s"),
    ("LookupError", "user 'alice@x' not found (id 812)"),
    ("PermissionError", 'key "k-1" revoked at 10:42:07.5'),
    ("ValueError", "token 3f2a9c1e-5b7d-4e8f-9a0b-1c2d3e4f5a6b revoked"),
    ("SMTPError", "mail bob.smith+tag@mail.example.com bounced"),
    ("HTTPError", "HTTP 503 from upstream 0x7f3a, request deadbeef42 failed"),
    ("ConnectionError", "connection reset\n\tby   peer 10.0.0.12:5432"),
    ("KeyError", "  spaces around  "),
    ("RuntimeError", "账户 alice@例子.com 已封禁 (代码 42)"),
])
def test_the_stored_signature_of_a_failure_is_the_one_its_attempt_gets(pool, error_class, message):
    alice = ResourceFactory(pool=pool)
    lease = services.claim_by_id(resource_id=alice.pk, holder="task 1")
    services.release(resource=alice, lease_token=lease.lease_token, outcome="failure",
                     error=f"{error_class}: {message}")
    stored = Resource.objects.values_list("last_failure_signature", flat=True).get(pk=alice.pk)
    assert stored == text_signature(f"{error_class}: {message}") == error_signature(error_class, message)


def test_a_long_signature_is_cut_where_scheduling_cuts_it(pool):
    message = "x" * 3000
    alice = failing(pool, f"E: {message}")
    stored = Resource.objects.values_list("last_failure_signature", flat=True).get(pk=alice.pk)
    assert stored == error_signature("E", message)[:500] and len(stored) == 500


def test_a_resource_failing_again_and_again_in_a_pool_where_nothing_succeeded_is_found_as_unclear(pool):
    alice = failing(pool, in_a_row=3)
    assert list(selectors.filter_diagnosis(Resource.objects.all(), Diagnosis.UNCLEAR, RULE)) == [alice]
