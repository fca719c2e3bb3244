"""RQ job that sends the due notifications: enqueued after a commit that queued some, and run by
the ops process every SEND_NOTIFICATIONS_EVERY seconds for retries and for anything an enqueue missed."""

from compensation.notifications.services import send_due_notifications
from retryops.language import in_stored_language

SEND_NOTIFICATIONS_EVERY = 30


@in_stored_language
def send_notifications_job() -> dict[str, int]:
    return send_due_notifications()
