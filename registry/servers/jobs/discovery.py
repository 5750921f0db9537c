"""Discovery as the control plane sees it: requesting a run, claiming it, recording its outcome.

More: docs/workers.md, "Module notes".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from registry.audit.services import Actor, actor_label, audit_record
from registry.core import task_queue
from registry.core.errors import ApplicationError
from registry.core.secret_fields import secret_redact, secret_redact_in
from registry.servers.jobs.runtime import runtime_live_owner
from registry.servers.models import (
    DiscoveryRun,
    DiscoveryStatus,
    McpServer,
    ReviewStatus,
    ServerStatus,
    UpstreamAuth,
)
from registry.servers.vetting.scanner import scan_text, scan_tool_definition
from registry.servers.vetting.tool_sync import ToolListError, server_tools_sync

logger = logging.getLogger(__name__)

REPORT_LIST_LIMIT = 50
# A run queued this long without the broker taking it (the send after commit failed) is sent by
# the janitor; one taken but not started after TOOLROOM_DISCOVERY_REDELIVER_SECONDS, again.
UNSENT_GRACE = timedelta(seconds=10)
# Past this, a queued run nobody picks up is failed rather than resent for ever.
QUEUED_GIVE_UP_AFTER = timedelta(hours=1)


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
    # error_kind NEEDS_PERSON_OAUTH: the protected resource metadata URL its 401 named.
    resource_metadata: str = ""


# Why a discovery failed, beyond the transport's kinds (connect, timeout, protocol, ...).
NEEDS_PERSON_OAUTH = "needs_person_oauth"  # answered 401 naming OAuth resource metadata
NEEDS_ACCOUNT = "needs_account"  # a per-person server with no admin's account to discover it


def discovery_request(*, server: McpServer, actor: Actor, trigger: str) -> DiscoveryRun:
    """Ask the workers to discover `server`; reuses a run already waiting for it."""
    if server.review_status == ReviewStatus.RETIRED:
        raise ApplicationError(f"{server.name} is retired; it is not discovered any more.")
    with transaction.atomic():
        stuck = {run.pk for run in discovery_runs_stuck(server=server)}
        pending = (
            DiscoveryRun.objects.select_for_update()
            .filter(server=server, status__in=[DiscoveryStatus.QUEUED, DiscoveryStatus.RUNNING])
            .exclude(pk__in=stuck)
            .first()
        )
        if pending is not None:
            return pending
        run = DiscoveryRun.objects.create(
            server=server, trigger=trigger, requested_by=actor_label(actor)
        )
        transaction.on_commit(lambda: discovery_send(run_id=run.pk), robust=True)
    return run


# Approved servers are discovered again at least this often (catches rug pulls).
DISCOVERY_MAX_AGE = timedelta(hours=6)


def discovery_request_stale(*, actor: Actor, max_age: timedelta = DISCOVERY_MAX_AGE) -> int:
    """Request a discovery of every approved server not discovered within `max_age`; how many."""
    cutoff = timezone.now() - max_age
    servers = McpServer.objects.filter(review_status=ReviewStatus.APPROVED).exclude(
        status__last_discovered_at__gte=cutoff
    )
    count = 0
    for server in servers:
        discovery_request(server=server, actor=actor, trigger="schedule")
        count += 1
    return count


def discovery_send(*, run_id: int) -> bool:
    """Hand the run's task to the broker and note that it took it; False (logged, the janitor
    sends it later) when the broker is unavailable. Call after commit."""
    run = DiscoveryRun.objects.select_related("server").filter(pk=run_id).first()
    if run is None or run.status != DiscoveryStatus.QUEUED:
        return False
    # A server held warm is discovered through its warm session, by the worker holding it.
    status = ServerStatus.objects.filter(server_id=run.server_id).first()
    owner = runtime_live_owner(status) if status is not None else ""
    try:
        task_queue.send_now(
            task_queue.DISCOVER_SERVER,
            args=[run.pk],
            worker=owner or None,
            queue=task_queue.DISCOVERY_QUEUE,
        )
    except Exception as exc:
        logger.warning("discovery run %s not sent (the janitor will): %s", run.pk, exc)
        return False
    DiscoveryRun.objects.filter(pk=run.pk).update(enqueued_at=timezone.now())
    return True


def _lease() -> timedelta:
    return timedelta(seconds=settings.TOOLROOM_DISCOVERY_LEASE_SECONDS)


def discovery_runs_stuck(*, server: McpServer | None = None) -> list[DiscoveryRun]:
    """Runs nobody is working on any more: running with an expired lease, queued but never taken
    by the broker, or taken so long ago that the message must have been lost."""
    now = timezone.now()
    redeliver = timedelta(seconds=settings.TOOLROOM_DISCOVERY_REDELIVER_SECONDS)
    runs = DiscoveryRun.objects.filter(
        models.Q(status=DiscoveryStatus.RUNNING, lease_until__lt=now)
        | models.Q(status=DiscoveryStatus.RUNNING, lease_until__isnull=True)
        | models.Q(
            status=DiscoveryStatus.QUEUED,
            enqueued_at__isnull=True,
            requested_at__lt=now - UNSENT_GRACE,
        )
        | models.Q(status=DiscoveryStatus.QUEUED, enqueued_at__lt=now - redeliver)
    )
    if server is not None:
        runs = runs.filter(server=server)
    return list(runs.select_related("server").order_by("requested_at"))


@dataclass(frozen=True)
class DiscoveryAttention:
    """A run an operator should know about: stuck now, or recovered by the janitor lately."""

    run: DiscoveryRun
    stuck: bool

    def describe(self) -> str:
        parts = ["STUCK" if self.stuck else self.run.status]
        if self.run.attempts > 1:
            parts.append(f"attempt {self.run.attempts}")
        if self.run.recoveries:
            parts.append(
                f"recovered {len(self.run.recoveries)}x: {self.run.recoveries[-1]['what']}"
            )
        return "; ".join(parts)


def discovery_runs_needing_attention(
    *, since: timedelta = timedelta(days=1)
) -> list[DiscoveryAttention]:
    """Stuck runs (what the janitor will recover next) and runs it retried, resent or failed in
    the last `since`, newest first; for `manage.py mcp status` and the fleet page."""
    stuck = {run.pk: run for run in discovery_runs_stuck()}
    recovered = (
        DiscoveryRun.objects.filter(requested_at__gte=timezone.now() - since)
        .exclude(recoveries=[])
        .exclude(pk__in=stuck)
    )
    runs = [DiscoveryAttention(run=run, stuck=True) for run in stuck.values()]
    runs += [DiscoveryAttention(run=run, stuck=False) for run in recovered.select_related("server")]
    return sorted(runs, key=lambda item: item.run.requested_at, reverse=True)


def discovery_lease_renew(*, run_id: int) -> bool:
    """The worker running it is alive: extend the lease; False if the run is no longer ours to
    run (finished, or failed by the janitor)."""
    return bool(
        DiscoveryRun.objects.filter(pk=run_id, status=DiscoveryStatus.RUNNING).update(
            lease_until=timezone.now() + _lease()
        )
    )


def discovery_janitor() -> dict[str, int]:
    """Recover every stuck run: requeue and resend it, or fail it with the reason once it used
    its attempts (or waited in the queue QUEUED_GIVE_UP_AFTER). Beat runs it every 30 s."""
    now = timezone.now()
    counts = {"resent": 0, "retried": 0, "failed": 0}
    for run in discovery_runs_stuck():
        with transaction.atomic():
            locked = DiscoveryRun.objects.select_for_update().get(pk=run.pk)
            if locked.status == DiscoveryStatus.RUNNING:
                if locked.lease_until is not None and locked.lease_until >= now:
                    continue  # renewed meanwhile
                why = f"attempt {locked.attempts}: the worker running it stopped (lease expired)"
                if locked.attempts >= settings.TOOLROOM_DISCOVERY_MAX_ATTEMPTS:
                    _fail(locked, f"Discovery gave up after {locked.attempts} attempts: {why}.")
                    counts["failed"] += 1
                    continue
                locked.status = DiscoveryStatus.QUEUED
                locked.lease_until = None
                counts["retried"] += 1
            elif locked.status == DiscoveryStatus.QUEUED:
                if locked.requested_at < now - QUEUED_GIVE_UP_AFTER:
                    _fail(locked, "Discovery gave up: no worker took the run for an hour.")
                    counts["failed"] += 1
                    continue
                why = "never taken by the broker" if locked.enqueued_at is None else "lost"
                why = f"the task was {why}; sent again"
                counts["resent"] += 1
            else:
                continue
            locked.enqueued_at = None
            locked.recoveries = [*locked.recoveries, {"at": now.isoformat(), "what": why}][-20:]
            locked.save(update_fields=["status", "lease_until", "enqueued_at", "recoveries"])
            logger.warning("discovery run %s of server %s: %s", locked.pk, locked.server_id, why)
            transaction.on_commit(lambda pk=locked.pk: discovery_send(run_id=pk), robust=True)  # type: ignore[misc]
    return counts


def _fail(run: DiscoveryRun, error: str) -> None:
    run.status = DiscoveryStatus.FAILED
    run.finished_at = timezone.now()
    run.lease_until = None
    run.error = error
    run.recoveries = [*run.recoveries, {"at": run.finished_at.isoformat(), "what": error}][-20:]
    run.save(update_fields=["status", "finished_at", "lease_until", "error", "recoveries"])
    audit_record(
        actor="system:discovery-janitor",
        action="discovery.failed",
        target=run.server,
        server=run.server,
        summary=f"Discovery of {run.server.name} failed: {error}",
        details={"run": run.pk, "kind": "stuck"},
    )


def discovery_claim(*, run_id: int) -> DiscoveryRun | None:
    """Take the run under a lease: a queued run, or a running one whose lease expired (its worker
    died: a redelivered task restarts it). None if a live worker has it, or it is finished."""
    now = timezone.now()
    claimed = (
        DiscoveryRun.objects.filter(pk=run_id)
        .filter(
            models.Q(status=DiscoveryStatus.QUEUED)
            | models.Q(status=DiscoveryStatus.RUNNING, lease_until__lt=now)
            | models.Q(status=DiscoveryStatus.RUNNING, lease_until__isnull=True)
        )
        .filter(attempts__lt=settings.TOOLROOM_DISCOVERY_MAX_ATTEMPTS)
        .update(
            status=DiscoveryStatus.RUNNING,
            started_at=now,
            lease_until=now + _lease(),
            attempts=models.F("attempts") + 1,
        )
    )
    if not claimed:
        return None
    return DiscoveryRun.objects.select_related("server").get(pk=run_id)


@dataclass(frozen=True)
class _Scanned:
    """What the scanner found in a discovery's tool definitions and instructions."""

    server_slug: str
    per_tool: dict[str, list[dict[str, Any]]]
    server_level: list[Any]


