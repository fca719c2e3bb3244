"""One screen of the retry machinery and its dead letters; see compensation.selectors.retry_overview."""

import json

from django.utils.translation import gettext_lazy as _

from audit.management.base import TranslatedHelpCommand
from compensation.flags import command_requires_dlq_inspector
from compensation.selectors import retry_overview


class Command(TranslatedHelpCommand):
    help = _("Show the retry queues (RQ), scheduled retries, running attempts, the dead letters by flow and"
             " error signature, and the live work orders with their SLA state. --json for scripts. Changes "
             "nothing.")

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help=_("Print one JSON object instead of tables."))
        parser.add_argument("--limit", type=int, default=50, help=_("Rows per table at most (default 50)."))

    def handle(self, *args, **options):
        command_requires_dlq_inspector()
        overview = retry_overview(limit=max(1, options["limit"]))
        if options["json"]:
            self.stdout.write(json.dumps(overview, indent=2, ensure_ascii=False))
            return
        out = self.stdout.write
        out("Queues")
        rows = [(name, *(str(q.get(k, q.get("error", ""))) for k in ("waiting", "scheduled", "running")))
                for name, q in overview["queues"].items()]
        self._table(("queue", "waiting", "scheduled", "running"), rows)
        retries = overview["scheduled_retries"]
        out(f"\nScheduled retries: {retries['count']}" + (f" (next due {retries['next_due']})"
                                                          if retries["next_due"] else ""))
        out(f"Running attempts: {overview['running_attempts']}")
        out("\nDead letters (open or replaying) by flow and error signature")
        self._table(("flow", "error signature", "count", "oldest"),
                    [(d["flow"], d["error_signature"][:70], str(d["count"]), d["oldest"][:19])
                     for d in overview["dead_letters"]])
        out("\nLive work orders")
        self._table(("id", "state", "SLA", "dead letters", "assignee", "title"),
                    [(str(o["id"]), o["state"], o["sla"], str(o["dead_letters"]), o["assignee"] or "-",
                      o["title"][:60]) for o in overview["work_orders"]])

    def _table(self, header, rows) -> None:
        if not rows:
            self.stdout.write("  (none)")
            return
        widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]
        for row in (header, *rows):
            self.stdout.write("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
