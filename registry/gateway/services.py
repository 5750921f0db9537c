"""Writes of the gateway's control plane: call records in batches, their retention, and the
per-server gateway policy (audited, and announced so that call checks see it at once)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from registry.audit.services import Actor, audit_record
from registry.gateway.models import ServerGatewayPolicy, ToolCall
from registry.servers.models import CircuitState, Health, McpServer, ServerStatus
from registry.servers.signals import announce_visibility_change
from registry.teams.models import Team

RECORD_BATCH_SIZE = 500


@dataclass(frozen=True)
class ToolCallRecord:
    """One call as the gateway saw it; plain values, made on the call path, written later."""

    started_at: float  # POSIX seconds
    duration_ms: float
    name: str
    via: str
    outcome: str
    token_id: int | None = None
    token_name: str = ""
    team_id: int | None = None
    server_id: int | None = None
    server_slug: str = ""
    tool_name: str = ""
    definition_hash: str = ""
    conversation: str = ""
    error_class: str = ""
    error: str = ""
    argument_bytes: int = 0
    argument_digest: str = ""
    arguments: dict[str, Any] | None = None


def tool_calls_record(*, records: list[ToolCallRecord]) -> int:
    """Write a batch of call records in as few INSERTs as the batch size allows.

    A call's team or server may have been deleted since the call (the batch is written later):
    the record keeps its names (token, server slug) and drops the link, never the record."""
    team_ids = {record.team_id for record in records if record.team_id is not None}
    server_ids = {record.server_id for record in records if record.server_id is not None}
    teams = set(Team.objects.filter(pk__in=team_ids).values_list("pk", flat=True))
    servers = set(McpServer.objects.filter(pk__in=server_ids).values_list("pk", flat=True))
    rows = []
    for record in records:
        values = {f.name: getattr(record, f.name) for f in fields(record)}
        if values["team_id"] not in teams:
            values["team_id"] = None
        if values["server_id"] not in servers:
            values["server_id"] = None
        values["started_at"] = datetime.fromtimestamp(record.started_at, tz=UTC)
        values["error"] = record.error[:500]
        values["conversation"] = record.conversation[:100]
        rows.append(ToolCall(**values))
    ToolCall.objects.bulk_create(rows, batch_size=RECORD_BATCH_SIZE)
    return len(rows)


def tool_calls_prune(*, keep_days: int) -> int:
    """Delete call records older than `keep_days` days; how many were deleted."""
    cutoff = timezone.now() - timedelta(days=keep_days)
    deleted, _ = ToolCall.objects.filter(started_at__lt=cutoff).delete()
    return deleted


POLICY_FIELDS = (
    "mode",
    "isolation_scope",
    "call_deadline_seconds",
    "max_concurrency",
    "queue_limit",
    "idle_stop_seconds",
    "pass_identity",
    "keep_arguments",
)


def server_gateway_policy_set(
    *, actor: Actor, server: McpServer, **values: Any
) -> ServerGatewayPolicy:
    """Change how the gateway may reach `server`; validated, audited, announced after commit."""
    unknown = set(values) - set(POLICY_FIELDS)
    if unknown:
        raise TypeError(f"unknown gateway policy fields: {sorted(unknown)}")
    with transaction.atomic():
        policy, _ = ServerGatewayPolicy.objects.select_for_update().get_or_create(server=server)
        before = {name: getattr(policy, name) for name in POLICY_FIELDS}
        for name, value in values.items():
            setattr(policy, name, value)
        policy.full_clean()
        policy.save()
        after = {name: getattr(policy, name) for name in POLICY_FIELDS}
        if before != after:
            audit_record(
                actor=actor,
                action="server.gateway_policy_changed",
                target=server,
                server=server,
                summary=f"Gateway policy of {server.slug} changed.",
                before=before,
                after=after,
            )
            announce_visibility_change(server_ids=[server.pk], reason="server.gateway_policy")
    return policy


def server_circuit_trip(*, server_id: int, error: str) -> bool:
    """The gateway saw the server fail call after call: open its circuit in the shared health
    state (every gateway process then refuses fast) and have it health-checked at once; the
    health check is the half-open probe, whose success closes the circuit again.

    Returns False when the circuit was already open (nothing to do)."""
    now = timezone.now()
    with transaction.atomic():
        status = ServerStatus.objects.select_for_update().filter(server_id=server_id).first()
        if status is None or status.circuit_state == CircuitState.OPEN:
            return False
        status.circuit_state = CircuitState.OPEN
        status.circuit_opened_at = now
        status.health = Health.UNHEALTHY
        status.last_error = f"Gateway calls failed: {error}"[:2000]
        status.next_check_at = now
        status.save(
            update_fields=[
                "circuit_state",
                "circuit_opened_at",
                "health",
                "last_error",
                "next_check_at",
                "updated_at",
            ]
        )
        server = McpServer.objects.get(pk=server_id)
        audit_record(
            actor="gateway",
            action="server.circuit_opened",
            target=server,
            server=server,
            summary=f"The gateway opened the circuit of {server.slug}: {error}"[:500],
        )
        announce_visibility_change(server_ids=[server_id], reason="server.circuit_opened")
    return True
