"""The resource endpoints. Each parses its input, calls one service or selector, and answers the
result or the service's refusal (retryops.api.errors renders DomainErrors)."""

from django.utils.http import parse_etags
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.response import Response

from resources import services
from resources.api.serializers import (
    ClaimNextSerializer,
    ClaimSerializer,
    HeartbeatSerializer,
    LeaseSerializer,
    PoolCreateSerializer,
    PoolSerializer,
    QuarantineSerializer,
    ReasonSerializer,
    ReleaseSerializer,
    ResourceCreateSerializer,
    ResourcePatchSerializer,
    ResourceSerializer,
)
from resources.filtersets import ResourceFilterSet, ResourcePoolFilterSet
from resources.models import Resource, ResourcePool
from resources.selectors import get_pool, get_resource
from retryops.api.authentication import actor_of, key_prefix_of
from retryops.api.schema import error_response
from retryops.api.views import ApiView

VIEW_POOLS, ADD_POOLS = "resources.view_resourcepool", "resources.add_resourcepool"
VIEW, ADD, CHANGE = "resources.view_resource", "resources.add_resource", "resources.change_resource"
RESET, QUARANTINE = "resources.reset_resource", "resources.quarantine_resource"
CLAIM = "resources.claim_resource"

LOCATION = OpenApiParameter("Location", OpenApiTypes.STR, OpenApiParameter.HEADER, response=[201],
                            description="The new object's URL.")


def pool_url(pool: ResourcePool) -> str:
    return f"/api/pools/{pool.name}/"


def resource_url(resource: Resource) -> str:
    return f"/api/resources/{resource.pk}/"


def _body(serializer_class, request) -> dict:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class PoolList(mixins.ListModelMixin, ApiView):
    """Resource pools, newest first (cursor-paginated); POST creates an empty one."""

    queryset = ResourcePool.objects.all()
    serializer_class = PoolSerializer
    filterset_class = ResourcePoolFilterSet
    required_permissions = {"GET": [VIEW_POOLS], "POST": [ADD_POOLS]}

    def get(self, request):
        return self.list(request)

    @extend_schema(request=PoolCreateSerializer, responses={201: PoolSerializer}, parameters=[LOCATION])
    def post(self, request):
        pool = services.create_pool(**_body(PoolCreateSerializer, request), actor=actor_of(request))
        return Response(PoolSerializer(pool).data, status=status.HTTP_201_CREATED, headers={"Location": pool_url(pool)})


class PoolDetail(ApiView):
    """One resource pool, by name."""

    serializer_class = PoolSerializer
    required_permissions = {"GET": [VIEW_POOLS]}

    def get(self, request, pool):
        return Response(PoolSerializer(get_pool(pool)).data)


class ResourceList(mixins.ListModelMixin, ApiView):
    """Resources, newest first (cursor-paginated), filtered by pool, state, failure category, last
    failure time, key and diagnosis; POST adds one to a pool."""

    queryset = Resource.objects.select_related("pool")
    serializer_class = ResourceSerializer
    filterset_class = ResourceFilterSet
    required_permissions = {"GET": [VIEW], "POST": [ADD]}

    def get(self, request):
        return self.list(request)

    @extend_schema(request=ResourceCreateSerializer, responses={201: ResourceSerializer}, parameters=[LOCATION])
    def post(self, request):
        data = _body(ResourceCreateSerializer, request)
        pool = data.pop("pool")
        [resource] = services.add_resources(pool=pool, resources=[data], actor=actor_of(request))
        resource.pool = get_pool(pool)
        return Response(ResourceSerializer(resource).data, status=status.HTTP_201_CREATED,
                        headers={"Location": resource_url(resource)})


class AddressedResource:
    """A view of one resource, named in its path by its id (`id`) or by its pool's name and its key
    (`pool`, `key`): external systems know their keys, not our ids."""

    def get_resource(self, *, with_version: bool = False) -> Resource:
        if "id" in self.kwargs:
            return get_resource(resource_id=int(self.kwargs["id"]), with_version=with_version)
        return get_resource(pool=self.kwargs["pool"], key=self.kwargs["key"], with_version=with_version)


def etag(resource: Resource) -> dict:
    """The ETag header of a resource read or changed with its version."""
    return {"ETag": f'"{resource.version}"'}


def if_match_of(request) -> list[str] | None:
    """The versions an If-Match header names: its strong ETags (a weak one never matches, RFC 9110);
    None without the header or with *, which any version of an existing resource matches."""
    raw = request.headers.get("If-Match")
    tags = None if raw is None else parse_etags(raw)
    if tags is None or tags == ["*"]:
        return None
    return [tag[1:-1] for tag in tags if not tag.startswith("W/")]


ETAG = OpenApiParameter("ETag", OpenApiTypes.STR, OpenApiParameter.HEADER, response=[200],
                        description="The resource's version: send it as If-Match with a PATCH.")
IF_MATCH = OpenApiParameter("If-Match", OpenApiTypes.STR, OpenApiParameter.HEADER, required=False,
                            description="The ETag of the resource as you read it (or a list of them, or *): a "
                                        "resource that has changed since is not changed, 412 precondition_failed.")


