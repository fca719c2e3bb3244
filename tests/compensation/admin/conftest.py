"""The console's actors for dead letters, work orders and runbook runs, and what they act on.

carol operates (replays, discards and resolves, moves work orders, requests and runs runbook
actions, starts bulk replays), erin approves runbook actions, dave only looks (the view
permissions). Each has a client of their own, so one test can have two of them act."""

import pytest
from django.test import Client

from compensation.models import DeadLetter
from compensation.services.dead_letters import collect_dead_letters
from compensation.work_orders.models import WorkOrder
from tests.compensation.conftest import dead_tasks
from tests.scheduling.admin.conftest import staff_user

VIEW = ["view_deadletter", "view_workorder", "view_bulkreplay", "view_runbookrun", "view_notification"]
OPERATE = ["replay_deadletter", "discard_deadletter", "change_workorder", "run_runbook_action", "add_bulkreplay"]
APPROVE = ["approve_runbookrun"]


def logged_in(username: str, codenames: list[str]) -> Client:
    client = Client()
    client.force_login(staff_user(username, codenames))
    return client


@pytest.fixture
def carol(db):
    return logged_in("carol", VIEW + OPERATE)


@pytest.fixture
def erin(db):
    return logged_in("erin", VIEW + APPROVE)


@pytest.fixture
def dave(db):
    return logged_in("dave", VIEW)


@pytest.fixture
def letters(pool, alice, instant_policy) -> list[DeadLetter]:
    """Three open dead letters of flow demo on alice, timed out, on one work order."""
    dead_tasks(pool=pool, policy=instant_policy, n=3, resource=alice, signature="TimeoutError: slow")
    return collect_dead_letters()


@pytest.fixture
def order(letters) -> WorkOrder:
    return letters[0].work_order


def said(response) -> str:
    return " | ".join(str(m) for m in response.context["messages"])


def states(letters) -> list[str]:
    return list(DeadLetter.objects.filter(pk__in=[letter.pk for letter in letters]).order_by("id")
                .values_list("state", flat=True))
