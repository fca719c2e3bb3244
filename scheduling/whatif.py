"""Policy what-if: the recorded attempts of a policy's tasks replayed under the policy as it is and
under a proposed change of it, to compare before saving the change. Reads only.

The replay, per task that used the policy, was created in the window (the last `days` days), has
ended (succeeded, dead or cancelled) and is not a probation probe; its recorded attempts are
walked in order, 1, 2, ...:

1. A succeeded attempt ends the walk: the task succeeds, "recovered" when it was not attempt 1.
2. A failed attempt is judged by the replayed policy with `scheduling.policies.judge` on its
   recorded "ErrorClass: message", as the runner judges it. Two kinds keep the verdict they were
   recorded with, because no policy made it: an abandoned attempt (worker lost, retried on the
   same resource) and one that never ran its flow (no resource: a failed claim, an unknown flow).
   The attempt's resource is quarantined when the runner would quarantine it: action
   `quarantine`, or a non-retryable category with any action but `dead_letter`.
3. The verdict retries when its category is retryable and its action is a retry; else the task
   dies there (non-retryable).
4. At attempt number `max_attempts` the task dies (all attempts failed).
5. The retry is due `retry_delay(...)` after the failure (the runner's function; for
   `exponential_jitter` its expected value, half the cap, so the replay is deterministic). A due
   time past `deadline_seconds` after the task's creation is refused, as the runner refuses it:
   the task dies, counted as a retry that would land after the deadline.
6. Otherwise a retry is scheduled. When the record has a next attempt the walk follows it: its
   outcome is what would happen, it starts when due (recorded dispatcher lateness is not
   replayed) and takes as long as it took.
7. When the record has no next attempt (the recorded policy stopped sooner): a cancelled task
   stays cancelled; any other is estimated. Each further attempt succeeds with probability p,
   the share of recorded attempts that followed a failure of the same error signature and
   succeeded (of all signatures when this one was never followed; 0 when nothing was), and takes
   as long as the last recorded one; the walk goes on as in 3-6 with probabilities instead of
   counts. These parts are "expected" figures, kept apart from the counted ones.

Tasks that succeeded at their first attempt are only counted (in SQL: no policy changes them);
the other tasks' attempts stream through one query ordered by (task, number), one task in memory
at a time; verdicts are memoised per error text and policy patterns, delays per attempt number.
"""

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import connections
from django.db.models import Case, Count, F, FloatField, Func, Q, TextField, Value, When
from django.db.models.functions import Concat
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from resources.choices import FailureCategory
from resources.classification import default_category
from retryops.errors import BadInput
from retryops.inputs import whole_number
from retryops.replica import read_alias
from scheduling.choices import TERMINAL_STATES, AttemptOutcome, PatternAction, TaskState
from scheduling.errors import BadPolicy
from scheduling.models import Attempt, RetryPolicy, Task
from scheduling.policies import clean_policy, default_action, policy_verdict, retry_delay
from scheduling.selectors import get_policy
from scheduling.services.policies import POLICY_FIELDS, policy_snapshot

DEFAULT_DAYS = 7
MAX_DAYS = 366
# Distinct error texts remembered per replay; past this the memo starts again (texts with ids in
# them would otherwise grow it without bound over a million attempts).
MAX_MEMO = 50_000
CHUNK = 20_000
RETRY_ACTIONS = (PatternAction.RETRY_SAME_RESOURCE, PatternAction.RETRY_OTHER_RESOURCE)


class _Expected:
    """An rng whose draw is the mean of its range: retry_delay's expected jittered delay."""

    @staticmethod
    def uniform(low: float, high: float) -> float:
        return (low + high) / 2


@dataclass
class Figure:
    """A count: the part counted from followed attempts and the part expected from the estimate."""

    counted: int = 0
    expected: float = 0.0

    @property
    def total(self) -> float:
        return self.counted + self.expected

    def as_dict(self) -> dict:
        return {"total": round(self.total, 3), "counted": self.counted, "expected": round(self.expected, 3)}

    def shown(self) -> str:
        """As the table shows it: "12" counted, "15.4 (3.4 expected)" with an estimate in it."""
        if not self.expected:
            return f"{self.counted:,}"
        return gettext("%(total)s (%(expected)s expected)") % {"total": f"{self.total:,.1f}",
                                                               "expected": f"{self.expected:,.1f}"}


@dataclass
class Replay:
    """What one policy makes of the window's tasks."""

    retries_scheduled: Figure = field(default_factory=Figure)
    dead: Figure = field(default_factory=Figure)
    dead_non_retryable: Figure = field(default_factory=Figure)
    dead_max_attempts: Figure = field(default_factory=Figure)
    dead_deadline: Figure = field(default_factory=Figure)
    recovered: Figure = field(default_factory=Figure)
    succeeded_first: Figure = field(default_factory=Figure)
    cancelled: Figure = field(default_factory=Figure)
    resources_quarantined: Figure = field(default_factory=Figure)


