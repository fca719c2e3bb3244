"""retryops.inputs: ids and counts that come in from outside, refused with the field named."""

import pytest
from django.utils import translation

from retryops.errors import BadInput
from retryops.inputs import MAX_ID, record_id, whole_number


@pytest.mark.parametrize("value", ["abc", "12", True, 1.5, float("nan"), 2**70, MAX_ID + 1, 0, -1, None])
def test_record_id_refuses_what_names_no_row(value):
    with pytest.raises(BadInput) as refused:
        record_id(value, field="resource")
    assert (refused.value.code, refused.value.details["field"]) == ("bad_input", "resource")


def test_record_id_takes_a_bigint():
    assert record_id(MAX_ID, field="task") == MAX_ID


def test_record_id_raises_the_callers_error_class():
    class TaskBadInput(BadInput):
        pass

    with pytest.raises(TaskBadInput):
        record_id("abc", field="task", error=TaskBadInput)


@pytest.mark.parametrize("value", [0, -1, 2**31, True, 1.0, "5", None])
def test_whole_number_refuses_what_is_out_of_range_or_not_whole(value):
    with pytest.raises(BadInput) as refused:
        whole_number(value, field="limit", minimum=1, maximum=2**31 - 1)
    assert refused.value.details["field"] == "limit"


def test_whole_number_refuses_in_the_operators_language():
    with translation.override("zh-hans"), pytest.raises(BadInput) as refused:
        whole_number(0, field="rate", minimum=1, maximum=500)
    assert str(refused.value) == "rate 必须是 1 到 500 之间的整数，收到的是 0"
