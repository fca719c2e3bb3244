"""Every way compensation starts a run of a business instance — a dead letter's replay (on its
resource or any), a bulk replay's job, a runbook's replay action, the clean-up's replay of the
retryable ones — goes through scheduling's one guard: refused while a run of the instance is live
(task_live) or once one has succeeded, with nothing started and the dead letter left open."""

from datetime import timedelta

import pytest
from django.utils import timezone

from compensation.choices import DeadLetterState
from compensation.errors import ReplayRefused
from compensation.models import BulkReplay, DeadLetter
from compensation.runbooks.actions.dead_letters import replay_dead_letters
from compensation.runbooks.catalog import ActionContext
from compensation.services.bulk_replay import run_bulk_replay, start_bulk_replay
from compensation.services.cleanup import cleanup_dead_letters
from compensation.services.replay import replay_dead_letter
from resources.choices import FailureCategory
from scheduling.choices import TaskState
from scheduling.models import Task
from tests.factories import DeadLetterFactory, WorkOrderFactory
from tests.scheduling.helpers import died_on, run_of

pytestmark = pytest.mark.django_db

# What each refusal is called (a replay's reason), and the sentence it carries.
REFUSALS = {TaskState.RETRYING: ("task_live", "a retry now would run it twice"),
            TaskState.SUCCEEDED: ("succeeded", "succeeded already: its payload again would run it a second time")}


@pytest.fixture
def letter(alice, default_policy) -> DeadLetter:
    """Order 42's dead letter: its task died on alice, in a work order, a retryable failure days ago."""
    dead = died_on(alice, default_policy)
    return DeadLetterFactory(task=dead, resource=alice, work_order=WorkOrderFactory(),
                             error_category=FailureCategory.RETRYABLE, died_at=timezone.now() - timedelta(days=40))


def instance_since(letter, state, bob) -> Task:
    """A run of the dead letter's business instance started since on bob: live, or succeeded."""
    return run_of(letter.task, state=state, resource=bob)


def nothing_started(letter, tasks: int) -> bool:
    return Task.objects.count() == tasks and DeadLetter.objects.get(pk=letter.pk).state == DeadLetterState.OPEN


@pytest.mark.parametrize("any_resource", [False, True])
@pytest.mark.parametrize("state", REFUSALS)
def test_a_replay_of_an_instance_that_is_live_or_succeeded_is_refused(letter, bob, state, any_resource):
    run = instance_since(letter, state, bob)
    tasks = Task.objects.count()
    with pytest.raises(ReplayRefused) as refused:
        replay_dead_letter(dead_letter=letter.pk, actor="ops:carol", any_resource=any_resource)
    reason, sentence = REFUSALS[state]
    assert (refused.value.details["reason"], refused.value.details["task_id"]) == (reason, run.pk)
    assert sentence in str(refused.value)
    assert nothing_started(letter, tasks)


@pytest.mark.parametrize("state", REFUSALS)
def test_a_bulk_replay_counts_an_instance_that_is_live_or_succeeded_as_refused(letter, bob, state):
    instance_since(letter, state, bob)
    tasks = Task.objects.count()
    bulk = start_bulk_replay(filter={"flow": letter.flow}, actor="ops:carol", rate=500)
    assert run_bulk_replay(bulk_replay=bulk.pk, max_seconds=5) == "finished"
    bulk = BulkReplay.objects.get(pk=bulk.pk)
    assert (bulk.done, bulk.refused) == (0, 1)
    assert REFUSALS[state][1] in bulk.last_error
    assert nothing_started(letter, tasks)


@pytest.mark.parametrize("state", REFUSALS)
def test_a_runbooks_replay_action_reports_an_instance_that_is_live_or_succeeded_as_refused(letter, bob, state):
    instance_since(letter, state, bob)
    tasks = Task.objects.count()
    context = ActionContext(run_id=1, work_order_id=letter.work_order_id, runbook="replay-them",
                            action="replay_dead_letters", input={}, token="run-1", requested_by="ops:carol",
                            approved_by="", actor="ops:carol")
    assert replay_dead_letters(context) == {"replayed": [], "refused": {str(letter.pk): REFUSALS[state][0]}}
    assert nothing_started(letter, tasks)


@pytest.mark.parametrize("state", REFUSALS)
def test_the_clean_up_replays_no_instance_that_is_live_or_succeeded(letter, bob, state):
    instance_since(letter, state, bob)
    tasks = Task.objects.count()
    result = cleanup_dead_letters(older_than_days=30, states="open", actor="ops:carol",
                                  replay_retryable=True)
    assert (result.replayed, result.refused) == (0, 1)
    assert REFUSALS[state][1] in result.refusals[0]
    assert nothing_started(letter, tasks)
