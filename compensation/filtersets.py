"""One FilterSet per model, shared by the API's lists (filterset_class) and by anything else that
filters dead letters and work orders by the same things. The dead letters' filters are those of a
bulk replay (compensation.services.bulk_replay.matching), with the same names and bounds, so a list
filtered one way is what a bulk replay with that filter replays (of its open ones)."""

import django_filters

from compensation.choices import DeadLetterState, WorkOrderSource, WorkOrderState
from compensation.models import DeadLetter
from compensation.runbooks.models import RunbookRun, RunbookRunState
from compensation.work_orders.models import WorkOrder
from scheduling.filtersets import IdFilter


class DeadLetterFilterSet(django_filters.FilterSet):
    """flow, error_signature, pool (its name), resource (an id), state, died_after (at or after),
    died_before (before); together they narrow the list together."""

    flow = django_filters.CharFilter(help_text="The flow of the task that died.")
    error_signature = django_filters.CharFilter(help_text="The error's signature (exact), as the groups show it.")
    pool = django_filters.CharFilter(field_name="pool__name", help_text="The pool's name.")
    resource = IdFilter(field_name="resource_id", help_text="The resource's id.")
    state = django_filters.ChoiceFilter(choices=DeadLetterState.choices)
    died_after = django_filters.IsoDateTimeFilter(field_name="died_at", lookup_expr="gte",
                                                  help_text="Died at this time or later (ISO 8601 with a time zone).")
    died_before = django_filters.IsoDateTimeFilter(field_name="died_at", lookup_expr="lt",
                                                   help_text="Died before this time (ISO 8601 with a time zone).")

    class Meta:
        model = DeadLetter
        fields = ["flow", "error_signature", "pool", "resource", "state", "died_after", "died_before"]


class WorkOrderFilterSet(django_filters.FilterSet):
    """state, source, flow, error_signature, pool (its name), assignee, opened_after, opened_before."""

    state = django_filters.ChoiceFilter(choices=WorkOrderState.choices)
    source = django_filters.ChoiceFilter(choices=WorkOrderSource.choices)
    flow = django_filters.CharFilter()
    error_signature = django_filters.CharFilter(help_text="The error's signature (exact).")
    pool = django_filters.CharFilter(field_name="pool__name", help_text="The pool's name.")
    assignee = django_filters.CharFilter(help_text="Who has it (exact).")
    opened_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte",
                                                    help_text="Opened at this time or later (ISO 8601 with a time "
                                                              "zone).")
    opened_before = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt",
                                                     help_text="Opened before this time (ISO 8601 with a time zone).")

    class Meta:
        model = WorkOrder
        fields = ["state", "source", "flow", "error_signature", "pool", "assignee", "opened_after", "opened_before"]


class RunbookRunFilterSet(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=RunbookRunState.choices)

    class Meta:
        model = RunbookRun
        fields = ["state"]
