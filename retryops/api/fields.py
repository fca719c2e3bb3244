"""Serializer fields stricter than DRF's, for input from other systems: text is a JSON string
(DRF's CharField turns 12 into "12") that a text column can hold, and a JSON object is an object
PostgreSQL's jsonb can hold; and the base of every input serializer (Input), which refuses a field
it does not take. The API checks types and storability here, once (retryops.jsonsafe); the
services take typed values and refuse only what breaks a rule (BadInput)."""

import copy
from collections.abc import Mapping

from django.utils.translation import gettext as _
from drf_spectacular.extensions import OpenApiSerializerExtension
from rest_framework import serializers

from retryops.jsonsafe import UnstorableValue, check_text, refuse_unstorable
from retryops.masking import mask_secrets


class Text(serializers.CharField):
    """A JSON string without NUL characters or lone surrogates."""

    default_error_messages = {"not_text": "must be a string, got {kind}.", "unstorable": "{problem}."}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_text", kind=type(data).__name__)
        problem = check_text(data)
        if problem:
            self.fail("unstorable", problem=problem)
        return super().to_internal_value(data)


class JsonObject(serializers.JSONField):
    """A JSON object: no NaN, no infinity, no NUL, no lone surrogate, no number past 2**53."""

    default_error_messages = {"not_object": "must be a JSON object, got {kind}.", "unstorable": "{problem}."}

    def to_internal_value(self, data):
        data = super().to_internal_value(data)
        if not isinstance(data, dict):
            self.fail("not_object", kind=type(data).__name__)
        try:
            return refuse_unstorable(data, name=self.field_name)
        except UnstorableValue as exc:
            self.fail("unstorable", problem=str(exc))
        except RecursionError:
            self.fail("unstorable", problem="nested too deeply to store")


class MaskedJson(serializers.JSONField):
    """JSON answered with the values of secret keys masked (retryops.masking): attributes,
    payloads, details and results that flows get or write in full."""

    def to_representation(self, value):
        return super().to_representation(mask_secrets(value))


class Flag(serializers.BooleanField):
    """true or false, and nothing else: DRF's BooleanField also takes "yes", "on", 1 and "0"."""

    default_error_messages = {"invalid": "must be true or false."}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


# The base of every serializer that parses a request's body: a field it does not take is refused
# by name (400 bad_input), never ignored. DRF ignores it, and a typo'd `lease_secs` would then claim
# for the pool's lease length. A serializer says more about a field it refuses in `unknown_field`
# (PATCH names the action that writes a service-owned one). A comment, not a docstring: the schema
# would describe every body without a docstring of its own with it.
class Input(serializers.Serializer):
    def unknown_field(self, name: str) -> str:
        if not self.fields:
            return _("not taken here: send no body, or {}")
        return _("not a field of this request: it takes %(fields)s") % {"fields": ", ".join(self.fields)}

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: [self.unknown_field(name)] for name in unknown})
        return super().to_internal_value(data)


class FieldsBuiltOnce:
    """Mixed into a ModelSerializer that answers (a claim, a resource): its fields are built from
    the model once per class, then copied for each instance. DRF builds them again for every
    instance it serializes, reading the model's fields and each one's options: 2 ms of a claim's
    answer, as much as the claim itself. A plain field is copied shallowly (each copy is bound to
    its own serializer; nothing else of it changes); a nested serializer deeply, as DRF would."""

    _built: dict = {}

    def get_fields(self):
        built = FieldsBuiltOnce._built.get(type(self))
        if built is None:
            built = FieldsBuiltOnce._built[type(self)] = super().get_fields()
        return {name: copy.deepcopy(field) if isinstance(field, serializers.BaseSerializer) else copy.copy(field)
                for name, field in built.items()}


class InputSchema(OpenApiSerializerExtension):
    """The schema of an Input's body says what Input does: no property it does not name
    (additionalProperties: false), so a client generated from the schema cannot send one. A body
    of no fields stays undocumented (drf-spectacular drops an empty object), as before."""

    target_class = Input
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction == "request" and schema.get("properties"):
            schema["additionalProperties"] = False
        return schema
