"""Django app configuration for the audit trail."""

from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "registry.audit"
    label = "audit"
    verbose_name = "Audit trail"
