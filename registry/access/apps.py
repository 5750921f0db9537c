"""Django app configuration for the access rules: an app (without models) for its admin view,
template tags and the `access_report` command."""

from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "registry.access"
    label = "access"
    verbose_name = "Access"
