"""Django app configuration for MCP servers and tools."""

from django.apps import AppConfig


class ServersConfig(AppConfig):
    name = "registry.servers"
    label = "servers"
    verbose_name = "MCP servers"
