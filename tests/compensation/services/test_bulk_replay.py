"""Bulk replay: a dry-run count, one running request per filter, the velocity limit, resumable."""

import math
import time
from datetime import timedelta

import pytest
from django.db import IntegrityError
from django.utils import timezone

from audit.models import AuditEntry
from compensation.choices import BulkReplayState, DeadLetterState
from compensation.errors import BulkReplayRunning
from compensation.models import BulkReplay, DeadLetter
from compensation.services.bulk_replay import (
    bulk_replay_preview,
    cancel_bulk_replay,
    restart_stalled_bulk_replays,
    run_bulk_replay,
    start_bulk_replay,
)
from compensation.services.dead_letters import collect_dead_letters
from retryops.errors import BadInput
from tests.compensation.conftest import dead_tasks, work_default

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUTS = {"flow": "demo", "error_signature": "TimeoutError: slow"}


@pytest.fixture
def letters(redis_conn, pool, bob, instant_policy):
    dead_tasks(pool=pool, policy=instant_policy, n=10, signature="TimeoutError: slow")
    dead_tasks(pool=pool, policy=instant_policy, n=2, signature="PermissionError: HTTP 403")
    return collect_dead_letters()


def test_the_preview_counts_the_open_dead_letters_the_filter_selects(letters):
    assert bulk_replay_preview(filter=TIMEOUTS) == 10
    assert bulk_replay_preview(filter={"pool": "accounts"}) == 12
    assert bulk_replay_preview(filter={"died_before": timezone.now() - timedelta(hours=1)}) == 0


def test_a_filter_with_an_unknown_field_is_refused_by_name(letters):
    with pytest.raises(BadInput, match="unknown filter field colour") as refused:
        bulk_replay_preview(filter={"colour": "red"})
    assert refused.value.details["field"] == "filter.colour"


@pytest.mark.parametrize("when", ["2024-02-30T00:00:00+00:00", "2024-01-01T00:00:00+99:00"])
def test_a_filter_time_that_is_no_date_is_refused_by_name(letters, when):
    with pytest.raises(BadInput, match="must be a date and time") as refused:
        bulk_replay_preview(filter={"died_after": when})
    assert refused.value.details["field"] == "filter.died_after"


@pytest.mark.parametrize("rate", [0, -1, 501, float("nan"), float("inf"), "fast"])
def test_a_rate_out_of_range_is_refused_by_name(letters, rate):
    with pytest.raises(BadInput) as refused:
        start_bulk_replay(filter=TIMEOUTS, actor="ops:carol", rate=rate)
    assert refused.value.details["field"] == "rate"
    assert not BulkReplay.objects.exists()


@pytest.mark.parametrize("rate", [0.5, 1e-300])
def test_a_rate_below_one_a_second_is_refused_because_a_slice_waits_out_its_last_slot(letters, rate):
    # A slice waits 1 / rate seconds after its last replay, holding the default queue that long.
    with pytest.raises(BadInput, match="from 1 to 500") as refused:
        start_bulk_replay(filter=TIMEOUTS, actor="ops:carol", rate=rate)
    assert refused.value.details["field"] == "rate"
    assert not BulkReplay.objects.exists()


def test_the_database_refuses_a_bulk_replay_slower_than_one_a_second(db):
    with pytest.raises(IntegrityError, match="bulk_replay_rate_in_range"):
        BulkReplay.objects.create(filter={}, filter_key="k", rate=0.5, requested_by="ops:carol")




def test_one_bulk_replay_runs_per_filter_at_a_time(letters):
    first = start_bulk_replay(filter=TIMEOUTS, actor="ops:carol", rate=500, any_resource=True)
    with pytest.raises(BulkReplayRunning, match=f"bulk replay {first.pk} with the same filter is running"):
        start_bulk_replay(filter=dict(reversed(list(TIMEOUTS.items()))), actor="ops:dave")
    other = start_bulk_replay(filter={"flow": "demo"}, actor="ops:dave")
    assert (first.selected, other.selected) == (10, 12)
    assert AuditEntry.objects.filter(action="bulk_replay.start").count() == 2


def test_a_bulk_replay_keeps_to_its_velocity_limit(letters):
    rate = 4  # slow enough that replaying without waiting would be measurably faster
    bulk = start_bulk_replay(filter=TIMEOUTS, actor="ops:carol", rate=rate, any_resource=True)
    started = time.monotonic()
    assert run_bulk_replay(bulk_replay=bulk, max_seconds=60) == "finished"
    elapsed = time.monotonic() - started
    done = BulkReplay.objects.get(pk=bulk.pk)
    assert (done.state, done.done, done.refused) == (BulkReplayState.FINISHED, 10, 0)
    # n replays at `rate` per second need at least (n - 1) / rate seconds.
    assert done.done <= math.floor(rate * elapsed) + 1
    assert DeadLetter.objects.filter(state=DeadLetterState.REPLAYING).count() == 10


def test_a_bulk_replay_counts_the_dead_letters_that_refuse(letters):
    # Their tasks named no resource: a same-resource replay refuses each one, and the run goes on.
    bulk = start_bulk_replay(filter=TIMEOUTS, actor="ops:carol", rate=500)
    run_bulk_replay(bulk_replay=bulk)
    done = BulkReplay.objects.get(pk=bulk.pk)
    assert (done.state, done.done, done.refused) == (BulkReplayState.FINISHED, 0, 10)
    assert "resource was removed" in done.last_error


def test_a_bulk_replay_whose_runner_died_resumes_where_it_stopped(letters):
    bulk = start_bulk_replay(filter=TIMEOUTS, actor="ops:carol", rate=500, any_resource=True)
    assert run_bulk_replay(bulk_replay=bulk, limit=4) == "more"
    # The runner dies mid-slice: its heartbeat stays, and goes stale.
    BulkReplay.objects.filter(pk=bulk.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert run_bulk_replay(bulk_replay=bulk) == "finished"
    assert BulkReplay.objects.get(pk=bulk.pk).done == 10
    assert all(count == 1 for count in DeadLetter.objects.filter(**TIMEOUTS).values_list("replay_count", flat=True))


def test_a_second_runner_leaves_a_bulk_replay_to_the_live_one(letters):
    bulk = start_bulk_replay(filter=TIMEOUTS, actor="ops:carol", rate=500, any_resource=True)
    BulkReplay.objects.filter(pk=bulk.pk).update(heartbeat_at=timezone.now())
    assert run_bulk_replay(bulk_replay=bulk) == "busy"
    assert BulkReplay.objects.get(pk=bulk.pk).done == 0


def test_the_periodic_job_restarts_a_stalled_bulk_replay(letters, redis_conn):
    bulk = start_bulk_replay(filter=TIMEOUTS, actor="ops:carol", rate=500, any_resource=True)
    redis_conn.flushdb()  # the job enqueued at start is lost with its process
    BulkReplay.objects.filter(pk=bulk.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert restart_stalled_bulk_replays() == [bulk.pk]
    work_default()
    assert BulkReplay.objects.get(pk=bulk.pk).state == BulkReplayState.FINISHED


def test_a_cancelled_bulk_replay_replays_no_more(letters):
    bulk = start_bulk_replay(filter=TIMEOUTS, actor="ops:carol", rate=500, any_resource=True)
    run_bulk_replay(bulk_replay=bulk, limit=3)
    cancel_bulk_replay(bulk_replay=bulk, actor="ops:carol")
    assert run_bulk_replay(bulk_replay=bulk) == "busy"
    assert BulkReplay.objects.get(pk=bulk.pk).done == 3
