"""Alerts in the admin: each rule's state, value and levels, and the history of its firings and
resolutions. Read only for everyone: the evaluator (telemetry.alerts.services) is the only writer."""

from django.contrib import admin
from django.contrib.admin.utils import display_for_value
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from compensation.notifications.models import NotificationSubject
from scheduling.admin import ReadOnlyAdmin
from telemetry.alerts.models import Alert, AlertEvent, AlertEventKind, AlertState
from telemetry.alerts.rules import RULES

STATE_COLOURS = {AlertState.FIRING: "#c62828", AlertState.OK: "#2e7d32"}
KIND_COLOURS = {AlertEventKind.FIRED: "#c62828", AlertEventKind.RESOLVED: "#2e7d32"}
# The events an alert's page shows; the history list has them all.
HISTORY_SHOWN = 20


def rule_label(rule: str) -> str:
    """A rule's name in the reader's language (a rule no longer in the registry by its name)."""
    return str(RULES[rule].label) if rule in RULES else rule


def shown(rule: str, value: float | None) -> str:
    """A value as the console shows it: as its rule writes it (a percentage for a ratio, seconds for
    a duration, a whole number for a count)."""
    if value is None:
        return "—"
    return RULES[rule].shown(value) if rule in RULES else f"{value:g}"


def said(rule: str, facts: dict, stored: str) -> str:
    """What a reading saw, in the reader's language; the stored English when the rule cannot say it
    (a rule no longer in the registry, facts of an older shape)."""
    try:
        return RULES[rule].describe(facts)
    except (KeyError, TypeError, ValueError):
        return stored


def badge(colours: dict, value: str, label: str) -> str:
    return format_html('<b style="color:{}">{}</b>', colours.get(value, "#000"), label)


def history_url(alert: Alert) -> str:
    return reverse("admin:telemetry_alertevent_changelist") + f"?alert__id__exact={alert.pk}"


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdmin):
    list_display = ("name", "state_badge", "since", "value_shown", "threshold_shown", "clear_level_shown",
                    "evaluated_at", "detail_shown", "history_link")
    list_display_links = ("name",)
    list_filter = ("state",)
    show_full_result_count = False
    fields = ("name", "rule", "state_badge", "since", "value_shown", "threshold_shown", "clear_level_shown",
              "clear_since", "evaluated_at", "detail_shown", "rows_link", "notifications_link", "history")
    readonly_fields = fields

    @admin.display(description=_("alert"), ordering="rule")
    def name(self, alert):
        # Beside a long detail the browser squeezed a Chinese name to a character a line.
        return format_html('<span style="display: inline-block; min-width: 6em">{}</span>', rule_label(alert.rule))

    @admin.display(description=_("state"), ordering="state")
    def state_badge(self, alert):
        return badge(STATE_COLOURS, alert.state, alert.get_state_display())

    @admin.display(description=_("value"))
    def value_shown(self, alert):
        if alert.value is None and alert.evaluated_at is not None:
            return format_html('<span title="{}">—</span>', gettext("The last evaluation could not judge: see the "
                                                                     "detail."))
        return shown(alert.rule, alert.value)

    @admin.display(description=_("fires above"))
    def threshold_shown(self, alert):
        return shown(alert.rule, alert.threshold)

    @admin.display(description=_("resolves at or below"))
    def clear_level_shown(self, alert):
        return shown(alert.rule, alert.clear_level)

    @admin.display(description=_("detail"))
    def detail_shown(self, alert):
        return said(alert.rule, alert.facts, alert.detail)

    @admin.display(description=_("history"))
    def history_link(self, alert):
        return format_html('<a href="{}">{}</a>', history_url(alert), gettext("history"))

    @admin.display(description=_("what it is about"))
    def rows_link(self, alert):
        if alert.rule not in RULES:
            return "—"
        return format_html('<a href="{}">{}</a>', RULES[alert.rule].rows_url(), gettext("open the list"))

    @admin.display(description=_("notifications"))
    def notifications_link(self, alert):
        url = (reverse("admin:compensation_notification_changelist")
               + f"?subject_type__exact={NotificationSubject.ALERT}&subject_id={alert.pk}")
        return format_html('<a href="{}">{}</a>', url, gettext("what the on-call was told"))

    @admin.display(description=_("history"))
    def history(self, alert):
        events = list(alert.events.order_by("-id")[:HISTORY_SHOWN])
        if not events:
            return gettext("It has not fired yet.")
        rows = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", (
            (display_for_value(event.at, "-"), badge(KIND_COLOURS, event.kind, event.get_kind_display()),
             shown(alert.rule, event.value), said(alert.rule, event.facts, event.detail)) for event in events))
        table = format_html("<table><thead><tr><th>{}</th><th>{}</th><th>{}</th><th>{}</th></tr></thead>"
                            "<tbody>{}</tbody></table>", gettext("at"), gettext("kind"), gettext("value"),
                            gettext("detail"), rows)
        if len(events) == HISTORY_SHOWN:
            table = format_html('{}<p><a href="{}">{}</a></p>', table, history_url(alert), gettext("all of it"))
        return table


class AlertRuleFilter(admin.SimpleListFilter):
    """The alerts by the name the reader's language gives their rule."""

    title = _("alert")
    parameter_name = "alert__id__exact"

    def lookups(self, request, model_admin):
        return [(str(pk), rule_label(rule)) for pk, rule in Alert.objects.order_by("id").values_list("pk", "rule")]

    def queryset(self, request, queryset):
        return queryset.filter(alert_id=self.value()) if self.value() else queryset


@admin.register(AlertEvent)
class AlertEventAdmin(ReadOnlyAdmin):
    list_display = ("at", "alert_name", "kind_badge", "value_shown", "level_shown", "detail_shown")
    list_display_links = ("at",)
    list_filter = ("kind", AlertRuleFilter)
    list_select_related = ("alert",)
    show_full_result_count = False
    fields = ("at", "alert_link", "kind_badge", "value_shown", "level_shown", "detail_shown")
    readonly_fields = fields

    @admin.display(description=_("alert"), ordering="alert__rule")
    def alert_name(self, event):
        return rule_label(event.alert.rule)

    @admin.display(description=_("alert"))
    def alert_link(self, event):
        return format_html('<a href="{}">{}</a>', reverse("admin:telemetry_alert_change", args=[event.alert_id]),
                           rule_label(event.alert.rule))

    @admin.display(description=_("kind"), ordering="kind")
    def kind_badge(self, event):
        return badge(KIND_COLOURS, event.kind, event.get_kind_display())

    @admin.display(description=_("value"))
    def value_shown(self, event):
        return shown(event.alert.rule, event.value)

    @admin.display(description=_("level crossed"))
    def level_shown(self, event):
        return shown(event.alert.rule, event.level)

    @admin.display(description=_("detail"))
    def detail_shown(self, event):
        return said(event.alert.rule, event.facts, event.detail)
