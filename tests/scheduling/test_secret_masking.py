"""Secrets a flow gets (its resource's attributes, its payload) and writes (its result): the flow
gets the real values; its result is stored masked; the task's payload is shown masked by the
console and the API, and the console's retry form that shows it masked runs the real one."""

import json
from html import escape

import pytest
from django.apps import apps
from django.urls import reverse
from django.utils import timezone
from werkzeug import Response

from compensation.jobs import dead_letters_job
from compensation.models import DeadLetter
from resources.models import Resource
from retryops.masking import MASK
from scheduling import services
from retryops.errors import BadInput
from scheduling.flows import flow
from scheduling.models import Attempt, BatchConfig, Task
from tests.api_fixtures import OPERATE, keyed_client
from tests.factories import AttemptFactory, DeadLetterFactory, ResourceFactory, RetryPolicyFactory, TaskFactory
from tests.resources.test_admin import submitted
from tests.retryops.conftest import console_groups, logged_in, member  # noqa: F401  (console_groups: the fixture)
from tests.scheduling.helpers import work

SECRET = "hunter2-s3cr3t"
seen: list[dict] = []


@flow("echo_secrets")
def echo_secrets(context):
    """Hands back what it was given, as a careless flow would."""
    seen.append({"attributes": context.resource_attributes, "payload": context.payload})
    return {"echo": context.resource_attributes, "session": {"cookie": "c-" + SECRET}, "ok": True}


@pytest.mark.django_db(transaction=True)
def test_a_flow_gets_the_real_secrets_and_its_result_is_stored_masked(redis_conn, pool, instant_policy):
    seen.clear()
    ResourceFactory(pool=pool, key="carol@x", attributes={"region": "eu", "password": SECRET})
    task = services.start_task(flow="echo_secrets", pool_name=pool, created_by="test", policy="instant",
                               payload={"order": 7, "api_token": "t-" + SECRET})
    work()
    assert seen == [{"attributes": {"region": "eu", "password": SECRET}, "payload": {"order": 7,
                                                                                  "api_token": "t-" + SECRET}}]
    task.refresh_from_db()
    assert task.state == "succeeded"
    assert task.result == {"echo": {"region": "eu", "password": MASK}, "session": {"cookie": MASK}, "ok": True}
    assert task.payload["api_token"] == "t-" + SECRET  # kept: a retry runs it again


@pytest.fixture
def secret_task(alice, default_policy):
    return TaskFactory(pool=alice.pool, resource=alice, policy=default_policy, state="succeeded", next_run_at=None,
                       finished_at=timezone.now(),
                       payload={"order": 7, "api_token": SECRET}, result={"authorization": SECRET, "id": 3})


