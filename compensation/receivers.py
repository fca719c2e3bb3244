"""Right after a task dies (or a retry succeeds), collect its dead letter and follow replays in the
same process, for latency; the periodic dead_letters_job catches whatever this misses (a crash
after the commit, a failure here). A failure here is logged, never raised: it must not break the
worker that ran the task."""

import logging

from django.dispatch import receiver

from scheduling.signals import task_cancelled, task_dead, task_retry_succeeded

log = logging.getLogger(__name__)


@receiver(task_dead, dispatch_uid="compensation.collect_dead_letters")
def collect_on_death(sender, task_id, **kwargs):
    from compensation.services import collect_dead_letters, follow_replays

    try:
        collect_dead_letters()
        follow_replays()
    except Exception:
        log.exception("dead letter of task %s not collected now; the periodic job will", task_id)


@receiver(task_retry_succeeded, dispatch_uid="compensation.follow_replays.succeeded")
@receiver(task_cancelled, dispatch_uid="compensation.follow_replays.cancelled")
def follow_on_end(sender, task_id, **kwargs):
    from compensation.services import follow_replays

    try:
        follow_replays()
    except Exception:
        log.exception("replays not followed after task %s; the periodic job will", task_id)
