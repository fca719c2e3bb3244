"""Every dead task becomes one dead letter, and the dead letters of one flow and signature one work order."""
import threading

import pytest
from django.db import connection

from compensation.choices import DeadLetterState, WorkOrderState
from compensation.models import DeadLetter
from compensation.notifications.models import Notification
from compensation.notifications.notifiers import NOTIFIERS
from compensation.services import dead_letters
from compensation.services.dead_letters import collect_dead_letters, discard_dead_letter
from compensation.work_orders.models import WorkOrder
from compensation.work_orders.services import close_work_order
from retryops.errors import IllegalTransition
from scheduling import services as scheduling
from scheduling.models import Task
from tests.compensation.conftest import dead_tasks
from tests.scheduling.helpers import in_thread, work


@pytest.mark.django_db(transaction=True)
def test_a_task_that_dies_in_a_worker_becomes_a_dead_letter_with_its_work_order(redis_conn, alice, instant_policy):
    task = scheduling.start_task(flow="until_fixed", pool_name=alice.pool, resource=alice, created_by="shop",
                                 policy="instant")
    work()
    assert not DeadLetter.objects.exists()  # the dead-letter step alone makes it
    collect_dead_letters()
    letter = DeadLetter.objects.select_related("work_order").get(task=task)
    assert (letter.state, letter.flow, letter.resource_id, letter.attempt_count) == (
        DeadLetterState.OPEN, "until_fixed", alice.pk, 3)
    assert letter.last_error == "TimeoutError: upstream timed out after 30s"
    assert (letter.error_signature, letter.error_category) == (
        Task.objects.get(pk=task.pk).last_error_signature, "retryable")
    assert (letter.work_order.state, letter.work_order.dead_letter_count) == (WorkOrderState.OPEN, 1)


@pytest.mark.django_db
def test_a_collection_that_fails_before_its_commit_leaves_the_death_for_the_next_one(pool, instant_policy,
                                                                                     monkeypatch):
    [task] = dead_tasks(pool=pool, policy=instant_policy)

    def broken(**kwargs):
        raise RuntimeError("database went away")

    monkeypatch.setattr(dead_letters, "join_work_order", broken)
    with pytest.raises(RuntimeError):
        collect_dead_letters()
    assert not DeadLetter.objects.exists() and Task.objects.get(pk=task.pk).collected_at is None
    monkeypatch.undo()
    collect_dead_letters()
    assert DeadLetter.objects.get(task=task).work_order.dead_letter_count == 1


