"""Operating servers from the admin: discover, check health, start and stop warm runtimes, and
the fleet status page. Each operation goes through the same services as `manage.py mcp`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from registry.core.admin_ids import object_id_or_404
from registry.core.errors import ApplicationError
from registry.servers.jobs.discovery import (
    discovery_request,
    discovery_runs_needing_attention,
)
from registry.servers.jobs.health import health_request, server_uptime
from registry.servers.jobs.runtime import runtime_live_owner, runtime_request
from registry.servers.jobs.sandbox_preparation import sandbox_preparation_current
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
from registry.servers.selectors import AWAITING_SERVER_STATES, tool_review_filter

OPERATIONS = {
    "discover": "Discover now",
    "check": "Check health now",
    # Starting a warm runtime is keeping the server warm: auto-start goes on with it (the
    # workers' supervisor keeps auto-start servers running), and stopping turns it off. The
    # labels and the message say so instead of changing the setting silently.
    "start": "Keep warm",
    "stop": "Stop keeping warm",
    "restart": "Restart",
}
SETTING_CHANGES = {
    "start": " Auto-start is on now: the workers keep it running, also after they restart.",
    "stop": " Auto-start is off now.",
}


def health_reason(server: McpServer, status: ServerStatus | None) -> str:
    """Why a server is degraded or unhealthy, in words (empty when there is nothing to explain).

    The same rules as registry.servers.jobs.health: failures below the threshold or a check
    slower than TOOLROOM_HEALTH_DEGRADED_LATENCY_MS degrade; failures at the threshold open the
    circuit.
    """
    if status is None or status.health not in (Health.DEGRADED, Health.UNHEALTHY):
        return ""
    failures = status.consecutive_failures
    last_error = status.last_error.strip().splitlines()[0][:200] if status.last_error else ""
    if failures:
        why = (
            f"{failures} failed check{'s' if failures != 1 else ''} in a row "
            f"(unhealthy from {server.health_failure_threshold})"
        )
        return f"{why}; last error: {last_error}" if last_error else why
    threshold = settings.TOOLROOM_HEALTH_DEGRADED_LATENCY_MS
    if status.latency_ms is not None and status.latency_ms > threshold:
        return (
            f"slow: the last check took {status.latency_ms:.0f} ms, "
            f"over the {threshold:.0f} ms threshold"
        )
    return f"last error: {last_error}" if last_error else ""


def operate(request: HttpRequest, servers: list[McpServer], operation: str) -> list[DiscoveryRun]:
    """Run one operation on each server, telling the admin what happened; the discovery runs
    asked for (empty for other operations)."""
    actor = request.user
    runs: list[DiscoveryRun] = []
    if operation == "check":
        health_request(servers=servers, actor=actor)
        messages.success(request, f"Asked for a health check of {len(servers)} server(s).")
        return runs
    done = 0
    for server in servers:
        try:
            if operation == "discover":
                runs.append(discovery_request(server=server, actor=actor, trigger="admin"))
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
            "server(s); the page shows the result once they are done."
            + SETTING_CHANGES.get(operation, ""),
        )
    return runs


def operate_view(
    model_admin: admin.ModelAdmin[McpServer], request: HttpRequest, object_id: str, operation: str
) -> HttpResponse:
    if request.method != "POST" or operation not in OPERATIONS:
        raise PermissionDenied
    if not model_admin.has_change_permission(request):
        raise PermissionDenied
    server = get_object_or_404(McpServer, pk=object_id_or_404(object_id))
    runs = operate(request, [server], operation)
    page = reverse("admin:servers_mcpserver_change", args=[server.pk])
    # The page follows the run it asked for (discovery_progress.js) until it ends.
    return HttpResponseRedirect(f"{page}?discovery={runs[0].pk}" if runs else page)


def discovery_status_view(
    model_admin: admin.ModelAdmin[McpServer], request: HttpRequest, object_id: str, run_id: int
) -> JsonResponse:
    """One discovery run's state, polled by the server page (staff with the view permission)."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    run = get_object_or_404(DiscoveryRun, pk=run_id, server_id=object_id_or_404(object_id))
    return JsonResponse(discovery_progress(run))  # admin_view: never cached


def discovery_progress(run: DiscoveryRun) -> dict[str, Any]:
    counts = run.summary.get("counts") if isinstance(run.summary, dict) else None
    return {
        "run": run.pk,
        "status": run.status,
        "label": run.get_status_display(),
        "finished": run.is_finished,
        "error": run.error[:300],
        "tools": counts.get("tools") if isinstance(counts, dict) else None,
    }


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
    # The run "Discover now" asked for (?discovery=ID), else one still waiting or running.
    followed = request.GET.get("discovery", "")
    progress = (
        DiscoveryRun.objects.filter(server=server, pk=int(followed)).first()
        if followed.isdigit()
        else None
    )
    if progress is None and last_run is not None and not last_run.is_finished:
        progress = last_run
    return {
        "discovery_progress": progress,
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
        "health_reason": health_reason(server, status),
    }


def _offender(server: McpServer) -> dict[str, Any]:
    checks: int = getattr(server, "checks", 0)
    failed: int = getattr(server, "failed", 0)
    uptime = round(100 * (checks - failed) / checks, 1) if checks else None
    status = getattr(server, "status", None)
    return {
        "server": server,
        "uptime": uptime,
        "failed": failed,
        "why": health_reason(server, status),
    }


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
    # The same rows as the list it links to (review=awaiting, of approved or pending servers).
    awaiting = Tool.objects.filter(
        tool_review_filter("awaiting"),
        server__review_status__in=AWAITING_SERVER_STATES,
    ).count()
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
        "sandbox_preparation": sandbox_preparation_current(),
        "discoveries_needing_attention": discovery_runs_needing_attention()[:15],
    }
    return TemplateResponse(request, "admin/servers/fleet_status.html", context)