def _findings(outcome: DiscoveryOutcome, *, server_id: int) -> _Scanned | None:
    """None if the server is gone (the store then fails as it would have)."""
    slugs = dict(McpServer.objects.values_list("pk", "slug"))
    server_slug = slugs.pop(server_id, None)
    if server_slug is None:
        return None
    return _scan(outcome, server_slug=server_slug, other_slugs=set(slugs.values()))


def _scan(outcome: DiscoveryOutcome, *, server_slug: str, other_slugs: set[str]) -> _Scanned:
    per_tool: dict[str, list[dict[str, Any]]] = {}
    for definition in outcome.tools:
        # A tool named like another server's namespaced tool would pass for it in catalogues.
        found = scan_tool_definition(
            definition, server_slug=server_slug, other_server_slugs=other_slugs
        )
        if found and isinstance(definition.get("name"), str):
            per_tool[definition["name"]] = [finding.as_dict() for finding in found]
    server_level = [f.as_dict() for f in scan_text(outcome.instructions, location="instructions")]
    return _Scanned(server_slug=server_slug, per_tool=per_tool, server_level=server_level)


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


def discovery_record(
    *, run: DiscoveryRun, outcome: DiscoveryOutcome, actor: Actor = "worker:discovery"
) -> DiscoveryRun:
    """Store what a discovery found: tools, resources, prompts, identity, vetting report."""
    # Scanning the definitions is pure and CPU-heavy: done before any row lock is taken.
    scanned = _findings(outcome, server_id=run.server_id) if outcome.ok else None
    return _discovery_store(run=run, outcome=outcome, actor=actor, scanned=scanned)


