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
