"""Writes of the gateway's control plane: call records in batches, their retention, and the
per-server gateway policy (audited, and announced so that call checks see it at once)."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from registry.audit.services import Actor, audit_record
from registry.gateway.models import ToolCall
from registry.servers.gateway_policy import ServerGatewayPolicy
from registry.servers.launch_spec import LaunchSpecError
from registry.servers.models import CircuitState, Health, McpServer, ServerStatus
from registry.servers.signals import announce_visibility_change
from registry.servers.storage import check_storage
from registry.teams.callers import Caller, PersonIdentity
from registry.teams.models import Team

RECORD_BATCH_SIZE = 500
# How long a server whose calls failed counts as wanted (its health checks back off no further
# than TOOLROOM_HEALTH_WANTED_BACKOFF_SECONDS meanwhile).
CIRCUIT_DEMAND_SECONDS = 600


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
    person_id: int | None = None
    person_name: str = ""
    client_name: str = ""
    client_authorization_id: int | None = None
    role_name: str = ""
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
    # A per-person server's call: the person's upstream account it used (never its token).
    upstream_account_id: int | None = None
    upstream_subject: str = ""
    # Names the record wherever it travels (the gateway's journal, a replay after a crash): a
    # record written twice is kept once.
    record_id: str = field(default_factory=lambda: uuid.uuid4().hex)


def arguments_digest(arguments: Mapping[str, Any]) -> tuple[int, str]:
    """The size and SHA-256 of a call's arguments as canonical JSON: what the audit keeps of
    them unless the server's policy keeps the values."""
    raw = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str).encode()
    return len(raw), hashlib.sha256(raw).hexdigest()


def conversation_digest(conversation: str) -> str:
    """A conversation as the audit keeps it: hashed, never the id the agent sent."""
    return hashlib.sha256(conversation.encode()).hexdigest()[:32] if conversation else ""


def caller_record_fields(identity: Caller) -> dict[str, Any]:
    """What a call record says of its caller: the agent token; or, for a person's call, the
    person, the app, its authorization and the role (the token is the access token of the
    moment)."""
    if isinstance(identity, PersonIdentity):
        return {
            "token_id": identity.token_id,
            "team_id": identity.team_id,
            "person_id": identity.person_id,
            "person_name": identity.person_name,
            "client_name": identity.client_name[:255],
            "client_authorization_id": identity.authorization_id,
            "role_name": identity.role_name,
        }
    return {"token_id": identity.token_id, "token_name": identity.name, "team_id": identity.team_id}


def tool_call_refusal_record(
    *,
    identity: Caller,
    name: str,
    server_slug: str,
    arguments: Mapping[str, Any],
    conversation: str,
    code: str,
    message: str,
    outcome: str,
    started_at: float,
) -> None:
    """Record a REST call the web app answered itself (refused, or the gateway unreachable), as
    the gateway records the same call made over MCP."""
    size, digest = arguments_digest(arguments)
    tool_calls_record(
        records=[
            ToolCallRecord(
                started_at=started_at,
                duration_ms=round((time.time() - started_at) * 1000, 3),
                name=name[:200],
                via="rest",
                outcome=outcome,
                server_slug=server_slug,
                conversation=conversation_digest(conversation),
                error_class=code,
                error=message,
                argument_bytes=size,
                argument_digest=digest,
                **caller_record_fields(identity),
            )
        ]
    )


def tool_calls_record(*, records: list[ToolCallRecord]) -> int:
    """Write a batch of call records in as few INSERTs as the batch size allows.

    A call's team or server may have been deleted since the call (the batch is written later):
    the record keeps its names (token, server slug) and drops the link, never the record. A
    record already written (the same `record_id`: a journal replayed after a crash that came
    between the write and the journal's removal) is skipped."""
    team_ids = {record.team_id for record in records if record.team_id is not None}
    server_ids = {record.server_id for record in records if record.server_id is not None}
    teams = set(Team.objects.filter(pk__in=team_ids).values_list("pk", flat=True))
    servers = set(McpServer.objects.filter(pk__in=server_ids).values_list("pk", flat=True))
    person_ids = {record.person_id for record in records if record.person_id is not None}
    people = set(get_user_model().objects.filter(pk__in=person_ids).values_list("pk", flat=True))
    rows = []
    for record in records:
        values = {f.name: getattr(record, f.name) for f in fields(record)}
        if values["team_id"] not in teams:
            values["team_id"] = None
        if values["server_id"] not in servers:
            values["server_id"] = None
        if values["person_id"] not in people:
            values["person_id"] = None
        values["started_at"] = datetime.fromtimestamp(record.started_at, tz=UTC)
        values["error"] = record.error[:500]
        values["conversation"] = record.conversation[:100]
        rows.append(ToolCall(**values))
    ToolCall.objects.bulk_create(rows, batch_size=RECORD_BATCH_SIZE, ignore_conflicts=True)
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
    "max_call_seconds",
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
        try:  # the server's storage may be no narrower than its sessions
            check_storage(server.storage or [], isolation_scope=policy.isolation_scope)
        except LaunchSpecError as exc:
            raise ValidationError({"isolation_scope": exc.message}) from exc
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
    state (every gateway process then refuses fast) and have it health-checked at once. A
    passing health check closes it again, and so does a real call let through as the half-open
    probe after the open time (registry.gateway.circuit_probe).

    Returns False when the circuit was already open (nothing to do)."""
    now = timezone.now()
    with transaction.atomic():
        status = ServerStatus.objects.select_for_update().filter(server_id=server_id).first()
        if status is None or status.circuit_state == CircuitState.OPEN:
            return False
        status.circuit_state = CircuitState.OPEN
        status.circuit_opened_at = now
        # Wanted: its health checks back off no further than TOOLROOM_HEALTH_WANTED_BACKOFF_SECONDS.
        wanted_until = now + timedelta(seconds=CIRCUIT_DEMAND_SECONDS)
        if not ServerGatewayPolicy.objects.filter(server_id=server_id).update(
            demanded_until=Greatest(
                Coalesce("demanded_until", Value(wanted_until)), Value(wanted_until)
            )
        ):
            ServerGatewayPolicy.objects.get_or_create(
                server_id=server_id, defaults={"demanded_until": wanted_until}
            )
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