def refuse_dead_letters_signed(signature: str) -> None:
    """A row the database will not take, whatever the cause."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                       f"IF NEW.error_signature = '{signature}' THEN RAISE EXCEPTION 'refused'; END IF; "
                       f"RETURN NEW; END $$; CREATE TRIGGER refuse BEFORE INSERT ON {DeadLetter._meta.db_table} "
                       "FOR EACH ROW EXECUTE FUNCTION refuse()")


@pytest.mark.django_db
def test_a_group_the_database_refuses_stays_queued_and_holds_up_no_other(pool, instant_policy):
    [refused] = dead_tasks(pool=pool, policy=instant_policy, signature="ValueError: refused")
    [taken] = dead_tasks(pool=pool, policy=instant_policy, signature="TimeoutError: slow")
    refuse_dead_letters_signed("ValueError: refused")

    collect_dead_letters()

    assert list(DeadLetter.objects.values_list("task_id", flat=True)) == [taken.pk]
    assert Task.objects.get(pk=refused.pk).collected_at is None


@pytest.mark.django_db
def test_a_refused_group_as_big_as_a_batch_holds_up_no_death_behind_it(pool, instant_policy):
    refused = dead_tasks(pool=pool, policy=instant_policy, n=2, signature="ValueError: refused")
    [taken] = dead_tasks(pool=pool, policy=instant_policy, signature="TimeoutError: slow")
    refuse_dead_letters_signed("ValueError: refused")

    for _ in range(3):  # the ops process's passes, each a batch of two
        collect_dead_letters(limit=2)

    assert list(DeadLetter.objects.values_list("task_id", flat=True)) == [taken.pk]
    assert [t.collected_at for t in Task.objects.filter(pk__in=[t.pk for t in refused])] == [None, None]


@pytest.mark.django_db
def test_a_dead_task_collected_twice_makes_no_second_dead_letter(pool, instant_policy):
    [task] = dead_tasks(pool=pool, policy=instant_policy)
    collect_dead_letters()
    Task.objects.filter(pk=task.pk).update(collected_at=None)  # as a restore from before the commit would
    assert collect_dead_letters() == []
    assert Task.objects.get(pk=task.pk).collected_at is not None
    assert DeadLetter.objects.filter(task=task).count() == 1
    assert WorkOrder.objects.get().dead_letter_count == 1


@pytest.mark.django_db
def test_a_purged_dead_letter_is_not_made_again(pool, instant_policy):
    [task] = dead_tasks(pool=pool, policy=instant_policy)
    collect_dead_letters()
    DeadLetter.objects.all().delete()  # the clean-up purged it; the task stays
    assert collect_dead_letters() == []
    assert not DeadLetter.objects.filter(task=task).exists()


@pytest.mark.django_db
def test_a_burst_of_a_thousand_deaths_of_one_signature_is_one_work_order_and_one_page(pool, instant_policy):
    dead_tasks(pool=pool, policy=instant_policy, n=1000)
    while collect_dead_letters():
        pass
    order = WorkOrder.objects.get()
    assert (order.dead_letter_count, order.dead_letters.count()) == (1000, 1000)
    assert order.first_dead_at <= order.last_dead_at
    # One trigger per channel (sent, or recorded as skipped where no channel is configured).
    assert sorted(Notification.objects.values_list("channel", "event")) == sorted(
        (channel, "trigger") for channel in NOTIFIERS)


@pytest.mark.django_db
def test_deaths_of_another_signature_open_a_work_order_of_their_own(pool, instant_policy):
    dead_tasks(pool=pool, policy=instant_policy, signature="TimeoutError: slow")
    dead_tasks(pool=pool, policy=instant_policy, signature="PermissionError: HTTP 403")
    collect_dead_letters()
    assert sorted(WorkOrder.objects.values_list("error_signature", "dead_letter_count")) == [
        ("PermissionError: HTTP 403", 1), ("TimeoutError: slow", 1)]


@pytest.mark.django_db
def test_a_death_after_its_work_order_was_closed_opens_a_new_one(pool, instant_policy):
    dead_tasks(pool=pool, policy=instant_policy)
    collect_dead_letters()
    first = WorkOrder.objects.get()
    close_work_order(work_order=first, actor="ops:carol", resolution="upstream fixed")
    dead_tasks(pool=pool, policy=instant_policy)
    [letter] = collect_dead_letters()
    assert letter.work_order_id != first.pk
    assert WorkOrder.objects.get(pk=letter.work_order_id).state == WorkOrderState.OPEN


@pytest.mark.django_db
def test_discarding_a_discarded_dead_letter_names_its_state(pool, instant_policy):
    dead_tasks(pool=pool, policy=instant_policy)
    [letter] = collect_dead_letters()
    discard_dead_letter(dead_letter=letter, actor="ops:carol", reason="test order")
    with pytest.raises(IllegalTransition, match="it is discarded") as refused:
        discard_dead_letter(dead_letter=letter.pk, actor="ops:carol")
    assert refused.value.details["from_state"] == DeadLetterState.DISCARDED


@pytest.mark.django_db(transaction=True)
def test_two_collectors_at_once_never_both_make_a_dead_letter(pool, instant_policy, monkeypatch):
    tasks = dead_tasks(pool=pool, policy=instant_policy, n=3)
    held, release, first = threading.Event(), threading.Event(), []
    join = dead_letters.join_work_order

    def slow_join(**kwargs):
        held.set()
        release.wait(10)
        return join(**kwargs)

    monkeypatch.setattr(dead_letters, "join_work_order", slow_join)
    thread = in_thread(lambda: first.extend(collect_dead_letters()))
    assert held.wait(10)
    second = collect_dead_letters()  # the first holds every dead task: it skips them, and waits for none
    release.set()
    thread.join(10)
    assert (len(first), second) == (3, [])
    assert sorted(DeadLetter.objects.values_list("task_id", flat=True)) == [t.pk for t in tasks]