# The rows every interface shows, in order: (key, label, indented under the one before).
ROWS = (
    ("retries_scheduled", _("Retries scheduled"), False),
    ("dead", _("Tasks that die (dead letters)"), False),
    ("dead_non_retryable", _("of which: non-retryable failure"), True),
    ("dead_max_attempts", _("of which: all attempts failed"), True),
    ("dead_deadline", _("of which: a retry would land after the deadline"), True),
    ("recovered", _("Recovered tasks (succeeded after a retry)"), False),
    ("succeeded_first", _("Succeeded at the first attempt"), False),
    ("cancelled", _("Cancelled by an operator"), False),
    ("resources_quarantined", _("Resources quarantined"), False),
)

EXPECTED_NOTE = _("Expected: where a policy retries more than the record did, the further attempts are estimated "
                  "from how often a failure of the same error signature was followed by a success.")


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    indented: bool
    current: Figure
    proposed: Figure

    @property
    def change(self) -> float:
        return self.proposed.total - self.current.total

    def shown_change(self) -> str:
        change = self.change
        if abs(change) < 0.05:
            return "0"
        return f"{round(change):+,}" if change == round(change) else f"{change:+,.1f}"


@dataclass(frozen=True)
class WhatIf:
    """The side-by-side answer: the policy as it is and as proposed, over the same tasks."""

    policy: str
    days: int
    since: datetime
    tasks: int
    live_tasks: int
    changes: dict
    current: Replay
    proposed: Replay

    def rows(self) -> list[Row]:
        return [Row(key, str(label), indented, getattr(self.current, key), getattr(self.proposed, key))
                for key, label, indented in ROWS]

    def shown_changes(self) -> list[tuple[str, str, str]]:
        """(field, value as saved, value proposed), values as JSON."""
        return [(name, json.dumps(before, ensure_ascii=False), json.dumps(after, ensure_ascii=False))
                for name, (before, after) in self.changes.items()]

    def summary(self) -> str:
        return gettext("Retry policy %(policy)s: %(tasks)s ended tasks created in the last %(days)s days (since "
                       "%(since)s UTC) replayed; %(live)s still running or waiting are left out.") % {
            "policy": self.policy, "tasks": f"{self.tasks:,}", "days": self.days,
            "since": f"{self.since.astimezone(UTC):%Y-%m-%d %H:%M}", "live": f"{self.live_tasks:,}"}

    @property
    def has_expected(self) -> bool:
        return any(row.current.expected or row.proposed.expected for row in self.rows())

    def as_dict(self) -> dict:
        return {
            "policy": self.policy, "days": self.days, "since": self.since.isoformat(), "tasks": self.tasks,
            "live_tasks_left_out": self.live_tasks,
            "changes": {name: {"current": before, "proposed": after} for name, (before, after) in self.changes.items()},
            "current": {key: getattr(self.current, key).as_dict() for key, _label, _ in ROWS},
            "proposed": {key: getattr(self.proposed, key).as_dict() for key, _label, _ in ROWS},
        }


def proposal(policy: RetryPolicy, changes: dict) -> dict:
    """The proposed policy: `policy`'s fields with `changes` over them, validated as a save would
    validate them (clean_policy); a bad field raises BadPolicy naming it."""
    if "name" in changes and changes["name"] != policy.name:
        raise BadPolicy(gettext("name cannot change in a what-if: it replays the tasks of %(name)s") % {
            "name": policy.name}, field="name")
    return clean_policy({**policy_snapshot(policy), **changes, "name": policy.name})


def what_if(*, policy: str | RetryPolicy, proposed: dict, days: int = DEFAULT_DAYS,
            now: datetime | None = None) -> WhatIf:
    """Replay the last `days` days of `policy`'s ended tasks under it and under `proposed` (field
    values as clean_policy returns them, e.g. from `proposal`); the model is the module's docstring."""
    days = whole_number(days, field="days", minimum=1, maximum=MAX_DAYS, error=BadInput)
    policy = get_policy(policy)
    since = (now or timezone.now()) - timedelta(days=days)
    candidate = RetryPolicy(**{name: value for name, value in proposed.items() if name in (*POLICY_FIELDS, "name")})
    memos: dict[str, dict] = {}  # two policies with the same patterns share their verdicts
    defaults: dict[str, str] = {}  # and every policy the default patterns' categories
    replays = (_Replayer(policy, memos, defaults), _Replayer(candidate, memos, defaults))
    followed = _Followed()
    tasks = Task.objects.filter(policy=policy, created_at__gte=since, is_probe=False)
    replayed = 0
    for history in _histories(policy, since):
        replayed += 1
        followed.observe(history)
        for replayer in replays:
            replayer.walk(history)
    # No policy changes a first attempt's success: counted, not streamed (half the tasks, often).
    counts = tasks.aggregate(at_once=Count("pk", filter=Q(state=TaskState.SUCCEEDED, attempt_count=1)),
                             live=Count("pk", filter=~Q(state__in=TERMINAL_STATES)))
    at_once, live = counts["at_once"], counts["live"]
    for replayer in replays:
        replayer.estimate(followed)
        replayer.result.succeeded_first.counted += at_once
    before, after = policy_snapshot(policy), {name: proposed[name] for name in POLICY_FIELDS}
    return WhatIf(policy=policy.name, days=days, since=since, tasks=replayed + at_once, live_tasks=live,
                  changes={name: (before[name], after[name]) for name in POLICY_FIELDS if before[name] != after[name]},
                  current=replays[0].result, proposed=replays[1].result)


