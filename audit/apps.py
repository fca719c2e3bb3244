from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The bottom layer: every app writes to it, it imports none of them."""

    name = "audit"
    verbose_name = "Audit log"
