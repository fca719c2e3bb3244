"""The audit log's vocabulary: through which door an action came, and which actions are audited."""

from django.db import models


class Channel(models.TextChoices):
    ADMIN = "admin", "Admin"
    API = "api", "API"
    COMMAND = "command", "Management command"
    SYSTEM = "system", "System"


class AuditAction(models.TextChoices):
    """Every operator action the audit log knows, as "<noun>.<verb>". One list, so the admin can
    filter by action without a DISTINCT over the table, and a typo fails in the first test that
    records it. The field itself carries no choices: adding an action here needs no migration.
    Workers' routine claims and releases are not here: they belong to the resource timeline; the
    API's claims, releases and heartbeats are (resource.claim, .release, .heartbeat), because an
    external system's every change is audited under its client's name."""

    # resources
    POOL_CREATE = "pool.create", "Pool created"
    POOL_CHANGE = "pool.change", "Pool changed"
    RESOURCE_CREATE = "resource.create", "Resource created"
    RESOURCE_CHANGE = "resource.change", "Resource changed"
    RESOURCE_RESET = "resource.reset", "Resource reset"
    RESOURCE_QUARANTINE = "resource.quarantine", "Resource quarantined"
    RESOURCE_UNQUARANTINE = "resource.unquarantine", "Resource released from quarantine"
    RESOURCE_RETRY = "resource.retry", "Resource retried (strict task)"
    RESOURCE_CLAIM = "resource.claim", "Resource claimed (API)"
    RESOURCE_RELEASE = "resource.release", "Resource released (API)"
    RESOURCE_HEARTBEAT = "resource.heartbeat", "Resource lease extended (API)"
    # scheduling
    TASK_START = "task.start", "Task started"
    TASK_CANCEL = "task.cancel", "Task cancelled"
    TASK_RUN_NOW = "task.run_now", "Task run now"
    POLICY_CREATE = "policy.create", "Retry policy created"
    POLICY_CHANGE = "policy.change", "Retry policy changed"
    BATCH_CREATE = "batch.create", "Batch config created"
    BATCH_CHANGE = "batch.change", "Batch config changed"
    # compensation
    DEAD_LETTER_REPLAY = "dead_letter.replay", "Dead letter replayed"
    DEAD_LETTER_DISCARD = "dead_letter.discard", "Dead letter discarded"
    DEAD_LETTER_RESOLVE = "dead_letter.resolve", "Dead letter resolved"
    DEAD_LETTER_CLEANUP = "dead_letter.cleanup", "Dead letters archived or purged"
    BULK_REPLAY_START = "bulk_replay.start", "Bulk replay started"
    BULK_REPLAY_CANCEL = "bulk_replay.cancel", "Bulk replay cancelled"
    WORK_ORDER_OPEN = "work_order.open", "Work order opened"
    WORK_ORDER_CHANGE = "work_order.change", "Work order changed (assignee, runbook, notes)"
    WORK_ORDER_TRANSITION = "work_order.transition", "Work order moved"
    WORK_ORDER_SLA_BREACH = "work_order.sla_breach", "Work order SLA breached (notice, acknowledge or compensate)"
    RUNBOOK_RUN = "runbook.run", "Runbook action run"
    RUNBOOK_REQUEST = "runbook.request", "Runbook action requested"
    RUNBOOK_APPROVE = "runbook.approve", "Runbook action approved"
    RUNBOOK_REJECT = "runbook.reject", "Runbook action rejected"
    NOTIFICATION_RESEND = "notification.resend", "Notifications sent again"
    # the REST API's clients
    API_CLIENT_CREATE = "api_client.create", "API client created"
    API_CLIENT_REVOKE = "api_client.revoke", "API client revoked"


class IdempotencyState(models.TextChoices):
    """Where the first request sent with an Idempotency-Key is: being processed, or answered."""

    IN_PROGRESS = "in_progress", "In progress"
    DONE = "done", "Done"
