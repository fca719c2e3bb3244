"""Dead letters: made from the dead tasks not collected yet, following their replays, settled by an operator.
A dead letter's life: open -> replaying (replay_dead_letter) -> replayed when the replay task
succeeds, or back to open, with the replay's error, when it dies or is cancelled (so it can be
replayed again or settled); open -> resolved (by hand, or when its work order is compensated or
closed) or discarded. Replayed, resolved and discarded are final."""

import logging
from itertools import groupby

from django.db import DatabaseError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from audit.choices import AuditAction
from audit.services import record_audit
from compensation.choices import WORK_ORDER_TERMINAL, DeadLetterState, state_words
from compensation.inputs import locked, text
from compensation.models import DeadLetter
from compensation.work_orders.services import join_work_order
from retryops.errors import IllegalTransition
from scheduling.choices import TERMINAL_STATES, TaskState
from scheduling.models import Task
from scheduling.services import claim_dead_tasks, leave_dead_tasks_uncollected

log = logging.getLogger(__name__)

BATCH = 500


def collect_dead_letters(*, limit: int = BATCH) -> list[DeadLetter]:
    """Turn the dead tasks not collected yet into dead letters, and each group of one flow and
    error signature into (or onto) its work order, in one transaction with the claim: a crash
    before the commit leaves the tasks for the next call. A task that has its dead letter already
    makes nothing (the one-to-one); a dead replay task is its dead letter's (follow_replays reopens
    it), not a dead letter of its own."""
    with transaction.atomic():
        made, after = [], 0
        # A batch the database refused whole goes back in the queue, still at its head: the next
        # batch is claimed past it, so that poison as long as a batch holds up no death behind it.
        while claimed := {t.pk: t for t in claim_dead_tasks(limit=limit, after=after)}:
            made_now, refused = _collect(claimed)
            made += made_now
            if made or not refused:
                break
            after = max(claimed)
        return made


def _collect(claimed: dict[int, Task]) -> tuple[list[DeadLetter], bool]:
    """The dead letters of the claimed tasks, group by group, and whether the database refused any group."""
    known = set(DeadLetter.objects.filter(task_id__in=claimed).values_list("task_id", flat=True))
    known |= set(DeadLetter.objects.filter(replay_task_id__in=claimed).values_list("replay_task_id", flat=True))
    tasks = [t for pk, t in claimed.items() if pk not in known]

    def key(t):
        return t.flow, t.last_error_signature
    made, refused = [], False
    # Work orders locked in one order (flow, signature), so two collectors never wait on each other in a cycle.
    for (flow, signature), group in groupby(sorted(tasks, key=lambda t: (*key(t), t.pk)), key=key):
        group = list(group)
        try:
            with transaction.atomic():  # a savepoint: a group the database refuses holds up no other
                made += _make_dead_letters(flow=flow, signature=signature, group=group)
        except DatabaseError:
            log.exception("dead letters of flow %s, signature %r refused by the database; their %d tasks "
                          "stay in the queue", flow, signature, len(group))
            leave_dead_tasks_uncollected(task_ids=[t.pk for t in group])
            refused = True
    return made, refused


def _make_dead_letters(*, flow: str, signature: str, group: list[Task]) -> list[DeadLetter]:
    order = join_work_order(flow=flow, error_signature=signature, pool_id=group[0].pool_id,
                            died=[t.finished_at for t in group])
    # The resource is the one it last ran on, else the one it named: a strict task that
    # never claimed it (quarantined, or in use at every attempt) is replayed on it too.
    return DeadLetter.objects.bulk_create(
        DeadLetter(task=t, flow=t.flow, pool_id=t.pool_id, resource_id=t.resource_id or t.requested_resource_id,
                   last_error=t.last_error, error_signature=t.last_error_signature,
                   error_category=t.last_error_category, attempt_count=t.attempt_count,
                   died_at=t.finished_at, work_order=order)
        for t in group)


def follow_replays(*, limit: int = BATCH) -> int:
    """Move the replaying dead letters whose replay task has ended: replayed when it succeeded,
    open again with its error when it died or was cancelled. Reads the tasks' state rather than
    their events, because a replay that succeeds at its first attempt emits none; runs in the
    periodic dead_letters_job. Returns how many moved."""
    now = timezone.now()
    with transaction.atomic():
        # A replay whose death collect_dead_letters has not taken yet stays replaying: opened now
        # and replayed again, its dead letter would no longer name it, and the collection would
        # make the replay's death a dead letter of its own.
        letters = list(
            DeadLetter.objects.select_for_update(of=("self",), skip_locked=True).select_related("replay_task", "work_order")
            .filter(state=DeadLetterState.REPLAYING, replay_task__state__in=TERMINAL_STATES)
            .exclude(replay_task__state=TaskState.DEAD, replay_task__collected_at__isnull=True)
            .order_by("id")[:limit])
        for letter in letters:
            task = letter.replay_task
            if task.state == TaskState.SUCCEEDED:
                letter.state, letter.settled_at = DeadLetterState.REPLAYED, task.finished_at or now
                letter.save(update_fields=["state", "settled_at", "updated_at"])
                continue
            letter.state = DeadLetterState.OPEN
            letter.last_error = task.last_error or f"replay {task.holder} was {task.state}"
            letter.error_signature, letter.error_category = task.last_error_signature, task.last_error_category
            letter.attempt_count, letter.died_at = task.attempt_count, task.finished_at or now
            letter.resource_id = task.resource_id or letter.resource_id
            if letter.work_order is None or letter.work_order.state in WORK_ORDER_TERMINAL:
                letter.work_order = join_work_order(flow=letter.flow, error_signature=letter.error_signature,
                                                    pool_id=letter.pool_id, died=[letter.died_at])
            letter.save(update_fields=["state", "last_error", "error_signature", "error_category", "attempt_count",
                                       "died_at", "resource", "work_order", "updated_at"])
    return len(letters)


def _settle(dead_letter: DeadLetter | int, *, to: str, action: str, actor: str, reason: str) -> DeadLetter:
    reason = text(reason, field="reason", max_length=2000)
    with transaction.atomic():
        letter = locked(DeadLetter, dead_letter, kind="dead_letter")
        if letter.state != DeadLetterState.OPEN:
            raise IllegalTransition(_("cannot mark dead letter %(id)s %(to)s: it is %(state)s; only an open one can be")
                                    % {"id": letter.pk, "to": state_words(DeadLetterState, to),
                                       "state": state_words(DeadLetterState, letter.state)},
                                    kind="dead_letter", id=letter.pk, from_state=letter.state, to_state=to)
        before = {"state": letter.state}
        letter.state, letter.settled_at = to, timezone.now()
        letter.save(update_fields=["state", "settled_at", "updated_at"])
        record_audit(action=action, target=letter, before=before, after={"state": to}, reason=reason, actor=actor)
    return letter


def discard_dead_letter(*, dead_letter: DeadLetter | int, actor: str, reason: str = "") -> DeadLetter:
    """Nothing is to be done about it: discarded (kept until the clean-up purges it)."""
    return _settle(dead_letter, to=DeadLetterState.DISCARDED, action=AuditAction.DEAD_LETTER_DISCARD, actor=actor,
                   reason=reason)


def resolve_dead_letter(*, dead_letter: DeadLetter | int, actor: str, reason: str = "") -> DeadLetter:
    """Taken care of outside a replay (compensated by hand)."""
    return _settle(dead_letter, to=DeadLetterState.RESOLVED, action=AuditAction.DEAD_LETTER_RESOLVE, actor=actor,
                   reason=reason)
