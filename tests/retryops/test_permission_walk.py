"""The permission walk (issue 9): every URL under /admin/ and every admin action, requested by a
staff user in no group and by a member of each console group, with the form data a browser
would send. Whoever the table below does not name for a URL or action must leave PostgreSQL
(but their session and last_login) and Redis as they were.

The walk cannot pass by forbidding everything or by posting nonsense: for each URL and action
that changes something, a member of a group named for it (a superuser where no group is) makes
the same request and something is written. And it cannot pass by missing a page: a URL pattern
or an action that the tables do not list fails test_the_walk_knows_every_admin_url (or
..._action), and the walk checks it visited each."""

from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, RequestFactory
from django.urls import reverse

from compensation.admin_bulk_replay import BulkReplayForm
from resources.models import Resource
from retryops.roles import APPROVERS, OPERATORS, POLICY_EDITORS, VIEWERS
from tests.retryops import scene as scenes
from tests.retryops.conftest import PASSWORD, logged_in, member
from tests.retryops.walk import admin_routes, page_form, writes

pytestmark = pytest.mark.django_db

SUPERUSERS = "superusers"  # no group: only a superuser may
ANYONE = "anyone"  # any staff user, about their own account
NEW_PASSWORD = "Walked-pw-4471"
RQ = "admin/rq/"


@dataclass(frozen=True)
class Visit:
    """One request of the walk: GET `path`, then POST it with `data` (a dict, or a function of
    the scene and the user), or, with `form`, with the form that the page shows a superuser,
    updated with `fill`. `who` may change something by posting it (nobody: a page that only reads)."""

    name: str
    path: Callable[[scenes.Scene], str]
    who: tuple[str, ...] = ()
    data: dict | Callable[[scenes.Scene, User], dict] | None = None
    form: bool = False
    fill: dict | Callable[[scenes.Scene], dict] | None = None
    # What the view itself raises for everyone it lets in (a missing optional package).
    raises: tuple[type[Exception], ...] = ()
    # Its write is a Redis pub/sub message, which leaves no key to compare: it is only shown to
    # be reachable (not 403) for those who may.
    unseen: bool = False

    def body(self, scene, me: User, superuser: Client) -> dict:
        if self.form:
            path = self.path(scene)
            page = superuser.get(path)
            assert page.status_code == 200, f"{path} answers a superuser {page.status_code}"
            data = page_form(page.content.decode(), path.split("?")[0])
            fill = self.fill(scene) if callable(self.fill) else self.fill or {}
            data.update({name: value if isinstance(value, list) else [str(value)] for name, value in fill.items()})
            return data
        return self.data(scene, me) if callable(self.data) else dict(self.data or {})


def url(name: str, *args) -> Callable[[scenes.Scene], str]:
    """The URL of an admin view, its arguments taken from the scene."""
    return lambda scene: reverse(name, args=[arg(scene) if callable(arg) else arg for arg in args])


def pk(attribute: str) -> Callable[[scenes.Scene], int]:
    return lambda scene: getattr(scene, attribute).pk


def rq(route: str, **values) -> Callable[[scenes.Scene], str]:
    """A django-rq page of the queue at index 0; job ids by the registry they are in."""
    def path(scene):
        return "/" + RQ + route.format(q=scenes.RQ_QUEUE_INDEX, **{k: getattr(scene.rq, v) for k, v in values.items()})
    return path


# Who may add, change or delete each model's rows in the admin; a model not listed is read only.
WRITERS = {
    "auth.group": {"add": SUPERUSERS, "change": SUPERUSERS, "delete": SUPERUSERS},
    "auth.user": {"add": SUPERUSERS, "change": SUPERUSERS, "delete": SUPERUSERS},
    "audit.apiclient": {"add": SUPERUSERS},
    "resources.resourcepool": {"add": SUPERUSERS, "change": SUPERUSERS},
    "resources.resource": {"add": SUPERUSERS, "change": SUPERUSERS},
    "scheduling.retrypolicy": {"add": POLICY_EDITORS, "change": POLICY_EDITORS},
    "scheduling.batchconfig": {"add": POLICY_EDITORS, "change": POLICY_EDITORS},
    "compensation.workorder": {"add": OPERATORS, "change": OPERATORS},
    "compensation.bulkreplay": {"add": OPERATORS},
}


