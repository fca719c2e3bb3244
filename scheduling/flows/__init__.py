"""The flow registry. A flow is a callable `flow(context) -> JSON-able result` that runs one
business instance with one claimed resource, and raises to fail. Flows come from
settings.RETRYOPS_FLOWS ({name: dotted path}) and from the @flow decorator."""

from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.utils.module_loading import import_string
from django.utils.translation import gettext as _

from scheduling.errors import FlowNotFound

_registry: dict[str, Callable] = {}


@dataclass
class FlowContext:
    """What a flow gets: the payload, the resource it runs with, and who it is.

    For side effects outside RetryOps (docs/concepts.md, "Exactly-once side effects"): call `check_lease()`
    just before each one (it raises LeaseMismatch once the lease is gone or has run out), and
    send the upstream `idempotency_key` (the business instance's: the same for every attempt and
    every rerun of it) and `fencing_token` (one more at every grant of this resource, so an
    upstream that keeps the highest it has seen per resource can refuse a paused holder)."""

    task_id: int
    attempt: int
    payload: dict
    resource_key: str
    resource_attributes: dict = field(default_factory=dict)
    idempotency_key: str = ""
    lease_token: str = ""
    fencing_token: int = 0
    heartbeat: Callable[[], None] = lambda: None
    check_lease: Callable[[], None] = lambda: None


def flow(name: str):
    """Register the decorated callable as the flow `name`."""

    def register(func: Callable) -> Callable:
        _registry[name] = func
        return func

    return register


def loaded_flows() -> list[str]:
    """The flows get_flow finds without importing anything (decorated, or imported once already)."""
    return list(_registry)


def known_flows() -> list[str]:
    return sorted(set(_registry) | set(getattr(settings, "RETRYOPS_FLOWS", {})))


def get_flow(name: str) -> Callable:
    if name in _registry:
        return _registry[name]
    path = getattr(settings, "RETRYOPS_FLOWS", {}).get(name)
    if path is None:
        raise FlowNotFound(_("unknown flow %(name)r; known flows: %(flows)s") % {
            "name": name, "flows": ", ".join(known_flows()) or _("none")}, flow=name)
    try:
        func = import_string(path)
    except ImportError as exc:
        raise FlowNotFound(_("flow %(name)r points at %(path)r, which cannot be imported: %(error)s") % {
            "name": name, "path": path, "error": exc}, flow=name) from None
    _registry[name] = func
    return func
