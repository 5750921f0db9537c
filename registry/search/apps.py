"""Django app configuration for tool search; connects the receiver that reindexes edited servers."""

from django.apps import AppConfig


class SearchConfig(AppConfig):
    name = "registry.search"
    label = "search"
    verbose_name = "Tool search"

    def ready(self) -> None:
        from registry.search import receivers  # noqa: F401, PLC0415
