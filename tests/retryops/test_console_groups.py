"""What each console group may do in the console, checked on the server: a viewer reads, an
operator acts, an approver approves, a policy editor edits retry policies."""

import pytest
from django.urls import reverse

from compensation.models import DeadLetter
from compensation.runbooks.models import RunbookRun
from resources.models import Resource
from scheduling.models import RetryPolicy, RetryPolicyChange, Task
from tests.retryops import scene as scenes
from tests.retryops.conftest import logged_in, member
from tests.retryops.walk import page_form

pytestmark = pytest.mark.django_db

RESOURCES = reverse("admin:resources_resource_changelist")


@pytest.fixture
def scene(settings, console_groups):
    return scenes.build(settings)


def console_user(username: str, group: str):
    """A fixture: `username`, a member of `group`, logged in."""
    @pytest.fixture
    def client(console_groups):
        return logged_in(member(username, group))
    return client


vera = console_user("vera", "viewers")
olga = console_user("olga", "operators")
erin = console_user("erin", "approvers")
pete = console_user("pete", "policy editors")


def retry_url(resource) -> str:
    return f"{reverse('admin:scheduling_task_retry')}?resource={resource.pk}"


def reset_url(resource) -> str:
    return reverse("admin:resources_resource_operation", args=[resource.pk, "reset"])


def test_a_viewer_sees_the_resource_list_without_action_buttons(vera, scene):
    page = vera.get(RESOURCES)

    assert page.status_code == 200
    html = page.content.decode()
    assert "alice@x" in html
    assert 'name="action"' not in html  # no action menu, hence no "reset / quarantine / retry selected"
    assert retry_url(scene.failed) not in html
    assert reverse("admin:resources_resource_add") not in html


def test_an_operator_sees_the_same_list_with_its_action_buttons(olga, scene):
    html = olga.get(RESOURCES).content.decode()

    assert 'name="action"' in html and 'value="reset_selected"' in html and 'value="retry_selected"' in html
    assert retry_url(scene.failed) in html


def test_a_viewer_posting_the_retry_form_is_refused_and_starts_nothing(vera, olga, scene):
    form = page_form(olga.get(retry_url(scene.failed)).content.decode(), reverse("admin:scheduling_task_retry"))
    tasks = Task.objects.count()

    answer = vera.post(retry_url(scene.failed), form)

    assert answer.status_code == 403
    assert Task.objects.count() == tasks
    assert Resource.objects.get(pk=scene.failed.pk).state == "failed"


def test_an_approver_approves_a_runbook_run_another_operator_requested(erin, scene):
    answer = erin.post(reverse("admin:compensation_runbookrun_approve", args=[scene.requested_run.pk]))

    assert answer.status_code == 302
    run = RunbookRun.objects.get(pk=scene.requested_run.pk)
    assert (run.state, run.approved_by) == ("approved", "erin")


def test_an_approver_replaying_a_dead_letter_is_refused_and_replays_nothing(erin, scene):
    answer = erin.post(reverse("admin:compensation_deadletter_replay", args=[scene.letter.pk]), {"reason": ""})

    assert answer.status_code == 403
    letter = DeadLetter.objects.get(pk=scene.letter.pk)
    assert (letter.state, letter.replay_task_id) == ("open", None)


def test_a_policy_editor_changes_a_retry_policy(pete, scene):
    change = reverse("admin:scheduling_retrypolicy_change", args=[scene.policy.pk])
    form = page_form(pete.get(change).content.decode(), change)
    form["max_attempts"] = ["7"]

    answer = pete.post(change, form)

    assert answer.status_code == 302
    assert RetryPolicy.objects.get(pk=scene.policy.pk).max_attempts == 7
    recorded = RetryPolicyChange.objects.filter(policy=scene.policy).first()  # the newest
    assert (recorded.changed_by, recorded.after["max_attempts"]) == ("pete", 7)


def test_a_policy_editor_resetting_a_resource_is_refused_and_resets_nothing(pete, scene):
    answer = pete.post(reset_url(scene.failed), {"post": "yes", "reason": "looks fine"})

    assert answer.status_code == 403
    assert Resource.objects.get(pk=scene.failed.pk).state == "failed"


def test_an_operator_resets_a_resource(olga, scene):
    answer = olga.post(reset_url(scene.failed), {"post": "yes", "reason": "looks fine"})

    assert answer.status_code == 200  # the result page
    assert Resource.objects.get(pk=scene.failed.pk).state == "available"


def test_a_viewer_reads_the_rq_dashboard(vera, redis_conn):
    assert vera.get(reverse("django_rq:home")).status_code == 200


def test_staff_in_no_group_may_not_read_the_rq_dashboard(console_groups, redis_conn):
    assert logged_in(member("sam")).get(reverse("django_rq:home")).status_code == 403


def test_an_operator_emptying_an_rq_queue_is_refused(olga, redis_conn):
    redis_conn.lpush("rq:queue:default", "a-job")

    assert olga.post(reverse("django_rq:clear", args=[0])).status_code == 403
    assert redis_conn.llen("rq:queue:default") == 1
