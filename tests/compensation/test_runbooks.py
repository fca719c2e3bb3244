"""Loading runbooks: everything checked, a bad one refused naming its file and field; and the
suggestions for a work order."""

from pathlib import Path

import pytest
from django.conf import settings as django_settings

from compensation.runbooks.catalog import (
    RunbookInvalid,
    load_runbooks,
    parse_runbook,
    runbooks,
    suggest_runbooks,
)
from compensation.runbooks.services import check_runbook_request
from retryops.errors import BadInput

GOOD = """---
name: good
title: A good runbook
applies_to:
  flows: [demo]
  signatures: ['time(d)?[ _-]?out']
actions:
  - name: resolve
    callable: compensation.runbooks.actions.dead_letters.resolve_dead_letters
    description: Resolve them.
    input_schema: {type: object}
---
1. Step one.
"""


def invalid(text: str) -> RunbookInvalid:
    with pytest.raises(RunbookInvalid) as refused:
        parse_runbook(text, file="config/runbooks/good.md", expected_name="good")
    assert refused.value.code == "bad_runbook"
    assert refused.value.details["file"] == "config/runbooks/good.md"
    return refused.value


def test_the_shipped_runbooks_all_load_with_their_actions():
    books = load_runbooks(Path(django_settings.BASE_DIR) / "config" / "runbooks")
    assert {"replay-after-upstream-outage", "quarantine-banned-accounts", "refund-failed-charges"} <= set(books)
    assert books["refund-failed-charges"].action("request_refund").external is True
    assert all(callable(action.function()) for book in books.values() for action in book.actions)


def test_a_good_runbook_is_parsed_with_its_steps():
    book = parse_runbook(GOOD, file="good.md", expected_name="good")
    assert (book.name, book.flows, book.steps) == ("good", ("demo",), "1. Step one.")
    assert book.action("resolve").external is False


@pytest.mark.parametrize(("change", "field"), [
    (("    input_schema: {type: object}\n", ""), "actions[0].input_schema"),
    (("callable: compensation.runbooks.actions.dead_letters.resolve_dead_letters",
      "callable: compensation.runbooks.actions.nope.x"),
     "actions[0].callable"),
    (("callable: compensation.runbooks.actions.dead_letters.resolve_dead_letters",
      "callable: compensation.runbooks.actions"),
     "actions[0].callable"),
    (("['time(d)?[ _-]?out']", "['time(out']"), "applies_to.signatures[0]"),
    (("{type: object}", "{type: objekt}"), "actions[0].input_schema.type"),
    (("name: good\n", "name: other\n"), "name"),
    (("title: A good runbook\n", "title: A good runbook\nowner: ops\n"), "owner"),
    (("    description: Resolve them.\n", "    description: Resolve them.\n    external: yes please\n"),
     "actions[0].external"),
    (("1. Step one.\n", ""), "steps"),
    (("{type: object}", "{type: object, default: .nan}"), "actions[0].input_schema.default"),
])
def test_a_bad_runbook_is_refused_naming_its_file_and_field(change, field):
    old, new = change
    assert old in GOOD
    error = invalid(GOOD.replace(old, new))
    assert error.details["field"] == field
    assert str(error).startswith(f"config/runbooks/good.md: {field}: ")


def test_a_runbook_without_front_matter_is_refused():
    assert invalid("1. Just steps.\n").details["field"] == "front matter"


def test_a_second_action_of_the_same_name_is_refused():
    twice = GOOD.replace("---\n1.", "  - name: resolve\n    callable: compensation.runbooks.actions.dead_letters."
                                    "resolve_dead_letters\n    description: Again.\n    input_schema: {}\n---\n1.")
    assert invalid(twice).details["field"] == "actions[1].name"


def test_one_bad_file_refuses_the_whole_folder(tmp_path):
    (tmp_path / "good.md").write_text(GOOD)
    (tmp_path / "bad.md").write_text(GOOD.replace("name: good", "name: bad").replace("title: A good runbook\n", ""))
    with pytest.raises(RunbookInvalid, match=r"bad.md: title: 'title' is a required property"):
        load_runbooks(tmp_path)


def test_an_edited_runbook_is_read_again_without_a_restart(tmp_path, settings):
    settings.RETRYOPS_RUNBOOK_DIR = tmp_path
    (tmp_path / "good.md").write_text(GOOD)
    assert runbooks()["good"].title == "A good runbook"
    (tmp_path / "good.md").write_text(GOOD.replace("A good runbook", "A better runbook, longer"))
    assert runbooks()["good"].title == "A better runbook, longer"


def test_the_steps_are_rendered_without_the_html_a_runbook_should_not_carry():
    book = parse_runbook(GOOD.replace("1. Step one.", "1. **Check** <script>alert(1)</script>"), file="good.md")
    html = book.steps_html()
    assert "<strong>Check</strong>" in html and "<script>" not in html


def test_the_shipped_runbooks_are_suggested_for_the_signatures_they_cover():
    def names(flow, signature, named=""):
        return [book.name for book in suggest_runbooks(flow=flow, error_signature=signature, named=named)]

    assert names("demo", "TimeoutError: upstream timed out after #s") == ["replay-after-upstream-outage"]
    assert names("demo", "PermissionError: HTTP #: account suspended by upstream") == ["quarantine-banned-accounts"]
    assert names("noop", "DemoFlowError: something else") == []
    # The one the work order names leads, matching or not.
    assert names("noop", "TimeoutError: x", named="refund-failed-charges")[0] == "refund-failed-charges"


def test_a_signature_match_ranks_above_a_flow_match(tmp_path):
    by_flow = parse_runbook(GOOD.replace("  signatures: ['time(d)?[ _-]?out']\n", ""), file="a.md")
    by_signature = parse_runbook(GOOD.replace("name: good", "name: timeouts").replace("  flows: [demo]\n", ""),
                                 file="b.md")
    suggested = suggest_runbooks(flow="demo", error_signature="TimeoutError: timed out", books=[by_flow, by_signature])
    assert [book.name for book in suggested] == ["timeouts", "good"]


@pytest.mark.django_db
def test_the_shipped_quarantine_refuses_a_blank_reason_as_the_quarantine_does():
    with pytest.raises(BadInput, match="reason"):
        check_runbook_request(runbook="quarantine-banned-accounts", action="quarantine_resources",
                              input={"reason": "   "})
