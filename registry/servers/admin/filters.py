"""The server list's filters: health, sandbox launch and last discovery."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from registry.servers.jobs.sandbox_checks import server_ids_with_sandbox_launch_warnings
from registry.servers.models import Health


class HealthFilter(admin.SimpleListFilter):
    title = "health"
    parameter_name = "health"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(Health.choices)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value():
            return queryset.filter(status__health=self.value())
        return queryset


class SandboxLaunchFilter(admin.SimpleListFilter):
    """Sandboxed servers whose command names a host path or a program their image lacks."""

    title = "sandbox launch"
    parameter_name = "sandbox_launch"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("will_fail", "Will fail in the sandbox")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "will_fail":
            return queryset.filter(pk__in=server_ids_with_sandbox_launch_warnings())
        return queryset


class DiscoveryFilter(admin.SimpleListFilter):
    title = "last discovery"
    parameter_name = "discovery"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("failed", "Failed"), ("never", "Never ran")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "failed":
            return queryset.filter(status__isnull=False).exclude(status__last_discovery_error="")
        if self.value() == "never":
            return queryset.filter(status__last_discovered_at__isnull=True)
        return queryset
