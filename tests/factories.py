import factory
from django.utils import timezone

from resources.models import Resource, ResourcePool


class ResourcePoolFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ResourcePool
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"pool-{n}")
    resource_noun = "account"
    lease_seconds = 300


class ResourceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Resource

    pool = factory.SubFactory(ResourcePoolFactory)
    key = factory.Sequence(lambda n: f"user{n}@example.com")
    label = factory.LazyAttribute(lambda o: o.key.split("@")[0])


class RetryPolicyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "scheduling.RetryPolicy"
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"policy-{n}")
    max_attempts = 3
    backoff = "fixed"
    initial_delay_seconds = 0
    multiplier = 2
    max_delay_seconds = 3600
    same_resource_on_retry = True


class BackdatedFactory(factory.django.DjangoModelFactory):
    """A model whose created_at is auto_now_add: a `created_at=` given is written after the insert."""

    class Meta:
        abstract = True
        skip_postgeneration_save = True

    @factory.post_generation
    def created_at(obj, create, extracted, **kwargs):
        if extracted is not None:
            obj.created_at = extracted
            if create:
                type(obj).objects.filter(pk=obj.pk).update(created_at=extracted)


class TaskFactory(factory.django.DjangoModelFactory):
    """A task row as the services leave it; waiting (pending, due now) unless told otherwise."""

    class Meta:
        model = "scheduling.Task"

    flow = "demo"
    pool = factory.SubFactory(ResourcePoolFactory)
    policy = factory.SubFactory(RetryPolicyFactory, name="default")
    state = "pending"
    strict = False
    next_run_at = factory.LazyFunction(timezone.now)
    idempotency_key = factory.Sequence(lambda n: f"task-{n}")
    created_by = "test"


class AttemptFactory(factory.django.DjangoModelFactory):
    """One attempt of a task; running unless told otherwise (then give finished_at too)."""

    class Meta:
        model = "scheduling.Attempt"

    task = factory.SubFactory(TaskFactory, state="running", next_run_at=None)
    number = 1
    started_at = factory.LazyFunction(timezone.now)
    outcome = "running"


class TaskEventFactory(BackdatedFactory):
    """A task event; a retry's success unless told otherwise."""

    class Meta:
        model = "scheduling.TaskEvent"

    task = factory.SubFactory(TaskFactory)
    kind = "task.retry.succeeded"
    attempt_number = 2


class WorkOrderFactory(BackdatedFactory):
    """A work order an operator opened; open unless told otherwise."""

    class Meta:
        model = "compensation.WorkOrder"

    title = factory.Sequence(lambda n: f"work order {n}")
    opened_by = "test"


class DeadLetterFactory(factory.django.DjangoModelFactory):
    """The dead letter of a task that died; open unless told otherwise."""

    class Meta:
        model = "compensation.DeadLetter"

    task = factory.SubFactory(TaskFactory, state="dead", next_run_at=None, finished_at=factory.LazyFunction(
        timezone.now))
    flow = factory.SelfAttribute("task.flow")
    pool = factory.SelfAttribute("task.pool")
    died_at = factory.LazyFunction(timezone.now)
