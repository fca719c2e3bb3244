"""RQ jobs of the audit app: thin wrappers around audit.streaming."""

import time

from retryops.language import in_stored_language

# One run drains the backlog batch by batch, for at most this long, so it ends before the next
# run is due however large the backlog Redis left behind.
PUBLISH_FOR_SECONDS = 5.0
# Seconds between the ops process's runs of the periodic jobs (retryops.ops). Idempotency keys
# are kept RETRYOPS_IDEMPOTENCY_KEEP_HOURS (at least 24): an hourly prune keeps the table within
# an hour of that.
PUBLISH_STREAM_EVERY = 2
PRUNE_STREAM_EVERY = 600
PRUNE_IDEMPOTENCY_KEYS_EVERY = 3600


@in_stored_language
def publish_stream_job() -> int:
    """Periodic: publish the stream outbox until it is empty, Redis refuses, or time is up."""
    from audit.streaming import PUBLISH_BATCH, publish_stream_messages

    published, until = 0, time.monotonic() + PUBLISH_FOR_SECONDS
    while time.monotonic() < until:
        count = publish_stream_messages(limit=PUBLISH_BATCH)
        published += count or 0
        if count is None or count < PUBLISH_BATCH:
            break
    return published


@in_stored_language
def prune_stream_job() -> int:
    """Periodic: delete stream messages published more than a day ago."""
    from audit.streaming import prune_published

    return prune_published()


def prune_idempotency_keys_job() -> int:
    """Periodic: delete idempotency keys kept longer than a day (services.IDEMPOTENCY_KEY_LIFETIME)."""
    from audit.services import prune_idempotency_keys

    return prune_idempotency_keys()
