"""Print deploy/prometheus/alerts.yml as the alert rules make it; see telemetry.alerts.prometheus."""

from django.conf import settings
from django.core.management.base import BaseCommand

from telemetry.alerts.prometheus import prometheus_rules


class Command(BaseCommand):
    help = ("Print the Prometheus alerting rules for the app's alert rules: "
            "manage.py prometheus_rules > deploy/prometheus/alerts.yml")

    def add_arguments(self, parser):
        parser.add_argument("--public-url", default=settings.RETRYOPS_PUBLIC_URL,
                            help="The console's address in runbook links (default: RETRYOPS_PUBLIC_URL).")

    def handle(self, *args, **options):
        self.stdout.write(prometheus_rules(public_url=options["public_url"].rstrip("/")), ending="")