def test_the_task_page_shows_payload_and_result_masked(admin_client, secret_task):
    page = admin_client.get(reverse("admin:scheduling_task_change", args=[secret_task.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert SECRET not in text
    assert escape('"order": 7') in text and MASK in text


def test_the_api_answers_a_tasks_payload_masked(make_api_client, secret_task):
    api = keyed_client(make_api_client("billing", *OPERATE)[1])
    response = api.get(f"/api/tasks/{secret_task.pk}/")
    assert response.status_code == 200, response.content
    assert response.json()["payload"] == {"order": 7, "api_token": MASK}


def test_the_api_answers_a_dead_letters_payload_masked(make_api_client, secret_task):
    from retryops import roles

    letter = DeadLetterFactory(task=TaskFactory(pool=secret_task.pool, policy=secret_task.policy, state="dead",
                                                next_run_at=None, finished_at=timezone.now(), payload={"password": SECRET}))
    api = keyed_client(make_api_client("oncall", *roles.ROLES[roles.OPERATORS])[1])
    response = api.get(f"/api/dead-letters/{letter.pk}/")
    assert response.status_code == 200, response.content
    assert response.json()["payload"] == {"password": MASK}
    assert DeadLetter.objects.get(pk=letter.pk).task.payload == {"password": SECRET}


def retry_form(admin_client, task):
    return admin_client.get(reverse("admin:scheduling_task_retry") + f"?task={task.pk}")


def retry_form_as_shown(admin_client, task) -> dict:
    """What the retry form posts when the operator submits it as it was shown."""
    form = retry_form(admin_client, task).context["form"]
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    return {name: value for name, value in data.items() if value is not False}


def test_the_retry_form_shows_the_payload_masked(admin_client, secret_task):
    page = retry_form(admin_client, secret_task)
    assert page.status_code == 200
    assert SECRET not in page.content.decode()


@pytest.mark.django_db(transaction=True)
def test_a_retry_from_the_form_as_shown_runs_the_real_payload(admin_client, redis_conn, pool, alice,
                                                              default_policy):
    source = TaskFactory(pool=pool, resource=alice, requested_resource=alice, policy=default_policy, state="dead",
                         next_run_at=None, finished_at=timezone.now(), flow="demo", payload={"order": 7, "api_token": SECRET})
    data = retry_form_as_shown(admin_client, source)
    assert json.loads(data["payload"])["api_token"] == MASK
    response = admin_client.post(reverse("admin:scheduling_task_retry") + f"?task={source.pk}", data)
    assert response.status_code == 302, response.context["form"].errors if response.context else response
    started = Task.objects.exclude(pk=source.pk).get()
    assert started.payload == {"order": 7, "api_token": SECRET}


@pytest.fixture
def nightly(alice, instant_policy):
    return services.save_batch_config(data={"name": "nightly", "pool": alice.pool, "flow": "demo",
                                            "policy": instant_policy, "payload": {"order": 7, "token": SECRET}},
                                      actor="carol")


def test_a_batch_configs_page_shows_its_payload_masked_and_saving_it_keeps_the_secret(admin_client, nightly):
    url = reverse("admin:scheduling_batchconfig_change", args=[nightly.pk])
    page = admin_client.get(url)
    assert SECRET not in page.content.decode()
    shown = json.loads(page.context["adminform"].form["payload"].value())
    assert shown == {"order": 7, "token": MASK}
    response = admin_client.post(url, submitted(page, payload=json.dumps({**shown, "order": 8})))
    assert response.status_code == 302
    assert BatchConfig.objects.get(pk=nightly.pk).payload == {"order": 8, "token": SECRET}


@pytest.mark.usefixtures("console_groups")
def test_a_viewer_without_change_permission_sees_a_batch_configs_payload_masked(nightly):
    page = logged_in(member("vera", "viewers")).get(reverse("admin:scheduling_batchconfig_change", args=[nightly.pk]))
    assert page.status_code == 200
    assert SECRET not in page.content.decode()
    assert escape(f'"token": "{MASK}"') in page.content.decode()


# a mask with no secret behind it


def test_a_batch_configs_payload_given_a_new_secret_key_with_the_mask_is_refused_on_the_field(admin_client, nightly):
    url = reverse("admin:scheduling_batchconfig_change", args=[nightly.pk])
    page = admin_client.get(url)
    response = admin_client.post(url, submitted(page, payload=json.dumps({"order": 8, "token": MASK,
                                                                          "db_password": MASK})))
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["payload"] == [
        f"payload.db_password shows the mask {MASK} but no secret is stored for it: type the secret"]
    assert BatchConfig.objects.get(pk=nightly.pk).payload == {"order": 7, "token": SECRET}


def test_save_batch_config_refuses_a_mask_with_no_secret_behind_it_and_writes_nothing(nightly):
    with pytest.raises(BadInput, match=r"^payload\.api_token shows the mask") as refused:
        services.save_batch_config(data={"payload": {"api_token": MASK}, "enabled": False}, actor="carol",
                                   config=nightly.pk)
    assert refused.value.code == "masked_secret_unknown"
    saved = BatchConfig.objects.get(pk=nightly.pk)
    assert (saved.payload, saved.enabled) == ({"order": 7, "token": SECRET}, nightly.enabled)


def test_a_retry_from_the_form_with_a_renamed_masked_secret_is_refused_on_the_payload(admin_client, pool, alice,
                                                                                      default_policy):
    source = TaskFactory(pool=pool, resource=alice, requested_resource=alice, policy=default_policy, state="dead",
                         next_run_at=None, finished_at=timezone.now(), flow="demo",
                         payload={"order": 7, "api_token": SECRET})
    data = retry_form_as_shown(admin_client, source)
    data["payload"] = json.dumps({"order": 7, "upstream_token": MASK})
    response = admin_client.post(reverse("admin:scheduling_task_retry") + f"?task={source.pk}", data)
    assert response.status_code == 200
    assert response.context["form"].errors["payload"] == [
        f"payload.upstream_token shows the mask {MASK} but no secret is stored for it: type the secret"]
    assert not Task.objects.exclude(pk=source.pk).exists()


def test_a_retry_through_the_api_with_a_mask_no_task_stored_is_refused(make_api_client, pool, alice, default_policy):
    last = TaskFactory(pool=pool, resource=alice, requested_resource=alice, policy=default_policy, state="dead",
                       next_run_at=None, finished_at=timezone.now(), flow="demo",
                       payload={"order": 7, "api_token": SECRET})
    AttemptFactory(task=last, resource=alice, outcome="failed", finished_at=timezone.now())
    api = keyed_client(make_api_client("oncall", *OPERATE)[1])
    response = api.post(f"/api/resources/{alice.pk}/retry", {"flow": "demo", "payload": {"order": 8, "password": MASK}},
                        format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "masked_secret_unknown"
    assert response.json()["error"]["details"]["path"] == "payload.password"
    assert Task.objects.count() == 1


# an upstream's error that echoes the request


def echo_upstream(httpserver, settings, answer):
    """http_call's upstream, a real local HTTP server: 422 with `answer` made of the request's JSON."""
    httpserver.expect_request("/calls").respond_with_handler(
        lambda request: Response(answer(json.loads(request.get_data())), status=422))
    settings.RETRYOPS_HTTP_CALL_URL = httpserver.url_for("/calls")


def stored_rows() -> dict[str, list[dict]]:
    """Every row of the project's tables, as the values it holds."""
    return {model._meta.label: list(model._default_manager.values())
            for app in ("audit", "resources", "scheduling", "compensation", "telemetry")
            for model in apps.get_app_config(app).get_models()}


@pytest.mark.django_db(transaction=True)
def test_an_upstream_error_echoing_the_request_leaves_no_secret_value_in_any_row(redis_conn, pool, httpserver,
                                                                                 settings):
    RetryPolicyFactory(name="once", max_attempts=1)
    echo_upstream(httpserver, settings, lambda body: "bad request: " + json.dumps(body))
    carol = ResourceFactory(pool=pool, key="carol@x", attributes={"region": "eu", "password": SECRET})
    task = services.start_task(flow="http_call", pool_name=pool, created_by="test", policy="once",
                               payload={"order": 7, "api_token": 31415926})
    work()
    dead_letters_job()

    attempt = Attempt.objects.get(task=task)
    assert attempt.error_message.startswith("HTTP 422 from ") and f'"password": "{MASK}"' in attempt.error_message
    assert f'"api_token": {MASK}' in attempt.error_message
    # The secrets stay where the flows read them, and nowhere else.
    assert Resource.objects.get(pk=carol.pk).attributes["password"] == SECRET
    assert Task.objects.get(pk=task.pk).payload["api_token"] == 31415926
    rows = stored_rows()
    rows["resources.Resource"] = [{**row, "attributes": None} for row in rows["resources.Resource"]]
    rows["scheduling.Task"] = [{**row, "payload": None} for row in rows["scheduling.Task"]]
    assert Task.objects.get(pk=task.pk).state == "dead" and rows["compensation.DeadLetter"]
    held = [label for label, values in rows.items() if SECRET in str(values) or "31415926" in str(values)]
    assert held == []


@pytest.mark.django_db(transaction=True)
def test_failures_echoing_different_passwords_share_one_error_signature(redis_conn, pool, httpserver, settings):
    RetryPolicyFactory(name="once", max_attempts=1)
    echo_upstream(httpserver, settings,
                  lambda body: f"password {body['resource']['attributes']['password']} refused")
    for key, password in (("carol@x", SECRET), ("dave@x", "correct-horse")):
        resource = ResourceFactory(pool=pool, key=key, attributes={"password": password})
        services.start_task(flow="http_call", pool_name=pool, created_by="test", policy="once", resource=resource)
    work()
    [signature] = set(Attempt.objects.values_list("error_signature", flat=True))
    assert signature.startswith("HttpCallError: HTTP <n> from ") and signature.endswith(f"password {MASK} refused")


class AuthError(Exception):
    pass


class HTTPError(Exception):
    pass


@flow("refuses_login")
def refuses_login(context):
    raise AuthError("login failed: invalid password")


@flow("upstream_unavailable")
def upstream_unavailable(context):
    raise HTTPError(f"HTTP 503 from upstream for {context.payload['password']}")


@pytest.mark.django_db(transaction=True)
def test_a_secret_masking_a_word_of_the_stored_error_leaves_the_policys_verdict_as_the_flow_raised_it(
        redis_conn, pool, instant_policy):
    ResourceFactory(pool=pool, key="carol@x")
    task = services.start_task(flow="refuses_login", pool_name=pool, created_by="test", policy="instant",
                               payload={"password": "password123"})
    work()
    attempt = Attempt.objects.get(task=task, number=1)
    assert attempt.category == "non_retryable"  # "invalid password", not "invalid ******"
    assert attempt.error_message == f"login failed: invalid {MASK}"


@pytest.mark.django_db(transaction=True)
def test_a_secret_that_ends_an_errors_class_name_leaves_the_class_name_as_it_is(redis_conn, pool, instant_policy):
    ResourceFactory(pool=pool, key="carol@x")
    task = services.start_task(flow="upstream_unavailable", pool_name=pool, created_by="test", policy="instant",
                               payload={"password": "Errorless1"})
    work()
    attempt = Attempt.objects.get(task=task, number=1)
    assert (attempt.error_class, attempt.error_message) == ("HTTPError", f"HTTP 503 from upstream for {MASK}")
