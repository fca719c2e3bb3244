"""retryops.jsonsafe: the one guard on text and JSON that PostgreSQL refuses."""

import pytest
from django.utils import translation

from retryops.jsonsafe import (
    UnstorableValue,
    check_text,
    clean_text,
    make_storable,
    refuse_unstorable,
)


@pytest.mark.parametrize("text, problem", [
    ("a\x00b", "NUL character"), ("a\ud800b", "lone surrogate"), ("\udfff", "lone surrogate"),
])
def test_check_text_names_what_a_text_column_refuses(text, problem):
    assert problem in check_text(text)


def test_check_text_passes_text_utf8_can_encode():
    assert check_text("Grüße 😀 \ufffd") is None


def test_clean_text_replaces_nul_characters_and_lone_surrogates():
    assert clean_text("a\x00b\ud800c\udc00") == "a\ufffdb\ufffdc\ufffd"


def test_refuse_unstorable_names_the_place_of_a_lone_surrogate():
    with pytest.raises(UnstorableValue) as refused:
        refuse_unstorable({"order": {"note": "x\ud800"}}, name="payload")
    assert refused.value.path == "payload.order.note" and "lone surrogate" in str(refused.value)


def test_refuse_unstorable_names_a_key_with_a_lone_surrogate():
    with pytest.raises(UnstorableValue, match="lone surrogate"):
        refuse_unstorable({"order": {"n\udc00": 1}}, name="payload")


def test_make_storable_repairs_lone_surrogates_in_values_and_keys():
    stored, notes = make_storable({"k\ud800": ["v\udc00"]})
    assert stored == {"k\ufffd": ["v\ufffd"]}
    assert len(notes) == 2 and all("lone surrogate" in note for note in notes)


def test_make_storable_keeps_the_repr_of_an_object_json_cannot_hold_storable():
    class Odd:
        def __repr__(self):
            return "odd\ud800"

    stored, notes = make_storable(Odd())
    assert stored == {"repr": "odd\ufffd"} and notes


def test_a_refusal_is_in_the_operators_language():
    with translation.override("zh-hans"), pytest.raises(UnstorableValue) as refused:
        refuse_unstorable({"amount": float("nan")}, name="payload")
    assert str(refused.value) == "payload.amount 为 nan，JSON 无法表示"


def test_repair_notes_are_stored_in_english_whatever_the_language():
    with translation.override("zh-hans"):
        _stored, notes = make_storable({"amount": float("nan"), "note": "a\x00b"})
    assert notes == ["result.amount is nan, which JSON cannot hold", "result.note contains a NUL character (\\u0000)"]


def test_a_repair_note_gives_a_huge_integers_length_not_its_value():
    # The note is stored and logged; the number may be a card number under a key masking meets later.
    stored, notes = make_storable({"card": 4111111111111111111})
    assert stored == {"card": "4111111111111111111"}
    assert notes == ["result.card is an integer of 19 digits, larger than 9007199254740991"]


def test_a_refusal_of_a_huge_integer_names_its_place_and_length():
    with pytest.raises(UnstorableValue, match=r"^payload\.pin is an integer of 19 digits, larger than 9007199254740991$"):
        refuse_unstorable({"pin": -4111111111111111111}, name="payload")
