"""Dead letters, bulk replays and escalation: the only code that changes them. The admin, jobs,
commands and the API call these. One module per use case; the public names are re-exported here.
Reads live in compensation.selectors; work orders have their own (compensation.work_orders.services)."""

from compensation.services.bulk_replay import (
    bulk_replay_preview,
    cancel_bulk_replay,
    restart_stalled_bulk_replays,
    run_bulk_replay,
    start_bulk_replay,
)
from compensation.services.cleanup import (
    Cleanup,
    cleanup_dead_letters,
    cleanup_queryset,
    parse_states,
)
from compensation.services.dead_letters import (
    collect_dead_letters,
    discard_dead_letter,
    follow_replays,
    resolve_dead_letter,
)
from compensation.services.escalation import (
    Escalation,
    breached_work_orders,
    escalate,
    mark_breach,
    orphaned_dead_letters,
    resendable_notifications,
)
from compensation.services.replay import replay_dead_letter

__all__ = [
    "bulk_replay_preview", "cancel_bulk_replay", "restart_stalled_bulk_replays", "run_bulk_replay",
    "start_bulk_replay",
    "Cleanup", "cleanup_dead_letters", "cleanup_queryset", "parse_states",
    "Escalation", "breached_work_orders", "escalate", "mark_breach", "orphaned_dead_letters",
    "resendable_notifications",
    "collect_dead_letters", "discard_dead_letter", "follow_replays", "replay_dead_letter", "resolve_dead_letter",
]