class ResourceDetail(AddressedResource, ApiView):
    """One resource, with its version as ETag; PATCH changes its label and attributes (and nothing
    else: its state and statistics are written by its actions), merging attributes by key (a key
    set to null is removed), and with If-Match only the version its sender read."""

    serializer_class = ResourceSerializer
    required_permissions = {"GET": [VIEW], "PATCH": [CHANGE]}

    @extend_schema(parameters=[ETAG])
    def get(self, request, **kwargs):
        resource = self.get_resource(with_version=True)
        return Response(ResourceSerializer(resource).data, headers=etag(resource))

    @extend_schema(request=ResourcePatchSerializer, parameters=[IF_MATCH, ETAG], responses={
        200: ResourceSerializer,
        412: error_response(412, "precondition_failed: the resource has changed since the If-Match's version was "
                                 "read (`details.version` is its version now); nothing was changed.")})
    def patch(self, request, **kwargs):
        resource = self.get_resource()
        changed = services.change_resource(resource=resource.pk, actor=actor_of(request), merge_attributes=True,
                                           if_match=if_match_of(request), **_body(ResourcePatchSerializer, request))
        return Response(ResourceSerializer(changed).data, headers=etag(changed))


class ResourceAction(AddressedResource, ApiView):
    """A POST that calls one service on the resource in its path: `input_serializer` parses the
    body, `act` calls the service with it, `output_serializer` renders what it returns (and the
    schema documents both)."""

    input_serializer = ReasonSerializer
    output_serializer = ResourceSerializer

    def act(self, resource: Resource, actor: str, data: dict) -> Resource:
        raise NotImplementedError

    def post(self, request, **kwargs):
        resource = self.get_resource()
        done = self.act(resource, actor_of(request), _body(self.input_serializer, request))
        if done.pool_id == resource.pool_id:
            done.pool = resource.pool  # the rows the services return do not carry it
        return Response(self.output_serializer(done).data)


class Claim(ResourceAction):
    """Claim this resource. Strict by default: if it cannot be had, 409 resource_unavailable with the
    reason (in_use, quarantined, done), who holds it and until when; with "strict": false another
    resource of its pool is claimed instead. A failed resource may be claimed (that is a retry on
    it). The answer's lease_token releases the lease and extends it."""

    input_serializer, output_serializer = ClaimSerializer, LeaseSerializer
    required_permissions = {"POST": [CLAIM]}

    def act(self, resource, actor, data):
        return services.client_claim_by_id(resource_id=resource.pk, actor=actor, key_prefix=key_prefix_of(self.request),
                                           **data)


class ClaimNext(ApiView):
    """Claim an available resource of the pool (any one: concurrent claimers never get the same);
    409 pool_exhausted, with what the pool's resources are doing, when there is none."""

    input_serializer, output_serializer = ClaimNextSerializer, LeaseSerializer
    required_permissions = {"POST": [CLAIM]}

    def post(self, request):
        # The pool by its name, looked up by the claim's statement, which answers with its name.
        lease = services.client_claim_next(**_body(ClaimNextSerializer, request), actor=actor_of(request),
                                           key_prefix=key_prefix_of(request))
        return Response(LeaseSerializer(lease).data)


class Release(ResourceAction):
    """Give the lease back with the outcome of the use: success, or failure with its error (a
    retryable one leaves the resource failed, where a retry may take it again; a non-retryable one
    quarantines it). A token that does not hold the resource: 409 lease_mismatch, saying why
    (expired, released, never_granted)."""

    input_serializer = ReleaseSerializer
    required_permissions = {"POST": [CLAIM]}

    def post(self, request, **kwargs):
        if "id" not in self.kwargs:
            return super().post(request, **kwargs)
        # Named by id, the resource is not read first: the release's statement finds it and
        # answers it with its pool's name, and one it does not find is a 404 all the same
        # (describe_lease_mismatch). The read was a third of a claim and release pair's time.
        done = self.act(int(self.kwargs["id"]), actor_of(request), _body(self.input_serializer, request))
        return Response(self.output_serializer(done).data)

    def act(self, resource, actor, data):
        return services.client_release(resource=resource, lease_token=data["lease_token"], outcome=data["outcome"],
                                       error=data.get("error") or None, details=data.get("details"), actor=actor,
                                       key_prefix=key_prefix_of(self.request))


class Heartbeat(ResourceAction):
    """Extend the lease: it then ends `seconds` (default: the pool's lease length) from now."""

    input_serializer = HeartbeatSerializer
    required_permissions = {"POST": [CLAIM]}

    def act(self, resource, actor, data):
        return services.client_heartbeat(resource=resource.pk, lease_token=data["lease_token"],
                                         seconds=data.get("seconds"), actor=actor)


class Reset(ResourceAction):
    """Make a failed or done resource available again; its counters, reasons and timeline stay."""

    required_permissions = {"POST": [RESET]}

    def act(self, resource, actor, data):
        return services.reset(resource=resource.pk, actor=actor, reason=data["reason"])


class Quarantine(ResourceAction):
    """Take the resource out of rotation until it is released from quarantine."""

    input_serializer = QuarantineSerializer
    required_permissions = {"POST": [QUARANTINE]}

    def act(self, resource, actor, data):
        return services.quarantine(resource=resource.pk, actor=actor, reason=data["reason"])


class Unquarantine(ResourceAction):
    """Put a quarantined resource back in its pool; the quarantine stays in its timeline."""

    required_permissions = {"POST": [QUARANTINE]}

    def act(self, resource, actor, data):
        return services.unquarantine(resource=resource.pk, actor=actor, reason=data["reason"])
