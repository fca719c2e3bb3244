"""One FilterSet per model, shared by the API's lists (filterset_class) and by anything else that
filters tasks by the same things; a filter that a selector already answers runs that selector."""

import django_filters
from django import forms
from drf_spectacular.utils import extend_schema_field

from retryops.inputs import MAX_ID
from scheduling.choices import TaskState
from scheduling.models import Task
from scheduling.selectors import changed_since, tasks_of_resource


@extend_schema_field({"type": "integer", "minimum": 1, "maximum": MAX_ID})
class IdFilter(django_filters.NumberFilter):
    """A row's id: a whole number from 1 to bigint's largest (a larger one would reach PostgreSQL)."""

    field_class = forms.IntegerField

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("min_value", 1)
        kwargs.setdefault("max_value", MAX_ID)
        super().__init__(*args, **kwargs)


class TaskFilterSet(django_filters.FilterSet):
    """state, flow, pool (its name), resource (an id: the tasks that ran on it, asked for it or wait
    for it), created_since and updated_since (ISO 8601); together they narrow the list together."""

    state = django_filters.ChoiceFilter(choices=TaskState.choices)
    flow = django_filters.CharFilter(help_text="The flow's name.")
    pool = django_filters.CharFilter(field_name="pool__name", help_text="The pool's name.")
    resource = IdFilter(method="filter_resource", help_text="A resource's id: the tasks that ran on it, asked for it "
                                                            "or wait for it.")
    created_since = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte",
                                                     help_text="Created at this time or later (ISO 8601 with a time "
                                                               "zone).")
    updated_since = django_filters.IsoDateTimeFilter(method="filter_updated_since",
                                                     help_text="Changed at this time or later: created, an attempt "
                                                               "started or ended, a retry scheduled, run now, "
                                                               "cancelled, dead or finished (ISO 8601 with a time "
                                                               "zone).")

    class Meta:
        model = Task
        fields = ["state", "flow", "pool", "resource", "created_since", "updated_since"]

    def filter_resource(self, queryset, name, value):
        return queryset.filter(pk__in=tasks_of_resource(value).values("pk"))

    def filter_updated_since(self, queryset, name, value):
        return changed_since(queryset, value)
