"""Agent tokens: creating (the secret shown once), revoking, the servers an agent declares and
how it gets its tools.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from registry.audit.services import Actor, actor_label, audit_record
from registry.core.errors import ApplicationError
from registry.teams.models import (
    AgentToken,
    DependencyLevel,
    Team,
    TeamRole,
    ToolExposure,
)
from registry.teams.services.teams import _bump, _full_clean, _iso
from registry.teams.tokens import token_generate, token_lookup_evict_on_commit


def _clean_declarations(declared: Mapping[str, Any] | None) -> dict[str, list[str]]:
    if not declared:
        return {}
    cleaned: dict[str, list[str]] = {}
    for level, slugs in declared.items():
        if level not in DependencyLevel.values:
            raise ApplicationError(
                f"{level!r} is not a dependency level ({', '.join(DependencyLevel.values)}).",
                field="declared_servers",
            )
        if not isinstance(slugs, list | tuple) or not all(isinstance(s, str) for s in slugs):
            raise ApplicationError("Declare servers by their slugs.", field="declared_servers")
        if slugs:
            cleaned[level] = sorted({s.strip() for s in slugs if s.strip()})
    return cleaned


@dataclass(frozen=True)
class CreatedToken:
    token: AgentToken
    plain: str  # shown once, never stored


@transaction.atomic
def agent_token_create(
    *,
    actor: Actor,
    team: Team,
    role: TeamRole,
    name: str,
    expires_at: datetime | None = None,
    declared_servers: Mapping[str, Any] | None = None,
) -> CreatedToken:
    new = token_generate()
    token = AgentToken(
        team=team,
        role=role,
        name=name.strip(),
        prefix=new.prefix,
        secret_hash=new.secret_hash,
        declared_servers=_clean_declarations(declared_servers),
        created_by_label=actor_label(actor),
        expires_at=expires_at,
    )
    _full_clean(token)
    try:
        with transaction.atomic():
            token.save()
    except IntegrityError as exc:
        raise ApplicationError(
            "The team already has an agent token with this name.", field="name"
        ) from exc
    audit_record(
        actor=actor,
        action="agent_token.created",
        target=token,
        summary=f"Created the agent token {token.name} for {team.name} "
        f"({role.name} role, prefix {token.prefix})"
        + (f", expiring at {expires_at.isoformat()}." if expires_at else "."),
        after={"prefix": token.prefix, "role": role.name, "expires_at": _iso(expires_at)},
    )
    if expires_at is not None:
        _bump([team.pk], "agent_token.created")  # the team's next expiry may be this one
    token_lookup_evict_on_commit(token.prefix)  # in case the prefix was remembered as unknown
    return CreatedToken(token=token, plain=new.plain)


@transaction.atomic
def agent_token_revoke(*, actor: Actor, token: AgentToken, reason: str = "") -> AgentToken:
    locked: AgentToken = (
        AgentToken.objects.select_for_update().select_related("team").get(pk=token.pk)
    )
    if locked.revoked_at is not None:
        raise ApplicationError("This agent token is already revoked.")
    locked.revoked_at = timezone.now()
    locked.revoked_by_label = actor_label(actor)
    locked.save(update_fields=["revoked_at", "revoked_by_label"])
    audit_record(
        actor=actor,
        action="agent_token.revoked",
        target=locked,
        summary=f"Revoked the agent token {locked.name} of {locked.team.name}"
        + (f": {reason.strip()}" if reason.strip() else "."),
        details={"reason": reason.strip()} if reason.strip() else {},
    )
    token_lookup_evict_on_commit(locked.prefix)
    _bump([locked.team_id], "agent_token.revoked")
    return locked


@transaction.atomic
def agent_token_declare_servers(
    *, actor: Actor, token: AgentToken, declared_servers: Mapping[str, Any]
) -> AgentToken:
    """Set the servers the agent requires, recommends or may use, for the catalogue's pre-flight."""
    locked: AgentToken = AgentToken.objects.select_for_update().get(pk=token.pk)
    if locked.revoked_at is not None:
        raise ApplicationError("This agent token is revoked.")
    before = locked.declared_servers
    locked.declared_servers = _clean_declarations(declared_servers)
    if locked.declared_servers == before:
        return locked
    locked.save(update_fields=["declared_servers"])
    audit_record(
        actor=actor,
        action="agent_token.servers_declared",
        target=locked,
        summary=f"The agent {locked.name} now declares {locked.declared_servers or 'no servers'}.",
        before={"declared_servers": before},
        after={"declared_servers": locked.declared_servers},
    )
    token_lookup_evict_on_commit(locked.prefix)
    # The gateway keeps a checked token (with its declarations) while the team's version holds.
    _bump([locked.team_id], "agent_token.servers_declared")
    return locked


@transaction.atomic
def agent_token_tool_exposure_set(*, actor: Actor, token: AgentToken, exposure: str) -> AgentToken:
    """This agent's tools/list: `all`, `search`, or "" to follow the team's default."""
    if exposure not in ["", *ToolExposure.values]:
        raise ApplicationError(f"Choose one of {', '.join(ToolExposure.values)}, or none.")
    locked: AgentToken = AgentToken.objects.select_for_update().get(pk=token.pk)
    if locked.revoked_at is not None:
        raise ApplicationError("This agent token is revoked.")
    before = locked.tool_exposure
    if before == exposure:
        return locked
    locked.tool_exposure = exposure
    locked.save(update_fields=["tool_exposure"])
    audit_record(
        actor=actor,
        action="agent_token.tool_exposure_set",
        target=locked,
        summary=f"The agent {locked.name} now gets "
        + (f"{exposure} tools." if exposure else "its team's default."),
        before={"tool_exposure": before},
        after={"tool_exposure": exposure},
    )
    token_lookup_evict_on_commit(locked.prefix)
    _bump([locked.team_id], "agent_token.tool_exposure_set")
    return locked
