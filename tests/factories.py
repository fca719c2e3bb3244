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
