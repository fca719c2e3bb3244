"""A console with something to act on behind every page, button and action: each row in a state
in which its operation would succeed, so that a refusal seen by the permission walk is the
permission check's and not the state's. Built through the services, as the console finds it."""

from dataclasses import dataclass, field

import django_rq
from django.contrib.auth.models import Group, User
from rq import Queue, SimpleWorker, Worker
from rq.job import Job

from audit.models import AuditEntry
from audit.services import create_api_client
from compensation.models import BulkReplay, DeadLetter
from compensation.notifications.models import Notification, NotificationState
from compensation.runbooks.models import RunbookRun
from compensation.runbooks.services import request_runbook_action
from compensation.services.bulk_replay import start_bulk_replay
from compensation.services.dead_letters import collect_dead_letters
from compensation.work_orders.models import WorkOrder
from compensation.work_orders.services import change_work_order, open_work_order, start_work_order
from resources import services as resources
from resources.models import Resource, ResourcePool
from scheduling import services as scheduling
from scheduling.models import Attempt, BatchConfig, RetryPolicy, Task, TaskEvent
from telemetry.alerts.services import evaluate_alert
from telemetry.alerts.models import Alert, AlertEvent
from tests.compensation.conftest import dead_tasks
from tests.factories import ResourceFactory, ResourcePoolFactory, RetryPolicyFactory
from tests.scheduling.admin.conftest import order_42, run

# The queue the RQ pages are walked on: the first of RQ_QUEUES, so its index is 0.
RQ_QUEUE = "default"
RQ_QUEUE_INDEX = 0


@dataclass
class RQScene:
    """Jobs of the queue at index 0 in each registry the RQ pages show, and a live worker."""

    queued: str
    deferred: str
    finished: str
    result: str
    failed: str
    worker: str


@dataclass
class Scene:
    pool: ResourcePool
    failed: Resource  # alice: its task died; reset, retry, quarantine
    quarantined: Resource  # bob: release from quarantine
    available: Resource  # carl
    held: Resource  # dan: held by the waiting task
    dead_task: Task
    waiting_task: Task  # cancel, run now
    attempt: Attempt
    policy: RetryPolicy
    batch: BatchConfig
    letter: DeadLetter  # open: replay, discard, resolve
    order: WorkOrder  # open, opened by the dead letters: acknowledge, start, close, cancel
    started_order: WorkOrder  # in progress: compensate
    requested_run: RunbookRun  # an external action carol asked for: approve, reject
    approved_run: RunbookRun  # an internal action: run
    notification: Notification  # failed: send again
    alert: Alert  # firing (the dead-letter queue is longer than the walk's threshold), with its history
    bulk: BulkReplay  # running: cancel
    group: Group
    user: User
    rq: RQScene | None = None
    rows: dict[str, int] = field(default_factory=dict)  # "app_label.model_name" -> the id its pages are walked with


def walk_noop() -> str:
    return "done"


def walk_fails() -> None:
    raise RuntimeError("the walk's failing job")


