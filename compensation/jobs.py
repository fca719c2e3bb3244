"""RQ jobs of the compensation app: thin, they call the services and return what they did."""

import logging

log = logging.getLogger(__name__)


def dead_letters_job() -> dict:
    """Periodic: collect the dead letters not collected yet and follow the replays that ended."""
    from compensation.services import collect_dead_letters, follow_replays

    made = 0
    while batch := collect_dead_letters():
        made += len(batch)
    return {"dead_letters": made, "replays_followed": follow_replays()}


def dlq_cleanup_job() -> dict:
    """Periodic: purge resolved and discarded dead letters older than RETRYOPS_DLQ_RETENTION_DAYS,
    so they never pile up unattended."""
    from django.conf import settings

    from audit.choices import Channel
    from audit.context import acting_as
    from compensation.choices import DeadLetterState
    from compensation.services import cleanup_dead_letters

    with acting_as(actor="dlq retention", channel=Channel.SYSTEM):
        result = cleanup_dead_letters(older_than_days=settings.RETRYOPS_DLQ_RETENTION_DAYS,
                                      states=[DeadLetterState.RESOLVED, DeadLetterState.DISCARDED],
                                      actor="dlq retention", purge=True)
    return {"purged": result.purged}