# A replayed attempt: (number, succeeded, start and duration in seconds after the task's creation,
# "ErrorClass: message" as judge reads it, signature, the recorded (category, action) when no
# policy made the verdict, else None, resource id).
NUMBER, SUCCEEDED, START, DURATION, TEXT, SIGNATURE, FIXED, RESOURCE = range(8)


def _seconds(expression) -> Func:
    return Func(expression, template="EXTRACT(EPOCH FROM %(expressions)s)::float8", output_field=FloatField())


def _query(policy: RetryPolicy, since: datetime):
    return (Attempt.objects
            .filter(task__policy=policy, task__created_at__gte=since, task__is_probe=False,
                    task__state__in=TERMINAL_STATES)
            .exclude(task__state=TaskState.SUCCEEDED, task__attempt_count=1)
            .exclude(outcome=AttemptOutcome.RUNNING)
            .order_by("task_id", "number")
            .values_list("task_id", "task__state", "number", "outcome", "error_signature", "category", "action",
                         "resource_id")
            .annotate(text=Case(When(error_message="", then=F("error_class")),
                                default=Concat(F("error_class"), Value(": "), F("error_message"), output_field=TextField()),
                                output_field=TextField()),
                      start=_seconds(F("started_at") - F("task__created_at")),
                      duration=_seconds(F("finished_at") - F("started_at"))))


def _histories(policy: RetryPolicy, since: datetime):
    """Each replayed task's finished attempts in order, as (state, [attempt tuple])."""
    # The queryset's own SQL, streamed by psycopg in chunks of CHUNK rows: neither a server-side
    # cursor (which PostgreSQL plans for its first rows and never in parallel: twice the time here)
    # nor Django's converter call per value. Works behind a transaction pooler too: one statement.
    sql, params = _query(policy, since).query.sql_with_params()
    task, state, attempts = None, None, []
    succeeded, abandoned = AttemptOutcome.SUCCEEDED.value, AttemptOutcome.ABANDONED.value
    connection = connections[read_alias()]
    connection.ensure_connection()
    with connection.connection.cursor() as cursor:  # psycopg's own: Django's wrapper has no stream()
        for task_id, task_state, number, outcome, signature, category, action, resource, text, start, duration \
                in cursor.stream(sql, params, size=CHUNK):
            if task_id != task:
                if attempts:
                    yield state, attempts
                task, state, attempts = task_id, task_state, []
            if outcome == succeeded:
                attempts.append((number, True, start, duration, None, None, None, resource))
            else:
                fixed = (category, action) if outcome == abandoned or resource is None else None
                attempts.append((number, False, start, duration, text, signature, fixed, resource))
    if attempts:
        yield state, attempts


class _Followed:
    """How often a recorded failure of each signature was followed by a success."""

    def __init__(self):
        self.seen: dict[str, list[int]] = {}  # signature -> [followed, succeeded]

    def observe(self, history) -> None:
        attempts = history[1]
        for n in range(len(attempts) - 1):
            failure = attempts[n]
            if not failure[SUCCEEDED]:
                counts = self.seen.get(failure[SIGNATURE])
                if counts is None:
                    counts = self.seen[failure[SIGNATURE]] = [0, 0]
                counts[0] += 1
                counts[1] += attempts[n + 1][SUCCEEDED]

    def rates(self) -> tuple[dict[str, float], float]:
        """Each signature's share of followed failures that a success followed, and all signatures' share."""
        followed = sum(counts[0] for counts in self.seen.values())
        succeeded = sum(counts[1] for counts in self.seen.values())
        return ({signature: s / f for signature, (f, s) in self.seen.items()},
                succeeded / followed if followed else 0.0)


def _consequence(category: str, action: str, *, judged: bool) -> tuple[bool, bool]:
    """(is it retried, is its resource quarantined), as after_failure and _settle_resource decide."""
    if category == FailureCategory.RETRYABLE and action in RETRY_ACTIONS:
        return True, False
    # Only a failure the flow had on its resource settles that resource (a claim that failed has none;
    # an abandoned attempt's lease was swept).
    return False, judged and (action == PatternAction.QUARANTINE or (
        category == FailureCategory.NON_RETRYABLE and action != PatternAction.DEAD_LETTER))


