"""What the resource endpoints take and answer. Input serializers only parse (types, lengths, which
fields may be sent); what a value may do is the services' decision."""

from django.conf import settings
from django.core.validators import validate_slug
from rest_framework import serializers

from resources.choices import Outcome
from resources.models import Resource, ResourcePool
from resources.services import MAX_REASON_LENGTH
from retryops.api.fields import FieldsBuiltOnce, Flag, Input, JsonObject, MaskedJson, Text
from retryops.api.schema import NOT_BLANK


def _seconds(help_text: str) -> serializers.IntegerField:
    """A lease's length, as long as the services let one be (RETRYOPS_MAX_LEASE_SECONDS)."""
    return serializers.IntegerField(min_value=1, max_value=settings.RETRYOPS_MAX_LEASE_SECONDS, required=False,
                                    help_text=help_text)


class PoolSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    class Meta:
        model = ResourcePool
        fields = ["id", "name", "description", "resource_noun", "lease_seconds", "consume_on_success", "created_at"]
        read_only_fields = fields


class PoolCreateSerializer(Input):
    name = Text(max_length=100, validators=[validate_slug], help_text="Letters, digits, hyphens and underscores; "
                                                                      "unique.")
    description = Text(required=False, allow_blank=True)
    resource_noun = Text(max_length=40, required=False, help_text="What one resource is called: account, number.")
    lease_seconds = _seconds("How long a claim lasts without a heartbeat (default 300).")
    consume_on_success = Flag(required=False, help_text="A resource used successfully is done, not returned.")


class ResourceSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    """A resource as anyone who may read it sees it; never its lease token (the holder's to
    release with)."""

    pool = serializers.CharField(source="pool.name", read_only=True)
    attributes = MaskedJson(read_only=True, help_text="Attributes handed to flows; the values of secret keys "
                                                      "(passwords, tokens, API keys, ...) read \"******\". Sent back "
                                                      "unchanged in a PATCH, a masked value keeps the secret.")

    class Meta:
        model = Resource
        fields = [
            "id", "pool", "key", "label", "attributes", "state", "lease_holder", "leased_at", "leased_until",
            "lease_kind", "failure_count", "success_count", "consecutive_failures", "last_failure_reason",
            "last_failure_category", "last_failure_signature", "last_failure_at", "last_success_at",
            "quarantine_reason", "quarantined_at", "probe_after", "created_at",
        ]
        read_only_fields = fields


class LeaseSerializer(ResourceSerializer):
    """A claimed resource, with the lease token that releases it and extends its lease, and the
    lease's fencing token: one more at every grant of the resource, for the holder to send with
    its side effects (docs/concepts.md, "Exactly-once side effects")."""

    class Meta(ResourceSerializer.Meta):
        fields = [*ResourceSerializer.Meta.fields, "lease_token", "fencing_token"]
        read_only_fields = fields


class ResourceCreateSerializer(Input):
    pool = Text(help_text="The pool's name.")
    key = Text(max_length=200, help_text="Unique within its pool; what operators and systems name it by.")
    label = Text(max_length=200, required=False, allow_blank=True)
    attributes = JsonObject(required=False, help_text="Non-secret attributes handed to flows.")


# Written by the services only; a PATCH naming one is refused, saying which action writes it.
SERVICE_OWNED = frozenset(ResourceSerializer.Meta.fields) - {"label", "attributes"} | {"lease_token", "fencing_token"}


class ResourcePatchSerializer(Input):
    """Label and attributes; any other field is refused by name (state changes through the actions)."""

    label = Text(max_length=200, required=False, allow_blank=True)
    attributes = JsonObject(required=False, help_text="A JSON merge patch (RFC 7396) of the attributes: the keys "
                                                      "sent are set, a key sent as null is removed, an object is "
                                                      "merged the same way, the others stay.")

    def unknown_field(self, name):
        if name in SERVICE_OWNED:
            return ("written by the services only: change it through the resource's actions (claim, release, reset, "
                    "quarantine, unquarantine, retry)")
        return "not a field of a resource: only label and attributes can be changed"


class ClaimNextSerializer(Input):
    pool = Text(help_text="The pool's name.")
    holder = Text(max_length=200, help_text="Who holds the lease: your worker's or task's name.")
    lease_seconds = _seconds("How long the lease lasts without a heartbeat (default: the pool's).")
    details = JsonObject(required=False, help_text="Kept with the claim in the resource's timeline.")


class ClaimSerializer(Input):
    holder = Text(max_length=200, help_text="Who holds the lease: your worker's or task's name.")
    strict = Flag(default=True, help_text="true (the default): this resource or a 409 saying why not; false: "
                                          "another one of its pool when this one cannot be had.")
    lease_seconds = _seconds("How long the lease lasts without a heartbeat (default: the pool's).")
    details = JsonObject(required=False, help_text="Kept with the claim in the resource's timeline.")


class ReleaseSerializer(Input):
    lease_token = Text(max_length=100, help_text="The token the claim answered.")
    outcome = serializers.ChoiceField(choices=Outcome.choices)
    error = Text(required=False, allow_blank=True, help_text="What failed (needed with outcome failure): its "
                                                              "class and message, e.g. TimeoutError: read timed out.")
    details = JsonObject(required=False, help_text="Kept with the release in the resource's timeline.")

    # The service refuses a failure without its error.
    body_rules = {"if": {"required": ["outcome"], "properties": {"outcome": {"const": Outcome.FAILURE}}},
                  "then": {"required": ["error"], "properties": {"error": {"pattern": NOT_BLANK}}}}


class HeartbeatSerializer(Input):
    lease_token = Text(max_length=100, help_text="The token the claim answered.")
    seconds = _seconds("The lease ends this long from now (default: the pool's lease length).")


class ReasonSerializer(Input):
    reason = Text(allow_blank=True, default="", max_length=MAX_REASON_LENGTH,
                  help_text="Why, for the timeline and the audit log.")


class QuarantineSerializer(Input):
    reason = Text(max_length=MAX_REASON_LENGTH, help_text="Why it is taken out of rotation.")
