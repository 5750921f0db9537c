"""Granting a server or one tool to a team, and revoking the grant."""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone

from registry.audit.services import Actor, actor_label, audit_record
from registry.core.errors import ApplicationError
from registry.servers.models import McpServer, ReviewStatus, Tool
from registry.teams.models import (
    AccessRequest,
    Grant,
    Team,
    TeamRole,
)
from registry.teams.services.teams import _bump, _full_clean, _iso


def _grant_scope(grant: Grant | AccessRequest) -> str:
    what = f"{grant.server.slug}/{grant.tool.name}" if grant.tool is not None else grant.server.slug
    return what + (f" for the {grant.role.name} role" if grant.role is not None else "")


@transaction.atomic
def grant_create(
    *,
    actor: Actor,
    team: Team,
    server: McpServer,
    tool: Tool | None = None,
    role: TeamRole | None = None,
    expires_at: datetime | None = None,
    note: str = "",
) -> Grant:
    """Grant a server (all its approved tools) or one tool to the team.

    Granting what the team already has changes that grant's expiry instead of adding another.
    A server that is not approved yet may be granted: its tools appear once it and they are.
    """
    if server.review_status in (ReviewStatus.RETIRED, ReviewStatus.REJECTED):
        raise ApplicationError(
            f"{server.name} is {server.get_review_status_display().lower()}; it cannot be granted.",
            field="server",
        )
    if tool is not None and tool.removed_at is not None:
        raise ApplicationError(f"{tool} is no longer offered by its server.", field="tool")
    existing: Grant | None = (
        Grant.objects.select_for_update(of=("self",))
        .filter(team=team, server=server, tool=tool, role=role, revoked_at__isnull=True)
        .order_by("pk")
        .first()
    )
    if existing is not None:
        if existing.expires_at == expires_at:
            return existing
        if expires_at is not None and expires_at <= timezone.now():
            raise ApplicationError("The expiry must be in the future.", field="expires_at")
        before = _iso(existing.expires_at)
        existing.expires_at = expires_at
        existing.expiry_notice_sent_at = None  # a new end: its owners are told again
        existing.save(update_fields=["expires_at", "expiry_notice_sent_at"])
        audit_record(
            actor=actor,
            action="grant.updated",
            target=existing,
            server=server,
            summary=f"{team.name}'s grant of {_grant_scope(existing)} now "
            + (f"expires at {expires_at.isoformat()}." if expires_at else "never expires."),
            before={"expires_at": before},
            after={"expires_at": _iso(expires_at)},
        )
        _bump([team.pk], "grant.updated")
        return existing
    grant = Grant(
        team=team,
        server=server,
        tool=tool,
        role=role,
        expires_at=expires_at,
        note=note.strip(),
        granted_by_label=actor_label(actor),
    )
    _full_clean(grant)
    try:
        with transaction.atomic():
            grant.save()
    except IntegrityError as exc:  # a concurrent identical grant won the race
        raise ApplicationError("The team already has this grant.") from exc
    audit_record(
        actor=actor,
        action="grant.created",
        target=grant,
        server=server,
        summary=f"Granted {_grant_scope(grant)} to {team.name}"
        + (f" until {expires_at.isoformat()}." if expires_at else "."),
        after={
            "team": team.slug,
            "server": server.slug,
            "tool": tool.name if tool else None,
            "role": role.name if role else None,
            "expires_at": _iso(expires_at),
        },
    )
    _bump([team.pk], "grant.created")
    return grant


@transaction.atomic
def grant_revoke(*, actor: Actor, grant: Grant, reason: str = "") -> Grant:
    locked: Grant = (
        Grant.objects.select_for_update(of=("self",))
        .select_related("team", "server", "tool", "role")
        .get(pk=grant.pk)
    )
    if locked.revoked_at is not None:
        raise ApplicationError("This grant is already revoked.")
    locked.revoked_at = timezone.now()
    locked.revoked_by_label = actor_label(actor)
    locked.revoke_reason = reason.strip()
    locked.save(update_fields=["revoked_at", "revoked_by_label", "revoke_reason"])
    audit_record(
        actor=actor,
        action="grant.revoked",
        target=locked,
        server=locked.server,
        summary=f"Revoked {locked.team.name}'s grant of {_grant_scope(locked)}"
        + (f": {reason.strip()}" if reason.strip() else "."),
        details={"reason": reason.strip()} if reason.strip() else {},
    )
    _bump([locked.team_id], "grant.revoked")
    return locked
