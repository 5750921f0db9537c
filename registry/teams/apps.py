"""Django app configuration for teams, grants, access requests and agent tokens."""

from django.apps import AppConfig


class TeamsConfig(AppConfig):
    name = "registry.teams"
    label = "teams"
    verbose_name = "Teams and access"
