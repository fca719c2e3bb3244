"""Runs of runbook actions for work orders: who asked, with what input, who approved, what came
of it. Written only by compensation.runbooks.services."""

from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext_lazy as _

from compensation.choices import Named


class RunbookRunState(models.TextChoices):
    # An external action waits here for a second operator; an internal one starts approved.
    REQUESTED = "requested", _("Waiting for approval")
    APPROVED = "approved", _("Ready to run")
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    REJECTED = "rejected", _("Rejected")


RUN_STARTED = (RunbookRunState.RUNNING, RunbookRunState.SUCCEEDED, RunbookRunState.FAILED)
RUN_FINISHED = (RunbookRunState.SUCCEEDED, RunbookRunState.FAILED)


class RunbookRun(Named, models.Model):
    """One request to run a runbook action for a work order, idempotent by its token, and its outcome."""

    work_order = models.ForeignKey("compensation.WorkOrder", verbose_name=_("work order"), on_delete=models.PROTECT,
                                   related_name="runbook_runs")
    runbook = models.CharField(_("runbook"), max_length=100)
    action = models.CharField(_("action"), max_length=100)
    # As the action was declared when requested: a runbook edited later to mark it external
    # makes it need approval too (the service checks both), never the other way round.
    external = models.BooleanField(_("external"), default=False)
    input = models.JSONField(_("input"), default=dict, blank=True)
    token = models.CharField(_("token"), max_length=100,
                             help_text=_("Idempotency key: the same token is the same run."))
    state = models.CharField(_("state"), max_length=20, choices=RunbookRunState.choices,
                             default=RunbookRunState.REQUESTED)
    requested_by = models.CharField(_("requested by"), max_length=200)
    # Who is behind requested_by and approved_by (audit.context.identity_of): a console user's
    # login, an API client's service user, a command's actor. Four eyes compares these, so that a
    # second client of the requester's service user, or the user behind a client, is the requester.
    requester_identity = models.CharField(_("requester's identity"), max_length=200,
                                          help_text=_("The user behind the request (an API client's service user)."))
    requested_at = models.DateTimeField(_("requested at"), auto_now_add=True)
    approved_by = models.CharField(_("approved by"), max_length=200, blank=True)
    approver_identity = models.CharField(_("approver's identity"), max_length=200, blank=True,
                                         help_text=_("The user behind the approval (an API client's service user)."))
    approved_at = models.DateTimeField(_("approved at"), null=True, blank=True)
    rejected_by = models.CharField(_("rejected by"), max_length=200, blank=True)
    rejected_at = models.DateTimeField(_("rejected at"), null=True, blank=True)
    reject_reason = models.TextField(_("reject reason"), blank=True)
    run_by = models.CharField(_("run by"), max_length=200, blank=True)
    started_at = models.DateTimeField(_("started at"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    result = models.JSONField(_("result"), null=True, blank=True)
    error = models.TextField(_("error"), blank=True)
    # What the result needed to become storable (NaN, NUL characters...), as record_audit notes it.
    repairs = models.JSONField(_("repairs"), default=list, blank=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("runbook run")
        verbose_name_plural = _("runbook runs")
        ordering = ["-id"]
        # The console's runbook actions (compensation.runbooks.admin checks them on the server):
        # operators request and run actions; approvers approve another operator's external one.
        permissions = [
            ("run_runbook_action", _("Can request and run a runbook action")),
            ("approve_runbookrun", _("Can approve or reject another operator's runbook action")),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=RunbookRunState.values), name="runbook_run_state_valid"),
            # A double click, a retried command: the second request finds the first run.
            models.UniqueConstraint(fields=["token"], name="runbook_run_token_unique"),
            # Four eyes: whoever asked for a run cannot be the one who approves it, whatever
            # the code path (a form, the shell, a bug in a service), neither under the same name
            # nor as the same user behind another one (a second API client of that user).
            models.CheckConstraint(
                condition=Q(approver_identity="") | (~Q(approver_identity__iexact=F("requester_identity"))
                                                     & ~Q(approved_by__iexact=F("requested_by"))),
                name="runbook_run_approver_not_requester",
            ),
            models.CheckConstraint(
                condition=~Q(requester_identity="") & (Q(approved_by="") | ~Q(approver_identity="")),
                name="runbook_run_identities_named",
            ),
            models.CheckConstraint(
                condition=Q(external=False) | Q(state__in=[RunbookRunState.REQUESTED, RunbookRunState.REJECTED])
                | ~Q(approved_by=""),
                name="runbook_run_external_approved",
            ),
            models.CheckConstraint(condition=Q(approved_by="") | Q(approved_at__isnull=False),
                                   name="runbook_run_approved_has_time"),
            models.CheckConstraint(
                condition=~Q(state__in=RUN_STARTED) | (Q(started_at__isnull=False) & ~Q(run_by="")),
                name="runbook_run_started_has_runner",
            ),
            models.CheckConstraint(condition=~Q(state__in=RUN_FINISHED) | Q(finished_at__isnull=False),
                                   name="runbook_run_finished_has_time"),
            models.CheckConstraint(
                condition=~Q(state=RunbookRunState.REJECTED) | (~Q(rejected_by="") & Q(rejected_at__isnull=False)),
                name="runbook_run_rejected_has_who",
            ),
        ]

    def __str__(self) -> str:
        return f"runbook run {self.pk}"
