"""Django app configuration for the workers (their management commands live here)."""

from django.apps import AppConfig


class WorkersConfig(AppConfig):
    name = "workers"
    label = "workers"
    verbose_name = "Workers"