@transaction.atomic
def _discovery_store(
    *, run: DiscoveryRun, outcome: DiscoveryOutcome, actor: Actor, scanned: _Scanned | None
) -> DiscoveryRun:
    # FOR NO KEY UPDATE: other writers of the server wait, but rows that merely point at it
    # (a health sample, an audit event: their foreign keys take KEY SHARE) do not, so a health
    # batch that holds this server's status row and inserts its sample cannot deadlock with us.
    server = McpServer.objects.select_for_update(no_key=True).get(pk=run.server_id)
    status, _ = ServerStatus.objects.select_for_update().get_or_create(server=server)
    now = timezone.now()
    # A server may print its env or echo its headers: nothing kept shows a stored secret.
    secrets = server.secret_values()
    outcome_error = secret_redact(outcome.error, secrets)
    changes: dict[str, Any] = {}
    tool_findings: dict[str, list[dict[str, Any]]] = {}
    server_findings: list[Any] = []
    if outcome.ok:
        if scanned is None or scanned.server_slug != server.slug:  # renamed since the scan
            other_slugs = McpServer.objects.exclude(pk=server.pk).values_list("slug", flat=True)
            scanned = _scan(outcome, server_slug=server.slug, other_slugs=set(other_slugs))
        tool_findings, server_findings = scanned.per_tool, scanned.server_level
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
    if not outcome.ok and outcome.error_kind == NEEDS_PERSON_OAUTH:
        outcome_error = _person_oauth_found(server, outcome, actor=actor)
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
    run.lease_until = None
    run.save(update_fields=["status", "finished_at", "summary", "error", "lease_until"])

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


