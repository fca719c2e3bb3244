"""Which errors are really transient, in the console beside the retry policies (issue 11): a page of
every policy's error signatures, one per policy (linked from its page, whose foot shows the top
few), each row linking to the attempts and tasks behind it. Reads only, with the policy's view
permission; the numbers are scheduling.analysis's, this module only words and links them."""

from urllib.parse import urlencode

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from resources.choices import FailureCategory
from retryops.errors import BadInput
from retryops.replica import from_replica
from scheduling.analysis import (
    DEFAULT_LIMIT,
    Hint,
    transient_errors,
    window_days,
)
from scheduling.choices import PatternAction, TaskState

from scheduling.models import RetryPolicy

# The windows a page offers; the setting's default is offered too.
WINDOW_CHOICES = (1, 7, 30, 90)
# The policy's own page shows its top few; its transience page shows the rest.
SHOWN_ON_POLICY_PAGE = 5

HINTS = {
    Hint.TIGHTEN: _("Tighten: retried, never recovered. Make it non-retryable or dead-letter it at once."),
    Hint.LOOSEN: _("Loosen: stopped at once, yet another resource ran the task later. Retry it on another "
                   "resource."),
    Hint.MOVE: _("Recovers on another resource more often than on the same one: retry it on another resource."),
}
PATTERN_SOURCES = {
    ("policy", FailureCategory.NON_RETRYABLE): _("the policy's non-retryable pattern"),
    ("policy", FailureCategory.RETRYABLE): _("the policy's retryable pattern"),
    ("builtin", FailureCategory.NON_RETRYABLE): _("built-in non-retryable pattern"),
    ("builtin", FailureCategory.RETRYABLE): _("built-in retryable pattern"),
}


def _share(part: int, whole: int) -> str:
    return f"{round(100 * part / whole)}%" if whole else "–"


def _rows(report) -> list[dict]:
    """The report's rows as the page shows them: counts, shares, words and links (the lists'
    addresses reversed once per page, not once per row)."""
    attempts = reverse("admin:scheduling_attempt_changelist")
    tasks = reverse("admin:scheduling_task_changelist")
    policy_pages = {}
    rows = []
    for stats in report.rows:
        behind = urlencode({"signature": stats.signature, "failed_within_days": report.days, "policy": stats.policy.pk})
        verdict = stats.verdict
        action_now = PatternAction(verdict.action).label
        recorded = PatternAction(stats.recorded_action).label if stats.recorded_action in PatternAction.values else ""
        if stats.policy.pk not in policy_pages:
            policy_pages[stats.policy.pk] = reverse("admin:scheduling_retrypolicy_change", args=[stats.policy.pk])
        rows.append({
            "stats": stats,
            "recovered_same_share": _share(stats.recovered_same, stats.failures),
            "recovered_other_share": _share(stats.recovered_other, stats.failures),
            "dead_share": _share(stats.dead, stats.failures),
            "pattern": verdict.classification.pattern or "",
            "pattern_source": PATTERN_SOURCES.get((stats.pattern_source, verdict.category),
                                                  _("no pattern matched: retryable by default")),
            "action": action_now,
            "recorded_action": recorded if recorded and recorded != action_now else "",
            "hint": HINTS.get(stats.hint, ""),
            "attempts_url": f"{attempts}?{behind}",
            "tasks_url": f"{tasks}?{behind}",
            "dead_url": f"{tasks}?{behind}&state__exact={TaskState.DEAD}",
            "policy_url": policy_pages[stats.policy.pk],
        })
    return rows


def _days(request) -> int:
    """The page's window: its `days`, else the setting's; a bad one is said and the setting's used."""
    try:
        return window_days(request.GET.get("days"))
    except BadInput as exc:
        messages.error(request, str(exc))
        return window_days()


def _windows(request, days: int) -> list[dict]:
    return [{"days": n, "chosen": n == days, "query": urlencode({"days": n})}
            for n in sorted({*WINDOW_CHOICES, window_days(), days})]


class TransienceConsole:
    """Mixed into the retry policy's ModelAdmin: the transience pages and the policy page's section."""

    change_list_template = "admin/scheduling/retrypolicy/change_list.html"
    change_form_template = "admin/scheduling/retrypolicy/change_form.html"

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("transience/", wrap(self.transience_view), name="scheduling_retrypolicy_transience"),
            path("<int:policy_id>/transience/", wrap(self.transience_view),
                 name="scheduling_retrypolicy_transience_of"),
            *super().get_urls(),
        ]

    def transience_view(self, request, policy_id: int | None = None):
        policy = None
        if policy_id is not None:
            policy = RetryPolicy.objects.filter(pk=policy_id).first()
            if policy is None:
                raise Http404(gettext("no retry policy with id %(id)s") % {"id": policy_id})
        if not self.has_view_permission(request, policy):
            raise PermissionDenied
        days = _days(request)
        report = from_replica(transient_errors, policy=policy, days=days)
        title = (gettext("Which errors are really transient: %(policy)s") % {"policy": policy} if policy
                 else gettext("Which errors are really transient"))
        context = {
            **self.admin_site.each_context(request), "opts": self.model._meta, "title": title, "policy": policy,
            "show_policy": policy is None,
            "report": report, "rows": _rows(report), "limit": DEFAULT_LIMIT,
            "windows": _windows(request, report.days), "all_url": reverse("admin:scheduling_retrypolicy_transience"),
        }
        return TemplateResponse(request, "admin/scheduling/retrypolicy/transience.html", context)

    def changelist_view(self, request, extra_context=None):
        extra_context = {**(extra_context or {}),
                         "transience_url": reverse("admin:scheduling_retrypolicy_transience")}
        return super().changelist_view(request, extra_context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = dict(extra_context or {})
        number = str(object_id)
        policy = RetryPolicy.objects.filter(pk=int(number)).first() if number.isascii() and number.isdigit() and len(number) <= 18 else None
        if policy is not None and request.method == "GET" and self.has_view_permission(request, policy):
            report = from_replica(transient_errors, policy=policy, limit=SHOWN_ON_POLICY_PAGE)
            extra_context.update(
                transience={"report": report, "rows": _rows(report)},
                transience_url=reverse("admin:scheduling_retrypolicy_transience_of", args=[policy.pk]))
        return super().change_view(request, object_id, form_url, extra_context)
