"""What the server page shows besides the form: tools, resources and prompts (each with its
review), decisions, launch summary and status."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.db.models import F
from django.db.models.functions import Lower
from django.http import HttpRequest

from registry.audit.selectors import audit_events_for_server
from registry.core.secret_fields import mask_mapping
from registry.servers import services
from registry.servers.admin.common import item_review_badge, review_badge
from registry.servers.admin.operations import server_operations_context
from registry.servers.admin.storage import storage_page_context
from registry.servers.dependency_locks import lock_summary
from registry.servers.jobs.sandbox_checks import server_sandbox_launch_warnings
from registry.servers.jobs.sandbox_preparation import sandbox_preparation_current
from registry.servers.models import (
    ApprovalState,
    ItemReview,
    McpServer,
    ServerPrompt,
    ServerResource,
    ServerStatus,
    Tool,
)
from registry.servers.policy import Isolation, allowed_network_modes, tier_policy
from registry.servers.selectors import (
    tool_review_filter,
    tool_review_state,
    tools_with_review_history,
)

TOOLS_SHOWN_ON_SERVER_PAGE = 50  # per page of the server page's tools
ITEMS_SHOWN_ON_SERVER_PAGE = 200  # resources, and prompts


# The review decisions (action, label), in the order the page offers them: services.TRANSITIONS.
SERVER_DECISIONS: list[tuple[str, str]] = [
    (action, transition.label) for action, transition in services.TRANSITIONS.items()
]


def server_page_context(request: HttpRequest, server: McpServer) -> dict[str, Any]:
    """The server page's context: its tools (one page), review decisions, launch and status."""
    # Tools still offered first, by name regardless of case; one page at a time.
    server_tools = tools_with_review_history(Tool.objects.filter(server=server)).order_by(
        F("removed_at").asc(nulls_first=True), Lower("name"), "pk"
    )
    tools_page = Paginator(server_tools, TOOLS_SHOWN_ON_SERVER_PAGE).get_page(
        request.GET.get("tools_page")
    )
    can_approve = request.user.has_perm("servers.approve_tool")
    tool_rows = []
    for tool in tools_page.object_list:
        state = tool_review_state(tool=tool)
        tool_rows.append(
            {
                "tool": tool,
                "badge": review_badge(state),
                "approvable": can_approve and state.key not in ("approved", "removed"),
                "has_diff": tool.removed_at is None
                and not tool.is_approved
                and tool.approval_state in (ApprovalState.CHANGED, ApprovalState.APPROVED),
            }
        )
    status = ServerStatus.objects.filter(server=server).first()
    item_rows = _item_rows(server)  # the first ITEMS_SHOWN_ON_SERVER_PAGE of each kind
    can_review = request.user.has_perm("servers.review_mcpserver")
    decisions = [
        (action, label)
        for action, label in SERVER_DECISIONS
        if can_review and services.server_transition_allowed(server, action)
    ]
    return {
        "server_status": status,
        "server_tool_rows": tool_rows,
        "server_tools_page": tools_page,
        "server_tools_count": tools_page.paginator.count,
        "server_tools_waiting": Tool.objects.filter(
            tool_review_filter("awaiting"), server=server
        ).count(),
        "can_approve_tools": can_approve,
        "server_item_rows": item_rows,
        "server_items_waiting": sum(
            1 for row in item_rows if not row["hidden"] and not row["item"].is_approved
        ),
        "server_audit_events": list(audit_events_for_server(server_id=server.pk)),
        "server_decisions": decisions,
        "launch_summary": _launch_summary(server),
        "sandbox_launch_warnings": server_sandbox_launch_warnings(server),
        "sandbox_preparation": sandbox_preparation_current()
        if server.isolation == Isolation.SANDBOX
        else None,
        "allowed_network_modes": allowed_network_modes(server.trust_tier, server.data_sensitivity),
        "tier_policy": tier_policy(server.trust_tier),
        **server_operations_context(request, server, status),
        **storage_page_context(request, server),
    }


def _item_rows(server: McpServer) -> list[dict[str, Any]]:
    """The server's resources, then its prompts, each with its review and the key the admin's
    form sends for it ("resource:12")."""
    rows: list[dict[str, Any]] = []
    items: list[ServerResource | ServerPrompt] = [
        *server.resources.all()[:ITEMS_SHOWN_ON_SERVER_PAGE],
        *server.prompts.all()[:ITEMS_SHOWN_ON_SERVER_PAGE],
    ]
    for item in items:
        kind = services.item_kind(item)
        rows.append(
            {
                "item": item,
                "kind": kind,
                "key": f"{kind}:{item.pk}",
                "label": item.uri if isinstance(item, ServerResource) else item.name,
                "template": isinstance(item, ServerResource) and item.is_template,
                "badge": item_review_badge(item),
                "hidden": item.review_state == ItemReview.HIDDEN,
            }
        )
    return rows


def _launch_summary(server: McpServer) -> dict[str, Any]:
    """The launch spec as shown to people: secrets masked."""
    return {
        "transport": server.get_transport_display(),
        "command": server.command,
        "url": server.url,
        "env": {
            **mask_mapping(server.env or {}),
            **{  # the values an admin marked as not secret, as they are
                name: value
                for name, value in (server.env or {}).items()
                if name in (server.env_not_secret or ())
            },
        },
        "headers": mask_mapping(server.headers or {}),
        "dependencies": lock_summary(server.package_lock or {}) if server.package_registry else "",
        "dependency_lock": server.package_lock or {},
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
