"""Operating servers from the admin: discover, check health, start and stop warm runtimes, and
the fleet status page. Each operation goes through the same services as `manage.py mcp`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, F, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from registry.core.errors import ApplicationError
from registry.servers.discovery import discovery_request, discovery_runs_needing_attention
from registry.servers.health import health_request, server_uptime
from registry.servers.models import (
    ApprovalState,
    DiscoveryRun,
    DiscoveryStatus,
    Health,
    HealthSample,
    McpServer,
    ReviewStatus,
    RuntimeState,
    ServerStatus,
    Tool,
)
from registry.servers.runtime import runtime_live_owner, runtime_request

OPERATIONS = {
    "discover": "Discover now",
    "check": "Check health now",
    "start": "Start",
    "stop": "Stop",
    "restart": "Restart",
}


def operate(request: HttpRequest, servers: list[McpServer], operation: str) -> None:
    """Run one operation on each server, telling the admin what happened."""
    actor = request.user
    if operation == "check":
        health_request(servers=servers, actor=actor)
        messages.success(request, f"Asked for a health check of {len(servers)} server(s).")
        return
    done = 0
    for server in servers:
        try:
            if operation == "discover":
                discovery_request(server=server, actor=actor, trigger="admin")
            else:
                runtime_request(server=server, action=operation, actor=actor)  # type: ignore[arg-type]
        except ApplicationError as exc:
            messages.error(request, exc.message)
        else:
            done += 1
    if done:
        messages.success(
            request,
            f"{OPERATIONS[operation]}: asked the workers for {done} "
            "server(s); the page shows the result once they are done.",
        )


def operate_view(
    model_admin: admin.ModelAdmin[McpServer], request: HttpRequest, object_id: str, operation: str
) -> HttpResponse:
    if request.method != "POST" or operation not in OPERATIONS:
        raise PermissionDenied
    if not model_admin.has_change_permission(request):
        raise PermissionDenied
    server = get_object_or_404(McpServer, pk=object_id)
    operate(request, [server], operation)
    return HttpResponseRedirect(reverse("admin:servers_mcpserver_change", args=[server.pk]))


def server_operations_context(
    request: HttpRequest, server: McpServer, status: ServerStatus | None
) -> dict[str, Any]:
    """What the server page shows about discovery, health and the warm runtime."""
    now = timezone.now()
    operations = ["discover", "check"]
    if server.review_status == ReviewStatus.APPROVED:
        running = status is not None and status.runtime_state in (
            RuntimeState.RUNNING,
            RuntimeState.STARTING,
        )
        operations += ["stop", "restart"] if running else ["start"]
    last_run = DiscoveryRun.objects.filter(server=server).first()
    return {
        "server_operations": [(op, OPERATIONS[op]) for op in operations]
        if request.user.has_perm("servers.change_mcpserver")
        else [],
        "discovery_runs": list(DiscoveryRun.objects.filter(server=server)[:10]),
        "vetting_report": status.vetting_report if status else {},
        "last_discovery": last_run,
        "health_samples": list(HealthSample.objects.filter(server=server)[:50]),
        "uptime_24h": server_uptime(server_id=server.pk, since=now - timedelta(days=1)),
        "uptime_7d": server_uptime(server_id=server.pk, since=now - timedelta(days=7)),
        "runtime_owner": runtime_live_owner(status) if status else "",
    }


def _offender(server: McpServer) -> dict[str, Any]:
    checks: int = getattr(server, "checks", 0)
    failed: int = getattr(server, "failed", 0)
    uptime = round(100 * (checks - failed) / checks, 1) if checks else None
    return {"server": server, "uptime": uptime, "failed": failed}


def fleet_status_view(
    model_admin: admin.ModelAdmin[McpServer], request: HttpRequest
) -> HttpResponse:
    """Counts by health, the worst offenders, and what changed and waits for re-approval."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    now = timezone.now()
    live = McpServer.objects.exclude(review_status=ReviewStatus.RETIRED)
    by_health = dict(
        live.values_list("status__health")
        .annotate(n=Count("pk"))
        .values_list("status__health", "n")
    )
    by_runtime = dict(
        live.values_list("status__runtime_state")
        .annotate(n=Count("pk"))
        .values_list("status__runtime_state", "n")
    )
    day_ago = now - timedelta(days=1)
    offenders: QuerySet[McpServer] = (
        live.select_related("status")
        .annotate(
            checks=Count("health_samples", filter=Q(health_samples__checked_at__gte=day_ago)),
            failed=Count(
                "health_samples",
                filter=Q(health_samples__checked_at__gte=day_ago, health_samples__ok=False),
            ),
        )
        .filter(Q(failed__gt=0) | Q(status__health=Health.UNHEALTHY))
        .order_by("-status__consecutive_failures", "-failed")[:15]
    )
    changed_tools = (
        Tool.objects.filter(approval_state=ApprovalState.CHANGED, removed_at__isnull=True)
        .select_related("server")
        .order_by("-last_seen_at")[:25]
    )
    failed_discoveries = DiscoveryRun.objects.filter(
        status=DiscoveryStatus.FAILED, finished_at__gte=day_ago
    ).select_related("server")[:15]
    awaiting = (
        Tool.objects.filter(
            removed_at__isnull=True,
            server__review_status__in=[ReviewStatus.APPROVED, ReviewStatus.PENDING_REVIEW],
        )
        .exclude(
            approval_state=ApprovalState.APPROVED, approved_definition_hash=F("definition_hash")
        )
        .count()
    )
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Fleet status",
        "opts": model_admin.opts,
        "health_counts": [(h.label, by_health.get(h.value, 0), h.value) for h in Health],
        "runtime_counts": [(r.label, by_runtime.get(r.value, 0)) for r in RuntimeState],
        "server_count": live.count(),
        "offenders": [_offender(server) for server in offenders],
        "changed_tools": list(changed_tools),
        "failed_discoveries": list(failed_discoveries),
        "tools_awaiting": awaiting,
        "discoveries_needing_attention": discovery_runs_needing_attention()[:15],
    }
    return TemplateResponse(request, "admin/servers/fleet_status.html", context)
