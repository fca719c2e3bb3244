"""A retry-policy file cut short (one must end with the line `...`) or malformed: `manage.py
load_retry_policies` names the file, the line and the key, and changes nothing (policies, their
change records, the audit log)."""

import re
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from audit.models import AuditEntry
from scheduling import services
from scheduling.errors import BadPolicy
from scheduling.models import RetryPolicy, RetryPolicyChange

SHIPPED = settings.RETRYOPS_POLICY_FILE.read_text(encoding="utf-8")


def state() -> tuple:
    """Everything a load writes."""
    return (sorted(RetryPolicy.objects.values_list("name", "max_attempts", "initial_delay_seconds",
                                                   "non_retryable_error_patterns")),
            RetryPolicyChange.objects.count(), AuditEntry.objects.count())


@pytest.fixture
def loaded(db, tmp_path):
    """The shipped policies, loaded; then an edited file whose `default` waits 5 minutes, not 2."""
    call_command("load_retry_policies", stdout=StringIO())
    edited = SHIPPED.replace("initial_delay_seconds: 120", "initial_delay_seconds: 300")
    assert edited != SHIPPED
    return tmp_path / "retry-policies.yaml", edited


def load_refused(path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    before = state()
    with pytest.raises(CommandError) as refused:
        call_command("load_retry_policies", str(path), stdout=StringIO())
    assert state() == before
    return str(refused.value)


def line_of(text: str, fragment: str) -> int:
    return text[:text.index(fragment)].count("\n") + 1


def test_a_file_cut_inside_a_quoted_pattern_names_its_line_and_column_and_changes_nothing(loaded):
    path, edited = loaded
    cut = edited[:edited.index("connection (reset") + 5] + "\n"
    message = load_refused(path, cut)
    line = line_of(edited, "connection (reset")
    assert message.startswith(f"{path}, line {line + 1}, column 1: not valid YAML: found unexpected end of stream "
                              f"while scanning a quoted scalar that starts at line {line}, column ")


def test_a_file_cut_mid_line_is_refused_as_cut_short_though_what_is_left_is_valid(loaded):
    # "max_delay_seconds: 3600" cut to "36" is still YAML, and a policy, with a wrong delay.
    path, edited = loaded
    whole = edited.replace("\n...\n", (
        "\n  - name: slow\n    max_attempts: 3\n    backoff: fixed\n    initial_delay_seconds: 1\n"
        "    multiplier: 1\n    same_resource_on_retry: true\n    retryable_error_patterns: []\n"
        "    non_retryable_error_patterns: []\n    max_delay_seconds: 3600\n...\n"))
    message = load_refused(path, whole[:whole.index("3600") + 2])
    assert message == (f"{path}, line {line_of(whole, 'max_delay_seconds: 3600')}: the file ends in the middle of "
                       "a line ('max_delay_seconds: 36'): it looks cut short; nothing was loaded (if it is "
                       "complete, end it with a newline and the line `...`)")


def test_a_file_without_the_end_of_document_line_is_refused_as_possibly_cut_short(loaded):
    path, edited = loaded
    assert load_refused(path, edited.replace("\n...\n", "\n")) == (
        f"{path}: it does not end with the line `...` (YAML's end of document), so it may be cut short; nothing "
        "was loaded (if it is complete, add `...` as its last line)")


def test_a_comment_after_the_end_of_document_line_is_refused_as_possibly_cut_short(loaded):
    # Only blank lines may follow the `...`: anything else could itself be what is left of a longer file.
    path, edited = loaded
    assert "does not end with the line `...`" in load_refused(path, edited + "# reviewed by bob\n")


def test_a_second_document_after_the_end_of_document_line_is_refused(loaded):
    path, edited = loaded
    second = "---\npolicies:\n  - name: other\n...\n"
    message = load_refused(path, edited + second)
    assert message.startswith(f"{path}, line {line_of(edited + second, second)}, column 1: not valid YAML: ")
    assert "another document" in message


def test_every_cut_of_the_shipped_file_at_a_line_boundary_is_refused_and_the_whole_file_loads(db):
    # A cut after a whole pattern or policy is still a valid document with fewer of them.
    lines = SHIPPED.splitlines(keepends=True)

    def loads(text: str) -> bool:
        try:
            services.load_retry_policies(text=text, source="cut.yaml", actor="review")
        except BadPolicy:
            return False
        return True

    assert [n for n in range(len(lines)) if loads("".join(lines[:n]))] == []
    assert not RetryPolicy.objects.exists()
    assert loads(SHIPPED) and set(RetryPolicy.objects.values_list("name", flat=True)) == {"default", "fast"}


def test_a_file_cut_between_the_keys_of_an_entry_names_the_entry_and_the_first_key_it_lacks(loaded):
    path, edited = loaded
    cut = edited[:edited.index("    backoff: exponential_jitter")]
    message = load_refused(path, cut)
    assert message == (f"{path}, line {line_of(edited, '- name: fast')}: policies[1] (fast): missing field "
                       "'backoff'")


# A key is named by its own line; an entry of a pattern list by the line its mapping starts on.
@pytest.mark.parametrize("good, bad, line_at, said", [
    ("max_attempts: 3", "max_attempts: three", "max_attempts: three",
     r"policies\[1\] \(fast\): max_attempts must be a whole number, got 'three'$"),
    ("action: retry_other_resource", "action: retry_elsewhere", "- pattern: 'captcha",
     r"policies\[0\] \(default\): retryable_error_patterns\[3\]\.action must be one of"),
])
def test_a_bad_value_names_the_line_of_its_key_or_list_entry(loaded, good, bad, line_at, said):
    path, edited = loaded
    broken = edited.replace(good, bad)
    assert re.match(rf"{re.escape(str(path))}, line {line_of(broken, line_at)}: {said}", load_refused(path, broken))


def test_an_empty_file_says_so(loaded):
    path, _ = loaded
    assert load_refused(path, "# nothing yet\n") == f"{path}: the file is empty: expected a mapping with a " \
                                                    "'policies' list"


def test_the_complete_edited_file_loads(loaded):
    path, edited = loaded
    path.write_text(edited, encoding="utf-8")
    call_command("load_retry_policies", str(path), stdout=StringIO())
    assert RetryPolicy.objects.get(name="default").initial_delay_seconds == 300
