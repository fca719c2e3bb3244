from compensation import admin_notifications  # noqa: F401
