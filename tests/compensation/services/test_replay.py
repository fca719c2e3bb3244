"""Replaying a dead letter starts a new task linked to it, and the dead letter follows that task."""

import pytest
from django.utils import timezone

from audit.models import AuditEntry
from compensation.choices import DeadLetterState
from compensation.errors import ReplayRefused
from compensation.services.dead_letters import collect_dead_letters, follow_replays
from compensation.services.replay import replay_dead_letter
from retryops.errors import IllegalTransition
from compensation.models import DeadLetter
import resources.services
from resources.choices import ResourceState
from resources.models import Resource
from scheduling import services as scheduling
from scheduling.choices import TaskEventKind, TaskState
from scheduling.models import Task, TaskEvent
from tests.compensation.conftest import upstream
from tests.scheduling.helpers import work

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def letter(redis_conn, alice, instant_policy) -> DeadLetter:
    task = scheduling.start_task(flow="until_fixed", pool_name=alice.pool, resource=alice, created_by="shop",
                                 policy="instant")
    work()
    collect_dead_letters()
    return DeadLetter.objects.get(task=task)


def test_a_replay_starts_a_strict_task_on_the_same_resource(letter, alice):
    replayed = replay_dead_letter(dead_letter=letter, actor="ops:carol")
    task = replayed.replay_task
    assert (replayed.state, replayed.replay_count) == (DeadLetterState.REPLAYING, 1)
    assert (task.flow, task.strict, task.pinned_resource_id) == ("until_fixed", True, alice.pk)
    assert Resource.objects.get(pk=alice.pk).lease_holder == task.holder


def test_a_replay_writes_one_audit_entry_of_its_own(letter):
    before = AuditEntry.objects.count()
    replay_dead_letter(dead_letter=letter, actor="ops:carol", reason="upstream fixed")
    entries = list(AuditEntry.objects.order_by("id").values_list("action", "actor", "reason"))[before:]
    assert entries == [("dead_letter.replay", "ops:carol", "upstream fixed")]


def test_a_replay_that_succeeds_marks_the_dead_letter_replayed(letter):
    upstream["broken"] = False
    replay_dead_letter(dead_letter=letter, actor="ops:carol")
    work()
    follow_replays()  # a first-attempt success emits no event: the periodic job follows it
    assert DeadLetter.objects.get(pk=letter.pk).state == DeadLetterState.REPLAYED


def test_a_replay_that_dies_reopens_the_dead_letter_with_the_new_error(letter):
    replayed = replay_dead_letter(dead_letter=letter, actor="ops:carol")
    work()
    collect_dead_letters()  # the dead-letter step: its death is its dead letter's
    follow_replays()
    again = DeadLetter.objects.get(pk=letter.pk)
    assert Task.objects.get(pk=replayed.replay_task_id).state == TaskState.DEAD
    assert (again.state, again.replay_task_id) == (DeadLetterState.OPEN, replayed.replay_task_id)
    assert again.died_at > letter.died_at
    assert DeadLetter.objects.count() == 1  # the dead replay made no dead letter of its own


def dies_uncollected(task: Task) -> None:
    """`task` died and the dead-letter step has not collected it yet (tests.compensation.conftest.dead_tasks)."""
    Task.objects.filter(pk=task.pk).update(state=TaskState.DEAD, finished_at=timezone.now(),
                                           last_error="TimeoutError: upstream timed out after 30s")
    TaskEvent.objects.create(task=task, kind=TaskEventKind.DEAD, attempt_number=1, details={})


def test_a_replay_whose_death_is_not_collected_yet_stays_its_dead_letters_replay(letter):
    first = replay_dead_letter(dead_letter=letter, actor="ops:carol", any_resource=True).replay_task
    dies_uncollected(first)
    # The replays are followed before the dead-letter step collects that death: were the dead
    # letter open again, a second replay would leave the first one's death unknown to the step,
    # which would make it a dead letter of its own.
    follow_replays()
    assert DeadLetter.objects.get(pk=letter.pk).state == DeadLetterState.REPLAYING
    collect_dead_letters()
    follow_replays()
    assert DeadLetter.objects.get(pk=letter.pk).state == DeadLetterState.OPEN
    replay_dead_letter(dead_letter=letter, actor="ops:carol", any_resource=True)
    collect_dead_letters()
    assert list(DeadLetter.objects.values_list("task_id", flat=True)) == [letter.task_id]




def test_replaying_a_dead_letter_that_is_replaying_names_its_state(letter):
    replay_dead_letter(dead_letter=letter, actor="ops:carol")
    tasks = Task.objects.count()
    with pytest.raises(IllegalTransition, match="it is replaying") as refused:
        replay_dead_letter(dead_letter=letter.pk, actor="ops:carol")
    assert refused.value.details["from_state"] == "replaying"
    assert Task.objects.count() == tasks


