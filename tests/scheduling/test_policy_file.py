"""A retry-policy file cut short or malformed. A malformed one: `manage.py load_retry_policies`
names the file, the line and the key, and changes nothing (policies, their change records, the
audit log). One cut short but still valid YAML: the load removes no policy and no pattern unless
`--prune` is given, and `--dry-run` names what the file lacks."""

import re
from io import StringIO

import pytest
import yaml
from django.conf import settings
from django.core.management import CommandError, call_command

from audit.models import AuditEntry
from scheduling import services
from scheduling.errors import BadPolicy
from scheduling.models import RetryPolicy, RetryPolicyChange
from tests.factories import TaskFactory

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


def load_refused(path, text: str, **options) -> str:
    path.write_text(text, encoding="utf-8")
    before = state()
    with pytest.raises(CommandError) as refused:
        call_command("load_retry_policies", str(path), stdout=StringIO(), **options)
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


def test_a_file_written_by_pyyaml_safe_dump_loads(loaded):
    # No end-of-document line `...`: what PyYAML and most tools write.
    path, edited = loaded
    path.write_text(yaml.safe_dump(yaml.safe_load(edited), sort_keys=False), encoding="utf-8")
    call_command("load_retry_policies", str(path), stdout=StringIO())
    assert RetryPolicy.objects.get(name="default").initial_delay_seconds == 300


def test_a_second_document_after_the_end_of_document_line_is_refused(loaded):
    path, edited = loaded
    second = "---\npolicies:\n  - name: other\n...\n"
    message = load_refused(path, edited + second)
    assert message.startswith(f"{path}, line {line_of(edited + second, second)}, column 1: not valid YAML: ")
    assert "another document" in message


def cut_after(text: str, fragment: str) -> str:
    """`text` cut at the end of the line holding `fragment`, as a truncated copy may be."""
    end = text.index("\n", text.index(fragment)) + 1
    return text[:end]


def test_a_file_cut_short_removes_no_policy_and_no_pattern_without_prune(loaded):
    # Cut after default's first non-retryable pattern: valid YAML, without four of default's
    # patterns and without the policy `fast`.
    path, _edited = loaded
    patterns = RetryPolicy.objects.get(name="default").non_retryable_error_patterns
    path.write_text(cut_after(SHIPPED, r"- '\bbanned\b'"), encoding="utf-8")
    out = StringIO()
    call_command("load_retry_policies", str(path), stdout=out)
    assert set(RetryPolicy.objects.values_list("name", flat=True)) == {"default", "fast"}
    assert RetryPolicy.objects.get(name="default").non_retryable_error_patterns == patterns
    assert "--prune" in out.getvalue()


def test_a_dry_run_of_a_file_cut_short_names_what_prune_would_drop_and_writes_nothing(loaded):
    path, edited = loaded
    path.write_text(cut_after(edited, r"- '\bbanned\b'"), encoding="utf-8")
    before = state()
    out = StringIO()
    call_command("load_retry_policies", str(path), dry_run=True, prune=True, stdout=out)
    said = out.getvalue()
    assert state() == before
    assert "changed: default (initial_delay_seconds, non_retryable_error_patterns)" in said
    assert "policy fast" in said and "'risk control'" in said and "'invalid payload|schema validation'" in said
    assert "nothing was written" in said


def test_prune_removes_the_policies_and_patterns_the_file_lacks(loaded):
    path, _edited = loaded
    path.write_text(cut_after(SHIPPED, r"- '\bbanned\b'"), encoding="utf-8")
    call_command("load_retry_policies", str(path), prune=True, stdout=StringIO())
    assert list(RetryPolicy.objects.values_list("name", flat=True)) == ["default"]
    default = RetryPolicy.objects.get(name="default")
    assert [entry["pattern"] for entry in default.non_retryable_error_patterns] == [r"\bbanned\b"]
    assert AuditEntry.objects.filter(action="policy.delete", target_label__contains="fast").exists()


def test_prune_refuses_to_remove_a_policy_a_task_uses_and_writes_nothing(loaded, pool):
    TaskFactory(policy=RetryPolicy.objects.get(name="fast"), pool=pool)
    path, _edited = loaded
    message = load_refused(path, cut_after(SHIPPED, "action: dead_letter"), prune=True)
    assert message == f"{path}: policy 'fast' is not in the file, but tasks or batch configs use it, so --prune " \
                      "cannot remove it; nothing was loaded"


def patterns() -> list:
    return sorted((name, [entry["pattern"] for entry in retryable], [entry["pattern"] for entry in non_retryable])
                  for name, retryable, non_retryable in RetryPolicy.objects.values_list(
                      "name", "retryable_error_patterns", "non_retryable_error_patterns"))


def test_every_cut_of_the_shipped_file_at_a_line_boundary_is_refused_or_removes_no_policy_and_no_pattern(db):
    # A cut after a whole pattern or policy is still a valid document with fewer of them. (A cut
    # that drops an entry's `probation: true` changes that entry: --dry-run shows such a change.)
    lines = SHIPPED.splitlines(keepends=True)
    services.load_retry_policies(text=SHIPPED, source="retry-policies.yaml", actor="review")
    loaded = patterns()
    for n in range(len(lines)):
        try:
            services.load_retry_policies(text="".join(lines[:n]), source="cut.yaml", actor="review")
        except BadPolicy:
            pass
        assert patterns() == loaded, f"cut at line {n}"


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
