"""Admin pages of the gateway: each server's gateway policy, and the call audit."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from registry.gateway.models import GatewayMode, IsolationScope, ServerGatewayPolicy, ToolCall
from registry.gateway.services import POLICY_FIELDS, server_gateway_policy_set
from registry.servers.models import McpServer


@admin.register(ServerGatewayPolicy)
class ServerGatewayPolicyAdmin(admin.ModelAdmin[ServerGatewayPolicy]):
    """How the gateway may reach a server; saved through the service (audited, and announced so
    the next call checks see it)."""

    list_display = [
        "server",
        "mode",
        "isolation_scope",
        "call_deadline_seconds",
        "max_concurrency",
        "queue_limit",
        "pass_identity",
    ]
    list_filter = ["mode", "isolation_scope", "pass_identity"]
    search_fields = ["server__name", "server__slug"]
    list_select_related = ["server"]
    fields = ["server", *POLICY_FIELDS]
    autocomplete_fields = ["server"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return ["server"] if obj is not None else []

    def save_model(
        self, request: HttpRequest, obj: ServerGatewayPolicy, form: Any, change: bool
    ) -> None:
        values = {name: form.cleaned_data[name] for name in POLICY_FIELDS}
        saved = server_gateway_policy_set(actor=request.user, server=obj.server, **values)
        obj.pk = saved.pk


def gateway_policy_summary(server: McpServer) -> SafeString:
    """One line for the server's page: mode, isolation scope, deadline, and where to change it."""
    policy = ServerGatewayPolicy.objects.filter(server=server).first() if server.pk else None
    mode = GatewayMode(policy.mode if policy else GatewayMode.ON_DEMAND).label
    scope = IsolationScope(policy.isolation_scope if policy else IsolationScope.TEAM).label
    deadline = policy.call_deadline_seconds if policy else 5.0
    if policy is not None:
        link = reverse("admin:gateway_servergatewaypolicy_change", args=[policy.pk])
    else:
        link = reverse("admin:gateway_servergatewaypolicy_add") + f"?server={server.pk}"
    return format_html(
        "{} &middot; isolation: {} &middot; deadline {} s{} &middot; <a href='{}'>change</a>",
        mode,
        scope,
        f"{deadline:g}",
        "" if policy else " (defaults)",
        link,
    )


@admin.register(ToolCall)
class ToolCallAdmin(admin.ModelAdmin[ToolCall]):
    """Every call through the gateway; read-only (rows are append-only)."""

    list_display = [
        "started_at",
        "name",
        "team",
        "token_name",
        "outcome",
        "error_class",
        "duration_ms",
        "via",
    ]
    list_filter = ["outcome", "via", "error_class", "team", "server_slug"]
    search_fields = ["name", "token_name", "server_slug", "tool_name", "error"]
    date_hierarchy = "started_at"
    list_select_related = ["team"]
    ordering = ["-started_at", "-id"]
    readonly_fields = [field.name for field in ToolCall._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
