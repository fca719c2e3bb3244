"""Replaying a dead letter: a new task for the same business instance, on the same resource
through the operator retry (strict), or on any resource of the pool when the operator says so."""

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from audit.choices import AuditAction
from audit.services import record_audit
from compensation.choices import REPLAYABLE_STATES, DeadLetterState, state_words
from compensation.errors import ReplayRefused
from compensation.inputs import locked, text
from compensation.models import DeadLetter
from resources.choices import ResourceState
from resources.errors import ResourceUnavailable
from resources.models import Resource
from resources.selectors import describe_unavailability
from retryops.errors import IllegalTransition
from scheduling.errors import InstanceSucceeded, TaskLive
from scheduling.models import Task
from scheduling.services import instance_to_run_again, replay_on_resource, start_replay


def _refusal(letter: DeadLetter, why) -> str:
    return _("cannot replay dead letter %(id)s: %(why)s") % {"id": letter.pk, "why": why}


def _refuse_unusable(letter: DeadLetter) -> Resource:
    """The dead letter's resource, if a strict replay could run on it; else why not, in the
    operators' words. retry_resource re-checks under the resource's lock: this read only names
    the states a replay will never get past."""
    resource = Resource.objects.select_related("pool").filter(pk=letter.resource_id).first() \
        if letter.resource_id else None
    if resource is None:
        raise ReplayRefused(_("cannot replay dead letter %(id)s on its resource: the resource was removed; replay it "
                              "on any resource of the pool instead") % {"id": letter.pk},
                            reason="removed", dead_letter_id=letter.pk)
    if resource.state == ResourceState.QUARANTINED:
        raise ReplayRefused(_refusal(letter, describe_unavailability(resource)), reason="quarantined",
                            dead_letter_id=letter.pk, resource_id=resource.pk)
    if resource.state == ResourceState.DONE and resource.pool.consume_on_success:
        raise ReplayRefused(_refusal(letter, describe_unavailability(resource)), reason="consumed",
                            dead_letter_id=letter.pk, resource_id=resource.pk)
    return resource


def replay_dead_letter(*, dead_letter: DeadLetter | int, actor: str, any_resource: bool = False,
                       reason: str = "") -> DeadLetter:
    """Start a new task for an open dead letter's flow and payload, and follow it (replaying). By
    default on the same resource, strictly, through scheduling's retry_resource (which resets a
    failed resource); a resource now quarantined, consumed or removed refuses with that reason
    (ReplayRefused) rather than replaying blindly. With `any_resource`, a non-strict task on the
    pool. One audit entry (dead_letter.replay) for the whole action."""
    reason = text(reason, field="reason", max_length=2000)
    with transaction.atomic():
        letter = locked(DeadLetter, dead_letter, kind="dead_letter")
        if letter.state not in REPLAYABLE_STATES:
            words = {"id": letter.pk, "state": state_words(DeadLetterState, letter.state),
                     "task": letter.replay_task_id}
            raise IllegalTransition(
                (_("cannot replay dead letter %(id)s: it is %(state)s (task %(task)s); only an open dead letter can "
                   "be replayed") if letter.replay_task_id else
                 _("cannot replay dead letter %(id)s: it is %(state)s; only an open dead letter can be replayed"))
                % words,
                kind="dead_letter", id=letter.pk, from_state=letter.state, to_state=DeadLetterState.REPLAYING,
                replay_task_id=letter.replay_task_id)
        dead = Task.objects.select_related("policy", "pool").get(pk=letter.task_id)
        try:
            if any_resource:
                # The same business instance as an operator's retry of it: refused while a run of
                # it is live or has succeeded, wherever that run was started from.
                first_run = instance_to_run_again(dead, letter.display_name)
                task = start_replay(dead=dead, actor=actor, first_run=first_run)
            else:
                resource = _refuse_unusable(letter)
                try:
                    # The dead task's own business instance (not whichever task ran there last):
                    # refused when a run of it succeeded or is live elsewhere since.
                    task = replay_on_resource(resource=resource, actor=actor, dead=dead)
                except ResourceUnavailable as exc:
                    raise ReplayRefused(_refusal(letter, exc), reason=exc.reason,
                                        dead_letter_id=letter.pk, resource_id=resource.pk) from None
        except TaskLive as exc:
            raise ReplayRefused(_refusal(letter, exc), reason="task_live", dead_letter_id=letter.pk,
                                **exc.details) from None
        except InstanceSucceeded as exc:
            raise ReplayRefused(_refusal(letter, exc), reason="succeeded", dead_letter_id=letter.pk,
                                task_id=exc.details["task_id"]) from None
        before = {"state": letter.state, "replay_task": letter.replay_task_id}
        letter.state, letter.replay_task, letter.replay_count = DeadLetterState.REPLAYING, task, letter.replay_count + 1
        letter.save(update_fields=["state", "replay_task", "replay_count", "updated_at"])
        record_audit(action=AuditAction.DEAD_LETTER_REPLAY, target=letter, before=before,
                     after={"state": letter.state, "replay_task": task.pk, "any_resource": any_resource,
                            "resource": task.pinned_resource_id, "at": timezone.now()},
                     reason=reason, actor=actor)
    return letter
