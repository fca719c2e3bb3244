"""Notifications: the messages to the on-call (models), queued and sent with their retries
(services, jobs), one small class per channel (notifiers), and their page in the console (admin)."""
