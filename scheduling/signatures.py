"""Error signatures live with the resources (resources.signatures), which group a resource's
failures by them too; tasks and attempts read them from there."""

from resources.signatures import MAX_LENGTH, error_signature  # noqa: F401