def test_replaying_a_replayed_dead_letter_names_its_state(letter):
    upstream["broken"] = False
    replay_dead_letter(dead_letter=letter, actor="ops:carol")
    work()
    follow_replays()
    with pytest.raises(IllegalTransition, match="it is replayed"):
        replay_dead_letter(dead_letter=letter, actor="ops:carol")


def test_a_dead_letter_whose_resource_is_quarantined_says_so_instead_of_replaying(letter, alice):
    resources.services.reset(resource=alice, actor="ops")
    resources.services.quarantine(resource=alice, actor="ops", reason="banned upstream")
    tasks = Task.objects.count()
    with pytest.raises(ReplayRefused, match="quarantined .*banned upstream") as refused:
        replay_dead_letter(dead_letter=letter, actor="ops:carol")
    assert refused.value.reason == "quarantined"
    assert (Task.objects.count(), DeadLetter.objects.get(pk=letter.pk).state) == (tasks, DeadLetterState.OPEN)
    assert not AuditEntry.objects.filter(action="dead_letter.replay").exists()


def test_a_dead_letter_whose_resource_was_consumed_says_so(letter, alice):
    Resource.objects.filter(pk=alice.pk).update(state=ResourceState.DONE)
    alice.pool.consume_on_success = True
    alice.pool.save(update_fields=["consume_on_success"])
    with pytest.raises(ReplayRefused, match="consumed") as refused:
        replay_dead_letter(dead_letter=letter, actor="ops:carol")
    assert refused.value.reason == "consumed"


def test_a_dead_letter_whose_resource_was_removed_says_so(letter):
    DeadLetter.objects.filter(pk=letter.pk).update(resource=None)
    with pytest.raises(ReplayRefused, match="removed"):
        replay_dead_letter(dead_letter=letter, actor="ops:carol")


def test_a_strict_task_that_died_before_it_claimed_its_resource_is_replayed_on_that_resource(redis_conn, alice,
                                                                                             instant_policy):
    task = scheduling.start_task(flow="until_fixed", pool_name=alice.pool, resource=alice, created_by="shop",
                                 policy="instant")
    resources.services.quarantine(resource=alice, actor="ops", reason="banned upstream")
    work()
    collect_dead_letters()
    letter = DeadLetter.objects.get(task=task)
    resources.services.unquarantine(resource=alice, actor="ops", reason="cleared by upstream")
    replayed = replay_dead_letter(dead_letter=letter, actor="ops:carol")
    assert (replayed.replay_task.strict, replayed.replay_task.pinned_resource_id) == (True, alice.pk)


def test_a_replay_on_any_resource_starts_a_task_the_pool_chooses_for(letter, alice, bob):
    resources.services.reset(resource=alice, actor="ops")
    resources.services.quarantine(resource=alice, actor="ops", reason="banned upstream")
    upstream["broken"] = False
    replayed = replay_dead_letter(dead_letter=letter, actor="ops:carol", any_resource=True)
    assert (replayed.replay_task.strict, replayed.replay_task.requested_resource_id) == (False, None)
    work()
    follow_replays()
    assert Task.objects.get(pk=replayed.replay_task_id).resource_id == bob.pk
    assert DeadLetter.objects.get(pk=letter.pk).state == DeadLetterState.REPLAYED


def test_the_resource_retry_command_still_audits_its_retry(letter, alice):
    before = AuditEntry.objects.count()
    scheduling.retry_resource(resource=alice, actor="ops:carol")
    assert list(AuditEntry.objects.order_by("id").values_list("action", flat=True))[before:] == ["resource.retry"]




def run_again_by_an_operator(letter, alice) -> Task:
    """The dead task's business instance started again by an operator's retry of its resource."""
    return scheduling.retry_resource(resource=alice, actor="ops:erin")


@pytest.mark.parametrize("any_resource", [False, True])
def test_a_replay_while_an_operator_retry_of_the_same_order_waits_is_refused(letter, alice, any_resource):
    again = run_again_by_an_operator(letter, alice)
    with pytest.raises(ReplayRefused) as refused:
        replay_dead_letter(dead_letter=letter, actor="ops:carol", any_resource=any_resource)
    assert refused.value.details["reason"] == "task_live"
    assert Task.objects.filter(payload=letter.task.payload).exclude(pk__in=[letter.task_id, again.pk]).count() == 0
    assert DeadLetter.objects.get(pk=letter.pk).state == DeadLetterState.OPEN


@pytest.mark.parametrize("any_resource", [False, True])
def test_a_replay_of_an_order_that_succeeded_since_is_refused_saying_so(letter, alice, any_resource):
    upstream["broken"] = False
    run_again_by_an_operator(letter, alice)
    work()
    with pytest.raises(ReplayRefused) as refused:
        replay_dead_letter(dead_letter=letter, actor="ops:carol", any_resource=any_resource)
    assert refused.value.details["reason"] == "succeeded"
    assert DeadLetter.objects.get(pk=letter.pk).state == DeadLetterState.OPEN
