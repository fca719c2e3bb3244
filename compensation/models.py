from compensation.notifications_models import Notification  # noqa: F401
