"""Hand-built histories for the acceptance figures: each builder writes the rows one figure
reads over the last hour before NOW (and some just outside it), and returns the rows the figure
must count, so a test can compare the figure's links with them. The numbers in each docstring are
the hand calculation."""

from datetime import timedelta

from compensation.notifications.models import Notification, NotificationState
from tests.factories import (
    AttemptFactory,
    TaskEventFactory,
    TaskFactory,
    WorkOrderFactory,
)

HOUR = 3600


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def retry_events(now):
    """In the window: 3 retries succeeded (attempt 2), one failed with another retry scheduled
    (attempt 3), one died (attempt 2): 3 of 5 retries succeeded, 60%. Outside it: a first
    attempt's failure, a success two hours ago, an execution failure of a retry (not an ending)."""
    succeeded = [TaskEventFactory(kind="task.retry.succeeded", attempt_number=2, created_at=now - minutes(m))
                 for m in (50, 30, 1)]
    failed = [TaskEventFactory(kind="task.retry.scheduled", attempt_number=3, created_at=now - minutes(20)),
              TaskEventFactory(kind="task.dead", attempt_number=2, created_at=now - minutes(10))]
    TaskEventFactory(kind="task.retry.scheduled", attempt_number=1, created_at=now - minutes(15))
    TaskEventFactory(kind="task.retry.succeeded", attempt_number=2, created_at=now - minutes(120))
    TaskEventFactory(kind="task.execution.failed", attempt_number=2, created_at=now - minutes(5))
    return {"succeeded": succeeded, "ended": succeeded + failed}


def _retry(due, *, late_by: float, number: int = 2):
    return AttemptFactory(number=number, scheduled_for=due, started_at=due + timedelta(seconds=late_by),
                          finished_at=due + timedelta(seconds=late_by + 1), outcome="succeeded")


def retry_starts(now):
    """With a grace of 30 s, of the retries due in the window: started 10 s and 30 s after their
    due time (on time), 31 s after (late), and a task waiting since 10 minutes past its due time
    (late): 2 of 4, 50%. Not counted: a first attempt started late, a retry due two hours ago, a
    retry due 10 s ago (still within its grace), a task waiting for its first attempt."""
    on_time = [_retry(now - minutes(50), late_by=10), _retry(now - minutes(40), late_by=30)]
    late = [_retry(now - minutes(30), late_by=31)]
    _retry(now - minutes(20), late_by=300, number=1)
    _retry(now - minutes(120), late_by=300)
    waiting = [TaskFactory(state="retrying", attempt_count=1, next_run_at=now - minutes(10))]
    TaskFactory(state="retrying", attempt_count=1, next_run_at=now - timedelta(seconds=10))
    TaskFactory(state="pending", attempt_count=0, next_run_at=now - minutes(20))
    return {"on_time": on_time, "late": late, "waiting": waiting}


def _page(order, *, after: float, state=NotificationState.SENT, event="trigger"):
    sent = order.first_dead_at + timedelta(seconds=after)
    Notification.objects.create(
        channel="slack", event=event, dedup_key=f"wo-{order.pk}", subject_id=order.pk, payload={"text": "x"},
        state=state, sent_at=sent if state == NotificationState.SENT else None, attempts=1)


def escalations(now):
    """Work orders opened by dead letters whose first dead letter died in the window: paged 60 s
    after it, paged 240 s after it (an earlier page failed), not paged yet (its page was skipped)
    30 minutes after it: [60, 240, 1800] s, p50 240 s, p99 240 + 0.98 * 1560 = 1768.8 s. Not
    counted: one opened by hand, one whose first dead letter died two hours ago."""
    def order(first_dead, signature):
        return WorkOrderFactory(source="dead_letters", flow="demo", error_signature=signature,
                                first_dead_at=first_dead, last_dead_at=first_dead)

    quick, slow, unpaged = (order(now - minutes(50), "A"), order(now - minutes(40), "B"),
                            order(now - minutes(30), "C"))
    _page(quick, after=60)
    _page(slow, after=30, state=NotificationState.FAILED)
    _page(slow, after=240)
    _page(slow, after=100, event="resolve")
    _page(unpaged, after=5, state=NotificationState.SKIPPED)
    WorkOrderFactory(source="manual", first_dead_at=now - minutes(45))
    old = order(now - minutes(120), "D")
    _page(old, after=10)
    return {"work_orders": [quick, slow, unpaged], "not_paged": [unpaged]}


def _ended(state, *, created, ended, first_dead=None, **more):
    fields = {"compensated_at": ended} if state == "compensated" else {}
    if state in ("compensated", "closed"):
        fields["acknowledged_at"] = created
    return WorkOrderFactory(state=state, created_at=created, ended_at=ended, first_dead_at=first_dead,
                            **fields, **more)


def compensations(now):
    """Work orders compensated in the window: opened 2 h before and compensated 50 minutes before
    NOW (4200 s), opened 30 and compensated 10 minutes before it (1200 s): p50 2700 s, p99
    1200 + 0.99 * 3000 = 4170 s. Not counted: one compensated two hours ago, one closed in the window."""
    counted = [_ended("compensated", created=now - minutes(120), ended=now - minutes(50)),
               _ended("compensated", created=now - minutes(30), ended=now - minutes(10))]
    _ended("compensated", created=now - minutes(180), ended=now - minutes(121))
    _ended("closed", created=now - minutes(30), ended=now - minutes(5))
    return {"work_orders": counted}


def completions(now):
    """With a compensate SLA of an hour, the work orders whose SLA ran out in the window (their
    clock started between 2 h and 1 h before NOW): compensated 50 minutes after its opening (no
    dead letter), closed 55 minutes after its first dead letter, compensated 90 minutes after it
    (too late), still open: 2 of 4 completed in time, 50%. Not counted: a cancelled one, one
    whose SLA runs out in 30 minutes."""
    done = [_ended("compensated", created=now - minutes(90), ended=now - minutes(40)),
            _ended("closed", created=now - minutes(99), first_dead=now - minutes(100), ended=now - minutes(45))]
    not_done = [_ended("compensated", created=now - minutes(109), first_dead=now - minutes(110),
                       ended=now - minutes(20)),
                WorkOrderFactory(created_at=now - minutes(79), first_dead_at=now - minutes(80))]
    _ended("cancelled", created=now - minutes(70), ended=now - minutes(60))
    WorkOrderFactory(created_at=now - minutes(30), first_dead_at=now - minutes(30))
    return {"completed": done, "not_completed": not_done, "due": done + not_done}
