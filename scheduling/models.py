"""Tasks (business instances), their attempts, retry policies and batch schedules."""

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from resources.choices import FailureCategory
from resources.models import Resource, ResourcePool
from scheduling.choices import (
    TERMINAL_STATES,
    WAITING_STATES,
    AttemptOutcome,
    Backoff,
    PatternAction,
    TaskEventKind,
    TaskState,
)


class RetryPolicy(models.Model):
    """How a failed task comes back: how often, after how long, on which resource."""

    name = models.SlugField(_("name"), max_length=100, unique=True)
    description = models.TextField(_("description"), blank=True)
    max_attempts = models.PositiveIntegerField(_("max attempts"), default=5)
    backoff = models.CharField(_("backoff"), max_length=30, choices=Backoff.choices, default=Backoff.EXPONENTIAL)
    initial_delay_seconds = models.FloatField(_("initial delay (seconds)"), default=120.0)
    multiplier = models.FloatField(_("multiplier"), default=2.0)
    max_delay_seconds = models.FloatField(_("max delay (seconds)"), default=3600.0)
    # Lists of {"pattern": regex, "action": PatternAction, "probation": bool}; see policies.py.
    retryable_error_patterns = models.JSONField(_("retryable error patterns"), default=list, blank=True)
    non_retryable_error_patterns = models.JSONField(_("non-retryable error patterns"), default=list, blank=True)
    same_resource_on_retry = models.BooleanField(_("same resource on retry"), default=True)
    deadline_seconds = models.FloatField(
        _("deadline (seconds)"), null=True, blank=True,
        help_text=_("No retry is scheduled later than this after the task was created."))
    probation_cooldown_seconds = models.PositiveIntegerField(
        _("probation cooldown (seconds)"), default=1800,
        help_text=_("Wait before the probe of a resource quarantined for a probationary reason."))
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("retry policy")
        verbose_name_plural = _("retry policies")
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(max_attempts__gte=1), name="policy_max_attempts_positive"),
            models.CheckConstraint(condition=Q(initial_delay_seconds__gte=0), name="policy_initial_delay_not_negative"),
            models.CheckConstraint(condition=Q(multiplier__gte=1), name="policy_multiplier_at_least_one"),
            models.CheckConstraint(
                condition=Q(max_delay_seconds__gte=models.F("initial_delay_seconds")), name="policy_max_delay_covers_initial"
            ),
            models.CheckConstraint(
                condition=Q(deadline_seconds__isnull=True) | Q(deadline_seconds__gt=0), name="policy_deadline_positive"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class RetryPolicyChange(models.Model):
    """Who changed a policy, when, and what it was before and after."""

    policy = models.ForeignKey(RetryPolicy, verbose_name=_("retry policy"), on_delete=models.CASCADE,
                               related_name="changes")
    changed_by = models.CharField(_("changed by"), max_length=200)
    changed_at = models.DateTimeField(_("changed at"), auto_now_add=True)
    before = models.JSONField(_("before"), default=dict)
    after = models.JSONField(_("after"), default=dict)

    class Meta:
        verbose_name = _("retry policy change")
        verbose_name_plural = _("retry policy changes")
        ordering = ["-id"]

    def __str__(self) -> str:
        # Ids, not the policy's name: a name would cost a query per row wherever changes are listed.
        # Shown as each change's caption on the policy's page, so in the reader's language.
        return gettext("change %(change)s of retry policy %(policy)s by %(who)s") % {
            "change": self.pk, "policy": self.policy_id, "who": self.changed_by}


class Task(models.Model):
    """One business instance: a flow run with one resource of a pool, retried until it succeeds or dies."""

    flow = models.CharField(_("flow"), max_length=100)
    pool = models.ForeignKey(ResourcePool, verbose_name=_("pool"), on_delete=models.PROTECT, related_name="tasks")
    payload = models.JSONField(_("payload"), default=dict, blank=True)
    state = models.CharField(_("state"), max_length=20, choices=TaskState.choices, default=TaskState.PENDING)
    # Task rows change state twice per attempt and every index is rewritten each time, so the
    # foreign keys below carry no index unless a query needs one (resource history goes through
    # Attempt, which is indexed by resource).
    requested_resource = models.ForeignKey(
        Resource, verbose_name=_("requested resource"), null=True, blank=True, on_delete=models.PROTECT,
        related_name="requested_by_tasks", db_index=False)
    # Strict only means something for a task that named its resource; a task that did not may
    # always fall back to another one (task_strict_names_a_resource).
    strict = models.BooleanField(_("strict"), default=True,
                                 help_text=_("A named resource that cannot be had fails the attempt."))
    is_probe = models.BooleanField(_("probe"), default=False,
                                   help_text=_("A probation probe of a quarantined resource."))
    policy = models.ForeignKey(RetryPolicy, verbose_name=_("retry policy"), on_delete=models.PROTECT,
                               related_name="tasks", db_index=False)
    attempt_count = models.PositiveIntegerField(_("attempts"), default=0)
    next_run_at = models.DateTimeField(_("next run at"), null=True, blank=True)
    deadline_at = models.DateTimeField(_("deadline"), null=True, blank=True)
    idempotency_key = models.CharField(_("idempotency key"), max_length=200, unique=True)
    created_by = models.CharField(_("created by"), max_length=200)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    # When the dead-letter step took this dead task (compensation.services.collect_dead_letters):
    # a dead task not collected yet is the queue of dead letters. Kept on the task, not read from
    # its dead letter, because a replay's death makes none and the clean-up purges old ones.
    collected_at = models.DateTimeField(_("collected at"), null=True, blank=True)

    # The resource of the latest attempt, and the lease the task holds on it between attempts
    # (same-resource retry, operator retry, scheduler pick). The lease lives on the resource row.
    resource = models.ForeignKey(Resource, verbose_name=_("resource"), null=True, blank=True,
                                 on_delete=models.PROTECT, related_name="tasks", db_index=False)
    # The resource the next attempt must run on (the requested one, or the same one after a
    # retryable failure); empty: any resource of the pool.
    pinned_resource = models.ForeignKey(
        Resource, verbose_name=_("pinned resource"), null=True, blank=True, on_delete=models.PROTECT,
        related_name="pinned_tasks", db_index=False)
    # The lease the task holds on `resource` (its attempt's while one runs): the task is the
    # lease's holder, found by this token (the resource's lease_holder is only its name for people).
    held_lease_token = models.UUIDField(_("held lease token"), null=True, blank=True)
    # Set on a task that runs a business instance again (an operator's retry of a finished task's
    # payload, a replay, a probe): the instance's first task, so that every run of it is one query
    # away and the instance is run again only while no run of it is live or has succeeded. Empty
    # on the first run itself.
    first_run = models.ForeignKey("self", verbose_name=_("first run of this business instance"), null=True,
                                  blank=True, on_delete=models.PROTECT, related_name="later_runs", db_index=False)
    # The order this task's business instance is a new instance of (an operator's "run it again as
    # a new instance" of a succeeded one): the first task of the order's first instance, on every
    # task of every instance made new from it, so that the instance guard sees all runs of one
    # order, one query away, and never lets two of them be live.
    new_instance_of = models.ForeignKey("self", verbose_name=_("new instance of"), null=True, blank=True,
                                        on_delete=models.PROTECT, related_name="+", db_index=False)
    rq_job_id = models.CharField(_("RQ job id"), max_length=100, blank=True)
    result = models.JSONField(_("result"), null=True, blank=True)
    last_error = models.TextField(_("last error"), blank=True)
    last_error_signature = models.CharField(_("last error signature"), max_length=500, blank=True)
    last_error_category = models.CharField(_("last error category"), max_length=20, blank=True,
                                           choices=FailureCategory.choices)

    class Meta:
        verbose_name = _("task")
        verbose_name_plural = _("tasks")
        ordering = ["-id"]
        # The operator console's actions on tasks (scheduling.admin_console checks them on the server).
        permissions = [
            ("retry_resource", _("Can retry a resource or run a flow on a specified resource")),
            ("cancel_task", _("Can cancel a waiting task")),
            ("run_task_now", _("Can run a waiting task now")),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=TaskState.values), name="task_state_valid"),
            models.CheckConstraint(
                condition=~Q(state__in=WAITING_STATES) | Q(next_run_at__isnull=False), name="task_waiting_has_next_run"
            ),
            models.CheckConstraint(
                condition=~Q(state__in=TERMINAL_STATES)
                | Q(finished_at__isnull=False, held_lease_token__isnull=True),
                name="task_finished_holds_nothing",
            ),
            models.CheckConstraint(
                condition=Q(strict=False) | Q(requested_resource__isnull=False), name="task_strict_names_a_resource"
            ),
            # One holder per lease; also how a lease finds its task (the invariant checker, the
            # retry history). Written only while a task holds a lease.
            models.UniqueConstraint(fields=["held_lease_token"], condition=Q(held_lease_token__isnull=False),
                                    name="task_held_lease_unique"),
        ]
        indexes = [
            # The dispatcher: waiting tasks by due time.
            models.Index(fields=["next_run_at"], condition=Q(state__in=WAITING_STATES), name="task_waiting_due_idx"),
            # Running tasks, whose attempts the dispatcher checks for lost workers.
            models.Index(fields=["id"], condition=Q(state=TaskState.RUNNING), name="task_running_idx"),
            # claim_dead_tasks: the dead tasks not collected yet, so it holds only the queue.
            models.Index(fields=["id"], condition=Q(state=TaskState.DEAD, collected_at__isnull=True),
                         name="task_dead_uncollected_idx"),
            models.Index(fields=["state", "-id"], name="task_state_idx"),
            # instance_to_run_again: the later runs of a business instance.
            models.Index(fields=["first_run"], condition=Q(first_run__isnull=False), name="task_first_run_idx"),
            # instance_to_run_again: the runs of an order's instances made new (new_instance_of).
            models.Index(fields=["new_instance_of"], condition=Q(new_instance_of__isnull=False),
                         name="task_new_instance_of_idx"),
            # The failed-first batch tick: is a waiting task's retry meant for this resource?
            models.Index(fields=["pinned_resource"], condition=Q(state__in=WAITING_STATES),
                         name="task_waiting_pinned_idx"),
        ]

    def __str__(self) -> str:
        return f"task {self.pk}"

    @property
    def holder(self) -> str:
        """How the task appears as a resource's holder, in operators' messages: a name only, never
        read back (a lease finds its task by its token: held_lease_token, Attempt.lease_token)."""
        return f"task {self.pk}"


