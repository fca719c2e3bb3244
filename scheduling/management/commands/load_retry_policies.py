from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError
from django.utils.translation import gettext_lazy as _

from audit.context import current
from audit.management.base import AuditedCommand
from retryops.errors import DomainError
from scheduling import services


class Command(AuditedCommand):
    help = _("Load retry policies from YAML (default config/tasks/retry-policies.yaml): all of them, or none.")

    def add_arguments(self, parser):
        parser.add_argument("path", nargs="?", default=str(settings.RETRYOPS_POLICY_FILE),
                            help=_("The YAML file to load."))
        parser.add_argument("--only-missing", action="store_true",
                            help=_("Add the policies that do not exist yet; leave existing ones (edited in the admin) "
                                   "alone."))

    def handle(self, *args, path, only_missing, **options):
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
        try:
            policies = services.load_retry_policies(text=text, source=path, actor=current().actor,
                                                    only_missing=only_missing)
        except DomainError as exc:
            raise CommandError(str(exc)) from None
        names = ", ".join(p.name for p in policies) or "none"
        if only_missing:
            self.stdout.write(self.style.SUCCESS(
                f"{len(policies)} missing retry policies added: {names}; existing ones were left as they are "
                f"(to overwrite them with {path}: manage.py load_retry_policies)"))
        else:
            self.stdout.write(self.style.SUCCESS(f"{len(policies)} retry policies loaded: {names}"))
