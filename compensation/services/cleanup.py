"""The dead-letter clean-up: archive (JSON Lines) and/or purge old dead letters in given states,
optionally replaying the open, retryable ones first. In batches by id (keyset), each its own
transaction with its audit entry, so memory stays constant and an interrupted run keeps what it did.

A batch is one SQL statement: it picks the next rows with FOR UPDATE SKIP LOCKED (a dead letter
being replayed or changed meanwhile is left alone, and re-checked against the state and age), and
deletes them and/or renders their archive lines in PostgreSQL, returning one row (count, first and
last id, the lines). The lines are written and fsync'ed before the batch commits, so a purged dead
letter is always in the archive; a crash between the fsync and the commit leaves those rows in
place to be archived again by the next run, so an archive may hold a dead letter twice (read it
keyed by `id`)."""

import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from typing import IO

from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from audit.choices import AuditAction
from audit.services import Target, record_audit
from compensation.choices import DeadLetterState
from compensation.models import DeadLetter
from compensation.services.replay import replay_dead_letter
from resources.choices import FailureCategory
from retryops.errors import BadInput, DomainError
from retryops.inputs import whole_number

MAX_DAYS = 36500
MAX_BATCH = 10000
# Measured with bench/dlq_cleanup.py: purge rows/s rise ~1.5x from 1,000 to 5,000 a batch, archiving
# ~10%; an archive batch of 5,000 holds about 10 MB of lines and its row locks for ~0.1 s.
DEFAULT_BATCH = 5000
# Resolved and discarded dead letters are purged by the periodic clean-up once this many days old.
RETENTION_DAYS = 30


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
    if not isinstance(states, (list, tuple, set)) or not states or not all(isinstance(s, str) for s in states):
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
    return whole_number(value, field="older_than_days", minimum=0, maximum=MAX_DAYS, error=BadInput)


def _conditions(older_than_days, states) -> tuple[tuple[str, ...], datetime]:
    cutoff = timezone.now() - timedelta(days=_days(older_than_days))
    return parse_states(states), cutoff


def cleanup_queryset(*, older_than_days: int, states) -> QuerySet[DeadLetter]:
    """The dead letters a clean-up with these arguments would take (dead_letter_state_age_idx)."""
    states, cutoff = _conditions(older_than_days, states)
    return DeadLetter.objects.filter(state__in=states, died_at__lt=cutoff)


def _json_value(column: str, db_type: str, name: str) -> str:
    """SQL rendering a column as json.dumps(..., cls=DjangoJSONEncoder, ensure_ascii=False) does,
    so archives written before the clean-up ran in SQL read alike, byte for byte."""
    if db_type in ("bigint", "integer", "smallint", "xid8"):
        # xid8 (the writing transaction, DeadLetter.xid) reads back as an int, so it is a JSON number.
        return f"coalesce({column}::text, 'null')"
    if db_type == "text" or db_type.startswith("varchar"):
        # to_json escapes exactly what json.dumps(ensure_ascii=False) escapes: the quote, the
        # backslash, and control characters (\b \f \n \r \t, else \u00xx); the rest stays as is.
        return f"coalesce(to_json({column})::text, 'null')"
    if db_type == "timestamp with time zone":
        # DjangoJSONEncoder: UTC as "Z", milliseconds truncated, no fraction at a whole second.
        utc = f"({column} AT TIME ZONE 'UTC')"
        iso = 'YYYY-MM-DD"T"HH24:MI:SS'
        return (f"""coalesce('"' || CASE WHEN date_trunc('second', {utc}) = {utc} THEN to_char({utc}, '{iso}') """
                f"""ELSE to_char({utc}, '{iso}.MS') END || 'Z"', 'null')""")
    raise NotImplementedError(f"the dead-letter archive cannot render {name} ({db_type}) in SQL yet: add it to "
                              "compensation.services.cleanup._json_value as DjangoJSONEncoder writes it")


def _archive_line() -> str:
    """SQL for one archive line: every column by attname, in the model's order."""
    parts = []
    for n, f in enumerate(DeadLetter._meta.concrete_fields):
        key = ("{" if n == 0 else ", ") + json.dumps(f.attname) + ": "
        parts += [f"'{key}'", _json_value(connection.ops.quote_name(f.column), f.db_type(connection), f.name)]
    return " || ".join([*parts, "'}'", "chr(10)"])


