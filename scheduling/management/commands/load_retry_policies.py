from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError

from audit.context import current
from audit.management.base import AuditedCommand
from retryops.errors import DomainError
from scheduling import services


class Command(AuditedCommand):
    help = "Load retry policies from YAML (default config/tasks/retry-policies.yaml): all of them, or none."

    def add_arguments(self, parser):
        parser.add_argument("path", nargs="?", default=str(settings.RETRYOPS_POLICY_FILE))

    def handle(self, *args, path, **options):
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
        try:
            policies = services.load_retry_policies(text=text, source=path, actor=current().actor)
        except DomainError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(self.style.SUCCESS(f"{len(policies)} retry policies loaded: {', '.join(p.name for p in policies)}"))
