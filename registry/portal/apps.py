"""The portal's Django app."""

from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "registry.portal"
    label = "portal"
    verbose_name = "Team portal"
