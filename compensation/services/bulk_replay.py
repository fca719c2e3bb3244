"""Bulk replay: replay the open dead letters matching a filter at a velocity limit (replays per
second; DEFAULT_RATE, or the request's own from 1 to 500, as SQS redrive allows), one running
request per filter (bulk_replay_one_running_per_filter). A request is run in slices by
bulk_replay_job; each slice claims it by a conditional update of heartbeat_at, so two runners never
run it together, and resumes after last_dead_letter_id, so a process that died loses nothing: the
periodic job re-enqueues a request whose heartbeat went stale."""

import hashlib
import json
import math
import time
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone, translation
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _

from audit.choices import AuditAction
from audit.services import record_audit
from compensation.choices import BulkReplayState, DeadLetterState, state_words
from compensation.errors import BulkReplayRunning
from compensation.inputs import field_name, locked, text
from compensation.models import BulkReplay, DeadLetter
from compensation.services.replay import replay_dead_letter
from resources.selectors import get_pool
from retryops.errors import BadInput, DomainError, IllegalTransition
from retryops.inputs import record_id

MAX_RATE = 500
# At least one replay a second, as SQS redrive: a slice waits out the slot of its last replay
# (1 / rate), and the jobs that share its queue would wait that long too.
MIN_RATE = 1
# Replays per second when the request names no rate.
DEFAULT_RATE = 10
FILTER_FIELDS = ("flow", "error_signature", "pool", "resource", "died_after", "died_before")
# A runner refreshes the heartbeat at every replay; one older than this has died.
STALE_AFTER = timedelta(seconds=30)
# Short, because the jobs that share its queue (notification sends) wait for it.
SLICE_SECONDS = 2.0


def _when(value, field: str) -> str:
    if isinstance(value, str):
        try:
            parsed = parse_datetime(value)
        except ValueError:  # well formed, but no date: February 30th, an offset of 99 hours
            parsed = None
        value = parsed if parsed is not None else value
    if not isinstance(value, datetime) or timezone.is_naive(value):
        raise BadInput(_("%(field)s must be a date and time with a time zone, got %(value)r") % {
            "field": field_name(field), "value": value}, field=field)
    return value.isoformat()


def parse_filter(filter) -> dict:
    """A bulk replay's filter in one canonical form (what "the same filter" means): flow and
    error_signature as text, pool and resource as ids, died_after/died_before as ISO times.
    Unknown keys and bad values are refused by name."""
    if not isinstance(filter, dict):
        raise BadInput(_("filter must be an object with some of %(fields)s") % {"fields": ", ".join(FILTER_FIELDS)},
                       field="filter")
    unknown = sorted(set(filter) - set(FILTER_FIELDS))
    if unknown:
        raise BadInput(_("unknown filter field %(unknown)s: use %(fields)s") % {
            "unknown": ", ".join(map(str, unknown)), "fields": ", ".join(FILTER_FIELDS)}, field=f"filter.{unknown[0]}")
    canonical = {}
    for field in ("flow", "error_signature"):
        if filter.get(field) not in (None, ""):
            canonical[field] = text(filter[field], field=f"filter.{field}", max_length=500)
    if filter.get("pool") not in (None, ""):
        canonical["pool"] = get_pool(filter["pool"]).pk
    if filter.get("resource") not in (None, ""):
        canonical["resource"] = record_id(filter["resource"], field="filter.resource", error=BadInput)
    for field in ("died_after", "died_before"):
        if filter.get(field) not in (None, ""):
            canonical[field] = _when(filter[field], f"filter.{field}")
    return canonical


def matching(canonical: dict) -> QuerySet[DeadLetter]:
    """The open dead letters a (canonical) filter selects."""
    condition = Q(state=DeadLetterState.OPEN)
    for field, lookup in (("flow", "flow"), ("error_signature", "error_signature"), ("pool", "pool_id"),
                          ("resource", "resource_id"), ("died_after", "died_at__gte"),
                          ("died_before", "died_at__lt")):
        if field in canonical:
            condition &= Q(**{lookup: canonical[field]})
    return DeadLetter.objects.filter(condition)


def bulk_replay_preview(*, filter) -> int:
    """The dry run: how many open dead letters a bulk replay with this filter would replay now."""
    return matching(parse_filter(filter)).count()


def _rate(rate) -> float:
    if rate is None:
        rate = DEFAULT_RATE
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) \
            or not MIN_RATE <= rate <= MAX_RATE:
        raise BadInput(_("rate must be a number of replays per second from %(min)s to %(max)s, got %(value)r") % {
            "min": MIN_RATE, "max": MAX_RATE, "value": rate}, field="rate")
    return float(rate)


def start_bulk_replay(*, filter, actor: str, rate: float | None = None, any_resource: bool = False,
                      everything: bool = False) -> BulkReplay:
    """Ask for a bulk replay and enqueue its runner once this commits. Refused (BulkReplayRunning)
    while one with the same filter runs. An empty filter replays every open dead letter: refused
    (BadInput on `filter`) unless `everything` says that is meant, so that a body lost on the way
    or a form left blank never widens a bulk replay to all of them."""
    canonical = parse_filter(filter)
    rate = _rate(rate)
    if not canonical and not everything:
        raise BadInput(_("an empty filter would replay every open dead letter: name a filter, or say that all "
                         "of them are meant"), field="filter")
    key = hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()
    with transaction.atomic():
        try:
            with transaction.atomic():
                bulk = BulkReplay.objects.create(filter=canonical, filter_key=key, rate=rate,
                                                 any_resource=any_resource, requested_by=actor,
                                                 selected=matching(canonical).count())
        except IntegrityError:
            running = BulkReplay.objects.filter(filter_key=key, state=BulkReplayState.RUNNING).first()
            raise BulkReplayRunning(
                _("bulk replay %(id)s with the same filter is running: cancel it or wait for it") % {"id": running.pk}
                if running else _("a bulk replay with the same filter is running: cancel it or wait for it"),
                bulk_replay_id=running.pk if running else None) from None
        record_audit(action=AuditAction.BULK_REPLAY_START, target=bulk, before=None,
                     after={"filter": canonical, "rate": rate, "any_resource": bulk.any_resource,
                            "selected": bulk.selected}, actor=actor)
        bulk_id = bulk.pk
        transaction.on_commit(lambda: enqueue_bulk_replay(bulk_id), robust=True)
    return bulk