class TransactionIdField(models.Field):
    """A PostgreSQL xid8: a transaction id that never wraps around, compared only with other xid8
    values (psycopg hands it over as text, so it travels as text and reads back as an int)."""

    description = "PostgreSQL 64-bit transaction id (xid8)"

    def db_type(self, connection) -> str:
        return "xid8"

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        return None if value is None else str(int(value))

    def from_db_value(self, value, expression, connection):
        return None if value is None else int(value)

    def to_python(self, value):
        return None if value is None else int(value)


class Attempt(models.Model):
    """One execution of a task: what a resource's retry history shows."""

    # Indexed through attempt_number_unique_per_task and attempt_resource_history_idx.
    task = models.ForeignKey(Task, verbose_name=_("task"), on_delete=models.CASCADE, related_name="attempts",
                             db_index=False)
    number = models.PositiveIntegerField(_("number"))
    resource = models.ForeignKey(Resource, verbose_name=_("resource"), null=True, blank=True,
                                 on_delete=models.PROTECT, related_name="attempts", db_index=False)
    lease_token = models.UUIDField(_("lease token"), null=True, blank=True)
    fencing_token = models.BigIntegerField(_("fencing token"), null=True, blank=True)
    worker = models.CharField(_("worker"), max_length=200, blank=True)
    rq_job_id = models.CharField(_("RQ job id"), max_length=100, blank=True)
    started_at = models.DateTimeField(_("started at"))
    scheduled_for = models.DateTimeField(_("scheduled for"), null=True, blank=True,
                                         help_text=_("When this attempt was due."))
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    outcome = models.CharField(_("outcome"), max_length=20, choices=AttemptOutcome.choices,
                               default=AttemptOutcome.RUNNING)
    error_class = models.CharField(_("error class"), max_length=200, blank=True)
    error_message = models.TextField(_("error message"), blank=True)
    error_signature = models.CharField(_("error signature"), max_length=500, blank=True)
    # Choices only so that pages show their labels; the values are the classification's.
    category = models.CharField(_("error category"), max_length=20, blank=True, choices=FailureCategory.choices)
    action = models.CharField(_("action"), max_length=30, blank=True, choices=PatternAction.choices)
    duration_ms = models.PositiveIntegerField(_("duration (ms)"), null=True, blank=True)
    # The transaction that finished it, written by the database (the attempt_finished_xid trigger,
    # migration 0008) on every path that ends an attempt and never changed after: telemetry rolls
    # finished attempts up into its histograms by it, as it rolls task events up by TaskEvent.xid.
    finished_xid = TransactionIdField(_("finishing transaction id"), null=True, blank=True, editable=False)

    class Meta:
        verbose_name = _("attempt")
        # "attempts" alone is a count (Task.attempt_count, a notification's attempts).
        verbose_name_plural = pgettext_lazy("the records", "attempts")
        ordering = ["task_id", "number"]
        constraints = [
            # A job delivered twice cannot record the same attempt twice, so it cannot run the flow twice.
            models.UniqueConstraint(fields=["task", "number"], name="attempt_number_unique_per_task"),
            models.UniqueConstraint(
                fields=["task"], condition=Q(outcome=AttemptOutcome.RUNNING), name="attempt_one_running_per_task"
            ),
            models.CheckConstraint(condition=Q(number__gte=1), name="attempt_number_positive"),
            models.CheckConstraint(
                condition=Q(outcome=AttemptOutcome.RUNNING) | Q(finished_at__isnull=False), name="attempt_finished_has_end"
            ),
        ]
        indexes = [
            # A resource's retry history, newest first.
            models.Index(fields=["resource", "-id"], name="attempt_resource_history_idx"),
            # The task behind a lease token: a timeline event's in the retry history, a lease no
            # task holds any more in the invariant checker.
            models.Index(fields=["lease_token"], condition=Q(lease_token__isnull=False),
                         name="attempt_lease_token_idx"),
            # telemetry's metrics rollup and scrape: the attempts finished since the rollup's watermark.
            models.Index(fields=["finished_xid"], condition=Q(finished_xid__isnull=False),
                         name="attempt_finished_xid_idx"),
            # The acceptance figures' retries started within their SLA (scheduling.selectors.retry_starts):
            # retries by due time, with their start, so a window is an index-only scan.
            models.Index(fields=["scheduled_for", "started_at"], condition=Q(number__gt=1),
                         name="attempt_retry_due_idx"),
            # Which errors are really transient (scheduling.analysis.transient_errors): the failures
            # of a window. Failed attempts only: the index is written once per failure.
            models.Index(fields=["started_at"], condition=Q(outcome__in=[AttemptOutcome.FAILED, AttemptOutcome.ABANDONED]),
                         name="attempt_failure_time_idx"),
            # The failures behind one row of that report (FailedWithFilter: one signature in a window):
            # without it, the attempts and dead tasks behind a row read every failure of the window
            # through attempt_failure_time_idx to keep the one signature's (1 in 200 at the benchmark).
            models.Index(fields=["error_signature", "started_at"],
                         condition=Q(outcome__in=[AttemptOutcome.FAILED, AttemptOutcome.ABANDONED]),
                         name="attempt_failure_signature_idx"),
        ]

    def __str__(self) -> str:
        return f"task {self.task_id} attempt {self.number}"


