"""Toolroom's OAuth 2.1 authorization server for people's MCP clients (docs/authentication.md)."""

from django.apps import AppConfig


class OauthConfig(AppConfig):
    name = "registry.oauth"
    label = "oauth"
    verbose_name = "People's apps (OAuth)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from registry.oauth import receivers  # noqa: F401, PLC0415 (connects the receivers)
