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

The attempts stream through one query ordered by (task, number) (attempt_number_unique_per_task),
never held in memory together; verdicts and delays are memoised per text and attempt number.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import F, FloatField, Func
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from resources.choices import FailureCategory
from retryops.inputs import whole_number
from scheduling.choices import TERMINAL_STATES, AttemptOutcome, PatternAction, TaskState
from scheduling.errors import BadInput, BadPolicy
from scheduling.models import Attempt, RetryPolicy, Task
from scheduling.policies import clean_policy, judge, retry_delay
from scheduling.selectors import get_policy
from scheduling.services.policies import POLICY_FIELDS, policy_snapshot

DEFAULT_DAYS = 7
MAX_DAYS = 366
# Distinct error texts remembered per replay; past this the memo starts again (texts with ids in
# them would otherwise grow it without bound over a million attempts).
MAX_MEMO = 50_000
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
    replays = (_Replayer(policy), _Replayer(candidate))
    followed = _Followed()
    tasks = 0
    for attempts in _histories(policy, since):
        tasks += 1
        followed.observe(attempts)
        for replayer in replays:
            replayer.walk(attempts)
    for replayer in replays:
        replayer.estimate(followed)
    live = (Task.objects.filter(policy=policy, created_at__gte=since, is_probe=False)
            .exclude(state__in=TERMINAL_STATES).count())
    before, after = policy_snapshot(policy), {name: proposed[name] for name in POLICY_FIELDS}
    return WhatIf(policy=policy.name, days=days, since=since, tasks=tasks, live_tasks=live,
                  changes={name: (before[name], after[name]) for name in POLICY_FIELDS if before[name] != after[name]},
                  current=replays[0].result, proposed=replays[1].result)


@dataclass(slots=True)
class _Attempt:
    number: int
    succeeded: bool
    start: float  # seconds after the task's creation
    duration: float
    text: str  # "ErrorClass: message", as judge reads it
    signature: str
    # The recorded verdict when no policy made it (abandoned, or the flow never ran); else None.
    fixed: tuple[str, str] | None
    resource: int | None


def _seconds(expression) -> Func:
    return Func(expression, template="EXTRACT(EPOCH FROM %(expressions)s)::float8", output_field=FloatField())


def _histories(policy: RetryPolicy, since: datetime):
    """Each replayed task's finished attempts in order, as (state, [_Attempt])."""
    rows = (Attempt.objects
            .filter(task__policy=policy, task__created_at__gte=since, task__is_probe=False,
                    task__state__in=TERMINAL_STATES)
            .exclude(outcome=AttemptOutcome.RUNNING)
            .order_by("task_id", "number")
            .values_list("task_id", "task__state", "number", "outcome", "error_class", "error_message",
                         "error_signature", "category", "action", "resource_id")
            .annotate(start=_seconds(F("started_at") - F("task__created_at")),
                      duration=_seconds(F("finished_at") - F("started_at")))
            .iterator(chunk_size=20_000))
    task, state, attempts = None, None, []
    for (task_id, task_state, number, outcome, error_class, message, signature, category, action, resource,
         start, duration) in rows:
        if task_id != task:
            if attempts:
                yield state, attempts
            task, state, attempts = task_id, task_state, []
        if outcome == AttemptOutcome.SUCCEEDED:
            attempts.append(_Attempt(number, True, start, duration, "", "", None, resource))
            continue
        unjudged = outcome == AttemptOutcome.ABANDONED or resource is None
        attempts.append(_Attempt(number, False, start, duration,
                                 f"{error_class}: {message}" if message else error_class, signature,
                                 (category, action) if unjudged else None, resource))
    if attempts:
        yield state, attempts


class _Followed:
    """How often a recorded failure of each signature was followed by a success."""

    def __init__(self):
        self.seen: dict[str, list[int]] = {}  # signature -> [followed, succeeded]
        self.all = [0, 0]

    def observe(self, history) -> None:
        _state, attempts = history
        for failure, following in zip(attempts, attempts[1:]):
            if failure.succeeded:
                continue
            counts = self.seen.setdefault(failure.signature, [0, 0])
            counts[0] += 1
            self.all[0] += 1
            if following.succeeded:
                counts[1] += 1
                self.all[1] += 1

    def rate(self, signature: str) -> float:
        followed, succeeded = self.seen.get(signature) or self.all
        return succeeded / followed if followed else 0.0


class _Replayer:
    """One policy's replay over the streamed tasks (steps 1-6), then its estimates (step 7)."""

    def __init__(self, policy: RetryPolicy):
        self.policy = policy
        self.result = Replay()
        self.quarantined: set[int] = set()
        self.pending: list[tuple[str, int, float, float]] = []  # (signature, attempt, due, duration)
        self._verdicts: dict[str, tuple[str, str]] = {}
        self._delays: dict[int, float] = {}

    def verdict(self, attempt: _Attempt) -> tuple[str, str]:
        if attempt.fixed is not None:
            return attempt.fixed
        found = self._verdicts.get(attempt.text)
        if found is None:
            if len(self._verdicts) >= MAX_MEMO:
                self._verdicts.clear()
            judged = judge(self.policy, attempt.text)
            found = self._verdicts[attempt.text] = (judged.category, judged.action)
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
        """Why a retryable failure of attempt `number` at `failed_at` ends the task (None: it is
        retried), and when the retry would be due."""
        due = failed_at + self.delay(number)
        if number >= self.policy.max_attempts:
            return "dead_max_attempts", due
        if self.policy.deadline_seconds and due > self.policy.deadline_seconds:
            return "dead_deadline", due
        return None, due

    def walk(self, history) -> None:
        state, attempts = history
        result, clock = self.result, attempts[0].start
        for n, attempt in enumerate(attempts):
            if attempt.succeeded:
                (result.recovered if n else result.succeeded_first).counted += 1
                return
            category, action = self.verdict(attempt)
            if category != FailureCategory.RETRYABLE or action not in RETRY_ACTIONS:
                if attempt.resource is not None and attempt.fixed is None and (
                        action == PatternAction.QUARANTINE
                        or (category == FailureCategory.NON_RETRYABLE and action != PatternAction.DEAD_LETTER)):
                    self.quarantined.add(attempt.resource)
                self._die("dead_non_retryable", 1)
                return
            why, due = self.stop(attempt.number, clock + attempt.duration)
            if why is not None:
                self._die(why, 1)
                return
            result.retries_scheduled.counted += 1
            clock = due
        if state == TaskState.CANCELLED:
            result.cancelled.counted += 1
        else:
            last = attempts[-1]
            self.pending.append((last.signature, last.number + 1, clock, last.duration))

    def _die(self, why: str, weight: float) -> None:
        for key in ("dead", why):
            figure = getattr(self.result, key)
            if isinstance(weight, int):
                figure.counted += weight
            else:
                figure.expected += weight

    def estimate(self, followed: _Followed) -> None:
        """Step 7: the tasks the record stopped following, with the observed success rates."""
        result = self.result
        for signature, number, clock, duration in self.pending:
            p, alive = followed.rate(signature), 1.0
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