def _bulk_replay_start(scene) -> dict:
    form = BulkReplayForm({"flow": "demo", "error_signature": "TimeoutError: upstream slow", "rate": "10"})
    assert form.is_valid(), form.errors
    return {"flow": "demo", "error_signature": "TimeoutError: upstream slow", "rate": "10", "_start": "1",
            "previewed": form.fingerprint()}


# What a browser sends to add or change a row: the page's form with these fields typed in.
ADD_FILL = {
    "auth.group": {"name": "walk group"},
    "auth.user": {"username": "walk-user", "password1": NEW_PASSWORD, "password2": NEW_PASSWORD,
                  "usable_password": "true"},
    "audit.apiclient": lambda scene: {"name": "walk-client", "user": scene.user.pk},
    "resources.resourcepool": {"name": "walk-pool", "resource_noun": "account", "lease_seconds": 60},
    "resources.resource": lambda scene: {"pool": scene.pool.pk, "key": "walk@x", "attributes": "{}"},
    "scheduling.retrypolicy": {"name": "walk-policy"},
    "scheduling.batchconfig": lambda scene: {"name": "walk-batch", "pool": scene.pool.pk, "flow": "demo",
                                             "policy": scene.policy.pk},
    "compensation.workorder": {"title": "walked in"},
    "compensation.bulkreplay": _bulk_replay_start,
}
CHANGE_FILL = {
    "auth.group": {"name": "walked group"},
    "auth.user": {"first_name": "Walked"},
    "resources.resourcepool": {"description": "walked"},
    "resources.resource": {"label": "walked"},
    "scheduling.retrypolicy": {"description": "walked"},
    "scheduling.batchconfig": {"tasks_per_tick": 7},
    "compensation.workorder": {"notes": "walked"},
}


def _who(model: str, verb: str) -> tuple[str, ...]:
    return (WRITERS[model][verb],) if verb in WRITERS.get(model, {}) else ()


def model_routes() -> dict[str, list[Visit]]:
    """The pages Django's admin gives every registered model, walked with the model's row of the scene."""
    routes = {}
    for model in admin.site._registry:
        label, opts = model._meta.label_lower, model._meta
        base, name = f"admin/{opts.app_label}/{opts.model_name}/", f"admin:{opts.app_label}_{opts.model_name}"

        def row(scene, label=label):
            return scene.rows[label]

        routes[base] = [Visit("list", url(f"{name}_changelist"))]  # its actions: ACTIONS
        routes[f"{base}add/"] = [
            Visit("add", url(f"{name}_add"), who=_who(label, "add"), form=bool(_who(label, "add")),
                  fill=ADD_FILL.get(label))]
        routes[f"{base}<path:object_id>/history/"] = [Visit("history", url(f"{name}_history", row))]
        routes[f"{base}<path:object_id>/delete/"] = [
            Visit("delete", url(f"{name}_delete", row), who=_who(label, "delete"), data={"post": "yes"})]
        routes[f"{base}<path:object_id>/change/"] = [
            Visit("change", url(f"{name}_change", row), who=_who(label, "change"), form=True,
                  fill=CHANGE_FILL.get(label))]
        routes[f"{base}<path:object_id>/"] = [Visit("old change URL", lambda scene, base=base, row=row:
                                                    f"/{base}{row(scene)}/")]
    return routes


def site_routes() -> dict[str, list[Visit]]:
    """The admin site's own pages, one visit per app's index."""
    found = admin_routes()
    app_list = next(route for route, pattern in found.items() if pattern.name == "app_list")
    labels = sorted({model._meta.app_label for model in admin.site._registry})
    catch_all = next(route for route, pattern in found.items() if pattern.pattern.regex.pattern.endswith("(?P<url>.*)$"))
    return {
        app_list: [Visit(f"{label} index", url("admin:app_list", label)) for label in labels],
        catch_all: [Visit("no such page", lambda scene: "/admin/nowhere/")],
    }