def _has_shared_authorization(server: McpServer) -> bool:
    return any(name.lower() == "authorization" for name in (server.headers or {}))


def _person_oauth_found(server: McpServer, outcome: DiscoveryOutcome, *, actor: Actor) -> str:
    """The server answered 401 naming OAuth resource metadata: a server that signs each person
    in. One with no shared Authorization header becomes a per-person server (through the
    services: a reviewed one goes back to review); the error says what to do next."""
    from registry.servers.services.servers import server_update  # noqa: PLC0415 (it imports us)

    metadata = outcome.resource_metadata[:300]
    found = f"{server.name} signs each person in with OAuth (its 401 names {metadata})"
    if server.upstream_auth == UpstreamAuth.PERSON_OAUTH:
        return outcome.error
    if _has_shared_authorization(server):
        return (
            f"{found}, and it refused the shared Authorization header. If it acts for each "
            'person, set its upstream authentication to "Each person\'s OAuth account"; '
            "else enter a working header."
        )
    server_update(actor=actor, server=server, changes={"upstream_auth": UpstreamAuth.PERSON_OAUTH})
    server.upstream_auth = UpstreamAuth.PERSON_OAUTH
    return (
        f"{found}: it is now a per-person server (upstream authentication \"Each person's OAuth "
        "account\"), and needs an admin's account to discover tools: link yours with "
        '"Link my account for discovery" on this page, or `manage.py mcp link '
        f"{server.slug} --user YOUR_NAME`, then discover it again."
    )


def discovery_runs_for_server(*, server: McpServer, limit: int = 10) -> list[DiscoveryRun]:
    return list(DiscoveryRun.objects.filter(server=server)[:limit])
