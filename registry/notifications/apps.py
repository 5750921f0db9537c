"""The notifications app; its receiver turns access request changes into outbox rows."""

from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "registry.notifications"
    label = "notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        from registry.notifications import receivers  # noqa: F401, PLC0415
