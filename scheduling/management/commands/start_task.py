from django.core.management.base import CommandError
from django.utils.translation import gettext_lazy as _

from audit.context import current
from audit.management.base import AuditedCommand
import resources.selectors
from retryops.errors import DomainError
from scheduling import services


class Command(AuditedCommand):
    help = _("Start a task: a flow run on a pool's resource (a named one with --key, strict unless --not-strict).")

    def add_arguments(self, parser):
        parser.add_argument("--flow", required=True, help=_("The flow to run."))
        parser.add_argument("--pool", required=True, help=_("The name of the pool to take the resource from."))
        parser.add_argument("--payload", default="{}", help=_("A JSON object."))
        parser.add_argument("--key", help=_("Run on this resource of the pool."))
        parser.add_argument("--not-strict", action="store_true",
                            help=_("If the named resource cannot be had, take another."))
        parser.add_argument("--policy",
                            help=_("The retry policy's name; default: default."))
        parser.add_argument("--idempotency-key",
                            help=_("Starting again with the same key returns the task it started the first time."))

    def handle(self, *args, flow, pool, payload, key, not_strict, policy, idempotency_key, actor=None, **options):
        # The task's created_by is who runs the command: --actor (AuditedCommand's), else the OS user.
        try:
            resource = resources.selectors.get_resource(pool=pool, key=key) if key else None
            task = services.start_task(flow=flow, pool_name=pool, payload=payload, resource=resource,
                                       strict=not not_strict, policy=policy, created_by=actor or current().actor,
                                       idempotency_key=idempotency_key)
        except DomainError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(self.style.SUCCESS(f"started {task} ({task.flow} on pool {task.pool.name})"))