class TaskEvent(models.Model):
    """task.execution.failed, task.retry.scheduled, task.retry.succeeded, task.dead: rows to count and alert on."""

    task = models.ForeignKey(Task, verbose_name=_("task"), on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(_("kind"), max_length=40, choices=TaskEventKind.choices)
    attempt_number = models.PositiveIntegerField(pgettext_lazy("which one", "attempt"), null=True, blank=True)
    details = models.JSONField(_("details"), default=dict, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    # The writing transaction's id: telemetry's metrics rollup counts the events up to a watermark of
    # these (telemetry.metrics_rollup says why a transaction id, not an event id).
    xid = TransactionIdField(
        _("transaction id"), db_default=models.Func(function="pg_current_xact_id", output_field=TransactionIdField()),
        editable=False)

    class Meta:
        verbose_name = _("task event")
        verbose_name_plural = _("task events")
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["kind", "created_at"], name="task_event_kind_time_idx"),
            # The ops dashboard's retry outcomes (scheduling.selectors.retry_outcomes and
            # retry_outcomes_per_hour): only the events that end a retry, so counting a window is
            # an index-only scan of that window's retries.
            models.Index(fields=["created_at", "kind"], name="task_event_retry_outcome_idx",
                         condition=Q(kind__in=[TaskEventKind.RETRY_SUCCEEDED, TaskEventKind.RETRY_SCHEDULED,
                                               TaskEventKind.DEAD], attempt_number__gt=1)),
            # telemetry's metrics rollup and scrape: the events of its kinds above its watermark.
            models.Index(fields=["kind", "xid", "id"], name="task_event_kind_xid_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} of task {self.task_id}"


class BatchConfig(models.Model):
    """Automatic scheduling: start this many tasks of a flow on a pool at every tick."""

    name = models.SlugField(_("name"), max_length=100, unique=True)
    pool = models.ForeignKey(ResourcePool, verbose_name=_("pool"), on_delete=models.CASCADE,
                             related_name="batch_configs")
    flow = models.CharField(_("flow"), max_length=100)
    policy = models.ForeignKey(RetryPolicy, verbose_name=_("retry policy"), on_delete=models.PROTECT,
                               related_name="batch_configs")
    payload = models.JSONField(_("payload"), default=dict, blank=True,
                               help_text=_("The payload of every task this config starts."))
    enabled = models.BooleanField(_("enabled"), default=True)
    tasks_per_tick = models.PositiveIntegerField(_("tasks per tick"), default=10)
    retry_failed_first = models.BooleanField(
        _("retry failed first"), default=False,
        help_text=_("Reclaim recently failed, retryable resources before taking fresh ones."))
    recent_window_seconds = models.PositiveIntegerField(_("recent window (seconds)"), default=3600)
    retryable_error_patterns = models.JSONField(
        _("retryable error patterns"), default=list, blank=True,
        help_text=_("Regexes; a failed resource is reclaimed only if its last failure matches one. Empty: any "
                    "retryable failure."))
    last_tick_at = models.DateTimeField(_("last tick at"), null=True, blank=True)
    last_error = models.TextField(_("last error"), blank=True,
                                  help_text=_("Why the last tick failed; empty after a good one."))

    class Meta:
        verbose_name = _("batch config")
        verbose_name_plural = _("batch configs")
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(tasks_per_tick__gte=1), name="batch_tasks_per_tick_positive"),
        ]

    def __str__(self) -> str:
        return self.name


