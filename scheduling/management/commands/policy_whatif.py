from pathlib import Path

from django.core.management.base import CommandError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from audit.management.base import TranslatedHelpCommand
from retryops.errors import DomainError
from retryops.replica import from_replica
from scheduling import selectors
from scheduling.whatif import DEFAULT_DAYS, EXPECTED_NOTE, proposal, what_if


def _yaml():
    import yaml

    return yaml


def parse_setting(text: str) -> tuple[str, object]:
    """`field=value` of --set: the value read as YAML (3, 2.5, null, fixed, ["timed out"])."""
    field, equals, value = text.partition("=")
    if not equals or not field.strip():
        raise CommandError(_("--set expects field=value, got %(text)r") % {"text": text})
    try:
        return field.strip(), _yaml().safe_load(value)
    except _yaml().YAMLError as exc:
        raise CommandError(_("--set %(field)s: the value is not valid YAML: %(error)s") % {
            "field": field.strip(), "error": exc}) from None


def read_file(path: str, policy: str) -> dict:
    """The proposed fields of a YAML file: a mapping of fields, or a policy file's `policies` list
    (config/tasks/retry-policies.yaml's form), of which the entry named `policy` is taken."""
    try:
        document = _yaml().safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise CommandError(_("cannot read %(path)s: %(error)s") % {"path": path, "error": exc}) from None
    except _yaml().YAMLError as exc:
        raise CommandError(_("%(path)s: not valid YAML: %(error)s") % {"path": path, "error": exc}) from None
    if isinstance(document, dict) and isinstance(document.get("policies"), list):
        entries = [entry for entry in document["policies"] if isinstance(entry, dict) and entry.get("name") == policy]
        if not entries:
            raise CommandError(_("%(path)s has no policy named %(name)r") % {"path": path, "name": policy})
        return entries[0]
    if not isinstance(document, dict):
        raise CommandError(_("%(path)s: expected a mapping of policy fields, or a 'policies' list") % {"path": path})
    return document


class Command(TranslatedHelpCommand):
    help = gettext_lazy(
        "Replay the last days of a retry policy's recorded attempts under a proposed change of it and print what "
        "each would do, side by side. Writes nothing.")

    def add_arguments(self, parser):
        parser.add_argument("policy", help=gettext_lazy("The retry policy's name."))
        parser.add_argument("--days", type=int, default=DEFAULT_DAYS,
                            help=gettext_lazy("Replay the tasks created in the last N days (default 7)."))
        parser.add_argument("--set", action="append", default=[], dest="set_fields", metavar="FIELD=VALUE",
                            help=gettext_lazy("A field of the proposed policy, its value as YAML: max_attempts=3, "
                                              "deadline_seconds=null, "
                                              "non_retryable_error_patterns='[\"banned\", \"timed out\"]'. "
                                              "Repeat for more fields."))
        parser.add_argument("--file", help=gettext_lazy(
            "A YAML file of the proposed fields, or a policy file (its entry with the policy's name); "
            "--set applies on top."))
        parser.add_argument("--json", action="store_true", help=gettext_lazy("Print JSON instead of a table."))

    def handle(self, *args, policy, days, set_fields, file, json, **options):
        import json as json_module

        changes = read_file(file, policy) if file else {}
        given = set()
        for text in set_fields:
            field, value = parse_setting(text)
            if field in given:
                raise CommandError(_("--set %(field)s is given twice") % {"field": field})
            given.add(field)
            changes[field] = value
        try:
            current = selectors.get_policy(policy)
            # Days of attempts streamed: from the replica, when there is one.
            result = from_replica(what_if, policy=current, proposed=proposal(current, changes), days=days)
        except DomainError as exc:
            raise CommandError(str(exc)) from None
        if json:
            self.stdout.write(json_module.dumps(result.as_dict(), indent=2, ensure_ascii=False))
            return
        self.stdout.write(self.table(result))

    def table(self, result) -> str:
        lines = [result.summary()]
        if result.changes:
            lines.append(_("Proposed: %(changes)s") % {"changes": "; ".join(
                f"{name} {before} → {after}" for name, before, after in result.shown_changes())})
        else:
            lines.append(_("Proposed: no change (both columns replay the policy as saved)."))
        rows = [("  " + row.label if row.indented else row.label, row.current.shown(), row.proposed.shown(),
                 row.shown_change()) for row in result.rows()]
        header = ("", _("current"), _("proposed"), _("change"))
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
        lines.append("")
        for row in [header, *rows]:
            lines.append(f"{row[0]:<{widths[0]}}  " + "  ".join(f"{row[i]:>{widths[i]}}" for i in (1, 2, 3)))
        if result.has_expected:
            lines += ["", str(EXPECTED_NOTE)]
        return "\n".join(lines)
