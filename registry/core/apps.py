"""Django app configuration for Toolroom's shared core."""

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "registry.core"
    label = "core"
    verbose_name = "Toolroom core"

    def ready(self) -> None:
        from registry.core.tracing import tracing_configure  # noqa: PLC0415

        tracing_configure()  # only where an OTLP endpoint is configured
