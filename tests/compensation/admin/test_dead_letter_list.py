"""The dead-letter list's filters on a queue of any size."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from compensation.models import DeadLetter

pytestmark = pytest.mark.django_db

LIST = reverse("admin:compensation_deadletter_changelist")


def test_the_flow_filter_offers_the_registered_flows_without_reading_the_queue(dave, letters):
    with CaptureQueriesContext(connection) as queries:
        page = dave.get(LIST)

    offered = [choice["display"] for spec in page.context["cl"].filter_specs if getattr(spec, "parameter_name", None) == "flow"
               for choice in spec.choices(page.context["cl"])]
    assert "demo" in offered and "noop" in offered
    assert not [q["sql"] for q in queries if "DISTINCT" in q["sql"] and "compensation_deadletter" in q["sql"]]


def test_the_flow_filter_keeps_a_flow_no_longer_registered_findable(dave, letters):
    DeadLetter.objects.filter(pk=letters[0].pk).update(flow="retired_flow")

    page = dave.get(LIST, {"flow": "retired_flow"})

    assert [row.pk for row in page.context["cl"].result_list] == [letters[0].pk]
    offered = [choice["display"] for spec in page.context["cl"].filter_specs if getattr(spec, "parameter_name", None) == "flow"
               for choice in spec.choices(page.context["cl"])]
    assert "retired_flow" in offered
