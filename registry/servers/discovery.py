"""Discovery as the control plane sees it: requesting a run, claiming it, recording its outcome.

A worker opens a session (see workers/discovery.py), lists what the server offers and hands a
`DiscoveryOutcome` to `discovery_record`, which syncs the tools (new ones unapproved, changed
ones lose their approval), runs the description scanner, writes the vetting report and audits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from registry.audit.services import Actor, actor_label, audit_record
from registry.core import task_queue
from registry.core.errors import ApplicationError
from registry.core.secret_fields import secret_redact, secret_redact_in
from registry.servers.models import (
    DiscoveryRun,
    DiscoveryStatus,
    McpServer,
    ReviewStatus,
    ServerStatus,
)
from registry.servers.runtime import runtime_live_owner
from registry.servers.scanner import scan_text, scan_tool_definition
from registry.servers.tool_sync import ToolListError, server_tools_sync

# A run still queued or running after this long was lost (its worker died); a new request
# starts a new run instead of waiting for it.
STALE_RUN_AFTER = timedelta(minutes=15)
REPORT_LIST_LIMIT = 50


@dataclass(frozen=True)
class DiscoveryOutcome:
    """What a worker found when it talked to a server (or why it could not)."""

    ok: bool
    protocol_version: str = ""
    server_info: dict[str, Any] = field(default_factory=dict)
    capabilities: dict[str, Any] = field(default_factory=dict)
    instructions: str = ""
    tools: list[dict[str, Any]] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)
    prompts: list[dict[str, Any]] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    error: str = ""
    error_kind: str = ""
    stderr_tail: str = ""
    via: str = ""
    # What actually ran, for a sandboxed server: image, digest, command inside it, network.
    launched: dict[str, Any] = field(default_factory=dict)


def discovery_request(*, server: McpServer, actor: Actor, trigger: str) -> DiscoveryRun:
    """Ask the workers to discover `server`; reuses a run already waiting for it."""
    if server.review_status == ReviewStatus.RETIRED:
        raise ApplicationError(f"{server.name} is retired; it is not discovered any more.")
    with transaction.atomic():
        pending = (
            DiscoveryRun.objects.select_for_update()
            .filter(
                server=server,
                status__in=[DiscoveryStatus.QUEUED, DiscoveryStatus.RUNNING],
                requested_at__gte=timezone.now() - STALE_RUN_AFTER,
            )
            .first()
        )
        if pending is not None:
            return pending
        run = DiscoveryRun.objects.create(
            server=server, trigger=trigger, requested_by=actor_label(actor)
        )
        # A server held warm is discovered through its warm session, by the worker holding it.
        status = ServerStatus.objects.filter(server=server).first()
        owner = runtime_live_owner(status) if status is not None else ""
        task_queue.enqueue(task_queue.DISCOVER_SERVER, args=[run.pk], worker=owner or None)
    return run


def discovery_claim(*, run_id: int) -> DiscoveryRun | None:
    """Mark a queued run as running; None if another worker has it (or it is done).

    A run left running by a worker that died is claimable again once it is stale.
    """
    now = timezone.now()
    claimed = (
        DiscoveryRun.objects.filter(pk=run_id)
        .filter(
            status=DiscoveryStatus.QUEUED,
        )
        .update(status=DiscoveryStatus.RUNNING, started_at=now)
    )
    if not claimed:
        stale = now - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)
        claimed = DiscoveryRun.objects.filter(
            pk=run_id, status=DiscoveryStatus.RUNNING, started_at__lt=stale
        ).update(started_at=now)
    if not claimed:
        return None
    return DiscoveryRun.objects.select_related("server").get(pk=run_id)


def _findings(
    outcome: DiscoveryOutcome, server: McpServer
) -> tuple[dict[str, list[dict[str, Any]]], list[Any]]:
    per_tool: dict[str, list[dict[str, Any]]] = {}
    # A tool named like another server's namespaced tool would pass for it in catalogues.
    other_slugs = set(McpServer.objects.exclude(pk=server.pk).values_list("slug", flat=True))
    for definition in outcome.tools:
        found = scan_tool_definition(
            definition, server_slug=server.slug, other_server_slugs=other_slugs
        )
        if found and isinstance(definition.get("name"), str):
            per_tool[definition["name"]] = [finding.as_dict() for finding in found]
    server_level = [f.as_dict() for f in scan_text(outcome.instructions, location="instructions")]
    return per_tool, server_level


def _vetting_report(
    outcome: DiscoveryOutcome,
    *,
    changes: dict[str, Any],
    tool_findings: dict[str, list[dict[str, Any]]],
    server_findings: list[Any],
) -> dict[str, Any]:
    by_kind: dict[str, int] = {}
    for found in tool_findings.values():
        for finding in found:
            by_kind[finding["kind"]] = by_kind.get(finding["kind"], 0) + 1
    return {
        "ok": outcome.ok,
        "via": outcome.via,
        "launched": outcome.launched,
        "protocol_version": outcome.protocol_version,
        "server_info": outcome.server_info,
        "capabilities": outcome.capabilities,
        "instructions": outcome.instructions[:2000],
        "counts": {
            "tools": len(outcome.tools),
            "resources": len(outcome.resources),
            "prompts": len(outcome.prompts),
        },
        "timings_ms": outcome.timings_ms,
        "changes": changes,
        "findings": {
            "tools_flagged": sorted(tool_findings)[:REPORT_LIST_LIMIT],
            "tools_flagged_count": len(tool_findings),
            "by_kind": by_kind,
            "instructions": server_findings,
        },
        "errors": [outcome.error] if outcome.error else [],
    }


@transaction.atomic
def discovery_record(
    *, run: DiscoveryRun, outcome: DiscoveryOutcome, actor: Actor = "worker:discovery"
) -> DiscoveryRun:
    """Store what a discovery found: tools, resources, prompts, identity, vetting report."""
    server = McpServer.objects.select_for_update().get(pk=run.server_id)
    status, _ = ServerStatus.objects.select_for_update().get_or_create(server=server)
    now = timezone.now()
    # A server may print its env or echo its headers: nothing kept shows a stored secret.
    secrets = server.secret_values()
    outcome_error = secret_redact(outcome.error, secrets)
    changes: dict[str, Any] = {}
    tool_findings: dict[str, list[dict[str, Any]]] = {}
    server_findings: list[Any] = []
    if outcome.ok:
        tool_findings, server_findings = _findings(outcome, server)
        try:
            synced = server_tools_sync(
                server=server,
                tools=outcome.tools,
                resources=outcome.resources,
                prompts=outcome.prompts,
                findings=tool_findings,
                actor=actor,
            )
        except ToolListError as exc:
            outcome_error = f"The server's tool list cannot be stored: {exc.message}"
        else:
            changes = {
                "added": synced.added[:REPORT_LIST_LIMIT],
                "changed": synced.changed[:REPORT_LIST_LIMIT],
                "removed": synced.removed[:REPORT_LIST_LIMIT],
                "returned": synced.returned[:REPORT_LIST_LIMIT],
                "approvals_dropped": synced.approvals_dropped[:REPORT_LIST_LIMIT],
                "unchanged": synced.unchanged,
            }
    succeeded = outcome.ok and not outcome_error
    report = _vetting_report(
        outcome,
        changes=changes,
        tool_findings=tool_findings,
        server_findings=server_findings,
    )
    report["ok"] = succeeded
    report["errors"] = [outcome_error] if outcome_error else []
    report = secret_redact_in(report, secrets)

    if succeeded:
        status.protocol_version = outcome.protocol_version[:20]
        status.server_info = outcome.server_info
        status.capabilities = outcome.capabilities
        status.instructions = secret_redact(outcome.instructions, secrets)
        status.last_discovered_at = now
        status.last_discovery_error = ""
        status.vetting_report = report
    else:
        status.last_discovery_error = outcome_error
    if outcome.stderr_tail:
        status.stderr_tail = secret_redact(outcome.stderr_tail, secrets)[-20000:]
    status.save()

    run.status = DiscoveryStatus.SUCCEEDED if succeeded else DiscoveryStatus.FAILED
    run.finished_at = now
    run.summary = report
    run.error = outcome_error
    run.save(update_fields=["status", "finished_at", "summary", "error"])

    if succeeded:
        counts = report["counts"]
        flagged = len(tool_findings)
        audit_record(
            actor=actor,
            action="server.discovered",
            target=server,
            server=server,
            summary=(
                f"Discovered {counts['tools']} tools, {counts['resources']} resources and "
                f"{counts['prompts']} prompts on {server.name} (protocol "
                f"{outcome.protocol_version})"
                + (f"; the scanner flagged {flagged} tool(s)." if flagged else ".")
            ),
            details={"run": run.pk, "changes": changes},
        )
    else:
        audit_record(
            actor=actor,
            action="server.discovery_failed",
            target=server,
            server=server,
            summary=f"Discovery of {server.name} failed: {outcome_error.splitlines()[0][:300]}",
            details={"run": run.pk, "kind": outcome.error_kind},
        )
    return run


def discovery_runs_for_server(*, server: McpServer, limit: int = 10) -> list[DiscoveryRun]:
    return list(DiscoveryRun.objects.filter(server=server)[:limit])
