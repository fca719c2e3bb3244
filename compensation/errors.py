"""Domain errors of dead letters, work orders and replays. Each has a stable `code`, a sentence
for people and `details` naming what was wrong (the field, the state, the reason)."""

from retryops.errors import DomainError


class CompensationError(DomainError):
    """Base class of the compensation app's errors."""

    code = "compensation_error"


class ReplayRefused(CompensationError):
    """A dead letter that cannot be replayed as asked; `reason`: quarantined, consumed, removed,
    in_use or task_live (the last two may pass: try again later), or succeeded (a run of its
    business instance succeeded since: resolve it instead)."""

    code = "replay_refused"

    def __init__(self, message: str, *, reason: str, **details):
        super().__init__(message, reason=reason, **details)
        self.reason = reason


class BulkReplayRunning(CompensationError):
    """A bulk replay with the same filter is running already; details: `bulk_replay_id`."""

    code = "bulk_replay_running"