class FailureRollup(models.Model):
    """What the failures of one (policy, error signature) that started in one UTC hour (or day) led
    to, as scheduling.analysis counts them: the "which errors are really transient" report reads
    these instead of every failure of its window. Written only by
    scheduling.services.rollups.roll_up_attempts, which recounts a period whenever a change
    reaches its failures (scheduling.analysis says which changes do)."""

    period_start = models.DateTimeField(_("period start"))
    # 1: an hour, counted from the failures; 24: a UTC day, the sum of its hours.
    period_hours = models.PositiveSmallIntegerField(_("period (hours)"))
    # An id, not a foreign key: the counts are the report's, never a reason to keep or lock a policy.
    policy_id = models.BigIntegerField(_("policy id"))
    signature = models.CharField(_("error signature"), max_length=500)
    failures = models.PositiveIntegerField(_("failures"))
    retries = models.PositiveIntegerField(_("retries"))
    wasted = models.PositiveIntegerField(_("wasted retries"))
    dead = models.PositiveIntegerField(_("dead"))
    recovered_same = models.PositiveIntegerField(_("recovered on the same resource"))
    recovered_other = models.PositiveIntegerField(_("recovered on another resource"))
    # The period's latest failure (its id), whose text the report shows.
    latest_attempt_id = models.BigIntegerField(_("latest failure"))

    class Meta:
        verbose_name = _("failure rollup")
        verbose_name_plural = _("failure rollups")
        constraints = [
            # Also the index the report reads its periods by, and the pass replaces them by.
            models.UniqueConstraint(fields=["period_hours", "period_start", "policy_id", "signature"],
                                    name="failure_rollup_once_per_period"),
            models.CheckConstraint(condition=Q(period_hours__in=[1, 24]), name="failure_rollup_hour_or_day"),
        ]

    def __str__(self) -> str:
        return f"{self.signature} of policy {self.policy_id}, {self.period_hours} h from {self.period_start}"


