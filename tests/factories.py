import factory

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
