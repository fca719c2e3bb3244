"""The audit log's vocabulary: through which door an action came, and which actions are audited."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class Channel(models.TextChoices):
    ADMIN = "admin", _("Admin")
    API = "api", _("API")
    COMMAND = "command", _("Management command")
    SYSTEM = "system", _("System")


class AuditAction(models.TextChoices):
    """Every operator action the audit log knows, as "<noun>.<verb>". One list, so the admin can
    filter by action without a DISTINCT over the table, and a typo fails in the first test that
    records it. The field itself carries no choices: adding an action here needs no migration.
    Claims and releases are recorded by the resource's timeline row, the API's too (it names the
    client, its key's prefix and the request); resource.claim and .release name the API's entries
    written before that, which the log keeps. An API heartbeat writes no timeline row and is
    audited (resource.heartbeat)."""

    # resources
    POOL_CREATE = "pool.create", _("Pool created")
    POOL_CHANGE = "pool.change", _("Pool changed")
    RESOURCE_CREATE = "resource.create", _("Resource created")
    RESOURCE_CHANGE = "resource.change", _("Resource changed")
    RESOURCE_RESET = "resource.reset", _("Resource reset")
    RESOURCE_QUARANTINE = "resource.quarantine", _("Resource quarantined")
    RESOURCE_UNQUARANTINE = "resource.unquarantine", _("Resource released from quarantine")
    RESOURCE_RETRY = "resource.retry", _("Resource retried (strict task)")
    RESOURCE_CLAIM = "resource.claim", _("Resource claimed (API)")
    RESOURCE_RELEASE = "resource.release", _("Resource released (API)")
    RESOURCE_HEARTBEAT = "resource.heartbeat", _("Resource lease extended (API)")
    # scheduling
    TASK_START = "task.start", _("Task started")
    TASK_CANCEL = "task.cancel", _("Task cancelled")
    TASK_RUN_NOW = "task.run_now", _("Task run now")
    POLICY_CREATE = "policy.create", _("Retry policy created")
    POLICY_CHANGE = "policy.change", _("Retry policy changed")
    POLICY_DELETE = "policy.delete", _("Retry policy removed (load_retry_policies --prune)")
    BATCH_CREATE = "batch.create", _("Batch config created")
    BATCH_CHANGE = "batch.change", _("Batch config changed")
    # compensation
    DEAD_LETTER_REPLAY = "dead_letter.replay", _("Dead letter replayed")
    DEAD_LETTER_DISCARD = "dead_letter.discard", _("Dead letter discarded")
    DEAD_LETTER_RESOLVE = "dead_letter.resolve", _("Dead letter resolved")
    DEAD_LETTER_CLEANUP = "dead_letter.cleanup", _("Dead letters archived or purged")
    BULK_REPLAY_START = "bulk_replay.start", _("Bulk replay started")
    BULK_REPLAY_CANCEL = "bulk_replay.cancel", _("Bulk replay cancelled")
    WORK_ORDER_OPEN = "work_order.open", _("Work order opened")
    WORK_ORDER_CHANGE = "work_order.change", _("Work order changed (assignee, runbook, notes)")
    WORK_ORDER_TRANSITION = "work_order.transition", _("Work order moved")
    WORK_ORDER_SLA_BREACH = "work_order.sla_breach", _("Work order SLA breached (notice, acknowledge or compensate)")
    RUNBOOK_RUN = "runbook.run", _("Runbook action run")
    RUNBOOK_REQUEST = "runbook.request", _("Runbook action requested")
    RUNBOOK_APPROVE = "runbook.approve", _("Runbook action approved")
    RUNBOOK_REJECT = "runbook.reject", _("Runbook action rejected")
    NOTIFICATION_RESEND = "notification.resend", _("Notifications sent again")
    # the REST API's clients
    API_CLIENT_CREATE = "api_client.create", _("API client created")
    API_CLIENT_REVOKE = "api_client.revoke", _("API client revoked")
    # who may do what: users, groups (the console's roles) and permissions, by whatever path
    # (audit.receivers)
    USER_CREATE = "user.create", _("User created")
    USER_CHANGE = "user.change", _("User changed (active, staff, superuser, password, name)")
    USER_DELETE = "user.delete", _("User deleted")
    USER_GROUPS_CHANGE = "user.change_groups", _("User's groups changed")
    USER_PERMISSIONS_CHANGE = "user.change_permissions", _("User's own permissions changed")
    GROUP_CREATE = "group.create", _("Group created")
    GROUP_CHANGE = "group.change", _("Group renamed")
    GROUP_DELETE = "group.delete", _("Group deleted")
    GROUP_PERMISSIONS_CHANGE = "group.change_permissions", _("Group's permissions changed")


class IdempotencyState(models.TextChoices):
    """Where the first request sent with an Idempotency-Key is: being processed, or answered."""

    IN_PROGRESS = "in_progress", _("In progress")
    DONE = "done", _("Done")
