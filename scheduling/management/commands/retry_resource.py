from django.core.management.base import CommandError
from django.utils.translation import gettext_lazy as _

from audit.management.base import AuditedCommand
import resources.selectors
from retryops.errors import DomainError
from scheduling import services


class Command(AuditedCommand):
    help = _("Retry a resource in strict mode: reset it if failed and start a task on exactly that resource, "
             "atomically. Without --flow it reuses the flow, payload and policy of the last task that ran on it.")

    def add_arguments(self, parser):
        parser.add_argument("--pool", required=True, help=_("The name of the resource's pool."))
        parser.add_argument("--key", required=True, help=_("The resource's key in that pool."))
        parser.add_argument("--actor", required=True, help=_("Who asks for the retry (recorded in the timeline)."))
        parser.add_argument("--flow", help=_("The flow to run; default: the last task's."))
        parser.add_argument("--payload",
                            help=_("JSON object; default: the last task's payload without --flow, {} with it."))
        parser.add_argument("--policy", help=_("The retry policy's name; default: the last task's."))

    def handle(self, *args, pool, key, actor, flow, payload, policy, **options):
        try:
            resource = resources.selectors.get_resource(pool=pool, key=key)
            task = services.retry_resource(resource=resource, actor=actor, flow=flow, payload=payload, policy=policy)
        except DomainError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(self.style.SUCCESS(f"started {task} ({task.flow}) on {resource.key}"))
