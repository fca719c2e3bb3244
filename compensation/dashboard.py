"""The ops dashboard: the admin index's first panel, which fetches `fragment` every few seconds.
Every read is a selector; this module only arranges the figures for the template and draws the chart."""

from datetime import timedelta
from math import log10

from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext_lazy
from django.views.decorators.http import require_safe

from compensation import selectors as compensation
from compensation.choices import WorkOrderState
from compensation.work_orders.models import SLA_CLOCK_NAMES
from retryops import flags
from scheduling import selectors as scheduling
from scheduling.services.recovery import OVERDUE_GRACE

# What the panel needs to be shown: the dashboard counts tasks and attempts, which every group
# of the console (viewers included) may look at; the counts of dead letters and work orders
# show no more than their lists do to those who can view them.
PERMISSION = "scheduling.view_task"
REFRESH_SECONDS = 5
RECENT = timedelta(minutes=10)
HOURS = 24

# The chart's drawing, in SVG user units (it scales to the panel's width).
WIDTH, HEIGHT = 960, 200
LEFT, RIGHT, TOP, BOTTOM = 40, 8, 10, 22
OUTCOMES = ("succeeded", "failed", "dead")  # bottom to top
PAST_CLOCK = {"notice": gettext_lazy("Past the notice SLA"), "acknowledge": gettext_lazy("Past the acknowledge SLA"),
              "compensate": gettext_lazy("Past the compensate SLA")}
# RQ's worker states (rq.worker.WorkerStatus), as the panel says them; another is shown as RQ names it.
WORKER_STATES = {"started": pgettext_lazy("RQ worker", "started"), "busy": pgettext_lazy("RQ worker", "busy"),
                 "idle": pgettext_lazy("RQ worker", "idle"), "suspended": pgettext_lazy("RQ worker", "suspended")}


def _nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50 ... at or above `value`: the chart's top gridline."""
    if value <= 1:
        return 1
    power = 10 ** int(log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def _outcome_words(row: dict) -> str:
    return _("%(succeeded)s succeeded, %(failed)s failed, %(dead)s dead") % row


def chart(per_hour: list[dict]) -> dict:
    """The bars of retry outcomes per hour: one stacked bar per hour (succeeded at the bottom,
    then failed, then dead), a gridline at the top, the middle and zero, and an hour label every
    three hours; times in the operator's time zone."""
    top = _nice_ceiling(max((sum(row[o] for o in OUTCOMES) for row in per_hour), default=0))
    plot_height = HEIGHT - TOP - BOTTOM
    slot = (WIDTH - LEFT - RIGHT) / len(per_hour)
    bar_width = round(slot * 0.7, 1)
    bars = []
    for i, row in enumerate(per_hour):
        start = timezone.localtime(row["hour"])
        end = timezone.localtime(row["hour"] + timedelta(hours=1))
        x = round(LEFT + i * slot + (slot - bar_width) / 2, 1)
        base, segments = HEIGHT - BOTTOM, []
        for outcome in OUTCOMES:
            height = round(row[outcome] / top * plot_height, 1)
            if height:
                base -= height
                segments.append({"outcome": outcome, "y": round(base, 1), "height": height})
        bars.append({"x": x, "segments": segments, "start": start, "end": end, **{o: row[o] for o in OUTCOMES},
                     "title": f"{start:%H:%M}–{end:%H:%M}: {_outcome_words(row)}",
                     # Every third hour, counted back from the current one, which is always labelled.
                     "label": f"{start:%H:%M}" if (len(per_hour) - 1 - i) % 3 == 0 else "",
                     "label_x": round(x + bar_width / 2, 1)})
    gridlines = [{"value": value, "y": round(HEIGHT - BOTTOM - value / top * plot_height, 1)}
                 for value in sorted({0, top // 2 if top >= 2 else 0, top})]
    totals = {o: sum(row[o] for row in per_hour) for o in OUTCOMES}
    return {"bars": bars, "gridlines": gridlines, "bar_width": bar_width, "width": WIDTH, "height": HEIGHT,
            "left": LEFT, "right": WIDTH - RIGHT, "label_y": HEIGHT - 6, "totals": totals,
            "summary": _outcome_words(totals)}


def failure_rate(outcomes: dict) -> float | None:
    """The share of the retries that failed (another retry scheduled, or the task dead), in
    percent; None when none ended."""
    ended = sum(outcomes.values())
    return None if not ended else round((outcomes["failed"] + outcomes["dead"]) * 100 / ended, 1)


def work_orders(*, now) -> dict:
    """The live work orders' board, with the words an operator reads for states and clocks."""
    board = compensation.live_work_order_board(now=now)
    return {**board,
            "by_state": [(state, WorkOrderState(state).label, n) for state, n in board["by_state"].items()],
            "past_by_clock": [(clock, PAST_CLOCK[clock], n) for clock, n in board["past_by_clock"].items()],
            "worst": [(order, [SLA_CLOCK_NAMES[clock] for clock in clocks]) for order, clocks in board["worst"]]}


def rq_health(*, now) -> dict:
    """The RQ queues and workers, with each worker's state in the reader's words."""
    health = compensation.rq_health(now=now)
    return {**health, "workers": [{**worker, "state": WORKER_STATES.get(worker["state"], worker["state"])}
                                  for worker in health["workers"]]}


def figures(*, now=None, with_dead_letters: bool = True) -> dict:
    """Everything the dashboard shows, read at `now`: a fixed number of queries, whatever the
    number of tasks, attempts and dead letters."""
    now = now or timezone.now()
    recent = scheduling.retry_outcomes(since=now - RECENT, until=now)
    dead_letters = compensation.dead_letter_queue_by_flow() if with_dead_letters else None
    return {
        "now": now,
        "retries": scheduling.scheduled_retries(now=now, overdue_after=OVERDUE_GRACE),
        "running": scheduling.running_attempts(),
        "recent": recent,
        "recent_minutes": int(RECENT.total_seconds() // 60),
        "failure_rate": failure_rate(recent),
        "chart": chart(scheduling.retry_outcomes_per_hour(now=now, hours=HOURS)),
        "dead_letters": dead_letters,
        "dead_letters_open": sum(row["open"] for row in dead_letters) if dead_letters is not None else None,
        "dead_letters_replaying": sum(row["replaying"] for row in dead_letters) if dead_letters is not None else None,
        "work_orders": work_orders(now=now),
        "rq": rq_health(now=now),
    }


@require_safe
def fragment(request):
    """The dashboard's HTML fragment, which the admin index's panel fetches and puts in place
    (mounted with admin_site.admin_view in retryops/urls.py: staff only, never cached)."""
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied(_("Viewing the dashboard needs the permission to view tasks."))
    return TemplateResponse(request, "admin/compensation/dashboard.html",
                            {**figures(with_dead_letters=flags.enabled(flags.DLQ_INSPECTOR)), "refresh_seconds": REFRESH_SECONDS})
