"""Django app configuration for the catalogue; connects the visibility-change receiver."""

from django.apps import AppConfig


class CatalogueConfig(AppConfig):
    name = "registry.catalogue"
    label = "catalogue"
    verbose_name = "Catalogue"

    def ready(self) -> None:
        from registry.catalogue import receivers  # noqa: F401, PLC0415