def build(settings) -> Scene:
    # A channel with a URL, so a failed notification may be sent again (sends happen after
    # commit, which a test never reaches: nothing is sent).
    settings.RETRYOPS_SLACK_WEBHOOK_URL = "http://127.0.0.1:9/walk"
    pool = ResourcePoolFactory(name="accounts", resource_noun="account")
    RetryPolicyFactory(name="once", max_attempts=1)
    later = RetryPolicyFactory(name="later", max_attempts=5, initial_delay_seconds=120, max_delay_seconds=120)
    alice, bob, carl, dan = (ResourceFactory(pool=pool, key=f"{name}@x") for name in ("alice", "bob", "carl", "dan"))
    dead = run(order_42(alice), error=TimeoutError("upstream slow"))
    waiting = run(scheduling.start_task(flow="demo", pool_name=pool, payload={"order": 43}, resource=dan,
                                        created_by="shop", policy="later"), error=TimeoutError("upstream slow"))
    resources.quarantine(resource=bob, actor="ops", reason="banned upstream")
    dead_tasks(pool=pool, policy=later, n=2, resource=alice, signature="TimeoutError: upstream slow")
    letters = collect_dead_letters()
    letter = next(one for one in letters if one.task_id == dead.pk)
    order = WorkOrder.objects.get(pk=letter.work_order_id)
    started = start_work_order(
        work_order=open_work_order(title="refund the March orders", actor="carol"), actor="carol")
    # The resolution the "mark compensated" action takes from the work order.
    started = change_work_order(work_order=started, actor="carol", resolution="refunded by hand")
    requested, _ = request_runbook_action(work_order=order, runbook="refund-failed-charges", action="request_refund",
                                          input={"kind": "credit", "ticket": "OPS-1"}, token="walk-refund",
                                          actor="carol")
    approved, _ = request_runbook_action(work_order=order, runbook="replay-after-upstream-outage",
                                         action="resolve_dead_letters", input={"reason": "applied upstream after all"},
                                         token="walk-resolve", actor="carol")
    notification = Notification.objects.create(
        channel="slack", event="trigger", dedup_key="walk", subject_id=order.pk, subject_label=str(order),
        payload={"text": "walk"}, state=NotificationState.FAILED, attempts=1, last_error="HTTP 500")
    bulk = start_bulk_replay(filter={"flow": "demo"}, actor="carol")
    batch = scheduling.save_batch_config(data={"name": "nightly", "pool": pool, "flow": "demo", "policy": later},
                                         actor="carol")
    settings.RETRYOPS_ALERT_DLQ_LENGTH = 0
    evaluate_alert(rule="dlq_length")
    scene = Scene(
        pool=pool, failed=Resource.objects.get(pk=alice.pk), quarantined=Resource.objects.get(pk=bob.pk),
        available=carl, held=Resource.objects.get(pk=dan.pk), dead_task=dead, waiting_task=waiting,
        attempt=Attempt.objects.filter(task=dead).get(), policy=later, batch=batch, letter=letter, order=order,
        started_order=started, requested_run=requested, approved_run=approved, notification=notification,
        alert=Alert.objects.get(rule="dlq_length"), bulk=bulk, group=Group.objects.create(name="walkers"),
        user=User.objects.create_user(username="walker", password="walker-pw-1"))
    scene.rows = {
        "auth.group": scene.group.pk, "auth.user": scene.user.pk,
        "audit.auditentry": AuditEntry.objects.order_by("id").values_list("pk", flat=True).first(),
        "audit.apiclient": create_api_client(name="walk-shop", user=scene.user, actor="carol")[0].pk,
        "resources.resourcepool": pool.pk, "resources.resource": scene.failed.pk,
        "scheduling.task": dead.pk, "scheduling.attempt": scene.attempt.pk,
        "scheduling.taskevent": TaskEvent.objects.filter(task=dead).values_list("pk", flat=True).first(),
        "scheduling.retrypolicy": later.pk, "scheduling.batchconfig": batch.pk,
        "compensation.runbookrun": requested.pk, "compensation.deadletter": letter.pk,
        "compensation.workorder": order.pk, "compensation.bulkreplay": bulk.pk,
        "compensation.notification": notification.pk,
        "telemetry.alert": scene.alert.pk, "telemetry.alertevent": AlertEvent.objects.get().pk,
    }
    return scene


def build_rq(scene: Scene) -> RQScene:
    """Jobs in each of the queue's registries, run by a burst worker in this process (rq's own,
    which never touches the database), and a worker that is registered and idle."""
    # rq's own queue: django-rq's enqueues once the transaction commits, which a test never does.
    connection = django_rq.get_connection(RQ_QUEUE)
    queue = Queue(RQ_QUEUE, connection=connection)
    finished = queue.enqueue(walk_noop, result_ttl=3600)
    failed = queue.enqueue(walk_fails)
    SimpleWorker([queue], connection=connection).work(burst=True)
    queued = queue.enqueue(walk_noop)
    deferred = queue.enqueue(walk_noop, depends_on=queued)
    worker = Worker([queue], connection=connection, name="walk-worker")
    worker.register_birth()
    finished = Job.fetch(finished.id, connection=connection)
    assert finished.get_status() == "finished" and Job.fetch(failed.id, connection=connection).get_status() == "failed"
    scene.rq = RQScene(queued=queued.id, deferred=deferred.id, finished=finished.id,
                       result=finished.latest_result().id, failed=failed.id, worker=worker.key)
    return scene.rq
