"""The vetting workplace's server pages: list, form, review decisions, tools, discovery and health.

Every decision made here goes through `registry.servers.services`, exactly as the API and the
management commands do; the admin only gathers input and shows results. Apps above add their
own lines and views to the server page (`ContributedPage`: the gateway's policy line).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.db.models.functions import Lower
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from registry.core.admin_contributions import ContributedPage
from registry.core.admin_ids import object_id_or_404
from registry.core.errors import ApplicationError
from registry.core.service_admin import ServiceAdmin
from registry.servers import services
from registry.servers.admin.approval_vetting import servers_vetting
from registry.servers.admin.common import badge
from registry.servers.admin.filters import DiscoveryFilter, HealthFilter, SandboxLaunchFilter
from registry.servers.admin.forms import (
    McpServerAdminForm,
    ReviewDecisionForm,
)
from registry.servers.admin.importing import import_servers_view
from registry.servers.admin.items import review_items
from registry.servers.admin.operations import (
    discovery_status_view,
    fleet_status_view,
    operate,
    operate_view,
)
from registry.servers.admin.server_page import SERVER_DECISIONS, server_page_context
from registry.servers.admin.storage import (
    storage_seed_view,
    storage_volume_delete_view,
)
from registry.servers.importing.launcher_adoption import package_pin_record
from registry.servers.models import (
    Health,
    McpServer,
    ReviewStatus,
    Tool,
)
from registry.servers.policy import TIER_POLICIES, tier_policy
from registry.servers.selectors import (
    server_list_with_tool_counts,
    tool_review_filter,
)
from registry.servers.templatetags.hidden_text import show_hidden

if TYPE_CHECKING:
    from registry.servers.selectors import ServerWithToolCounts


@admin.register(McpServer)
class McpServerAdmin(ServiceAdmin[McpServer], ContributedPage[McpServer]):
    form = McpServerAdminForm
    change_form_template = "admin/servers/mcpserver/change_form.html"
    change_list_template = "admin/servers/mcpserver/change_list.html"
    list_display = [
        "server_name",
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
        SandboxLaunchFilter,
        DiscoveryFilter,
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
        "description_shown",
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
                    "description_shown",
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
                    "env_not_secret",
                    "headers_text",
                    "upstream_auth",
                    "person_secret_header",
                    "person_secret_prefix",
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
                    "storage",
                    "memory_limit_mb",
                    "cpu_limit",
                    "pids_limit",
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

    # Django takes expressions here (case-insensitive order); the stubs only know strings.
    ordering = [Lower("name"), "pk"]  # type: ignore[list-item]

    @admin.display(description="Name", ordering=Lower("name"))
    def server_name(self, obj: McpServer) -> str:
        return obj.name

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
    def tools_total(self, obj: ServerWithToolCounts) -> int:
        return obj.tools_total

    @admin.display(description="Approved", ordering="tools_approved")
    def tools_approved(self, obj: ServerWithToolCounts) -> int:
        return obj.tools_approved

    @admin.display(description="Awaiting", ordering="tools_awaiting")
    def tools_awaiting(self, obj: ServerWithToolCounts) -> SafeString | int:
        """Offered and not approved at their current definition, for a server in review or in
        use: the fleet page and the review queue count the same tools."""
        count = obj.tools_awaiting
        if count is None:
            why = (
                "a draft's tools are counted once it is submitted"
                if obj.review_status == ReviewStatus.DRAFT
                else "the tools of a retired or rejected server cannot be approved"
            )
            return format_html(
                '<span class="awaiting-none" title="Not counted: {}">&ndash;</span>', why
            )
        if not count:
            return 0
        url = reverse("admin:servers_tool_changelist")
        return format_html(
            '<a href="{}?server__id__exact={}&amp;review=awaiting">{}</a>', url, obj.pk, count
        )

    @admin.display(description="Description as shown")
    def description_shown(self, obj: McpServer) -> SafeString:
        """The description with its hidden characters marked: the text box shows none of them
        (tag characters, zero-width and bidirectional controls)."""
        return show_hidden(obj.description) if obj.pk else show_hidden("")

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
        if change:
            saved = self.run_service(
                request,
                lambda: services.server_update(
                    actor=request.user, server=obj, changes=form.server_fields(changed_only=True)
                ),
            )
        else:
            saved = self.run_service(
                request,
                lambda: services.server_create(
                    actor=request.user, **form.server_fields(changed_only=False)
                ),
            )
            if saved is not None:
                obj.pk = saved.pk
        if saved is None:
            return
        # A launcher command (npx, uvx, docker run) became a pinned package or image reference.
        if getattr(form, "launcher_pin", None) is not None:
            package_pin_record(
                actor=request.user, server=McpServer.objects.get(pk=obj.pk), pin=form.launcher_pin
            )
        for note in getattr(form, "launcher_notes", []):
            messages.warning(request, note)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """Nothing related is edited on this page; tools change through their own services."""

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
            context.update(server_page_context(request, server))
        return super().change_view(request, object_id, form_url, context)

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        custom = [
            path(
                "<path:object_id>/decide/<str:action>/",
                self.admin_site.admin_view(self.decision_view),
                name="{}_{}_decide".format(*info),
            ),
            path(
                "<path:object_id>/discovery/<int:run_id>/status/",
                self.admin_site.admin_view(self.discovery_status_view),
                name="{}_{}_discovery_status".format(*info),
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
                "<int:object_id>/approve-tools/",
                self.admin_site.admin_view(self.approve_tools_view),
                name="{}_{}_approve_tools".format(*info),
            ),
            path(
                "<int:object_id>/review-items/",
                self.admin_site.admin_view(self.review_items_view),
                name="{}_{}_review_items".format(*info),
            ),
            path(
                "<int:object_id>/storage/<int:volume_id>/delete/",
                self.admin_site.admin_view(self.storage_volume_delete_view),
                name="{}_{}_storage_delete".format(*info),
            ),
            path(
                "<int:object_id>/storage/seed/",
                self.admin_site.admin_view(self.storage_seed_view),
                name="{}_{}_storage_seed".format(*info),
            ),
            path(
                "fleet/",
                self.admin_site.admin_view(self.fleet_view),
                name="{}_{}_fleet".format(*info),
            ),
        ]
        return custom + super().get_urls()

    def approve_tools_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """Approve the tools ticked on the server page, each at the definition the page showed.

        Flagged tools need their own acknowledgement box ticked. More than one tool asks for a
        confirmation first; the note is recorded with every approval.
        """
        if request.method != "POST" or not request.user.has_perm("servers.approve_tool"):
            raise PermissionDenied
        server = get_object_or_404(McpServer, pk=object_id)
        back = reverse("admin:servers_mcpserver_change", args=[server.pk])
        selected = [int(pk) for pk in request.POST.getlist("tool") if pk.isdigit()]
        tools = list(
            Tool.objects.filter(server=server, pk__in=selected).order_by(Lower("name"), "pk")
        )
        if not tools:
            self.message_user(request, "Tick the tools to approve first.", messages.WARNING)
            return HttpResponseRedirect(back + "#server-tools")
        acknowledged = {int(pk) for pk in request.POST.getlist("acknowledge") if pk.isdigit()}
        note = request.POST.get("note", "").strip()
        if len(tools) > 1 and "confirm" not in request.POST:
            return TemplateResponse(
                request,
                "admin/servers/tools_approve_confirm.html",
                {
                    **self.admin_site.each_context(request),
                    "title": f"Approve {len(tools)} tools of {server.name}",
                    "opts": self.opts,
                    "server": server,
                    "rows": [
                        {
                            "tool": tool,
                            "hash": request.POST.get(f"hash_{tool.pk}", ""),
                            "acknowledged": tool.pk in acknowledged,
                        }
                        for tool in tools
                    ],
                    "note": note,
                },
            )
        approved = 0
        for tool in tools:
            try:
                services.tool_approve(
                    actor=request.user,
                    tool=tool,
                    note=note,
                    acknowledge_findings=tool.pk in acknowledged,
                    # The definition the page showed; none shown is never "the current one".
                    expected_hash=request.POST.get(f"hash_{tool.pk}", ""),
                )
            except ApplicationError as exc:
                self.message_user(request, f"Not approved: {exc.message}", messages.WARNING)
            else:
                approved += 1
        if approved:
            self.message_user(request, f"Approved {approved} tool(s).", messages.SUCCESS)
        return HttpResponseRedirect(back + "#server-tools")

    def review_items_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        return review_items(self, request, object_id)

    def operate_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        return operate_view(self, request, object_id, operation)

    def storage_volume_delete_view(
        self, request: HttpRequest, object_id: int, volume_id: int
    ) -> HttpResponse:
        return storage_volume_delete_view(request, object_id, volume_id)

    def storage_seed_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        return storage_seed_view(request, object_id)

    def discovery_status_view(
        self, request: HttpRequest, object_id: str, run_id: int
    ) -> HttpResponse:
        return discovery_status_view(self, request, object_id, run_id)

    def fleet_view(self, request: HttpRequest) -> HttpResponse:
        return fleet_status_view(self, request)

    def import_view(self, request: HttpRequest) -> HttpResponse:
        return import_servers_view(self, request)

    def decision_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        if action not in services.TRANSITIONS:
            raise PermissionDenied
        if not request.user.has_perm("servers.review_mcpserver"):
            raise PermissionDenied
        server = get_object_or_404(McpServer, pk=object_id_or_404(object_id))
        return self._decide(request, McpServer.objects.filter(pk=server.pk), action, bulk=False)

    def _decide(
        self, request: HttpRequest, queryset: QuerySet[McpServer], action: str, *, bulk: bool
    ) -> HttpResponse:
        """Ask for the reason or note, then apply the decision to each server via the service."""
        label = dict(SERVER_DECISIONS)[action]
        servers = list(queryset)
        # One by one, the form asks for what this server's tier needs; in bulk the service
        # applies each server's rules and reports the ones it refused.
        note_required = (
            not bulk
            and action == "approve"
            and any(tier_policy(server.trust_tier).approval_note_required for server in servers)
        )
        if request.method == "POST" and "confirm" in request.POST:
            form = ReviewDecisionForm(request.POST, action=action, note_required=note_required)
            if form.is_valid():
                reason = form.text()
                done: list[McpServer] = []
                for server in servers:
                    try:
                        done.append(
                            services.server_decide(
                                actor=request.user, server=server, action=action, reason=reason
                            )
                        )
                    except ApplicationError as exc:
                        if not bulk:
                            field = exc.field if exc.field in form.fields else None
                            form.add_error(field, exc.message)
                        else:
                            self.message_user(request, exc.message, messages.ERROR)
                if done:
                    self.message_user(
                        request, f"{label}: done for {len(done)} server(s).", messages.SUCCESS
                    )
                    if action == "approve":
                        self._tell_waiting_tools(request, done)
                if not bulk and done:
                    return HttpResponseRedirect(
                        reverse("admin:servers_mcpserver_change", args=[servers[0].pk])
                    )
                if bulk:
                    return HttpResponseRedirect(reverse("admin:servers_mcpserver_changelist"))
        else:
            form = ReviewDecisionForm(action=action, note_required=note_required)
        context = {
            **self.admin_site.each_context(request),
            "title": f"{label}: {', '.join(s.name for s in servers[:5])}"
            + (f" and {len(servers) - 5} more" if len(servers) > 5 else ""),
            "opts": self.opts,
            "servers": servers,
            "vetting": servers_vetting(servers) if action == "approve" else [],
            "form": form,
            "action": action,
            "action_label": label,
            "bulk": bulk,
            "bulk_action": f"{action}_selected",
            "selected_ids": [s.pk for s in servers],
        }
        return TemplateResponse(request, "admin/servers/review_decision.html", context)

    def _tell_waiting_tools(self, request: HttpRequest, servers: list[McpServer]) -> None:
        """After a server is approved, its tools still need their own approval: say how many."""
        for server in servers:
            waiting = Tool.objects.filter(tool_review_filter("awaiting"), server=server).count()
            if not waiting:
                continue
            url = reverse("admin:servers_tool_changelist")
            self.message_user(
                request,
                format_html(
                    '{} tool(s) of {} still wait for approval: <a href="{}?server__id__exact={}'
                    '&amp;review=awaiting">review them</a>.',
                    waiting,
                    server.name,
                    url,
                    server.pk,
                ),
                messages.WARNING,
            )

    @admin.action(description="Discover now", permissions=["change"])
    def discover_selected(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        operate(request, list(queryset), "discover")

    @admin.action(description="Check health now", permissions=["change"])
    def check_health_selected(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        operate(request, list(queryset), "check")

    @admin.action(description="Keep warm (turns auto-start on)", permissions=["change"])
    def start_selected(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        operate(request, list(queryset), "start")

    @admin.action(description="Stop keeping warm (turns auto-start off)", permissions=["change"])
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