class RetryRollup(models.Model):
    """How many retries (attempts numbered 2 and up) ended in one UTC hour, by how (their task
    events), and how many were due in it and started, late or not: the acceptance figures read
    these instead of a week of rows (scheduling.selectors.retry_outcomes, retry_start_counts).
    Added to, never recounted: an event or a finished attempt counts once, in the pass that
    passes its transaction (scheduling.services.rollups)."""

    period_start = models.DateTimeField(_("hour"), unique=True)
    succeeded = models.PositiveIntegerField(_("retries succeeded"), default=0)
    failed = models.PositiveIntegerField(_("retries failed"), default=0)
    dead = models.PositiveIntegerField(_("retries dead"), default=0)
    # Retries due in the hour (Attempt.scheduled_for) that have started and finished; `late`
    # started after their due time plus the grace the mark records.
    started = models.PositiveIntegerField(_("retries started"), default=0)
    late = models.PositiveIntegerField(_("retries started late"), default=0)

    class Meta:
        verbose_name = _("retry rollup")
        verbose_name_plural = _("retry rollups")

    def __str__(self) -> str:
        return f"retries of the hour from {self.period_start}"


class AttemptRollupMark(models.Model):
    """Where the rollups of attempts stand (FailureRollup, RetryRollup): every change written by a
    transaction below `below_xid` is in them; a read counts what was written at or above it from
    the rows. One row (id 1), moved only forward, in the transaction of the pass."""

    below_xid = TransactionIdField(_("below transaction"))
    # The oldest period the rollup holds: older failures are never read (scheduling.analysis's longest
    # window). Empty until the first pass has counted every period.
    kept_from = models.DateTimeField(_("kept from"), null=True, blank=True)
    # The RETRYOPS_RETRY_SLA_GRACE_SECONDS RetryRollup.late was counted with: another setting counts
    # them all again.
    grace_seconds = models.FloatField(_("grace (seconds)"), null=True, blank=True)
    advanced_at = models.DateTimeField(_("advanced at"), auto_now=True)

    class Meta:
        verbose_name = _("attempt rollup mark")
        verbose_name_plural = _("attempt rollup marks")
        constraints = [
            models.CheckConstraint(condition=Q(id=1), name="attempt_rollup_mark_single_row"),
        ]

    def __str__(self) -> str:
        return f"attempts rolled up below transaction {self.below_xid}"
