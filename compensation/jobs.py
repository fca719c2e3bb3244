"""RQ jobs of the compensation app: thin, they call the services and return what they did."""

from dataclasses import asdict

from retryops.language import in_stored_language

# Seconds between the ops process's runs of the periodic jobs (retryops.ops).
DEAD_LETTERS_EVERY = 5
DLQ_CLEANUP_EVERY = 3600
ESCALATE_EVERY = 60


@in_stored_language
def dead_letters_job() -> dict:
    """Periodic, every few seconds: the one path from a task's death to its dead letter and work
    order (collect the dead tasks not collected yet), then follow the replays that ended, restart
    the bulk replays whose runner died, and end the runbook runs whose runner died."""
    from compensation.runbooks.services import fail_interrupted_runbook_runs
    from compensation.services.bulk_replay import restart_stalled_bulk_replays
    from compensation.services.dead_letters import collect_dead_letters, follow_replays

    made = 0
    while batch := collect_dead_letters():
        made += len(batch)
    return {"dead_letters": made, "replays_followed": follow_replays(),
            "bulk_replays_restarted": restart_stalled_bulk_replays(),
            "runbook_runs_interrupted": len(fail_interrupted_runbook_runs())}


@in_stored_language
def bulk_replay_job(bulk_replay_id: int) -> str:
    """One slice of a bulk replay; enqueues the next slice while there is more, so the jobs
    sharing its queue wait one slice at most."""
    from compensation.services.bulk_replay import run_bulk_replay
    from compensation.services.bulk_replay import enqueue_bulk_replay

    outcome = run_bulk_replay(bulk_replay=bulk_replay_id)
    if outcome == "more":
        enqueue_bulk_replay(bulk_replay_id)
    return outcome


@in_stored_language
def dlq_cleanup_job() -> dict:
    """Periodic: purge resolved and discarded dead letters older than RETENTION_DAYS,
    so they never pile up unattended."""
    from audit.choices import Channel
    from audit.context import acting_as
    from compensation.choices import DeadLetterState
    from compensation.services.cleanup import cleanup_dead_letters
    from compensation.services.cleanup import RETENTION_DAYS

    with acting_as(actor="dlq retention", channel=Channel.SYSTEM):
        result = cleanup_dead_letters(older_than_days=RETENTION_DAYS,
                                      states=[DeadLetterState.RESOLVED, DeadLetterState.DISCARDED],
                                      actor="dlq retention", purge=True)
    return {"purged": result.purged}


@in_stored_language
def escalate_job() -> dict:
    """Periodic: the escalation safety net (compensation.services.escalation), as the system. Its
    failures are in the result and the log, not raised: the next run tries again."""
    from audit.choices import Channel
    from audit.context import acting_as
    from compensation.services.escalation import escalate

    with acting_as(actor="escalate", channel=Channel.SYSTEM):
        return asdict(escalate())
