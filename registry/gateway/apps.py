"""Django app configuration for the gateway's control plane."""

from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "registry.gateway"
    label = "gateway"
    verbose_name = "Gateway"
