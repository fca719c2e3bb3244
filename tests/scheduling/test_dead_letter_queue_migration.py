"""scheduling 0015: the dead tasks the old outbox consumer had processed are collected; those whose
task.dead event it had not processed yet stay the queue, for the dead-letter step to take."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

# Not in a transaction: the migration builds its index concurrently.
pytestmark = pytest.mark.django_db(transaction=True)

BEFORE, AFTER = ("scheduling", "0014_task_new_instance_of"), ("scheduling", "0015_dead_letter_queue")


@pytest.fixture(autouse=True)
def back_to_the_latest_migrations():
    """The test leaves the schema at 0015, outside any transaction: the tests after it need the latest."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    return executor.loader.project_state([target]).apps


def test_only_the_deaths_the_old_consumer_had_not_processed_stay_uncollected():
    old = migrate(BEFORE)
    pool = old.get_model("resources", "ResourcePool").objects.create(name="accounts", lease_seconds=60)
    policy = old.get_model("scheduling", "RetryPolicy").objects.create(name="once", max_attempts=1)
    tasks, events = old.get_model("scheduling", "Task").objects, old.get_model("scheduling", "TaskEvent").objects
    deliveries = old.get_model("scheduling", "TaskEventDelivery").objects

    def task(key, state="dead", delivered_to=None):
        made = tasks.create(flow="demo", pool=pool, policy=policy, state=state, strict=False, idempotency_key=key,
                            created_by="test", finished_at=timezone.now())
        if delivered_to is not None:
            event = events.create(task=made, kind="task.dead", details={})
            if delivered_to:
                deliveries.create(consumer=delivered_to, event=event)
        return made.pk

    collected = task("collected", delivered_to="dead_letters")
    waiting = task("waiting", delivered_to="")
    seen_by_another = task("seen by another consumer only", delivered_to="alerts")
    without_event = task("no event left")
    succeeded = task("succeeded", state="succeeded")

    new = migrate(AFTER).get_model("scheduling", "Task").objects
    assert set(new.filter(collected_at__isnull=True).values_list("pk", flat=True)) == {
        waiting, seen_by_another, succeeded}
    assert new.filter(pk__in=[collected, without_event], collected_at__isnull=False).count() == 2
