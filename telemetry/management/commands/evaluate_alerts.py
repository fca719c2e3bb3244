"""One evaluation of the alert rules from the shell; see telemetry.alerts.services."""

from django.core.management.base import BaseCommand, CommandError
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from telemetry.alerts.services import evaluate_alerts, read_alerts
from telemetry.alerts.models import Alert
from telemetry.alerts.rules import RULES


class Command(BaseCommand):
    @property
    def help(self) -> str:
        # Read when the parser is made (argparse needs a str, not a lazy translation).
        return gettext("Evaluate the alert rules as the ops process does every 30 seconds: "
                       "fire an alert whose value is above its threshold, resolve one that stayed at or below its "
                       "clear level for RETRYOPS_ALERT_CLEAR_SECONDS, and notify the on-call either way. Prints "
                       "each rule's value, threshold and state; exits non-zero when a rule failed. --dry-run only "
                       "reads.")

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help=_("Read each rule's value; change nothing."))

    def handle(self, *args, **options):
        if options["dry_run"]:
            states = dict(Alert.objects.values_list("rule", "state"))
            for name, reading in read_alerts().items():
                rule = RULES[name]
                self.stdout.write(f"{name}: {rule.shown(reading.value)} (fires above {rule.shown(rule.threshold())}, "
                                  f"state {states.get(name, 'not evaluated yet')}): {reading.detail}")
            return
        result = evaluate_alerts()
        alerts = {alert.rule: alert for alert in Alert.objects.all()}
        for name, outcome in result.outcomes.items():
            rule, alert = RULES[name], alerts.get(name)
            value = rule.shown(alert.value) if alert else "n/a"
            self.stdout.write(f"{name}: {outcome}, {value} (fires above {rule.shown(rule.threshold())})"
                              + (f": {alert.detail}" if alert and alert.detail else ""))
        if result.failures:
            for failure in result.failures:
                self.stderr.write(f"  failed: {failure}")
            raise CommandError(f"{len(result.failures)} alert rule(s) failed; the others ran (see above)")
