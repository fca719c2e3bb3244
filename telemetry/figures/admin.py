"""The acceptance figures in the console: a page (1 h, 24 h or 7 d) and a panel on the admin index,
each figure with its target, coloured when it misses it, and linked to the rows behind it (the
lists' filters that select exactly the rows the figure counted). Reads only: telemetry.figures.selectors
computes, this arranges and links."""

from dataclasses import dataclass
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext
from django.views.decorators.http import require_safe

from retryops.replica import from_replica
from scheduling.selectors import retry_sla_grace
from telemetry.figures.selectors import WINDOWS, Figure, Window, acceptance_figures

# As the ops dashboard: the figures count retries and work orders, which every console group may view.
PERMISSION = "scheduling.view_task"
TITLES = {
    "retry_success_ratio": gettext_lazy("Retry success rate"),
    "retry_within_sla_ratio": gettext_lazy("Retries started within their SLA"),
    "dead_letter_to_work_order": gettext_lazy("Dead letter → work order, on-call paged"),
    "work_order_to_compensated": gettext_lazy("Work order → compensated"),
    "compensation_completion_ratio": gettext_lazy("Compensation completion rate"),
}


@dataclass(frozen=True)
class Link:
    """A count of rows behind a figure, and the list that shows exactly them ("" for a reader
    who may not view that list)."""

    words: str
    url: str


