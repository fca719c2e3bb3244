"""The dead-letter clean-up: archive (JSON Lines) and/or purge old dead letters in given states,
optionally replaying the open, retryable ones first. In batches of ids, each its own transaction
with its audit entry, so memory stays constant and an interrupted run keeps what it did."""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import IO

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from audit.choices import AuditAction
from audit.services import Target, record_audit
from compensation.choices import DeadLetterState
from compensation.errors import BadInput
from compensation.models import DeadLetter
from compensation.services.common import actor_name
from compensation.services.replay import replay_dead_letter
from resources.choices import FailureCategory
from retryops.errors import DomainError

MAX_DAYS = 36500
MAX_BATCH = 10000


@dataclass
class Cleanup:
    """What one clean-up did (or, dry, would do)."""

    selected: int = 0
    archived: int = 0
    purged: int = 0
    replayed: int = 0
    refused: int = 0
    dry_run: bool = False
    refusals: list[str] = field(default_factory=list)


def parse_states(states) -> tuple[str, ...]:
    """States as a list or as "resolved,discarded"; an unknown one is refused by name."""
    if isinstance(states, str):
        states = [s.strip() for s in states.split(",") if s.strip()]
    if not isinstance(states, (list, tuple, set)) or not states:
        raise BadInput(f"state must name dead-letter states ({', '.join(DeadLetterState.values)}), got {states!r}",
                       field="state")
    unknown = sorted(str(s) for s in set(states) - set(DeadLetterState.values))
    if unknown:
        raise BadInput(f"unknown dead-letter state {', '.join(unknown)}: use {', '.join(DeadLetterState.values)}",
                       field="state", unknown=unknown)
    if DeadLetterState.REPLAYING in states:
        raise BadInput("replaying dead letters are following their replay task and cannot be cleaned up",
                       field="state")
    return tuple(sorted(set(states)))


def _days(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DAYS:
        raise BadInput(f"older_than_days must be a whole number of days from 0 to {MAX_DAYS}, got {value!r}",
                       field="older_than_days")
    return value


def cleanup_queryset(*, older_than_days: int, states) -> QuerySet[DeadLetter]:
    """The dead letters a clean-up with these arguments would take (dead_letter_state_age_idx)."""
    cutoff = timezone.now() - timedelta(days=_days(older_than_days))
    return DeadLetter.objects.filter(state__in=parse_states(states), died_at__lt=cutoff)


def _row(letter: dict) -> str:
    return json.dumps(letter, cls=DjangoJSONEncoder, ensure_ascii=False)


def cleanup_dead_letters(*, older_than_days: int, states, actor: str, archive: IO[str] | None = None,
                         purge: bool = False, replay_retryable: bool = False, dry_run: bool = False,
                         batch_size: int = 1000, progress: Callable[[int], None] | None = None) -> Cleanup:
    """Archive to `archive` (a text file, one JSON object a line) and/or purge the dead letters in
    `states` that died more than `older_than_days` ago; with `replay_retryable`, first replay the
    open ones whose error is retryable (they are then replaying, and kept). `dry_run` counts only."""
    actor = actor_name(actor)
    queryset = cleanup_queryset(older_than_days=older_than_days, states=states)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH:
        raise BadInput(f"batch_size must be a whole number from 1 to {MAX_BATCH}, got {batch_size!r}",
                       field="batch_size")
    if not (archive or purge or replay_retryable):
        raise BadInput("say what to do: archive to a file, purge, or replay the retryable ones", field="purge")
    result = Cleanup(dry_run=dry_run)
    if dry_run:
        result.selected = queryset.count()
        if replay_retryable:
            result.replayed = queryset.filter(state=DeadLetterState.OPEN,
                                              error_category=FailureCategory.RETRYABLE).count()
        return result
    last_id = 0
    while True:
        # Keyset pagination by id: each batch reads at most batch_size rows, however many there are.
        ids = list(queryset.filter(pk__gt=last_id).order_by("pk").values_list("pk", flat=True)[:batch_size])
        if not ids:
            return result
        last_id = ids[-1]
        result.selected += len(ids)
        kept: set[int] = set()
        if replay_retryable:
            kept = _replay(ids, actor, result)
        if archive or purge:
            _archive_and_purge([i for i in ids if i not in kept], queryset, actor, archive, purge, result)
        if progress:
            progress(len(ids))


def _replay(ids: list[int], actor: str, result: Cleanup) -> set[int]:
    replayable = DeadLetter.objects.filter(pk__in=ids, state=DeadLetterState.OPEN,
                                           error_category=FailureCategory.RETRYABLE).values_list("pk", flat=True)
    kept = set()
    for pk in replayable:
        try:
            replay_dead_letter(dead_letter=pk, actor=actor, reason="dlq_cleanup --replay-retryable")
            result.replayed += 1
            kept.add(pk)
        except DomainError as exc:
            result.refused += 1
            if len(result.refusals) < 20:
                result.refusals.append(f"dead letter {pk}: {exc}")
    return kept


def _archive_and_purge(ids, queryset, actor, archive, purge, result) -> None:
    with transaction.atomic():
        # Locked and re-checked: a dead letter replayed since the batch was chosen is not ours any more.
        rows = list(queryset.select_for_update(skip_locked=True).filter(pk__in=ids).order_by("pk").values())
        if not rows:
            return
        if archive is not None:
            archive.write("".join(_row(r) + "\n" for r in rows))
            archive.flush()  # on disk before the rows it holds are deleted
            result.archived += len(rows)
        taken = [r["id"] for r in rows]
        if purge:
            DeadLetter.objects.filter(pk__in=taken).delete()
            result.purged += len(rows)
        record_audit(action=AuditAction.DEAD_LETTER_CLEANUP,
                     target=Target(type="compensation.deadletter", id=f"{taken[0]}-{taken[-1]}",
                                   label=f"{len(taken)} dead letters"),
                     before={"ids": [taken[0], taken[-1]], "count": len(taken)},
                     after=None if purge else {"archived": len(taken)},
                     reason=f"{'archived' if archive is not None else ''}{' and ' if archive and purge else ''}"
                            f"{'purged' if purge else ''}", actor=actor)