def enqueue_bulk_replay(bulk_id: int) -> None:
    import django_rq

    from compensation.jobs import bulk_replay_job

    django_rq.get_queue("default").enqueue(bulk_replay_job, bulk_id, result_ttl=0)


def cancel_bulk_replay(*, bulk_replay: BulkReplay | int, actor: str) -> BulkReplay:
    """Stop a running bulk replay; the replays it started go on."""
    with transaction.atomic():
        bulk = locked(BulkReplay, bulk_replay, kind="bulk_replay")
        if bulk.state != BulkReplayState.RUNNING:
            raise IllegalTransition(_("cannot cancel bulk replay %(id)s: it is %(state)s") % {
                "id": bulk.pk, "state": state_words(BulkReplayState, bulk.state)}, kind="bulk_replay", id=bulk.pk,
                                    from_state=bulk.state, to_state=BulkReplayState.CANCELLED)
        bulk.state, bulk.finished_at = BulkReplayState.CANCELLED, timezone.now()
        bulk.save(update_fields=["state", "finished_at"])
        record_audit(action=AuditAction.BULK_REPLAY_CANCEL, target=bulk, before={"state": BulkReplayState.RUNNING},
                     after={"state": bulk.state, "done": bulk.done, "refused": bulk.refused}, actor=actor)
    return bulk


def _claim(bulk_id: int, now: datetime) -> bool:
    """Take the runner's turn: only when nobody heartbeated within STALE_AFTER."""
    return BulkReplay.objects.filter(
        Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=now - STALE_AFTER), pk=bulk_id,
        state=BulkReplayState.RUNNING).update(heartbeat_at=now) == 1


def _step(bulk_id: int) -> bool:
    """Replay the next dead letter of a bulk replay, with its progress, in one transaction.
    False when there is nothing more to do (finished or cancelled)."""
    with transaction.atomic():
        bulk = BulkReplay.objects.select_for_update().get(pk=bulk_id)
        if bulk.state != BulkReplayState.RUNNING:
            return False
        letter = matching(bulk.filter).filter(pk__gt=bulk.last_dead_letter_id).order_by("pk").first()
        now = timezone.now()
        if letter is None:
            bulk.state, bulk.finished_at, bulk.heartbeat_at = BulkReplayState.FINISHED, now, None
            bulk.save(update_fields=["state", "finished_at", "heartbeat_at"])
            return False
        try:
            # A refusal is kept on the bulk replay (last_error): stored text is English whatever
            # the language of whoever runs this slice (as retryops.language.in_stored_language).
            with translation.override(None):
                replay_dead_letter(dead_letter=letter.pk, actor=bulk.requested_by, any_resource=bulk.any_resource,
                                   reason=f"{bulk}")
            bulk.done += 1
        except DomainError as exc:  # this dead letter refuses; the others still get theirs
            bulk.refused += 1
            bulk.last_error = f"dead letter {letter.pk}: {exc}"[:2000]
        bulk.last_dead_letter_id, bulk.heartbeat_at = letter.pk, now
        bulk.save(update_fields=["done", "refused", "last_error", "last_dead_letter_id", "heartbeat_at"])
        return True


def run_bulk_replay(*, bulk_replay: BulkReplay | int, max_seconds: float | None = None,
                    limit: int | None = None) -> str:
    """Run one slice of a bulk replay: at most `max_seconds` (or `limit` replays), never faster
    than its rate. Returns "finished", "more" (call again) or "busy" (another runner has it)."""
    bulk_id = bulk_replay.pk if isinstance(bulk_replay, BulkReplay) else bulk_replay
    max_seconds = SLICE_SECONDS if max_seconds is None else max_seconds
    if not _claim(bulk_id, timezone.now()):
        return "busy"
    rate = BulkReplay.objects.values_list("rate", flat=True).get(pk=bulk_id)
    started, n = time.monotonic(), 0
    while True:
        # Replay n starts no earlier than n / rate seconds into the slice: the velocity limit.
        wait = started + n / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        if not _step(bulk_id):
            return "finished"
        n += 1
        if (limit is not None and n >= limit) or time.monotonic() - started + 1 / rate > max_seconds:
            # Wait out this replay's slot, so the next slice's first replay keeps the rate too;
            # then give the turn back, so that slice (this job's successor) may claim it at once.
            time.sleep(max(0.0, started + n / rate - time.monotonic()))
            BulkReplay.objects.filter(pk=bulk_id).update(heartbeat_at=None)
            return "more"


def restart_stalled_bulk_replays(*, now: datetime | None = None) -> list[int]:
    """Re-enqueue the running bulk replays whose runner died (heartbeat stale): they resume."""
    now = now or timezone.now()
    stalled = list(BulkReplay.objects.filter(state=BulkReplayState.RUNNING)
                   .filter(Q(heartbeat_at__lt=now - STALE_AFTER) | Q(heartbeat_at__isnull=True,
                                                                     created_at__lt=now - STALE_AFTER))
                   .values_list("pk", flat=True))
    for bulk_id in stalled:
        enqueue_bulk_replay(bulk_id)
    return stalled