def window_words(seconds: int) -> str:
    if seconds % 86400 == 0:
        return ngettext("%(n)d day", "%(n)d days", seconds // 86400) % {"n": seconds // 86400}
    if seconds % 3600 == 0:
        return ngettext("%(n)d hour", "%(n)d hours", seconds // 3600) % {"n": seconds // 3600}
    return ngettext("%(n)d minute", "%(n)d minutes", seconds // 60) % {"n": seconds // 60}


def duration_words(seconds: float | None) -> str:
    """A time as operators read it, in its two largest units (a zero second one left out):
    "45 s", "4 min 12 s", "5 min", "3 h 5 min", "2 d 4 h"; "–" for none."""
    if seconds is None:
        return "–"
    whole = round(seconds)
    if whole < 60:
        return _("%(s)d s") % {"s": whole}
    unit, small, both, alone = next(
        choice for choice in ((86400, 3600, _("%(big)d d %(small)d h"), _("%(big)d d")),
                              (3600, 60, _("%(big)d h %(small)d min"), _("%(big)d h")),
                              (60, 1, _("%(big)d min %(small)d s"), _("%(big)d min")))
        if whole >= choice[0])
    big, rest = divmod(whole, unit)
    return (both if rest // small else alone) % {"big": big, "small": rest // small}


def percent_words(ratio: float | None) -> str:
    return "–" if ratio is None else f"{ratio * 100:.1f}%"


def _list_url(request, name: str, permission: str, **params) -> str:
    if not request.user.has_perm(permission):
        return ""
    query = {key: value.isoformat() if hasattr(value, "isoformat") else value for key, value in params.items()}
    return f"{reverse(name)}?{urlencode(query)}"


def links(request, key: str, figure: Figure, window: Window, *, now) -> list[Link]:
    """The lists behind one figure, filtered to the rows it counted over `window` at `now`."""
    since, until, counts = window.since, window.until, figure.counts
    if key == "retry_success_ratio":
        def events(which):
            return _list_url(request, "admin:scheduling_taskevent_changelist", "scheduling.view_taskevent",
                             retry=which, created_at__gte=since, created_at__lte=until)
        return [Link(_("%(n)d succeeded") % {"n": counts["succeeded"]}, events("succeeded")),
                Link(_("of %(n)d retries ended") % {"n": counts["ended"]}, events("ended"))]
    if key == "retry_within_sla_ratio":
        def attempts(which):
            return _list_url(request, "admin:scheduling_attempt_changelist", "scheduling.view_attempt",
                             retry_start=which, scheduled_for__gte=since, scheduled_for__lte=until)
        waiting = _list_url(request, "admin:scheduling_task_changelist", "scheduling.view_task",
                            retry_overdue="yes", next_run_at__gte=since,
                            next_run_at__lte=min(until, now - retry_sla_grace()))
        return [Link(_("%(n)d on time") % {"n": counts["on_time"]}, attempts("on_time")),
                Link(_("%(n)d started late") % {"n": counts["late"]}, attempts("late")),
                Link(_("%(n)d still waiting, late") % {"n": counts["waiting"]}, waiting)]
    if key == "dead_letter_to_work_order":
        def orders(**more):
            return _list_url(request, "admin:compensation_workorder_changelist", "compensation.view_workorder",
                             source="dead_letters", first_dead_at__gte=since, first_dead_at__lte=until, **more)
        return [Link(_("%(n)d work orders") % {"n": counts["work_orders"]}, orders()),
                Link(_("%(n)d not paged yet") % {"n": counts["not_paged"]}, orders(paged="no"))]
    if key == "work_order_to_compensated":
        return [Link(_("%(n)d work orders compensated") % {"n": counts["work_orders"]},
                     _list_url(request, "admin:compensation_workorder_changelist", "compensation.view_workorder",
                               state="compensated", compensated_at__gte=since, compensated_at__lte=until))]
    if key == "compensation_completion_ratio":
        def due(which):
            return _list_url(request, "admin:compensation_workorder_changelist", "compensation.view_workorder",
                             completed=which, compensate_due__gte=since, compensate_due__lte=until)
        return [Link(_("%(n)d completed in time") % {"n": counts["completed"]}, due("yes")),
                Link(_("of %(n)d due") % {"n": counts["due"]}, due("due")),
                Link(_("%(n)d not completed in time") % {"n": counts["not_completed"]}, due("no"))]
    raise ValueError(f"no links for {key!r}")


def _card(request, key: str, window: Window, now, values: list[tuple[str, Figure]], target: str,
          shown) -> dict:
    figure = values[0][1]
    met = [f.met for _, f in values]
    status = "none" if all(m is None for m in met) else "missed" if False in met else "met"
    return {"key": key, "title": TITLES[key], "target": target, "status": status,
            "values": [{"label": label, "text": shown(f.value), "met": f.met} for label, f in values],
            "links": links(request, key, figure, window, now=now)}


def cards(request, *, seconds: int, now=None) -> list[dict]:
    """The figures over `seconds` up to `now`, as the page and the panel show them."""
    now = now or timezone.now()
    window = Window(seconds=seconds, until=now)
    f = from_replica(acceptance_figures, seconds=seconds, now=now)
    at_least = _("target ≥ %(value)s")
    at_most = _("target ≤ %(value)s (p99)")
    return [
        _card(request, "retry_success_ratio", window, now, [("", f["retry_success_ratio"])],
              at_least % {"value": percent_words(f["retry_success_ratio"].target)}, percent_words),
        _card(request, "retry_within_sla_ratio", window, now, [("", f["retry_within_sla_ratio"])],
              at_least % {"value": percent_words(f["retry_within_sla_ratio"].target)} + " · " + _(
                  "grace %(grace)s after the due time") % {"grace": duration_words(
                      settings.RETRYOPS_RETRY_SLA_GRACE_SECONDS)}, percent_words),
        _card(request, "dead_letter_to_work_order", window, now,
              [("p50", f["dead_letter_to_work_order_p50"]), ("p99", f["dead_letter_to_work_order_p99"])],
              at_most % {"value": duration_words(f["dead_letter_to_work_order_p99"].target)}, duration_words),
        _card(request, "work_order_to_compensated", window, now,
              [("p50", f["work_order_to_compensated_p50"]), ("p99", f["work_order_to_compensated_p99"])],
              at_most % {"value": duration_words(f["work_order_to_compensated_p99"].target)}, duration_words),
        _card(request, "compensation_completion_ratio", window, now, [("", f["compensation_completion_ratio"])],
              at_least % {"value": percent_words(f["compensation_completion_ratio"].target)}, percent_words),
    ]


def _allowed(request) -> None:
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied(_("Viewing the acceptance figures needs the permission to view tasks."))


def windows() -> list[int]:
    return sorted({*WINDOWS, settings.RETRYOPS_FIGURES_WINDOW_SECONDS})


@require_safe
def page(request):
    """The page "Acceptance figures", over the window chosen by ?window= (seconds; one offered)."""
    _allowed(request)
    raw = request.GET.get("window")
    offered = windows()
    error = ""
    seconds = settings.RETRYOPS_FIGURES_WINDOW_SECONDS
    if raw is not None:
        if raw.isascii() and raw.isdigit() and int(raw) in offered:
            seconds = int(raw)
        else:
            error = _("The window must be one of %(windows)s seconds, got %(value)r; showing %(default)s.") % {
                "windows": ", ".join(str(w) for w in offered), "value": raw[:40],
                "default": window_words(seconds)}
    now = timezone.now()
    context = {**admin.site.each_context(request), "title": _("Acceptance figures"), "now": now, "error": error,
               "cards": cards(request, seconds=seconds, now=now), "window": window_words(seconds),
               "since": Window(seconds=seconds, until=now).since,
               "windows": [{"seconds": w, "words": window_words(w), "current": w == seconds,
                            "url": f"{reverse('acceptance_figures')}?window={w}"} for w in offered]}
    return TemplateResponse(request, "admin/telemetry/figures.html", context, status=400 if error else 200)


@require_safe
def panel(request):
    """The admin index's panel: the figures over RETRYOPS_FIGURES_WINDOW_SECONDS."""
    _allowed(request)
    seconds = settings.RETRYOPS_FIGURES_WINDOW_SECONDS
    now = timezone.now()
    return TemplateResponse(request, "admin/telemetry/figures_panel.html", {
        "now": now, "cards": cards(request, seconds=seconds, now=now), "window": window_words(seconds),
        "page_url": reverse("acceptance_figures")})
