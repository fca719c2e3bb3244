"""A replay that dies counts in task_retry_dlq_total (its task.dead event) but not in
task_retry_escalated_total: it makes no new dead letter (follow_replays reopens the old one, which
was escalated once). So deaths and escalations are not comparable, and Prometheus'
RetryOpsWorkOrderCreationFailed reads the app's own rule (retryops_alert_firing) instead of
comparing them, which paged for work orders that were never missing."""

import pytest

from compensation.jobs import dead_letters_job
from compensation.models import DeadLetter
from compensation.services.replay import replay_dead_letter
from scheduling import services as scheduling
from tests.scheduling.helpers import work
from tests.telemetry.metrics_helpers import scrape, value

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_dead_replay_is_a_death_but_not_a_second_escalation(redis_conn, alice, instant_policy):
    task = scheduling.start_task(flow="demo", pool_name=alice.pool, resource=alice, created_by="shop",
                                 payload={"script": ["TimeoutError: upstream slow"]}, policy="instant")
    work()
    dead_letters_job()
    before = scrape()
    replay_dead_letter(dead_letter=DeadLetter.objects.get(task=task), actor="ops:carol")
    work()  # the replay dies: its dead letter opens again, back on a work order
    dead_letters_job()
    after = scrape()

    dlq = value(after, "task_retry_dlq_total") - value(before, "task_retry_dlq_total")
    escalated = value(after, "task_retry_escalated_total") - value(before, "task_retry_escalated_total")
    assert (dlq, escalated) == (1, 0)


def test_the_prometheus_work_order_rule_reads_the_apps_alert_not_the_counters():
    from pathlib import Path

    import yaml

    rules = yaml.safe_load((Path(__file__).parents[2] / "deploy/prometheus/alerts.yml").read_text())
    [rule] = [rule for group in rules["groups"] for rule in group["rules"]
              if rule.get("alert") == "RetryOpsWorkOrderCreationFailed"]
    assert 'retryops_alert_firing{alert="work_order_creation_failed"}' in rule["expr"]
    assert "task_retry_dlq_total" not in rule["expr"]