@cache
def _batch_sql(*, archive: bool, purge: bool, by_ids: bool) -> str:
    table = connection.ops.quote_name(DeadLetter._meta.db_table)
    # The queryset's conditions again, checked on the locked row: what changed since is not taken.
    where = "state = ANY(%(states)s::varchar[]) AND died_at < %(cutoff)s"
    where += " AND id = ANY(%(ids)s::bigint[])" if by_ids else " AND id > %(after)s::bigint"
    lines = f"string_agg({_archive_line()}, '' ORDER BY id)" if archive else "NULL"
    # Keyset by id: each batch reads at most `limit` rows however many there are.
    order = "ORDER BY id LIMIT %(limit)s::bigint FOR UPDATE SKIP LOCKED"
    if purge:
        # By ctid: the picked rows are locked, so none moves before the DELETE, and a TID scan
        # spares it an index lookup per row (a third of the purge's time). A row updated since the
        # statement's snapshot (still matching) is not found and stays for the next run.
        taken = (f"WITH picked AS (SELECT ctid FROM {table} WHERE {where} {order}), taken AS (DELETE FROM {table} "
                 f"WHERE ctid = ANY(ARRAY(SELECT ctid FROM picked)) RETURNING {'*' if archive else 'id'})")
    else:
        taken = f"WITH taken AS (SELECT * FROM {table} WHERE {where} {order})"
    return f"{taken} SELECT count(*), min(id), max(id), {lines} FROM taken"


def _sync(archive: IO[str]) -> None:
    archive.flush()
    try:
        fileno = archive.fileno()
    except (AttributeError, io.UnsupportedOperation):
        return  # an in-memory archive: nothing to put on disk
    os.fsync(fileno)


def cleanup_dead_letters(*, older_than_days: int, states, actor: str, archive: IO[str] | None = None,
                         purge: bool = False, replay_retryable: bool = False, dry_run: bool = False,
                         batch_size: int = DEFAULT_BATCH, progress: Callable[[int], None] | None = None) -> Cleanup:
    """Archive to `archive` (a text file, one JSON object a line) and/or purge the dead letters in
    `states` that died more than `older_than_days` ago; with `replay_retryable`, first replay the
    open ones whose error is retryable (they are then replaying, and kept). `dry_run` counts only.
    Each batch's lines are on disk before the batch commits; after a crash, some may be archived
    twice (see the module's docstring)."""
    states, cutoff = _conditions(older_than_days, states)
    queryset = DeadLetter.objects.filter(state__in=states, died_at__lt=cutoff)
    batch_size = whole_number(batch_size, field="batch_size", maximum=MAX_BATCH, error=BadInput)
    if not (archive or purge or replay_retryable):
        raise BadInput("say what to do: archive to a file, purge, or replay the retryable ones", field="purge")
    result = Cleanup(dry_run=dry_run)
    if dry_run:
        result.selected = queryset.count()
        if replay_retryable:
            result.replayed = queryset.filter(state=DeadLetterState.OPEN,
                                              error_category=FailureCategory.RETRYABLE).count()
        return result
    batch = _Batch(states=list(states), cutoff=cutoff, archive=archive, purge=purge, actor=actor, limit=batch_size)
    last_id = 0
    while True:
        if replay_retryable:
            # Chosen first and replayed one by one (each in its own transaction); the rest are
            # then taken by id, re-checked under the lock like any batch.
            ids = list(queryset.filter(pk__gt=last_id).order_by("pk").values_list("pk", flat=True)[:batch_size])
            if not ids:
                return result
            last_id = ids[-1]
            result.selected += len(ids)
            kept = _replay(ids, actor, result)
            rest = [i for i in ids if i not in kept]
            if (archive or purge) and rest:
                batch.tally(result, batch.take(ids=rest)[0])
            seen = len(ids)
        else:
            seen, last = batch.take(after=last_id)
            if not seen:
                return result
            last_id = last
            result.selected += seen
            batch.tally(result, seen)
        if progress:
            progress(seen)


@dataclass
class _Batch:
    """One batch of the clean-up: one statement, the archive on disk, the audit entry, one commit."""

    states: list[str]
    cutoff: datetime
    archive: IO[str] | None
    purge: bool
    actor: str
    limit: int

    def take(self, *, after: int = 0, ids: list[int] | None = None) -> tuple[int, int | None]:
        """Archive and/or purge the next rows past `after` (or those of `ids` still matching):
        how many, and the last one's id."""
        sql = _batch_sql(archive=self.archive is not None, purge=self.purge, by_ids=ids is not None)
        params = {"states": self.states, "cutoff": self.cutoff, "after": after, "ids": ids, "limit": self.limit}
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, params)
            count, first, last, lines = cursor.fetchone()
            if not count:
                return 0, None
            if self.archive is not None:
                self.archive.write(lines)
                _sync(self.archive)  # on disk before the rows it holds are deleted
            done = " and ".join(w for w, on in (("archived", self.archive is not None), ("purged", self.purge)) if on)
            record_audit(action=AuditAction.DEAD_LETTER_CLEANUP,
                         target=Target(type="compensation.deadletter", id=f"{first}-{last}",
                                       label=f"{count} dead letters"),
                         before={"ids": [first, last], "count": count},
                         after=None if self.purge else {"archived": count}, reason=done, actor=self.actor)
        return count, last

    def tally(self, result: Cleanup, count: int) -> None:
        if self.archive is not None:
            result.archived += count
        if self.purge:
            result.purged += count


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
