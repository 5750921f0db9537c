"""The operations app's Django app (probes, metrics and the operators' commands; no models)."""

from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "registry.operations"
    label = "operations"
    verbose_name = "Toolroom operations"
