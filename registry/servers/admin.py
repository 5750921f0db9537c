"""The vetting workplace: servers, tools and the audit trail in the Django admin.

Every decision made here goes through `registry.servers.services`, exactly as the API and the
management commands do; the admin only gathers input and shows results.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from registry.audit.models import AuditEvent
from registry.audit.selectors import audit_events_for_server
from registry.core.canonical import pretty_json
from registry.core.errors import ApplicationError
from registry.core.secret_fields import mask_mapping
from registry.gateway.admin import gateway_policy_summary
from registry.servers import services
from registry.servers.admin_forms import (
    McpServerAdminForm,
    PermissionClassForm,
    ReviewDecisionForm,
    ToolApprovalForm,
    ToolRevokeForm,
)
from registry.servers.admin_import import import_servers_view
from registry.servers.admin_operations import (
    fleet_status_view,
    operate,
    operate_view,
    server_operations_context,
)
from registry.servers.models import (
    ApprovalState,
    Category,
    Health,
    McpServer,
    ReviewStatus,
    ServerStatus,
    Tool,
    ToolApproval,
)
from registry.servers.policy import TIER_POLICIES, allowed_network_modes, tier_policy
from registry.servers.selectors import server_list_with_tool_counts, tool_definition_diff

TOOLS_SHOWN_ON_SERVER_PAGE = 200

_BADGE_COLOURS = {
    ReviewStatus.DRAFT: "#777",
    ReviewStatus.PENDING_REVIEW: "#b26b00",
    ReviewStatus.APPROVED: "#1a7f37",
    ReviewStatus.REJECTED: "#b42318",
    ReviewStatus.SUSPENDED: "#b42318",
    ReviewStatus.RETIRED: "#555",
    Health.UNKNOWN: "#777",
    Health.HEALTHY: "#1a7f37",
    Health.DEGRADED: "#b26b00",
    Health.UNHEALTHY: "#b42318",
    ApprovalState.UNAPPROVED: "#b26b00",
    ApprovalState.APPROVED: "#1a7f37",
    ApprovalState.CHANGED: "#b42318",
    ApprovalState.REVOKED: "#555",
}


def badge(value: str, label: str) -> SafeString:
    colour = _BADGE_COLOURS.get(value, "#555")  # type: ignore[call-overload]
    return format_html(
        '<span style="color:#fff;background:{};padding:1px 6px;border-radius:8px;'
        'white-space:nowrap">{}</span>',
        colour,
        label,
    )


@admin.register(Category)
class CategoryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["name", "slug", "description"]
    search_fields = ["name", "slug"]

    def get_prepopulated_fields(self, request: HttpRequest, obj: Category | None = None) -> Any:
        return {} if obj is not None else {"slug": ("name",)}

    def get_readonly_fields(self, request: HttpRequest, obj: Category | None = None) -> Any:
        # Agents filter their catalogue by the slug: it stays what it was created as.
        return ("slug",) if obj is not None else ()

    def save_model(self, request: HttpRequest, obj: Category, form: Any, change: bool) -> None:
        """Through the services: audited, and catalogues showing the category follow a rename."""
        data = form.cleaned_data
        if change:
            services.category_update(
                actor=request.user,
                category=obj,
                name=data["name"],
                description=data.get("description", ""),
            )
        else:
            created = services.category_create(
                actor=request.user,
                slug=data["slug"],
                name=data["name"],
                description=data.get("description", ""),
            )
            obj.pk = created.pk


class HealthFilter(admin.SimpleListFilter):
    title = "health"
    parameter_name = "health"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(Health.choices)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value():
            return queryset.filter(status__health=self.value())
        return queryset


# (action, label, whether a reason/note is asked for)
SERVER_DECISIONS: list[tuple[str, str]] = [
    ("submit", "Submit for review"),
    ("approve", "Approve"),
    ("reject", "Reject"),
    ("suspend", "Suspend"),
    ("retire", "Retire"),
]
_DECISION_SERVICES: dict[str, Callable[..., McpServer]] = {
    "submit": lambda actor, server, reason: services.server_submit_for_review(
        actor=actor, server=server
    ),
    "approve": lambda actor, server, reason: services.server_approve(
        actor=actor, server=server, note=reason
    ),
    "reject": lambda actor, server, reason: services.server_reject(
        actor=actor, server=server, reason=reason
    ),
    "suspend": lambda actor, server, reason: services.server_suspend(
        actor=actor, server=server, reason=reason
    ),
    "retire": lambda actor, server, reason: services.server_retire(
        actor=actor, server=server, reason=reason
    ),
}


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = McpServerAdminForm
    change_form_template = "admin/servers/mcpserver/change_form.html"
    change_list_template = "admin/servers/mcpserver/change_list.html"
    list_display = [
        "name",
        "category",
        "tier",
        "status_badge",
        "health_badge",
        "tools_total",
        "tools_approved",
        "tools_awaiting",
    ]
    list_filter = [
        "review_status",
        "trust_tier",
        "isolation",
        "transport",
        HealthFilter,
        "category",
        "data_sensitivity",
    ]
    search_fields = ["name", "slug", "description", "package_identifier", "url"]
    list_select_related = ["category", "status"]
    prepopulated_fields = {"slug": ("name",)}
    readonly_fields = [
        "review_status",
        "review_note",
        "reviewed_by",
        "reviewed_at",
        "tier_policy_summary",
        "gateway",
    ]
    actions = [
        "discover_selected",
        "check_health_selected",
        "start_selected",
        "stop_selected",
        "submit_selected",
        "approve_selected",
        "reject_selected",
        "suspend_selected",
        "retire_selected",
    ]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "name",
                    "slug",
                    "description",
                    "category",
                    "version",
                    "homepage_url",
                    "repository_url",
                ]
            },
        ),
        ("Review", {"fields": ["review_status", "review_note", "reviewed_by", "reviewed_at"]}),
        (
            "Launch",
            {
                "fields": [
                    "transport",
                    "command",
                    "working_directory",
                    "url",
                    "env_text",
                    "headers_text",
                    "package_registry",
                    "package_identifier",
                    "package_version",
                    "image",
                ]
            },
        ),
        (
            "Trust and policy",
            {
                "fields": [
                    "trust_tier",
                    "tier_policy_summary",
                    "data_sensitivity",
                    "isolation",
                    "network_mode",
                    "egress_allowlist",
                    "memory_limit_mb",
                    "cpu_limit",
                    "pids_limit",
                    "gateway",
                ]
            },
        ),
        (
            "Health checks and lifecycle",
            {
                "fields": [
                    "health_check_method",
                    "health_check_tool",
                    "health_check_arguments",
                    "health_check_interval_seconds",
                    "health_check_timeout_seconds",
                    "health_failure_threshold",
                    "auto_start",
                    "restart_policy",
                    "restart_max_attempts",
                ]
            },
        ),
    ]

    # --- list -----------------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[McpServer]:
        return server_list_with_tool_counts()

    @admin.display(description="Tier", ordering="trust_tier")
    def tier(self, obj: McpServer) -> str:
        return obj.get_trust_tier_display()

    @admin.display(description="Status", ordering="review_status")
    def status_badge(self, obj: McpServer) -> SafeString:
        return badge(obj.review_status, obj.get_review_status_display())

    @admin.display(description="Health", ordering="status__health")
    def health_badge(self, obj: McpServer) -> SafeString:
        status = getattr(obj, "status", None)
        health = status.health if status else Health.UNKNOWN
        return badge(health, Health(health).label)

    @admin.display(description="Tools", ordering="tools_total")
    def tools_total(self, obj: McpServer) -> int:
        return obj.tools_total  # type: ignore[attr-defined,no-any-return]

    @admin.display(description="Approved", ordering="tools_approved")
    def tools_approved(self, obj: McpServer) -> int:
        return obj.tools_approved  # type: ignore[attr-defined,no-any-return]

    @admin.display(description="Awaiting", ordering="tools_awaiting")
    def tools_awaiting(self, obj: McpServer) -> SafeString | int:
        count: int = obj.tools_awaiting  # type: ignore[attr-defined]
        if not count:
            return 0
        url = reverse("admin:servers_tool_changelist")
        return format_html(
            '<a href="{}?server__id__exact={}&amp;removed=present&amp;approval_state__exact={}">'
            "{}</a>",
            url,
            obj.pk,
            ApprovalState.UNAPPROVED,
            count,
        )

    @admin.display(description="Gateway")
    def gateway(self, obj: McpServer) -> SafeString:
        return gateway_policy_summary(obj)

    @admin.display(description="What the tier allows")
    def tier_policy_summary(self, obj: McpServer) -> SafeString:
        rows = []
        for policy in TIER_POLICIES.values():
            marker = "→ " if obj.pk and policy.tier == obj.trust_tier else ""
            rows.append(
                format_html(
                    "<tr><td>{}{}</td><td>{}</td><td>{}</td><td>{} MB, {} CPU, {} pids</td>"
                    "<td>{}</td></tr>",
                    marker,
                    policy.tier.label,
                    ", ".join(i.label for i in policy.isolations),
                    ", ".join(m.value for m in policy.network_modes),
                    policy.max_memory_mb,
                    policy.max_cpus,
                    policy.max_pids,
                    policy.summary,
                )
            )
        return format_html(
            '<table class="tier-policy"><tr><th>Tier</th><th>May run as</th><th>Networks</th>'
            "<th>Limits (max)</th><th></th></tr>{}</table>",
            SafeString("".join(rows)),
        )

    # --- saving through the services ----------------------------------------------------------

    def save_model(self, request: HttpRequest, obj: McpServer, form: Any, change: bool) -> None:
        try:
            if change:
                services.server_update(
                    actor=request.user, server=obj, changes=form.server_fields(changed_only=True)
                )
            else:
                created = services.server_create(
                    actor=request.user, **form.server_fields(changed_only=False)
                )
                obj.pk = created.pk
        except ApplicationError as exc:
            messages.error(request, exc.message)
            request._toolroom_save_failed = True  # type: ignore[attr-defined]

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """Nothing related is edited on this page; tools change through their own services."""

    def response_add(
        self, request: HttpRequest, obj: McpServer, post_url_continue: Any = None
    ) -> HttpResponse:
        if getattr(request, "_toolroom_save_failed", False):
            return HttpResponseRedirect(request.path)
        return super().response_add(request, obj, post_url_continue)

    def response_change(self, request: HttpRequest, obj: McpServer) -> HttpResponse:
        if getattr(request, "_toolroom_save_failed", False):
            return HttpResponseRedirect(request.path)
        return super().response_change(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: McpServer | None = None) -> bool:
        # Servers are retired, never deleted, once they left draft: their trail must stay.
        if obj is not None and obj.review_status != ReviewStatus.DRAFT:
            return False
        return super().has_delete_permission(request, obj)

    # --- the server page --------------------------------------------------------------------

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        server = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if server is not None:
            context.update(self._server_page_context(request, server))
        return super().change_view(request, object_id, form_url, context)

    def _server_page_context(self, request: HttpRequest, server: McpServer) -> dict[str, Any]:
        tools = list(
            Tool.objects.filter(server=server).order_by("removed_at", "name")[
                :TOOLS_SHOWN_ON_SERVER_PAGE
            ]
        )
        status = ServerStatus.objects.filter(server=server).first()
        can_review = request.user.has_perm("servers.review_mcpserver")
        decisions = [
            (action, label)
            for action, label in SERVER_DECISIONS
            if can_review and services.server_transition_allowed(server, action)
        ]
        return {
            "server_status": status,
            "server_tools": tools,
            "server_tools_count": Tool.objects.filter(server=server).count(),
            "server_tools_limit": TOOLS_SHOWN_ON_SERVER_PAGE,
            "server_resources": list(server.resources.all()[:200]),
            "server_prompts": list(server.prompts.all()[:200]),
            "server_audit_events": list(audit_events_for_server(server_id=server.pk)),
            "server_decisions": decisions,
            "launch_summary": _launch_summary(server),
            "allowed_network_modes": allowed_network_modes(
                server.trust_tier, server.data_sensitivity
            ),
            "tier_policy": tier_policy(server.trust_tier),
            **server_operations_context(request, server, status),
        }

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        custom = [
            path(
                "<path:object_id>/decide/<str:action>/",
                self.admin_site.admin_view(self.decision_view),
                name="{}_{}_decide".format(*info),
            ),
            path(
                "import/",
                self.admin_site.admin_view(self.import_view),
                name="{}_{}_import".format(*info),
            ),
            path(
                "<path:object_id>/operate/<str:operation>/",
                self.admin_site.admin_view(self.operate_view),
                name="{}_{}_operate".format(*info),
            ),
            path(
                "fleet/",
                self.admin_site.admin_view(self.fleet_view),
                name="{}_{}_fleet".format(*info),
            ),
        ]
        return custom + super().get_urls()

    def operate_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        return operate_view(self, request, object_id, operation)

    def fleet_view(self, request: HttpRequest) -> HttpResponse:
        return fleet_status_view(self, request)

    def import_view(self, request: HttpRequest) -> HttpResponse:
        return import_servers_view(self, request)

    def decision_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        if action not in _DECISION_SERVICES:
            raise PermissionDenied
        if not request.user.has_perm("servers.review_mcpserver"):
            raise PermissionDenied
        server = get_object_or_404(McpServer, pk=object_id)
        return self._decide(request, McpServer.objects.filter(pk=server.pk), action, bulk=False)

    def _decide(
        self, request: HttpRequest, queryset: QuerySet[McpServer], action: str, *, bulk: bool
    ) -> HttpResponse:
        """Ask for the reason or note, then apply the decision to each server via the service."""
        label = dict(SERVER_DECISIONS)[action]
        servers = list(queryset)
        if request.method == "POST" and "confirm" in request.POST:
            form = ReviewDecisionForm(request.POST)
            if form.is_valid():
                reason = form.cleaned_data["reason"]
                done = 0
                for server in servers:
                    try:
                        _DECISION_SERVICES[action](request.user, server, reason)
                    except ApplicationError as exc:
                        self.message_user(request, exc.message, messages.ERROR)
                    else:
                        done += 1
                if done:
                    self.message_user(
                        request, f"{label}: done for {done} server(s).", messages.SUCCESS
                    )
                if not bulk:
                    return HttpResponseRedirect(
                        reverse("admin:servers_mcpserver_change", args=[servers[0].pk])
                    )
                return HttpResponseRedirect(reverse("admin:servers_mcpserver_changelist"))
        else:
            form = ReviewDecisionForm()
        context = {
            **self.admin_site.each_context(request),
            "title": f"{label}: {', '.join(s.name for s in servers[:5])}"
            + (f" and {len(servers) - 5} more" if len(servers) > 5 else ""),
            "opts": self.opts,
            "servers": servers,
            "form": form,
            "action": action,
            "action_label": label,
            "bulk": bulk,
            "bulk_action": f"{action}_selected",
            "selected_ids": [s.pk for s in servers],
        }
        return TemplateResponse(request, "admin/servers/review_decision.html", context)

    @admin.action(description="Discover now", permissions=["change"])
    def discover_selected(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        operate(request, list(queryset), "discover")

    @admin.action(description="Check health now", permissions=["change"])
    def check_health_selected(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        operate(request, list(queryset), "check")

    @admin.action(description="Start warm runtimes", permissions=["change"])
    def start_selected(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        operate(request, list(queryset), "start")

    @admin.action(description="Stop warm runtimes", permissions=["change"])
    def stop_selected(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        operate(request, list(queryset), "stop")

    def has_review_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("servers.review_mcpserver")

    def _bulk(
        self, request: HttpRequest, queryset: QuerySet[McpServer], action: str
    ) -> HttpResponse | None:
        if not self.has_review_permission(request):
            raise PermissionDenied
        return self._decide(
            request, McpServer.objects.filter(pk__in=queryset.values("pk")), action, bulk=True
        )

    @admin.action(description="Submit selected servers for review", permissions=["review"])
    def submit_selected(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> Any:
        return self._bulk(request, queryset, "submit")

    @admin.action(description="Approve selected servers", permissions=["review"])
    def approve_selected(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> Any:
        return self._bulk(request, queryset, "approve")

    @admin.action(description="Reject selected servers", permissions=["review"])
    def reject_selected(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> Any:
        return self._bulk(request, queryset, "reject")

    @admin.action(description="Suspend selected servers", permissions=["review"])
    def suspend_selected(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> Any:
        return self._bulk(request, queryset, "suspend")

    @admin.action(description="Retire selected servers", permissions=["review"])
    def retire_selected(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> Any:
        return self._bulk(request, queryset, "retire")


def _launch_summary(server: McpServer) -> dict[str, Any]:
    """The launch spec as shown to people: secrets masked."""
    return {
        "transport": server.get_transport_display(),
        "command": server.command,
        "url": server.url,
        "env": mask_mapping(server.env or {}),
        "headers": mask_mapping(server.headers or {}),
        "package": (
            f"{server.get_package_registry_display()} {server.package_identifier} "
            f"{server.package_version}"
            if server.package_registry
            else ""
        ),
        "image": server.image,
        "isolation": server.get_isolation_display(),
        "sandboxed": server.isolation == "sandbox" and server.transport == "stdio",
        "network": server.get_network_mode_display(),
        "egress_allowlist": list(server.egress_allowlist or []),
        "limits": f"{server.effective_memory_limit_mb} MB, {server.effective_cpu_limit} CPU, "
        f"{server.effective_pids_limit} processes",
    }


class RemovedFilter(admin.SimpleListFilter):
    title = "offered"
    parameter_name = "removed"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("present", "Still offered"), ("removed", "Removed by the server")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "present":
            return queryset.filter(removed_at__isnull=True)
        if self.value() == "removed":
            return queryset.filter(removed_at__isnull=False)
        return queryset


class FindingsFilter(admin.SimpleListFilter):
    title = "scanner findings"
    parameter_name = "findings"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Has findings"), ("no", "No findings")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            return queryset.exclude(findings=[])
        if self.value() == "no":
            return queryset.filter(findings=[])
        return queryset


@admin.register(Tool)
class ToolAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    change_form_template = "admin/servers/tool/change_form.html"
    list_display = [
        "name",
        "server",
        "permission_class",
        "approval_badge",
        "findings_count",
        "short_hash",
        "last_seen_at",
        "offered",
    ]
    list_filter = [
        "approval_state",
        "permission_class",
        RemovedFilter,
        FindingsFilter,
        "server__review_status",
        "server",
    ]
    search_fields = ["name", "title", "description", "server__name", "server__slug"]
    list_select_related = ["server"]
    actions = ["approve_selected", "revoke_selected"]
    readonly_fields = (
        "server",
        "name",
        "title",
        "description",
        "definition_hash",
        "permission_class_derived",
        "permission_class",
        "approval_state",
        "first_seen_at",
        "last_seen_at",
        "removed_at",
    )
    fields = readonly_fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tools come from discovery

    def has_delete_permission(self, request: HttpRequest, obj: Tool | None = None) -> bool:
        return False  # a tool's history is evidence

    def has_change_permission(self, request: HttpRequest, obj: Tool | None = None) -> bool:
        return False  # decisions have their own forms below

    @admin.display(description="Approval", ordering="approval_state")
    def approval_badge(self, obj: Tool) -> SafeString:
        state = obj.approval_state
        if state == ApprovalState.APPROVED and not obj.is_approved:
            state = ApprovalState.CHANGED
        return badge(state, ApprovalState(state).label)

    @admin.display(description="Findings")
    def findings_count(self, obj: Tool) -> SafeString | int:
        if not obj.findings:
            return 0
        return format_html('<strong style="color:#b42318">{}</strong>', len(obj.findings))

    @admin.display(description="Hash")
    def short_hash(self, obj: Tool) -> SafeString:
        return format_html("<code>{}</code>", obj.definition_hash[:12])

    @admin.display(description="Offered", boolean=True)
    def offered(self, obj: Tool) -> bool:
        return obj.removed_at is None

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        tool = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if tool is not None:
            can_approve = request.user.has_perm("servers.approve_tool")
            context.update(
                {
                    "tool": tool,
                    "definition_json": pretty_json(tool.definition),
                    "definition_diff": tool_definition_diff(tool=tool),
                    "approvals": list(ToolApproval.objects.filter(tool=tool)[:50]),
                    "can_approve": can_approve and not tool.is_approved and tool.removed_at is None,
                    "can_revoke": can_approve and tool.approval_state == ApprovalState.APPROVED,
                    "approval_form": ToolApprovalForm(
                        initial={"expected_hash": tool.definition_hash}
                    ),
                    "revoke_form": ToolRevokeForm(),
                    "permission_form": PermissionClassForm(
                        initial={"permission_class": tool.permission_class_override}
                    ),
                    "audit_events": list(
                        AuditEvent.objects.filter(target_type="tool", target_id=str(tool.pk))[:50]
                    ),
                }
            )
        return super().change_view(request, object_id, form_url, context)

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path(
                "<path:object_id>/approve/",
                self.admin_site.admin_view(self.approve_view),
                name="{}_{}_approve".format(*info),
            ),
            path(
                "<path:object_id>/revoke/",
                self.admin_site.admin_view(self.revoke_view),
                name="{}_{}_revoke".format(*info),
            ),
            path(
                "<path:object_id>/permission-class/",
                self.admin_site.admin_view(self.permission_class_view),
                name="{}_{}_permission_class".format(*info),
            ),
            *super().get_urls(),
        ]

    def _tool_for_decision(self, request: HttpRequest, object_id: str) -> Tool:
        if request.method != "POST" or not request.user.has_perm("servers.approve_tool"):
            raise PermissionDenied
        return get_object_or_404(Tool, pk=object_id)

    def _back(self, tool: Tool) -> HttpResponseRedirect:
        return HttpResponseRedirect(reverse("admin:servers_tool_change", args=[tool.pk]))

    def approve_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        tool = self._tool_for_decision(request, object_id)
        form = ToolApprovalForm(request.POST)
        if not form.is_valid():
            self.message_user(request, "The approval form was incomplete.", messages.ERROR)
            return self._back(tool)
        try:
            services.tool_approve(
                actor=request.user,
                tool=tool,
                note=form.cleaned_data["note"],
                acknowledge_findings=form.cleaned_data["acknowledge_findings"],
                expected_hash=form.cleaned_data["expected_hash"],
            )
        except ApplicationError as exc:
            self.message_user(request, exc.message, messages.ERROR)
        else:
            self.message_user(
                request, f"Approved {tool} at its current definition.", messages.SUCCESS
            )
        return self._back(tool)

    def revoke_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        tool = self._tool_for_decision(request, object_id)
        form = ToolRevokeForm(request.POST)
        try:
            if not form.is_valid():
                raise ApplicationError("Give a reason for revoking the approval.")
            services.tool_revoke(actor=request.user, tool=tool, reason=form.cleaned_data["reason"])
        except ApplicationError as exc:
            self.message_user(request, exc.message, messages.ERROR)
        else:
            self.message_user(request, f"Revoked the approval of {tool}.", messages.SUCCESS)
        return self._back(tool)

    def permission_class_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        tool = self._tool_for_decision(request, object_id)
        form = PermissionClassForm(request.POST)
        try:
            if not form.is_valid():
                raise ApplicationError("Choose a permission class.")
            updated = services.tool_set_permission_class(
                actor=request.user,
                tool=tool,
                permission_class=form.cleaned_data["permission_class"],
            )
        except ApplicationError as exc:
            self.message_user(request, exc.message, messages.ERROR)
        else:
            self.message_user(
                request, f"{updated} is a {updated.permission_class} tool now.", messages.SUCCESS
            )
        return self._back(tool)

    def has_approve_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("servers.approve_tool")

    @admin.action(
        description="Approve selected tools at their current definitions", permissions=["approve"]
    )
    def approve_selected(self, request: HttpRequest, queryset: QuerySet[Tool]) -> None:
        if not request.user.has_perm("servers.approve_tool"):
            raise PermissionDenied
        result = services.tools_approve_bulk(actor=request.user, tools=queryset)
        if result.approved:
            self.message_user(
                request, f"Approved {len(result.approved)} tool(s).", messages.SUCCESS
            )
        for tool, reason in result.skipped:
            self.message_user(request, f"Not approved: {tool}: {reason}", messages.WARNING)

    @admin.action(description="Revoke the approval of selected tools", permissions=["approve"])
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[Tool]) -> Any:
        if not request.user.has_perm("servers.approve_tool"):
            raise PermissionDenied
        if "confirm" in request.POST:
            form = ToolRevokeForm(request.POST)
            if form.is_valid():
                revoked = 0
                for tool in queryset:
                    try:
                        services.tool_revoke(
                            actor=request.user, tool=tool, reason=form.cleaned_data["reason"]
                        )
                    except ApplicationError as exc:
                        self.message_user(request, exc.message, messages.WARNING)
                    else:
                        revoked += 1
                if revoked:
                    self.message_user(request, f"Revoked {revoked} approval(s).", messages.SUCCESS)
                return None
        else:
            form = ToolRevokeForm()
        return TemplateResponse(
            request,
            "admin/servers/tool_revoke.html",
            {
                **self.admin_site.each_context(request),
                "title": "Revoke tool approvals",
                "opts": self.opts,
                "tools": list(queryset.select_related("server")),
                "form": form,
            },
        )


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["created_at", "actor_label", "action", "target_repr", "server", "summary"]
    list_filter = ["action", "target_type"]
    search_fields = ["actor_label", "action", "target_repr", "summary"]
    list_select_related = ["server"]
    date_hierarchy = "created_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AuditEvent | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AuditEvent | None = None) -> bool:
        return False
