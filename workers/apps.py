"""Django app configuration for the data plane (its management commands live here)."""

from django.apps import AppConfig


class WorkersConfig(AppConfig):
    name = "workers"
    label = "workers"
    verbose_name = "Workers"
