"""No label of /metrics carries a resource key, a task id or an error's text: label sets stay
bounded by flows, pools, categories and states."""

import re

import pytest

from scheduling import services
from telemetry.metrics.rollup import roll_up_metrics
from tests.factories import ResourceFactory
from tests.scheduling.helpers import work
from tests.telemetry.metrics_helpers import scrape

pytestmark = pytest.mark.django_db(transaction=True)

LABELS = {"flow", "pool", "category", "state", "outcome", "clock", "channel", "le", "percentile", "queue", "scheduler", "alert"}


def test_labels_name_flows_pools_and_states_never_keys_tasks_or_errors(redis_conn, pool, instant_policy):
    ResourceFactory(pool=pool, key="zed-7781@example.com")
    task = services.start_task(flow="demo", pool_name=pool, created_by="test", policy="instant",
                               payload={"script": ["TimeoutError: upstream quirk 9931 slow", "ok"]})
    work()
    roll_up_metrics()  # the gauges it counts, with their labels
    scraped = scrape()
    names = {name for name, _labels in scraped}
    assert "task_retry_success_total" in names and "retryops_resources" in names  # the scrape has the rows
    values = {v for _name, labels in scraped for _label, v in labels}
    assert set().union(*({label for label, _v in labels} for _name, labels in scraped)) <= LABELS
    for forbidden in ("zed-7781", "9931", "quirk", "upstream"):
        assert not any(forbidden in v for v in values), forbidden
    assert str(task.pk) not in values
    assert not any(re.fullmatch(r"\d+", v) for v in values)  # no id of any kind
