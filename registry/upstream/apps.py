"""People's upstream accounts (docs/authentication.md, "Upstream accounts")."""

from django.apps import AppConfig


class UpstreamConfig(AppConfig):
    name = "registry.upstream"
    label = "upstream"
    verbose_name = "People's upstream accounts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from registry.upstream import receivers  # noqa: F401, PLC0415 (connects the receivers)
