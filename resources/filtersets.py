"""One FilterSet per model, shared by the API's lists (filterset_class) and by anything else that
filters pools and resources by the same things; each filter that the console has too runs the
same selector (resources.selectors) as the console's."""

import django_filters

from resources.choices import Diagnosis, FailureCategory, ResourceState
from resources.models import Resource, ResourcePool
from resources.selectors import failed_since, filter_diagnosis


class ResourcePoolFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(help_text="The pool's name.")

    class Meta:
        model = ResourcePool
        fields = ["name"]


class ResourceFilterSet(django_filters.FilterSet):
    """pool (its name), state, category (of the last failure), failed_since (ISO 8601), key,
    diagnosis; all of them at once narrow the list together."""

    pool = django_filters.CharFilter(field_name="pool__name", help_text="The pool's name.")
    state = django_filters.ChoiceFilter(choices=ResourceState.choices)
    category = django_filters.ChoiceFilter(field_name="last_failure_category", choices=FailureCategory.choices,
                                           help_text="The category of the resource's last failure.")
    failed_since = django_filters.IsoDateTimeFilter(method="filter_failed_since",
                                                    help_text="Its last failure was at this time or later "
                                                              "(ISO 8601 with a time zone).")
    key = django_filters.CharFilter(help_text="The resource's key (exact).")
    diagnosis = django_filters.ChoiceFilter(choices=Diagnosis.choices, method="filter_diagnosis",
                                            help_text="Whose fault its failures look like, as the console says.")

    class Meta:
        model = Resource
        fields = ["pool", "state", "category", "failed_since", "key", "diagnosis"]

    def filter_failed_since(self, queryset, name, value):
        return failed_since(queryset, value)

    def filter_diagnosis(self, queryset, name, value):
        return filter_diagnosis(queryset, value)
