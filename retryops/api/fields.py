"""Serializer fields stricter than DRF's, for input from other systems: text is a JSON string
(DRF's CharField turns 12 into "12") that a text column can hold, and a JSON object is an object
PostgreSQL's jsonb can hold. What else a service refuses, it refuses itself (BadInput)."""

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
