"""Which errors are really transient (issue 11): for each error signature that failed attempts of a
policy's tasks in a window, what the failures led to. Reads only; the console shows it beside the
policy (scheduling.admin_analysis).

One failure is one failed or abandoned attempt (not a probation probe's). Per (policy, signature):

- failures: such attempts that started in the window;
- retries: those after which a retry was scheduled. A failure either schedules a retry or ends its
  task, so it did unless its task died at that very attempt;
- wasted: those retries whose task died anyway (the retry was spent and nothing recovered);
- recovered on the same / another resource: failures whose business instance later succeeded
  (the task itself, else a later run of it that an operator started: Task.first_run), on the
  resource that failed or on another one (an attempt that never got a resource counts as
  another);
- dead: failures whose task ended dead.

The pattern and action shown are what the policy, as it is now, makes of the latest failure's text
(scheduling.policies.judge, the function the runner calls), beside the action recorded then.

The counts are read from FailureRollup, per UTC hour and day, which the ops process keeps
(scheduling.services.rollups); a read adds the failures the rollup does not hold: the
window's ends, which cut an hour, and the hours a change written since the rollup's last pass
reached. So a page is exact at once, and costs what it costs whatever the history.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from retryops.errors import BadInput
from retryops.inputs import record_id, whole_number
from retryops.replica import read_alias
from scheduling.choices import AttemptOutcome, PatternAction, TaskEventKind, TaskState

from scheduling.models import Attempt, FailureRollup, AttemptRollupMark, RetryPolicy, Task, TaskEvent
from scheduling.policies import Verdict, judge
from scheduling.watermark import day_floor, hour_floor, snapshot

# The longest window a page may ask for: attempt_failure_time_idx bounds the read to the window,
# and a quarter's failures are still one scan of that index.
MAX_WINDOW_DAYS = 90
# Rows a page shows, the most wasted retries first.
DEFAULT_LIMIT = 50

RETRYING_ACTIONS = (PatternAction.RETRY_SAME_RESOURCE, PatternAction.RETRY_OTHER_RESOURCE)
STOPPING_ACTIONS = (PatternAction.QUARANTINE, PatternAction.DEAD_LETTER)


class Hint:
    """What a row suggests to an operator about the policy as it is now (codes; the console words them)."""

    TIGHTEN = "tighten"  # retried, never recovered, and some retries wasted: stop retrying it
    LOOSEN = "loosen"  # stopped (quarantine or dead letter), yet another resource ran the task later
    MOVE = "move"  # retried on the same resource, but recovered more often on another one


@dataclass(frozen=True)
class SignatureStats:
    """What one error signature's failures of one policy's tasks led to in the window."""

    policy: RetryPolicy
    signature: str
    failures: int
    retries: int
    wasted: int
    dead: int
    recovered_same: int
    recovered_other: int
    last_failed_at: datetime
    example: str  # the latest failure's text, "ErrorClass: message"
    recorded_category: str
    recorded_action: str  # what the runner did with the latest failure
    verdict: Verdict  # what the policy makes of it now
    pattern_source: str  # "policy" (one of its patterns), "builtin" (a default pattern) or "" (none matched)

    @property
    def recovered(self) -> int:
        return self.recovered_same + self.recovered_other

    @property
    def hint(self) -> str:
        action = self.verdict.action
        if action in RETRYING_ACTIONS and self.wasted and not self.recovered:
            return Hint.TIGHTEN
        if action in STOPPING_ACTIONS and self.recovered_other:
            return Hint.LOOSEN
        # Only where the policy keeps the resource: without same_resource_on_retry every retry moves.
        if (action == PatternAction.RETRY_SAME_RESOURCE and self.policy.same_resource_on_retry
                and self.recovered_other > self.recovered_same):
            return Hint.MOVE
        return ""


@dataclass(frozen=True)
class TransienceReport:
    """A page of SignatureStats over a window; `more` when rows beyond `limit` were left out."""

    since: datetime
    until: datetime
    days: int
    rows: list[SignatureStats]
    more: bool


def window_days(value=None) -> int:
    """The window in days: `value` (a page's choice, text or a number) or the setting
    RETRYOPS_TRANSIENCE_WINDOW_DAYS; BadInput naming `days` when it is not 1 to MAX_WINDOW_DAYS."""
    if value is None or value == "":
        value = settings.RETRYOPS_TRANSIENCE_WINDOW_DAYS
    # isascii: str.isdigit() also takes digits such as "²" that int() refuses.
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit() and len(value.strip()) <= 6:
        value = int(value.strip())
    return whole_number(value, field="days", minimum=1, maximum=MAX_WINDOW_DAYS, error=BadInput)


# The failures that started in some time ranges (%(lo)s[i] to %(hi)s[i], each a nested loop over
# attempt_failure_time_idx) with what each led to, as the CTE `failure`; the counts of a group of
# them, as _COUNTS. The cost follows the failures in the ranges, not the attempts or tasks kept. The
# later runs that succeeded are few (an operator's retry or a dead letter's replay, at most one
# succeeding per business instance: instance_to_run_again refuses more), read once from
# task_first_run_idx and hash-joined rather than looked up once per failure.
FAILURE_CTE = f"""
    rerun AS (
        SELECT DISTINCT ON (first_run_id) first_run_id, id, resource_id FROM {Task._meta.db_table}
        WHERE first_run_id IS NOT NULL AND state = %(succeeded)s
        ORDER BY first_run_id, id
    ), failure AS (
        SELECT a.id, a.started_at, a.number, a.resource_id, a.error_signature AS signature, t.policy_id, t.state,
               t.attempt_count,
               t.state = %(succeeded)s OR rerun.id IS NOT NULL AS recovered,
               CASE WHEN t.state = %(succeeded)s THEN t.resource_id ELSE rerun.resource_id END AS recovered_on
        FROM unnest(%(lo)s::timestamptz[], %(hi)s::timestamptz[]) AS r(lo, hi)
        JOIN {Attempt._meta.db_table} a ON a.started_at >= r.lo AND a.started_at < r.hi
        -- Each failure's task by its primary key: OFFSET 0 keeps the planner from turning this into a
        -- hash join over every task (a full scan of the tasks for a window of a few thousand failures).
        CROSS JOIN LATERAL (
            SELECT id, policy_id, state, attempt_count, resource_id, first_run_id, is_probe FROM {Task._meta.db_table}
            WHERE id = a.task_id OFFSET 0
        ) t
        LEFT JOIN rerun ON rerun.first_run_id = COALESCE(t.first_run_id, t.id) AND rerun.id > t.id
                           AND t.state <> %(succeeded)s
        WHERE a.outcome IN (%(failed)s, %(abandoned)s)
          AND NOT t.is_probe AND (%(policy)s::bigint IS NULL OR t.policy_id = %(policy)s::bigint)
    )
"""
COUNTS = """
    count(*) AS failures,
    count(*) FILTER (WHERE NOT (state = %(dead)s AND attempt_count = number)) AS retries,
    count(*) FILTER (WHERE state = %(dead)s AND attempt_count > number) AS wasted,
    count(*) FILTER (WHERE state = %(dead)s) AS dead,
    count(*) FILTER (WHERE recovered AND recovered_on = resource_id) AS recovered_same,
    count(*) FILTER (WHERE recovered AND recovered_on IS DISTINCT FROM resource_id) AS recovered_other,
    max(id) AS latest
"""
COLUMNS = ("failures", "retries", "wasted", "dead", "recovered_same", "recovered_other")
_ORDER = "ORDER BY wasted DESC, failures DESC, signature, policy_id LIMIT %(limit)s"

# Every failure of the window, counted from the attempts: the reference the rollup must equal.
_RAW_SQL = f"WITH {FAILURE_CTE} SELECT policy_id, signature, {COUNTS} FROM failure GROUP BY policy_id, signature {_ORDER}"

# The rolled-up periods of the window (FailureRollup, through failure_rollup_once_per_period) plus
# the failures of the rest counted from the attempts: the window's ends, which cut an hour, and the
# hours a change at or above the rollup's mark reached (changed_hours).
_ROLLED_UP_SQL = f"""
    WITH {FAILURE_CTE}
    SELECT policy_id, signature, {", ".join(f"sum({c})::int AS {c}" for c in COLUMNS)}, max(latest) AS latest
    FROM (
        SELECT policy_id, signature, {", ".join(COLUMNS)}, latest_attempt_id AS latest
        FROM {FailureRollup._meta.db_table}
        WHERE ((period_hours = 24 AND period_start = ANY(%(days)s::timestamptz[]))
               OR (period_hours = 1 AND period_start = ANY(%(hours)s::timestamptz[])))
          AND (%(policy)s::bigint IS NULL OR policy_id = %(policy)s::bigint)
      UNION ALL
        SELECT policy_id, signature, {COUNTS} FROM failure GROUP BY policy_id, signature
    ) counted
    GROUP BY policy_id, signature
    {_ORDER}
"""

# The UTC hours whose failures a change written by a transaction from %(lo)s (to %(hi)s, NULL: on)
# reached, from %(since)s on. What a failure's counts depend on changes only with one of these
# rows: the failure itself finishing (its attempt's finished_xid), its task's later attempts
# ending, the task dying, cancelled or taking a late outcome (a task event), or a later run of its
# business instance (Task.first_run) succeeding (that run's attempt). So the changed tasks are
# those of the attempts finished and the events written meanwhile (attempt_finished_xid_idx,
# task_event_kind_xid_idx), and the failures reached are those of every run of their instances.
# A failure can also stop being one: an abandoned attempt whose flow's success arrives late and is
# kept becomes a success (the task event says which attempt), so its own hour is reached too.
CHANGED_HOURS_SQL = f"""
    WITH changed AS (
        SELECT task_id FROM {Attempt._meta.db_table}
        WHERE finished_xid >= %(lo)s::xid8 AND (%(hi)s::xid8 IS NULL OR finished_xid < %(hi)s::xid8)
      UNION
        SELECT task_id FROM {TaskEvent._meta.db_table}
        WHERE kind = ANY(%(kinds)s) AND xid >= %(lo)s::xid8 AND (%(hi)s::xid8 IS NULL OR xid < %(hi)s::xid8)
    ), instance AS (
        SELECT DISTINCT COALESCE(t.first_run_id, t.id) AS id FROM {Task._meta.db_table} t JOIN changed ON t.id = changed.task_id
    ), run AS (
        SELECT id FROM instance
      UNION
        SELECT t.id FROM {Task._meta.db_table} t JOIN instance ON t.first_run_id = instance.id
    )
    SELECT date_trunc('hour', a.started_at, 'UTC')
    FROM run JOIN {Attempt._meta.db_table} a ON a.task_id = run.id
    WHERE a.outcome IN (%(failed)s, %(abandoned)s) AND a.started_at >= %(since)s
  UNION
    SELECT date_trunc('hour', a.started_at, 'UTC')
    FROM {TaskEvent._meta.db_table} e
    JOIN {Attempt._meta.db_table} a ON a.task_id = e.task_id AND a.number = e.attempt_number
    WHERE e.kind = %(late)s AND e.xid >= %(lo)s::xid8 AND (%(hi)s::xid8 IS NULL OR e.xid < %(hi)s::xid8)
      AND a.started_at >= %(since)s
"""


def sql_params(**params) -> dict:
    """The parameters every query of this module takes, with `params`."""
    return {"succeeded": TaskState.SUCCEEDED, "dead": TaskState.DEAD, "failed": AttemptOutcome.FAILED,
            "abandoned": AttemptOutcome.ABANDONED, "kinds": list(TaskEventKind.values),
            "late": TaskEventKind.LATE_OUTCOME, "policy": None, **params}


def changed_hours(cursor, *, lo: int, hi: int | None, since: datetime) -> set[datetime]:
    """CHANGED_HOURS_SQL's hours."""
    cursor.execute(CHANGED_HOURS_SQL, sql_params(lo=str(lo), hi=None if hi is None else str(hi), since=since))
    return {hour for (hour,) in cursor.fetchall()}


def merged(ranges: list[tuple[datetime, datetime]]) -> tuple[list[datetime], list[datetime]]:
    """Sorted ranges, the touching ones joined, as (starts, ends): the CTE's %(lo)s and %(hi)s."""
    lo, hi = [], []
    for start, end in sorted(r for r in ranges if r[0] < r[1]):
        if hi and start <= hi[-1]:
            hi[-1] = max(hi[-1], end)
        else:
            lo.append(start)
            hi.append(end)
    return lo, hi


@dataclass(frozen=True)
class _Plan:
    """Which periods of a window a read takes from the rollup (whole days, whole hours) and which
    ranges it counts from the attempts."""

    days: list[datetime]
    hours: list[datetime]
    ranges: list[tuple[datetime, datetime]]


def _plan(*, since: datetime, until: datetime, kept_from: datetime, changed: set[datetime]) -> _Plan:
    hour = timedelta(hours=1)
    first = hour_floor(since) + (hour if hour_floor(since) < since else timedelta(0))
    ranges, whole = [(since, min(first, until))], []
    start = first
    while start + hour <= until:
        if start < kept_from or start in changed:
            ranges.append((start, start + hour))
        else:
            whole.append(start)
        start += hour
    ranges.append((max(start, since), until))
    by_day: dict[datetime, list[datetime]] = {}
    for start in whole:
        by_day.setdefault(day_floor(start), []).append(start)
    days = [day for day, hours in by_day.items() if len(hours) == 24]
    hours = [start for day, starts in by_day.items() if len(starts) < 24 for start in starts]
    return _Plan(days=days, hours=hours, ranges=ranges)


def failure_counts(*, since: datetime, until: datetime, policy_id: int | None = None, limit: int = DEFAULT_LIMIT,
                   rolled_up: bool = True) -> list[dict]:
    """The counts per (policy, signature) of the failures that started from `since` to `until`, the
    most wasted retries first, at most `limit` rows; each with its latest failure's id. From the
    rollup (FailureRollup) and the failures it does not hold yet, in one snapshot: the counts are
    what every failure of the window gives (`rolled_up=False` counts those, the reference)."""
    params = sql_params(policy=policy_id, limit=limit)
    with snapshot(read_alias()) as cursor:
        mark = None
        if rolled_up:
            cursor.execute(f"SELECT below_xid::text, kept_from FROM {AttemptRollupMark._meta.db_table} WHERE id = 1")
            mark = cursor.fetchone()
        if mark is None or mark[1] is None:
            lo, hi = merged([(since, until)])
            cursor.execute(_RAW_SQL, {**params, "lo": lo, "hi": hi})
        else:
            changed = changed_hours(cursor, lo=int(mark[0]), hi=None, since=hour_floor(since))
            plan = _plan(since=since, until=until, kept_from=mark[1], changed=changed)
            lo, hi = merged(plan.ranges)
            cursor.execute(_ROLLED_UP_SQL, {**params, "lo": lo, "hi": hi, "days": plan.days, "hours": plan.hours})
        columns = [column.name for column in cursor.description]
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def _pattern_source(policy: RetryPolicy, verdict: Verdict) -> str:
    pattern = verdict.classification.pattern
    if pattern is None:
        return ""
    # judge tries the policy's own patterns before the built-in ones, so a pattern of the
    # policy's that matched is the one it returned.
    entries = [*policy.non_retryable_error_patterns, *policy.retryable_error_patterns]
    return "policy" if any(entry["pattern"] == pattern for entry in entries) else "builtin"


def _failure_text(attempt: Attempt) -> str:
    # As the runner handed the exception to judge: error_text's "ClassName: message".
    return f"{attempt.error_class}: {attempt.error_message}" if attempt.error_message else attempt.error_class


def transient_errors(*, policy: RetryPolicy | int | None = None, days=None, now: datetime | None = None,
                     limit: int = DEFAULT_LIMIT) -> TransienceReport:
    """Per error signature (and policy), what its failures in the last `days` led to, the most
    wasted retries first (then the most failures); of every policy's tasks, or of one policy's.
    From the hourly rollup (failure_counts): a fixed number of queries, whose cost follows the
    window's rolled-up rows and the failures of the hours not rolled up yet, not the history."""
    days = window_days(days)
    limit = whole_number(limit, field="limit", maximum=1000, error=BadInput)
    policy_id = None if policy is None else (
        policy.pk if isinstance(policy, RetryPolicy) else record_id(policy, field="policy", error=BadInput))
    until = now or timezone.now()
    since = until - timedelta(days=days)
    found = failure_counts(since=since, until=until, policy_id=policy_id, limit=limit + 1)
    shown = found[:limit]
    latest = Attempt.objects.only("error_class", "error_message", "category", "action", "started_at").in_bulk(
        [row["latest"] for row in shown])
    policies = RetryPolicy.objects.in_bulk({row["policy_id"] for row in shown})
    rows = []
    for row in shown:
        attempt, row_policy = latest[row["latest"]], policies[row["policy_id"]]
        verdict = judge(row_policy, _failure_text(attempt))
        rows.append(SignatureStats(
            policy=row_policy, signature=row["signature"], failures=row["failures"], retries=row["retries"],
            wasted=row["wasted"], dead=row["dead"], recovered_same=row["recovered_same"],
            recovered_other=row["recovered_other"], last_failed_at=attempt.started_at,
            example=_failure_text(attempt), recorded_category=attempt.category, recorded_action=attempt.action,
            verdict=verdict, pattern_source=_pattern_source(row_policy, verdict)))
    return TransienceReport(since=since, until=until, days=days, rows=rows, more=len(found) > limit)
