"""Automatic scheduling: each tick of a batch config starts its tasks, failed resources first if asked."""

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from resources.errors import PoolExhausted, ResourceUnavailable
from retryops.errors import DomainError
from retryops.jsonsafe import clean_text
from scheduling.models import BatchConfig, Task
from scheduling.selectors import failed_first_candidates
from scheduling.services.tasks import start_task

log = logging.getLogger(__name__)


@dataclass
class BatchTicks:
    """What one run_batches did: tasks started per config, and why the configs that failed did."""

    started: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def run_batch(*, config: BatchConfig, now: datetime | None = None) -> list[Task]:
    """One tick of a batch config: start up to tasks_per_tick tasks, each on a resource claimed
    now. With retry_failed_first, recently failed retryable resources go first; quarantined ones
    never."""
    now = now or timezone.now()
    started: list[Task] = []
    candidates = failed_first_candidates(config=config, now=now) if config.retry_failed_first else []
    common = {"flow": config.flow, "pool_name": config.pool_id, "payload": config.payload, "policy": config.policy,
              "created_by": f"batch {config.name}"}
    while len(started) < config.tasks_per_tick and candidates:
        candidate = candidates.pop(0)
        try:
            with transaction.atomic():
                started.append(start_task(resource=candidate, reserve=True, **common))
        except ResourceUnavailable:
            continue  # taken since we looked
    while len(started) < config.tasks_per_tick:
        try:
            with transaction.atomic():
                started.append(start_task(claim_now=True, **common))
        except PoolExhausted:
            break
    BatchConfig.objects.filter(pk=config.pk).update(last_tick_at=now, last_error="")
    return started


def run_batches(*, now: datetime | None = None) -> BatchTicks:
    """Tick every enabled batch config. A config that fails is logged and its error recorded on
    it (last_error, last_tick_at); the others tick all the same."""
    now = now or timezone.now()
    ticks = BatchTicks()
    for config in BatchConfig.objects.filter(enabled=True).select_related("policy").order_by("name"):
        try:
            ticks.started[config.name] = len(run_batch(config=config, now=now))
        except Exception as exc:  # one bad config must not stop the others
            if isinstance(exc, DomainError):
                log.warning("batch config %s failed: %s", config.name, exc)
            else:
                log.exception("batch config %s failed", config.name)
            message = clean_text(f"{exc}" if isinstance(exc, DomainError) else f"{type(exc).__name__}: {exc}")[:4000]
            ticks.failed[config.name] = message
            BatchConfig.objects.filter(pk=config.pk).update(last_tick_at=now, last_error=message)
    return ticks
