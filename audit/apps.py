from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AuditConfig(AppConfig):
    """The bottom layer: every app writes to it, it imports none of them."""

    name = "audit"
    verbose_name = _("Audit log")

    def ready(self):
        from audit import receivers

        receivers.connect()
