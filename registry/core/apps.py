"""Django app configuration for Toolroom's shared core."""

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "registry.core"
    label = "core"
    verbose_name = "Toolroom core"
