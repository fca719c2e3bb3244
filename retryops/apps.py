from django.apps import AppConfig


class RetryOpsConfig(AppConfig):
    """Project wiring above every app (settings, urls, roles, commands)."""

    name = "retryops"

    def ready(self):
        from django.contrib.auth import get_user_model
        from django.db.models.signals import m2m_changed

        from retryops.roles import make_role_members_staff

        m2m_changed.connect(make_role_members_staff, sender=get_user_model().groups.through,
                            dispatch_uid="retryops.make_role_members_staff")
