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
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connections
from django.utils import timezone

from retryops.errors import BadInput
from retryops.inputs import record_id, whole_number
from retryops.replica import read_alias
from scheduling.choices import AttemptOutcome, PatternAction, TaskState

from scheduling.models import Attempt, RetryPolicy, Task
from scheduling.policies import Verdict, judge

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


# Served by attempt_failure_time_idx (the window's failures) and the tasks' primary key: the cost
# follows the failures in the window, not the attempts or tasks kept (bench/transience.py). The
# later runs that succeeded are few (an operator's retry or a dead letter's replay, at most one
# succeeding per business instance: instance_to_run_again refuses more), read once from
# task_first_run_idx and hash-joined rather than looked up once per failure.
_FAILURES_SQL = f"""
    WITH rerun AS (
        SELECT DISTINCT ON (first_run_id) first_run_id, id, resource_id FROM {Task._meta.db_table}
        WHERE first_run_id IS NOT NULL AND state = %(succeeded)s
        ORDER BY first_run_id, id
    ), failure AS (
        SELECT a.id, a.number, a.resource_id, a.error_signature AS signature, t.policy_id, t.state,
               t.attempt_count,
               t.state = %(succeeded)s OR rerun.id IS NOT NULL AS recovered,
               CASE WHEN t.state = %(succeeded)s THEN t.resource_id ELSE rerun.resource_id END AS recovered_on
        FROM {Attempt._meta.db_table} a
        -- Each failure's task by its primary key: OFFSET 0 keeps the planner from turning this into a
        -- hash join over every task (a full scan of the tasks for a window of a few thousand failures).
        CROSS JOIN LATERAL (
            SELECT id, policy_id, state, attempt_count, resource_id, first_run_id, is_probe FROM {Task._meta.db_table}
            WHERE id = a.task_id OFFSET 0
        ) t
        LEFT JOIN rerun ON rerun.first_run_id = COALESCE(t.first_run_id, t.id) AND rerun.id > t.id
                           AND t.state <> %(succeeded)s
        WHERE a.outcome IN (%(failed)s, %(abandoned)s) AND a.started_at >= %(since)s AND a.started_at < %(until)s
          AND NOT t.is_probe AND (%(policy)s::bigint IS NULL OR t.policy_id = %(policy)s::bigint)
    )
    SELECT policy_id, signature, count(*) AS failures,
           count(*) FILTER (WHERE NOT (state = %(dead)s AND attempt_count = number)) AS retries,
           count(*) FILTER (WHERE state = %(dead)s AND attempt_count > number) AS wasted,
           count(*) FILTER (WHERE state = %(dead)s) AS dead,
           count(*) FILTER (WHERE recovered AND recovered_on = resource_id) AS recovered_same,
           count(*) FILTER (WHERE recovered AND recovered_on IS DISTINCT FROM resource_id) AS recovered_other,
           max(id) AS latest
    FROM failure
    GROUP BY policy_id, signature
    ORDER BY wasted DESC, failures DESC, signature, policy_id
    LIMIT %(limit)s
"""


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
    Three queries whatever the history: the aggregate, the latest failure of each row, the policies."""
    days = window_days(days)
    limit = whole_number(limit, field="limit", maximum=1000, error=BadInput)
    policy_id = None if policy is None else (
        policy.pk if isinstance(policy, RetryPolicy) else record_id(policy, field="policy", error=BadInput))
    until = now or timezone.now()
    since = until - timedelta(days=days)
    with connections[read_alias()].cursor() as cursor:
        cursor.execute(_FAILURES_SQL, {
            "since": since, "until": until, "policy": policy_id, "limit": limit + 1,
            "succeeded": TaskState.SUCCEEDED, "dead": TaskState.DEAD,
            "failed": AttemptOutcome.FAILED, "abandoned": AttemptOutcome.ABANDONED,
        })
        columns = [column.name for column in cursor.description]
        found = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
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
