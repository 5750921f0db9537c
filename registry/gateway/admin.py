"""Admin pages of the gateway: each server's gateway policy (and its line on the server's page),
each team's quotas (with the limits in force and their hits), and the call audit."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from registry.core.admin_export import CSV_CHANGE_LIST_TEMPLATE, CsvExportMixin
from registry.gateway.models import TeamQuota, ToolCall
from registry.gateway.quotas import QUOTA_FIELDS, quota_defaults, quota_hits, team_quota_set
from registry.gateway.services import POLICY_FIELDS, server_gateway_policy_set
from registry.gateway.usage_admin import usage_dashboard_view
from registry.servers.admin.servers import McpServerAdmin
from registry.servers.gateway_policy import (
    DEFAULT_CALL_DEADLINE_SECONDS,
    DEFAULT_MAX_CALL_SECONDS,
    GatewayMode,
    IsolationScope,
    ServerGatewayPolicy,
)
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
        "max_call_seconds",
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


@admin.register(TeamQuota)
class TeamQuotaAdmin(admin.ModelAdmin[TeamQuota]):
    """A team's quotas at the gateway (empty: the default from settings, 0: no limit); saved
    through the service (audited, and the gateway reads them at the team's next call)."""

    list_display = ["team", *QUOTA_FIELDS]
    search_fields = ["team__name", "team__slug"]
    list_select_related = ["team"]
    fields = ["team", *QUOTA_FIELDS, "defaults", "hits"]
    autocomplete_fields = ["team"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return ["team", "defaults", "hits"] if obj is not None else ["defaults", "hits"]

    @admin.display(description="defaults (settings)")
    def defaults(self, obj: TeamQuota) -> str:
        limits = quota_defaults()
        return ", ".join(f"{name} {getattr(limits, name)}" for name in QUOTA_FIELDS)

    @admin.display(description="hits (since Redis started)")
    def hits(self, obj: TeamQuota) -> str:
        if not obj.team_id:
            return "-"
        try:
            counted = quota_hits()
        except Exception:
            return "(Redis out of reach)"
        mine = {limit: n for (team, limit), n in counted.items() if team == obj.team.slug}
        return ", ".join(f"{limit} {n}" for limit, n in sorted(mine.items())) or "none"

    def save_model(self, request: HttpRequest, obj: TeamQuota, form: Any, change: bool) -> None:
        values = {name: form.cleaned_data[name] for name in QUOTA_FIELDS}
        saved = team_quota_set(actor=request.user, team=obj.team, **values)
        obj.pk = saved.pk


def gateway_policy_summary(server: McpServer) -> SafeString:
    """One line for the server's page: mode, isolation scope, deadline, and where to change it."""
    policy = ServerGatewayPolicy.objects.filter(server=server).first() if server.pk else None
    mode = GatewayMode(policy.mode if policy else GatewayMode.ON_DEMAND).label
    scope = IsolationScope(policy.isolation_scope if policy else IsolationScope.TEAM).label
    deadline = policy.call_deadline_seconds if policy else DEFAULT_CALL_DEADLINE_SECONDS
    maximum = policy.max_call_seconds if policy else DEFAULT_MAX_CALL_SECONDS
    if policy is not None:
        link = reverse("admin:gateway_servergatewaypolicy_change", args=[policy.pk])
    else:
        link = reverse("admin:gateway_servergatewaypolicy_add") + f"?server={server.pk}"
    return format_html(
        "{} &middot; isolation: {} &middot; deadline {} s, up to {} s while the server reports "
        "progress{} &middot; <a href='{}'>change</a>",
        mode,
        scope,
        f"{deadline:g}",
        f"{max(maximum, deadline):g}",
        "" if policy else " (defaults)",
        link,
    )


McpServerAdmin.contribute_line(
    fieldset="Trust and policy", name="gateway", description="Gateway", line=gateway_policy_summary
)


@admin.register(ToolCall)
class ToolCallAdmin(CsvExportMixin, admin.ModelAdmin[ToolCall]):
    """Every call through the gateway; read-only (rows are append-only); exported as CSV with the
    list's filters."""

    change_list_template = CSV_CHANGE_LIST_TEMPLATE
    csv_columns = [
        ("started_at", "started_at"),
        ("name", "name"),
        ("server", "server_slug"),
        ("tool", "tool_name"),
        ("team", lambda call: call.team.slug if call.team else ""),
        ("role", "role_name"),
        ("token", "token_name"),
        ("person", "person_name"),
        ("client", "client_name"),
        ("via", "via"),
        ("outcome", "outcome"),
        ("error_class", "error_class"),
        ("error", "error"),
        ("duration_ms", "duration_ms"),
        ("argument_bytes", "argument_bytes"),
        ("conversation", "conversation"),
        ("definition_hash", "definition_hash"),
    ]

    list_display = [
        "started_at",
        "name",
        "team",
        "caller",  # with the role it acted in: one column fewer at 1280 px
        "upstream_identity",
        "outcome",
        "error_class",
        "duration",
        "via",
    ]
    list_filter = [
        "outcome",
        "via",
        "error_class",
        "team",
        ("person", admin.RelatedOnlyFieldListFilter),  # the people who made calls, not everyone
        "server_slug",
    ]
    search_fields = [
        "name",
        "token_name",
        "person_name",
        "client_name",
        "server_slug",
        "tool_name",
        "error",
        "upstream_subject",
    ]
    date_hierarchy = "started_at"
    list_select_related = ["team"]
    ordering = ["-started_at", "-id"]
    readonly_fields = [field.name for field in ToolCall._meta.fields]

    @admin.display(description="caller", ordering="person_name")
    def caller(self, obj: ToolCall) -> str:
        """The agent token, or the person and the app that acted for them; and the role."""
        who = (
            f"{obj.person_name} (through {obj.client_name})" if obj.person_name else obj.token_name
        )
        return f"{who} as {obj.role_name}" if obj.role_name else who

    @admin.display(description="duration", ordering="duration_ms")
    def duration(self, obj: ToolCall) -> str:
        ms = obj.duration_ms
        return f"{ms:,.0f} ms" if ms >= 10 else f"{ms:.1f} ms"

    @admin.display(description="upstream account", ordering="upstream_subject")
    def upstream_identity(self, obj: ToolCall) -> str:
        """A per-person server's call: the person's upstream account it used (never a token)."""
        if obj.upstream_account_id is None:
            return "-"
        return obj.upstream_subject or f"account #{obj.upstream_account_id}"

    def get_urls(self) -> list[URLPattern]:
        usage = path(
            "usage/",
            self.admin_site.admin_view(self.usage_view),
            name="gateway_toolcall_usage",
        )
        return [usage, *super().get_urls()]

    def usage_view(self, request: HttpRequest) -> HttpResponse:
        return usage_dashboard_view(self, request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
