from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class CompensationConfig(AppConfig):
    name = "compensation"
    verbose_name = _("Dead letters and work orders")
