"""The compensation jobs: the periodic ones as the ops process calls them, and the bulk replay on a burst worker."""

from datetime import timedelta

import django_rq
import pytest
from django.utils import timezone

from audit.models import AuditEntry
from compensation.choices import BulkReplayState, DeadLetterState
from compensation.jobs import dead_letters_job, dlq_cleanup_job, escalate_job
from compensation.models import BulkReplay, DeadLetter
from compensation.services.bulk_replay import start_bulk_replay
from compensation.services.dead_letters import collect_dead_letters, discard_dead_letter, resolve_dead_letter
from compensation.services.cleanup import RETENTION_DAYS
from compensation.work_orders.models import WorkOrder
from tests.compensation.conftest import dead_tasks
from tests.scheduling.helpers import CountingWorker

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_periodic_job_collects_a_death_whose_process_crashed_before_the_dead_letter(redis_conn, pool,
                                                                                         instant_policy):
    # Written without the worker, as when the process died right after the dying transaction committed.
    [task] = dead_tasks(pool=pool, policy=instant_policy)
    dead_letters_job()
    letter = DeadLetter.objects.get(task=task)
    assert (letter.state, letter.work_order.dead_letter_count) == (DeadLetterState.OPEN, 1)


def test_a_bulk_replay_runs_in_slices_until_it_is_finished(redis_conn, pool, instant_policy, monkeypatch):
    from compensation.services import bulk_replay

    monkeypatch.setattr(bulk_replay, "SLICE_SECONDS", 0.05)  # several slices, each enqueuing the next
    dead_tasks(pool=pool, policy=instant_policy, n=6)
    collect_dead_letters()
    bulk = start_bulk_replay(filter={"flow": "demo"}, actor="ops:carol", rate=40, any_resource=True)
    worker = django_rq.get_worker("default", worker_class=CountingWorker)
    worker.work(burst=True)
    done = BulkReplay.objects.get(pk=bulk.pk)
    assert (done.state, done.done) == (BulkReplayState.FINISHED, 6)
    assert worker.deliveries > 2


def test_the_periodic_cleanup_purges_settled_dead_letters_past_retention(db, pool, instant_policy):
    dead_tasks(pool=pool, policy=instant_policy, n=3)
    letters = collect_dead_letters()
    discard_dead_letter(dead_letter=letters[0], actor="ops:carol")
    resolve_dead_letter(dead_letter=letters[1], actor="ops:carol")
    DeadLetter.objects.update(died_at=timezone.now() - timedelta(days=31))
    assert dlq_cleanup_job() == {"purged": 2}
    assert list(DeadLetter.objects.values_list("state", flat=True)) == [DeadLetterState.OPEN]
    assert AuditEntry.objects.filter(action="dead_letter.cleanup", channel="system").exists()


def test_the_escalate_job_marks_breaches_as_the_system(redis_conn, pool, instant_policy, settings):
    dead_tasks(pool=pool, policy=instant_policy)
    collect_dead_letters()
    WorkOrder.objects.update(first_dead_at=timezone.now() - timedelta(hours=1))
    escalate_job()
    order = WorkOrder.objects.get()
    assert order.acknowledge_breached_at is not None
    entry = AuditEntry.objects.get(action="work_order.sla_breach", after__sla="acknowledge")
    assert (entry.actor, entry.channel) == ("escalate", "system")


def test_the_dead_letter_consumer_and_the_retention_clean_up_run_with_the_dlq_inspector_off(
        redis_conn, pool, instant_policy, settings):
    """The flag hides the inspector; it must not lose dead letters nor let them pile up."""
    settings.RETRYOPS_FLAGS_OFF = frozenset({"dlq-inspector"})
    [task] = dead_tasks(pool=pool, policy=instant_policy)
    assert dead_letters_job()["dead_letters"] == 1
    letter = DeadLetter.objects.get(task=task)
    discard_dead_letter(dead_letter=letter, actor="ops:carol")
    DeadLetter.objects.update(died_at=timezone.now() - timedelta(days=RETENTION_DAYS + 1))
    assert dlq_cleanup_job() == {"purged": 1}
