"""recovery_runbook: the runbooks from the shell, with the same checks as the admin (it calls
the same services): list them, show one, run an action for a work order, approve or reject a run."""

import argparse
import json

from django.core.management.base import CommandError
from django.db import transaction
from django.utils.translation import gettext_lazy as _

from audit.context import current
from audit.management.base import AuditedCommand
from compensation.runbooks.catalog import get_runbook, runbooks, suggest_for_work_order
from compensation.runbooks.models import RunbookRun, RunbookRunState
from compensation.runbooks.services import (
    approve_runbook_action,
    check_runbook_request,
    reject_runbook_action,
    request_runbook_action,
    run_runbook_action,
)
from compensation.work_orders.models import WorkOrder
from retryops.errors import DomainError


def _rolled_back(call):
    """Run a service and undo what it wrote: its checks, without its effects (a dry run)."""
    with transaction.atomic():
        call()
        transaction.set_rollback(True)


class Command(AuditedCommand):
    help = _("Runbooks for work orders. `list [--work-order ID]` (the suggested ones for that work order), "
             "`show NAME` (its steps and actions), `run NAME ACTION --work-order ID --input JSON --token T`"
             " (request the action and run it when it needs no approval; the same token again is the same "
             "run), `approve RUN_ID --actor A` (a second operator approves an external action, then it "
             "runs), `reject RUN_ID --reason R`. --dry-run checks without changing anything.")

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="subcommand", required=True, metavar="{list,show,run,approve,reject}")
        listing = commands.add_parser("list", help=_("The runbooks, or those suggested for a work order."))
        listing.add_argument("--work-order", type=int, help=_("Only the runbooks suggested for this work order."))
        show = commands.add_parser("show", help=_("A runbook's steps and actions."))
        show.add_argument("name")
        run = commands.add_parser("run", help=_("Request a runbook action for a work order, and run it if it may."))
        run.add_argument("name")
        run.add_argument("action")
        run.add_argument("--work-order", type=int, required=True)
        run.add_argument("--input", default="{}", help=_("The action's input, a JSON value (default {})."))
        run.add_argument("--token", required=True, help=_("Idempotency key: the same token again is the same run."))
        run.add_argument("--dry-run", action="store_true",
                         help=_("Check the runbook, action and input; write nothing."))
        approve = commands.add_parser("approve",
                                      help=_("Approve an external action (not your own request), then run it."))
        approve.add_argument("run_id", type=int)
        approve.add_argument("--no-run", action="store_true", help=_("Approve only; run it later."))
        approve.add_argument("--dry-run", action="store_true",
                             help=_("Check that you may approve it; write nothing."))
        reject = commands.add_parser("reject", help=_("Turn down a run that has not started."))
        reject.add_argument("run_id", type=int)
        reject.add_argument("--reason", required=True)
        reject.add_argument("--dry-run", action="store_true")
        for sub in (run, approve, reject):
            # Also after the subcommand; SUPPRESS keeps an --actor given before it (AuditedCommand's).
            sub.add_argument("--actor", default=argparse.SUPPRESS,
                             help=_("Who acts, for the audit log (default: the OS user; approve needs it)."))

    def handle(self, *args, subcommand, **options):
        try:
            getattr(self, f"do_{subcommand}")(**options)
        except DomainError as exc:
            raise CommandError(f"{exc} [{exc.code}]") from None

    def do_list(self, *, work_order=None, **options):
        books = list(runbooks().values())
        if work_order is not None:
            order = WorkOrder.objects.filter(pk=work_order).first()
            if order is None:
                raise CommandError(f"no work order with id {work_order}")
            books = suggest_for_work_order(order)
            self.stdout.write(f"runbooks for {order} ({order.flow or 'any flow'}: "
                              f"{order.error_signature or 'no signature'}):")
        for book in books:
            actions = ", ".join(a.name + (" (external)" if a.external else "") for a in book.actions)
            self.stdout.write(f"{book.name:34} {book.title}  [{actions}]")
        self.stdout.write(f"{len(books)} runbook(s)")

    def do_show(self, *, name, **options):
        book = get_runbook(name)
        self.stdout.write(self.style.MIGRATE_HEADING(f"{book.name}: {book.title}"))
        self.stdout.write(f"applies to flows: {', '.join(book.flows) or 'any'}; "
                          f"signatures: {', '.join(book.signatures) or 'any'}\n")
        self.stdout.write(book.steps + "\n")
        self.stdout.write(self.style.MIGRATE_HEADING("actions"))
        for action in book.actions:
            mark = "external: needs another operator's approval" if action.external else "internal"
            self.stdout.write(f"- {action.name} ({mark}): {action.description}")
            self.stdout.write(f"  input: {json.dumps(action.input_schema, sort_keys=True)}")

    def do_run(self, *, name, action, work_order, input, token, dry_run, **options):
        try:
            value = json.loads(input)
        except ValueError as exc:
            raise CommandError(f"--input is not JSON: {exc}") from None
        actor = current().actor
        if dry_run:
            _, step, _ = check_runbook_request(runbook=name, action=action, input=value)
            order = WorkOrder.objects.filter(pk=work_order).first()
            if order is None:
                raise CommandError(f"no work order with id {work_order}")
            then = "wait for another operator's approval" if step.external else "run at once"
            self.stdout.write(f"dry run: {name} / {action} for {order} ({order.state}) as {actor} would "
                              f"{then}; nothing changed")
            return
        run, _first = request_runbook_action(work_order=work_order, runbook=name, action=action, input=value,
                                             token=token, actor=actor)
        self._carry_on(run, actor=actor)

    def _carry_on(self, run: RunbookRun, *, actor: str):
        if run.state == RunbookRunState.APPROVED:
            run = run_runbook_action(run=run, actor=actor)
        self._summary(run)

    def _summary(self, run: RunbookRun):
        what = f"{run} ({run.runbook} / {run.action}, work order {run.work_order_id})"
        if run.state == RunbookRunState.REQUESTED:
            self.stdout.write(self.style.WARNING(
                f"{what} waits for approval by an operator other than {run.requester_identity}: "
                f"manage.py recovery_runbook approve {run.pk} --actor OTHER"))
        elif run.state == RunbookRunState.SUCCEEDED:
            self.stdout.write(self.style.SUCCESS(f"{what} succeeded: {json.dumps(run.result, sort_keys=True)}"))
        elif run.state == RunbookRunState.FAILED:
            raise CommandError(f"{what} failed: {run.error}")
        else:
            self.stdout.write(f"{what} is {run.state}")

    def do_approve(self, *, run_id, no_run, dry_run, actor=None, **options):
        if not actor:
            raise CommandError("approve needs --actor: who approves (not who requested it)")
        actor = current().actor  # the option as the audit context cleaned it (trimmed, NUL-free, 200 at most)
        if dry_run:
            _rolled_back(lambda: approve_runbook_action(run=run_id, actor=actor))
            self.stdout.write(f"dry run: {actor} may approve runbook run {run_id}; nothing changed")
            return
        run = approve_runbook_action(run=run_id, actor=actor)
        self.stdout.write(f"{actor} approved {run}")
        if no_run:
            self._summary(run)
        else:
            self._carry_on(run, actor=actor)

    def do_reject(self, *, run_id, reason, dry_run, **options):
        actor = current().actor
        if dry_run:
            _rolled_back(lambda: reject_runbook_action(run=run_id, actor=actor, reason=reason))
            self.stdout.write(f"dry run: {actor} may reject runbook run {run_id}; nothing changed")
            return
        run = reject_runbook_action(run=run_id, actor=actor, reason=reason)
        self.stdout.write(f"{actor} rejected {run}: {reason}")
