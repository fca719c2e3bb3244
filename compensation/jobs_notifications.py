"""RQ job that sends the due notifications: enqueued after a commit that queued some, and run
periodically (rq cron, every 30 s) for retries and for anything an enqueue missed."""

from compensation.notifications import send_due_notifications
from retryops.language import in_stored_language


@in_stored_language
def send_notifications_job() -> dict[str, int]:
    return send_due_notifications()