def _own_password(scene, me):
    return {"old_password": PASSWORD, "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD}


def _view_on_site(scene):
    return reverse("admin:view_on_site", args=[ContentType.objects.get_for_model(Resource).pk, scene.failed.pk])


ROUTES: dict[str, list[Visit]] = {
    **model_routes(),
    **site_routes(),
    "admin/": [Visit("index", url("admin:index"))],
    "admin/login/": [Visit("log in", url("admin:login"), data=lambda scene, me: {
        "username": me.get_username(), "password": PASSWORD})],
    "admin/logout/": [Visit("log out", url("admin:logout"))],
    "admin/password_change/": [Visit("own password", url("admin:password_change"), who=(ANYONE,),
                                     data=_own_password)],
    "admin/password_change/done/": [Visit("own password changed", url("admin:password_change_done"))],
    "admin/autocomplete/": [Visit("autocomplete", lambda scene: reverse("admin:autocomplete") + "?" + urlencode(
        {"app_label": "scheduling", "model_name": "batchconfig", "field_name": "pool", "term": "acc"}))],
    "admin/jsi18n/": [Visit("translations", url("admin:jsi18n"))],
    "admin/r/<path:content_type_id>/<path:object_id>/": [Visit("view on site", _view_on_site)],
    "admin/dashboard/": [Visit("ops dashboard", url("ops_dashboard"))],
    "admin/figures/": [Visit("acceptance figures", url("acceptance_figures"))],
    "admin/figures/panel/": [Visit("acceptance figures panel", url("acceptance_figures_panel"))],
    "admin/auth/user/<id>/password/": [
        Visit("a user's password", url("admin:auth_user_password_change", pk("user")), who=(SUPERUSERS,),
              form=True, fill={"password1": NEW_PASSWORD, "password2": NEW_PASSWORD})],
    # resources
    "admin/resources/resource/<int:object_id>/operation/<str:operation>/": [
        Visit("reset", url("admin:resources_resource_operation", pk("failed"), "reset"), who=(OPERATORS,),
              data={"post": "yes", "reason": "walked"}),
        Visit("quarantine", url("admin:resources_resource_operation", pk("available"), "quarantine"),
              who=(OPERATORS,), data={"post": "yes", "reason": "walked"}),
        Visit("release", url("admin:resources_resource_operation", pk("quarantined"), "unquarantine"),
              who=(OPERATORS,), data={"post": "yes", "reason": "walked"}),
    ],
    # scheduling
    "admin/scheduling/task/retry/": [
        Visit("retry this resource", lambda scene: reverse("admin:scheduling_task_retry") + f"?resource={scene.failed.pk}",
              who=(OPERATORS,), form=True)],
    "admin/scheduling/task/retry/keys/": [
        Visit("key autocomplete", lambda scene: reverse("admin:scheduling_task_retry_keys") + "?" + urlencode(
            {"pool": scene.pool.pk, "q": "a"}))],
    "admin/scheduling/task/<int:task_id>/cancel/": [
        Visit("cancel", url("admin:scheduling_task_cancel", pk("waiting_task")), who=(OPERATORS,),
              data={"reason": "walked"})],
    "admin/scheduling/retrypolicy/transience/": [
        Visit("which errors are transient", url("admin:scheduling_retrypolicy_transience"))],
    "admin/scheduling/retrypolicy/<int:policy_id>/transience/": [
        Visit("a policy's transient errors", url("admin:scheduling_retrypolicy_transience_of", pk("policy")))],
    "admin/scheduling/task/<int:task_id>/run-now/": [
        Visit("run now", url("admin:scheduling_task_run_now", pk("waiting_task")), who=(OPERATORS,))],
    # compensation
    "admin/compensation/runbookrun/<int:run_id>/approve/": [
        Visit("approve", url("admin:compensation_runbookrun_approve", pk("requested_run")), who=(APPROVERS,))],
    "admin/compensation/runbookrun/<int:run_id>/run/": [
        Visit("run", url("admin:compensation_runbookrun_run", pk("approved_run")), who=(OPERATORS,))],
    "admin/compensation/runbookrun/<int:run_id>/reject/": [
        Visit("reject", url("admin:compensation_runbookrun_reject", pk("requested_run")), who=(OPERATORS, APPROVERS),
              data={"reason": "walked"})],
    "admin/compensation/deadletter/groups/": [Visit("groups", url("admin:compensation_deadletter_groups"))],
    "admin/compensation/deadletter/<int:dead_letter_id>/replay/": [
        Visit("replay", url("admin:compensation_deadletter_replay", pk("letter")), who=(OPERATORS,),
              data={"reason": ""})],
    "admin/compensation/deadletter/<int:dead_letter_id>/discard/": [
        Visit("discard", url("admin:compensation_deadletter_discard", pk("letter")), who=(OPERATORS,),
              data={"reason": "walked"})],
    "admin/compensation/deadletter/<int:dead_letter_id>/resolve/": [
        Visit("resolve", url("admin:compensation_deadletter_resolve", pk("letter")), who=(OPERATORS,),
              data={"reason": "walked"})],
    "admin/compensation/workorder/<int:work_order_id>/transition/<slug:action>/": [
        Visit("acknowledge", url("admin:compensation_workorder_transition", pk("order"), "acknowledge"),
              who=(OPERATORS,)),
        Visit("start", url("admin:compensation_workorder_transition", pk("order"), "start"), who=(OPERATORS,)),
        Visit("compensate", url("admin:compensation_workorder_transition", pk("started_order"), "compensate"),
              who=(OPERATORS,), data={"resolution": "walked"}),
        Visit("close", url("admin:compensation_workorder_transition", pk("order"), "close"), who=(OPERATORS,),
              data={"resolution": "walked"}),
        Visit("cancel", url("admin:compensation_workorder_transition", pk("order"), "cancel"), who=(OPERATORS,),
              data={"reason": "walked"}),
    ],
    "admin/compensation/workorder/<int:work_order_id>/runbooks/": [
        Visit("request a runbook action", url("admin:compensation_workorder_runbooks", pk("order")),
              who=(OPERATORS,), data={"runbook": "replay-after-upstream-outage", "action": "resolve_dead_letters",
                                      "token": "walk-request", "input": '{"reason": "walked"}'})],
    "admin/compensation/bulkreplay/<int:bulk_replay_id>/cancel/": [
        Visit("cancel", url("admin:compensation_bulkreplay_cancel", pk("bulk")), who=(OPERATORS,))],
    # django-rq
    RQ + r"^stats.json/?$": [Visit("stats", rq("stats.json"))],
    RQ + r"^stats.json/(?P<token>[\w]+)?/?$": [Visit("stats with a token", rq("stats.json/not-the-token/"))],
    # django-rq's own Prometheus view, there once prometheus-client is installed (staff, or RQ_API_TOKEN).
    RQ + r"^metrics/?$": [Visit("RQ metrics", rq("metrics/"))],
    RQ: [Visit("queues", rq(""))],
    RQ + "queues/<int:queue_index>/": [Visit("jobs", rq("queues/{q}/"))],
    RQ + "queues/<int:queue_index>/details/": [Visit("details", rq("queues/{q}/details/"))],
    RQ + "queues/<int:queue_index>/finished/": [Visit("finished", rq("queues/{q}/finished/"))],
    RQ + "queues/<int:queue_index>/failed/": [Visit("failed", rq("queues/{q}/failed/"))],
    RQ + "queues/<int:queue_index>/failed/clear/": [
        Visit("delete failed jobs", rq("queues/{q}/failed/clear/"), who=(SUPERUSERS,))],
    RQ + "queues/<int:queue_index>/scheduled/": [Visit("scheduled", rq("queues/{q}/scheduled/"))],
    RQ + "queues/<int:queue_index>/started/": [Visit("started", rq("queues/{q}/started/"))],
    RQ + "queues/<int:queue_index>/deferred/": [Visit("deferred", rq("queues/{q}/deferred/"))],
    RQ + "queues/<int:queue_index>/empty/": [Visit("empty the queue", rq("queues/{q}/empty/"), who=(SUPERUSERS,))],
    RQ + "queues/<int:queue_index>/requeue-all/": [
        Visit("requeue failed jobs", rq("queues/{q}/requeue-all/"), who=(SUPERUSERS,))],
    RQ + "queues/<int:queue_index>/<str:job_id>/": [Visit("job", rq("queues/{q}/{job}/", job="finished"))],
    RQ + "queues/<int:queue_index>/<str:job_id>/results/<str:result_id>/": [
        Visit("result", rq("queues/{q}/{job}/results/{result}/", job="finished", result="result"))],
    RQ + "queues/<int:queue_index>/<str:job_id>/delete/": [
        Visit("delete a job", rq("queues/{q}/{job}/delete/", job="queued"), who=(SUPERUSERS,))],
    RQ + "queues/<int:queue_index>/<str:job_id>/requeue/": [
        Visit("requeue a job", rq("queues/{q}/{job}/requeue/", job="failed"), who=(SUPERUSERS,))],
    RQ + "queues/<int:queue_index>/<str:job_id>/enqueue/": [
        Visit("enqueue a deferred job", rq("queues/{q}/{job}/enqueue/", job="deferred"), who=(SUPERUSERS,))],
    RQ + "queues/<int:queue_index>/<str:job_id>/stop/": [
        Visit("stop a job", rq("queues/{q}/{job}/stop/", job="queued"), who=(SUPERUSERS,), unseen=True)],
    RQ + "queues/confirm-action/<int:queue_index>/": [
        Visit("confirm an action", rq("queues/confirm-action/{q}/"),
              data=lambda scene, me: {"action": "delete", "_selected_action": [scene.rq.queued]})],
    RQ + "queues/actions/<int:queue_index>/": [
        Visit("delete selected jobs", rq("queues/actions/{q}/"), who=(SUPERUSERS,),
              data=lambda scene, me: {"action": "delete", "job_ids": [scene.rq.queued]})],
    RQ + "workers/<int:queue_index>/": [Visit("workers", rq("workers/{q}/"))],
    RQ + "workers/<int:queue_index>/<str:key>/": [Visit("worker", rq("workers/{q}/{key}/", key="worker"))],
    # rq-scheduler is not installed: the page fails for everyone who may read it.
    RQ + "schedulers/<int:scheduler_index>/": [
        Visit("scheduler", rq("schedulers/{q}/"), raises=(ImproperlyConfigured,))],
    RQ + "cron-schedulers/<int:connection_index>/<str:scheduler_name>/": [
        Visit("cron scheduler", rq("cron-schedulers/0/walk/"))],
    RQ + "cron-schedulers/<int:connection_index>/<str:scheduler_name>/jobs/<path:cron_job_name>/": [
        Visit("cron job", rq("cron-schedulers/0/walk/jobs/audit.cron.publish/"))],
}

# URL patterns under /admin/ the walk does not request, and why. Empty: it requests them all.
UNVISITED: dict[str, str] = {}


# Every admin action, "app_label.model_name:action": who may run it (nobody: it changes nothing).
ACTIONS = {
    "auth.group:delete_selected": (SUPERUSERS,),
    "auth.user:delete_selected": (SUPERUSERS,),
    "audit.auditentry:delete_selected": (),  # the admins below never delete: has_delete_permission is False
    "audit.apiclient:delete_selected": (),
    "audit.apiclient:revoke_selected": (SUPERUSERS,),
    "resources.resourcepool:delete_selected": (),
    "resources.resource:delete_selected": (),
    "resources.resource:reset_selected": (OPERATORS,),
    "resources.resource:quarantine_selected": (OPERATORS,),
    "resources.resource:unquarantine_selected": (OPERATORS,),
    "resources.resource:retry_selected": (OPERATORS,),
    "scheduling.task:delete_selected": (),
    "scheduling.task:cancel_selected": (OPERATORS,),
    "scheduling.task:run_selected_now": (OPERATORS,),
    "scheduling.attempt:delete_selected": (),
    "scheduling.taskevent:delete_selected": (),
    "scheduling.retrypolicy:delete_selected": (),
    "scheduling.batchconfig:delete_selected": (),
    "compensation.runbookrun:delete_selected": (),
    "compensation.runbookrun:approve": (APPROVERS,),
    "compensation.runbookrun:run": (OPERATORS,),
    "compensation.runbookrun:reject": (OPERATORS, APPROVERS),
    "compensation.deadletter:delete_selected": (),
    "compensation.deadletter:replay": (OPERATORS,),
    "compensation.deadletter:replay_on_any_resource": (OPERATORS,),
    "compensation.deadletter:discard": (OPERATORS,),
    "compensation.deadletter:resolve": (OPERATORS,),
    "compensation.deadletter:bulk_replay_like_these": (),  # opens the bulk replay page, filled in
    "compensation.workorder:delete_selected": (),
    "compensation.workorder:acknowledge": (OPERATORS,),
    "compensation.workorder:start": (OPERATORS,),
    "compensation.workorder:compensate": (OPERATORS,),
    "compensation.workorder:close": (OPERATORS,),
    "compensation.workorder:cancel": (OPERATORS,),
    "compensation.bulkreplay:delete_selected": (),
    "compensation.bulkreplay:cancel": (OPERATORS,),
    "compensation.notification:delete_selected": (),
    "compensation.notification:send_again": (OPERATORS,),
    "telemetry.alert:delete_selected": (),  # read only: the evaluator is the only writer
    "telemetry.alertevent:delete_selected": (),
}
# The rows an action is walked on: every row of its list, except where one refusal refuses all
# (sending again takes failed or skipped notifications only, all or none).
SELECTED = {"compensation.notification:send_again": lambda scene: [scene.notification.pk]}


def registered_actions() -> set[str]:
    """Every action registered, and those an app adds to another's page (offered to a superuser)."""
    request = RequestFactory().get("/")
    request.user = User(username="root", is_active=True, is_superuser=True)
    return {f"{model._meta.label_lower}:{name}" for model, model_admin in admin.site._registry.items()
            for name in {*(name for _func, name, _text in model_admin._get_base_actions()),
                         *model_admin.get_actions(request)}}


def action_request(scene, action: str) -> tuple[str, dict]:
    label, name = action.split(":")
    model = next(model for model in admin.site._registry if model._meta.label_lower == label)
    rows = SELECTED[action](scene) if action in SELECTED else list(model._default_manager.values_list("pk", flat=True))
    path = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    # "post": the confirmation page's answer; "reason": what the confirmation pages ask for.
    return path, {"action": name, admin.helpers.ACTION_CHECKBOX_NAME: rows, "index": "0", "select_across": "0",
                  "post": "yes", "reason": "walked"}


def may(groups: set[str], who: tuple[str, ...]) -> bool:
    return ANYONE in who or bool(groups & set(who))


def request(client: Client, method: str, path: str, data: dict, raises=()):
    try:
        return client.get(path) if method == "get" else client.post(path, data)
    except raises:
        return None


@pytest.fixture
def scene(settings, console_groups, redis_conn):
    built = scenes.build(settings)
    scenes.build_rq(built)
    return built


@pytest.fixture
def superuser_client(db):
    return logged_in(member("root", superuser=True))


def test_the_walk_knows_every_admin_url():
    registered = set(admin_routes())
    assert sorted(registered - ROUTES.keys() - UNVISITED.keys()) == [], "walk these too: add them to ROUTES"
    assert sorted(ROUTES.keys() - registered) == [], "no longer registered: remove them from ROUTES"
    assert not UNVISITED.keys() & ROUTES.keys()


def test_the_walk_knows_every_admin_action():
    assert sorted(registered_actions() - ACTIONS.keys()) == [], "walk these too: add them to ACTIONS"
    assert sorted(ACTIONS.keys() - registered_actions()) == [], "no longer registered: remove them from ACTIONS"


def log_in_again(client: Client, me: User) -> None:
    me.refresh_from_db()  # the walk changes the password on its way, and logs out
    client.force_login(me)


def walk_urls(client: Client, me: User, scene, superuser: Client) -> tuple[set[str], list[str]]:
    """GET and POST every URL of ROUTES as `me`: the routes visited, and what went wrong."""
    mine, visited, wrong = {group.name for group in me.groups.all()}, set(), []
    for route, visits in ROUTES.items():
        for visit in visits:
            path, body = visit.path(scene), visit.body(scene, me, superuser)
            for method in ("get", "post"):
                log_in_again(client, me)
                crash = None
                with writes() as wrote:
                    try:
                        response = request(client, method, path, body, visit.raises)
                    except Exception as exc:  # said with the rest: a view may crash after a write it should not make
                        response, crash = None, exc
                said = f"{method.upper()} {path} ({visit.name})"
                if crash is not None:
                    wrong.append(f"{said} raised {crash!r}, having written {wrote}")
                    continue
                if response is not None and route != "admin/logout/":
                    assert response.wsgi_request.user.pk == me.pk, f"{said} was not {me}'s"
                if method == "post" and may(mine, visit.who):
                    continue
                if wrote:
                    wrong.append(f"{said} wrote {wrote}")
                # Refused as such, not merely by a form that happened to write nothing.
                if method == "post" and visit.who and response is not None and response.status_code != 403:
                    wrong.append(f"{said} answered {response.status_code}, not 403")
            visited.add(route)
    return visited, wrong


def walk_actions(client: Client, me: User, scene) -> tuple[set[str], list[str]]:
    """Run every action of ACTIONS as `me` on its rows: the actions run, and what went wrong."""
    mine, visited, wrong = {group.name for group in me.groups.all()}, set(), []
    for action, who in ACTIONS.items():
        path, body = action_request(scene, action)
        log_in_again(client, me)
        with writes() as wrote:
            response = client.post(path, body)
        assert response.wsgi_request.user.pk == me.pk
        if wrote and not may(mine, who):
            wrong.append(f"action {action} wrote {wrote}")
        visited.add(action)
    return visited, wrong


@pytest.mark.parametrize("groups", [(), (VIEWERS,), (APPROVERS,), (POLICY_EDITORS,), (OPERATORS,)],
                         ids=["no group", VIEWERS, APPROVERS, POLICY_EDITORS, OPERATORS])
def test_a_staff_user_changes_nothing_the_walk_does_not_name_their_group_for(scene, superuser_client, groups):
    me, client = member("walker-" + "-".join(groups).replace(" ", "-"), *groups), Client()

    urls, wrong_urls = walk_urls(client, me, scene, superuser_client)
    actions, wrong_actions = walk_actions(client, me, scene)

    assert not wrong_urls + wrong_actions, "\n".join(wrong_urls + wrong_actions)
    assert (urls, actions) == (ROUTES.keys() - UNVISITED.keys(), ACTIONS.keys())


WRITING_VISITS = [(route, visit, group) for route, visits in ROUTES.items() for visit in visits
                  for group in visit.who if group != ANYONE]


@pytest.mark.parametrize(("route", "visit", "group"), WRITING_VISITS,
                         ids=[f"{route} {visit.name} by {group}" for route, visit, group in WRITING_VISITS])
def test_whom_the_walk_names_for_a_url_changes_something_by_posting_it(scene, superuser_client, route, visit, group):
    me = member("doer", superuser=True) if group == SUPERUSERS else member("doer", group)
    path, body = visit.path(scene), visit.body(scene, me, superuser_client)
    client = logged_in(me)
    with writes() as wrote:
        response = client.post(path, body)
    assert response.status_code != 403
    assert visit.unseen or wrote, f"POST {path} by {group} answered {response.status_code} and wrote nothing"


WRITING_ACTIONS = [(action, group) for action, who in ACTIONS.items() for group in who]


@pytest.mark.parametrize(("action", "group"), WRITING_ACTIONS,
                         ids=[f"{action} by {group}" for action, group in WRITING_ACTIONS])
def test_whom_the_walk_names_for_an_action_changes_something_with_it(scene, action, group):
    me = member("doer", superuser=True) if group == SUPERUSERS else member("doer", group)
    path, body = action_request(scene, action)
    with writes() as wrote:
        response = logged_in(me).post(path, body)
    assert response.status_code != 403
    assert wrote, f"{action} by {group} answered {response.status_code} and wrote nothing"
