"""Actions on a work order's own dead letters: replay them, or mark them resolved."""

from compensation.choices import DeadLetterState
from compensation.errors import ReplayRefused
from compensation.models import DeadLetter
from compensation.runbooks.catalog import ActionContext
from compensation.services.dead_letters import resolve_dead_letter
from compensation.services.replay import replay_dead_letter


def _open_letters(context: ActionContext, limit: int) -> list[int]:
    return list(DeadLetter.objects.filter(work_order_id=context.work_order_id, state=DeadLetterState.OPEN)
                .order_by("id").values_list("id", flat=True)[:limit])


def replay_dead_letters(context: ActionContext) -> dict:
    """Replay the work order's open dead letters (on their own resources unless `any_resource`),
    up to `limit`; a dead letter that refuses (its resource quarantined, consumed, in use) is
    counted with its reason and the others go on."""
    options = context.input or {}
    replayed, refused = [], {}
    for letter_id in _open_letters(context, int(options.get("limit", 100))):
        try:
            replay_dead_letter(dead_letter=letter_id, actor=context.actor,
                               any_resource=bool(options.get("any_resource", False)),
                               reason=f"runbook {context.runbook} ({context.run_id})")
            replayed.append(letter_id)
        except ReplayRefused as exc:
            refused[str(letter_id)] = exc.reason
    return {"replayed": replayed, "refused": refused}


def resolve_dead_letters(context: ActionContext) -> dict:
    """Mark the work order's open dead letters resolved: compensated by hand, nothing to replay."""
    options = context.input or {}
    reason = options.get("reason") or f"runbook {context.runbook} ({context.run_id})"
    resolved = []
    for letter_id in _open_letters(context, int(options.get("limit", 1000))):
        resolve_dead_letter(dead_letter=letter_id, actor=context.actor, reason=reason)
        resolved.append(letter_id)
    return {"resolved": resolved}
