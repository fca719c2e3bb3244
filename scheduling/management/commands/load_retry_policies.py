from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from audit.context import current
from audit.management.base import AuditedCommand
from retryops.errors import DomainError
from scheduling import services


class Command(AuditedCommand):
    help = gettext_lazy("Load retry policies from YAML (default config/tasks/retry-policies.yaml): all of them, or "
                        "none. What the file lacks (policies, error patterns) is kept unless --prune is given.")

    def add_arguments(self, parser):
        parser.add_argument("path", nargs="?", default=str(settings.RETRYOPS_POLICY_FILE),
                            help=gettext_lazy("The YAML file to load."))
        how = parser.add_mutually_exclusive_group()
        how.add_argument("--only-missing", action="store_true",
                         help=gettext_lazy("Add the policies that do not exist yet; leave existing ones (edited in "
                                           "the admin) alone."))
        how.add_argument("--prune", action="store_true",
                         help=gettext_lazy("Also remove the policies and error patterns the file lacks."))
        parser.add_argument("--dry-run", action="store_true",
                            help=gettext_lazy("Print what would be added, changed and (with --prune) removed; write "
                                              "nothing."))

    def handle(self, *args, path, only_missing, prune, dry_run, **options):
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
        try:
            if dry_run:
                load = services.preview_retry_policies(text=text, source=path, only_missing=only_missing, prune=prune)
            else:
                load = services.load_retry_policies(text=text, source=path, actor=current().actor,
                                                    only_missing=only_missing, prune=prune)
        except DomainError as exc:
            raise CommandError(str(exc)) from None
        if only_missing and not dry_run:
            self.stdout.write(self.style.SUCCESS(
                f"{len(load.added)} missing retry policies added: {', '.join(load.added) or 'none'}; existing ones "
                f"were left as they are (to overwrite them with {path}: manage.py load_retry_policies)"))
            return
        self.report(load, dry_run=dry_run)

    def report(self, load: services.PolicyLoad, *, dry_run: bool) -> None:
        none = _("none")
        lines = [_("added: %(names)s") % {"names": ", ".join(load.added) or none},
                 _("changed: %(policies)s") % {"policies": "; ".join(
                     f"{name} ({', '.join(fields)})" for name, fields in load.changed.items()) or none}]
        lacking = [_("policy %(name)s") % {"name": name} for name in load.lacking_policies] + load.lacking_patterns
        if lacking and load.pruned:
            lines.append(_("removed (not in the file): %(what)s") % {"what": "; ".join(lacking)})
        elif lacking:
            lines.append(_("kept, though not in the file (--prune removes them): %(what)s") % {
                "what": "; ".join(lacking)})
        if dry_run:
            lines.append(_("dry run: nothing was written"))
        self.stdout.write(self.style.SUCCESS("\n".join(lines)))