class _Replayer:
    """One policy's replay over the streamed tasks (steps 1-6), then its estimates (step 7)."""

    def __init__(self, policy: RetryPolicy, memos: dict[str, dict], defaults: dict[str, str]):
        self.policy = policy
        self.result = Replay()
        self.quarantined: set[int] = set()
        self.pending: list[tuple[str, int, float, float]] = []  # (signature, attempt, due, duration)
        patterns = repr((policy.non_retryable_error_patterns, policy.retryable_error_patterns))
        self._verdicts: dict[str, tuple[bool, bool]] = memos.setdefault(patterns, {})
        self._defaults = defaults
        self._delays: dict[int, float] = {}

    def consequence(self, attempt: tuple) -> tuple[bool, bool]:
        if attempt[FIXED] is not None:
            return _consequence(*attempt[FIXED], judged=False)
        text = attempt[TEXT]
        found = self._verdicts.get(text)
        if found is None:
            if len(self._verdicts) >= MAX_MEMO:
                self._verdicts.clear()
            # judge's verdict in two parts: the policy's own patterns, then (what both replayed
            # policies share) the defaults' category, judged once per text for both.
            verdict = policy_verdict(self.policy, text)
            if verdict is not None:
                category, action = verdict.category, verdict.action
            else:
                category = self._defaults.get(text)
                if category is None:
                    if len(self._defaults) >= MAX_MEMO:
                        self._defaults.clear()
                    category = self._defaults[text] = default_category(text)
                action = default_action(category)
            found = self._verdicts[text] = _consequence(category, action, judged=True)
        return found

    def delay(self, number: int) -> float:
        found = self._delays.get(number)
        if found is None:
            policy = self.policy
            found = self._delays[number] = retry_delay(
                backoff=policy.backoff, attempt=number, initial=policy.initial_delay_seconds,
                multiplier=policy.multiplier, maximum=policy.max_delay_seconds, rng=_Expected())
        return found

    def stop(self, number: int, failed_at: float) -> tuple[str | None, float]:
        """Why a retried failure of attempt `number` at `failed_at` ends the task instead (None: it
        is retried), and when the retry would be due."""
        due = failed_at + self.delay(number)
        if number >= self.policy.max_attempts:
            return "dead_max_attempts", due
        if self.policy.deadline_seconds and due > self.policy.deadline_seconds:
            return "dead_deadline", due
        return None, due

    def walk(self, history) -> None:
        state, attempts = history
        result, clock = self.result, attempts[0][START]
        for attempt in attempts:
            if attempt[SUCCEEDED]:
                (result.recovered if attempt[NUMBER] > 1 else result.succeeded_first).counted += 1
                return
            retried, quarantines = self.consequence(attempt)
            if not retried:
                if quarantines:
                    self.quarantined.add(attempt[RESOURCE])
                self._die("dead_non_retryable", 1)
                return
            why, clock = self.stop(attempt[NUMBER], clock + attempt[DURATION])
            if why is not None:
                self._die(why, 1)
                return
            result.retries_scheduled.counted += 1
        if state == TaskState.CANCELLED:
            result.cancelled.counted += 1
        else:
            last = attempts[-1]
            self.pending.append((last[SIGNATURE], last[NUMBER] + 1, clock, last[DURATION]))

    def _die(self, why: str, weight: int | float) -> None:
        for key in ("dead", why):
            figure = getattr(self.result, key)
            if isinstance(weight, int):
                figure.counted += weight
            else:
                figure.expected += weight

    def estimate(self, followed: _Followed) -> None:
        """Step 7: the tasks the record stopped following, with the observed success rates."""
        result = self.result
        rates, pooled = followed.rates()
        for signature, number, clock, duration in self.pending:
            p, alive = rates.get(signature, pooled), 1.0
            if not self.policy.deadline_seconds:
                # Only max_attempts ends it: attempts number .. max_attempts, each failing with q.
                q, left = 1 - p, self.policy.max_attempts - number + 1
                result.recovered.expected += 1 - q ** left
                result.retries_scheduled.expected += left - 1 if q == 1 else (q - q ** left) / (1 - q)
                self._die("dead_max_attempts", float(q ** left))
                continue
            while alive > 0:
                result.recovered.expected += alive * p
                alive *= 1 - p
                if alive <= 0:
                    break
                why, due = self.stop(number, clock + duration)
                if why is not None:
                    self._die(why, alive)
                    break
                result.retries_scheduled.expected += alive
                number, clock = number + 1, due
        self.pending = []
        result.resources_quarantined.counted = len(self.quarantined)
