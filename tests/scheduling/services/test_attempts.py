"""An attempt's end: what the task shows once it has succeeded or failed."""

import pytest

from scheduling import services
from scheduling.choices import AttemptOutcome, TaskState
from scheduling.models import Attempt
from tests.scheduling.helpers import work

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_task_that_succeeds_on_a_retry_no_longer_shows_the_earlier_error(redis_conn, pool, alice, instant_policy):
    task = services.start_task(flow="demo", pool_name=pool, payload={"script": ["TimeoutError: slow", "ok"]},
                               created_by="shop", policy="instant")
    work()
    task.refresh_from_db()
    assert task.state == TaskState.SUCCEEDED
    assert (task.last_error, task.last_error_signature, task.last_error_category) == ("", "", "")
    first = Attempt.objects.get(task=task, number=1)
    assert (first.outcome, first.error_message) == (AttemptOutcome.FAILED, "slow")
