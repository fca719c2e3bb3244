from django.apps import AppConfig


class CompensationConfig(AppConfig):
    name = "compensation"
    verbose_name = "Dead letters and work orders"

    def ready(self):
        from compensation import receivers  # noqa: F401 (connects them)
