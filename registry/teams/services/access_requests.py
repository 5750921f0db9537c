"""Access requests: a team asks, an admin approves (which grants) or denies, the team may
withdraw; with limits on how many stay open.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from registry.audit.services import Actor, actor_label, audit_record
from registry.core.errors import ApplicationError
from registry.servers.models import McpServer, ReviewStatus, Tool
from registry.teams.models import (
    AccessRequest,
    AccessRequestState,
    Grant,
    Membership,
    Team,
    TeamRole,
)
from registry.teams.services.grants import _grant_scope, grant_create
from registry.teams.services.teams import _full_clean, _iso


def access_request_waiting_for(request: AccessRequest) -> str:
    """Why a pending request cannot be approved yet, or "" when an admin may approve it."""
    if request.state != AccessRequestState.PENDING:
        return ""
    if request.server.review_status != ReviewStatus.APPROVED:
        return f"{request.server.name} is not approved at the moment."
    if request.tool is not None and not request.tool.is_approved:
        return (
            f"The tool {request.tool.name} is not approved yet: an admin must approve its "
            "current definition before the request can be granted."
        )
    return ""


def _check_access_request_limits(*, team: Team, server: McpServer) -> None:
    """Requests are answered by people: a team (or everyone, for one server) may keep only so
    many open, and create only so many a day, withdrawn ones included (a create-withdraw loop
    must not flood the admins' queue or the audit trail)."""
    Team.objects.select_for_update().filter(pk=team.pk).first()  # one count at a time per team
    pending = AccessRequest.objects.pending()
    per_team = settings.TOOLROOM_ACCESS_REQUESTS_OPEN_PER_TEAM
    if pending.filter(team=team).count() >= per_team:
        raise ApplicationError(
            f"{team.name} already has {per_team} open access requests; wait for answers or "
            "withdraw some before asking for more.",
            field="team",
        )
    per_server = settings.TOOLROOM_ACCESS_REQUESTS_OPEN_PER_SERVER
    if pending.filter(server=server).count() >= per_server:
        raise ApplicationError(
            f"{server.name} already has {per_server} open access requests; ask again once the "
            "admins have answered them.",
            field="server",
        )
    per_day = settings.TOOLROOM_ACCESS_REQUESTS_PER_TEAM_PER_DAY
    since = timezone.now() - timedelta(days=1)
    if AccessRequest.objects.filter(team=team, created_at__gte=since).count() >= per_day:
        raise ApplicationError(
            f"{team.name} made {per_day} access requests in the last 24 hours, the most a team "
            "may; ask again tomorrow.",
            field="team",
        )


@transaction.atomic
def access_request_create(
    *,
    actor: AbstractBaseUser,
    team: Team,
    server: McpServer,
    tool: Tool | None = None,
    role: TeamRole | None = None,
    justification: str,
    wished_expires_at: datetime | None = None,
) -> AccessRequest:
    if not Membership.objects.filter(team=team, user=cast(Any, actor)).exists():
        raise ApplicationError("Only the team's members can ask for access for it.", field="team")
    if server.review_status != ReviewStatus.APPROVED:
        raise ApplicationError("Only approved servers can be requested.", field="server")
    if tool is not None and (tool.server_id != server.pk or tool.removed_at is not None):
        raise ApplicationError("That tool is not offered by this server.", field="tool")
    _check_access_request_limits(team=team, server=server)
    scope = Q(team=team, server=server, role=role) & (
        Q(tool=tool) if tool is not None else Q(tool__isnull=True)
    )
    if AccessRequest.objects.pending().filter(scope).exists():
        raise ApplicationError(
            "The team already has an open request for this; wait for its answer or withdraw it.",
            field="tool" if tool is not None else "server",
        )
    covering = (
        Grant.objects.active()
        .filter(team=team, server=server)
        .filter(Q(tool__isnull=True) | Q(tool=tool))
    )
    covering = (
        covering.filter(Q(role__isnull=True) | Q(role=role))
        if role
        else covering.filter(role__isnull=True)
    )
    if covering.exists():
        raise ApplicationError("The team already has this access.", field="server")
    request = AccessRequest(
        team=team,
        requested_by=cast(Any, actor),
        server=server,
        tool=tool,
        role=role,
        justification=justification.strip(),
        wished_expires_at=wished_expires_at,
    )
    _full_clean(request)
    try:
        with transaction.atomic():
            request.save()
    except IntegrityError as exc:
        raise ApplicationError("The team already has an open request for this.") from exc
    audit_record(
        actor=actor,
        action="access_request.created",
        target=request,
        server=server,
        summary=f"{actor.get_username()} asked for {_grant_scope(request)} for {team.name}.",
        after={
            "justification": request.justification,
            "wished_expires_at": _iso(wished_expires_at),
        },
        details={"waiting_for": access_request_waiting_for(request)},
    )
    return request


def _locked_pending(request: AccessRequest) -> AccessRequest:
    locked: AccessRequest = (
        AccessRequest.objects.select_for_update(of=("self",))
        .select_related("team", "server", "tool", "role")
        .get(pk=request.pk)
    )
    if locked.state != AccessRequestState.PENDING:
        raise ApplicationError(f"This request is already {locked.get_state_display().lower()}.")
    return locked


@transaction.atomic
def access_request_approve(
    *, actor: Actor, request: AccessRequest, expires_at: datetime | None = None, note: str = ""
) -> AccessRequest:
    """Approve the request and create the grant. `expires_at` may shorten the wished expiry,
    never lengthen it; a request whose server or tool is not approved yet stays pending."""
    locked = _locked_pending(request)
    waiting_for = access_request_waiting_for(locked)
    if waiting_for:
        raise ApplicationError(f"The request stays pending: {waiting_for}")
    wished = locked.wished_expires_at
    if expires_at is not None and wished is not None and expires_at > wished:
        raise ApplicationError(
            "The expiry may be shorter than the team asked for, not longer.", field="expires_at"
        )
    effective = expires_at or wished
    if effective is not None and effective <= timezone.now():
        raise ApplicationError(
            "The expiry has passed; approve with a later expiry or deny.", field="expires_at"
        )
    grant = grant_create(
        actor=actor,
        team=locked.team,
        server=locked.server,
        tool=locked.tool,
        role=locked.role,
        expires_at=effective,
        note=note or f"Access request #{locked.pk}: {locked.justification}"[:2000],
    )
    locked.state = AccessRequestState.APPROVED
    locked.decided_at = timezone.now()
    locked.decided_by_label = actor_label(actor)
    locked.decision_reason = note.strip()
    locked.grant = grant
    locked.save(
        update_fields=["state", "decided_at", "decided_by_label", "decision_reason", "grant"]
    )
    audit_record(
        actor=actor,
        action="access_request.approved",
        target=locked,
        server=locked.server,
        summary=f"Approved {locked.team.name}'s request for {_grant_scope(locked)}"
        + (f" until {effective.isoformat()}." if effective else "."),
        after={"state": locked.state, "grant": grant.pk, "expires_at": _iso(effective)},
    )
    return locked


@transaction.atomic
def access_request_deny(*, actor: Actor, request: AccessRequest, reason: str) -> AccessRequest:
    reason = reason.strip()
    if not reason:
        raise ApplicationError("Say why the request is denied.", field="reason")
    locked = _locked_pending(request)
    locked.state = AccessRequestState.DENIED
    locked.decided_at = timezone.now()
    locked.decided_by_label = actor_label(actor)
    locked.decision_reason = reason
    locked.save(update_fields=["state", "decided_at", "decided_by_label", "decision_reason"])
    audit_record(
        actor=actor,
        action="access_request.denied",
        target=locked,
        server=locked.server,
        summary=f"Denied {locked.team.name}'s request for {_grant_scope(locked)}: {reason}",
        after={"state": locked.state},
        details={"reason": reason},
    )
    return locked


@transaction.atomic
def access_request_withdraw(*, actor: Actor, request: AccessRequest) -> AccessRequest:
    locked = _locked_pending(request)
    locked.state = AccessRequestState.WITHDRAWN
    locked.decided_at = timezone.now()
    locked.decided_by_label = actor_label(actor)
    locked.save(update_fields=["state", "decided_at", "decided_by_label"])
    audit_record(
        actor=actor,
        action="access_request.withdrawn",
        target=locked,
        server=locked.server,
        summary=f"{actor_label(actor)} withdrew {locked.team.name}'s request for "
        f"{_grant_scope(locked)}.",
        after={"state": locked.state},
    )
    return locked


@dataclass
class BulkDecisionResult:
    done: list[AccessRequest] = field(default_factory=list)
    skipped: list[tuple[AccessRequest, str]] = field(default_factory=list)


def access_requests_decide_bulk(
    *,
    actor: Actor,
    requests: Iterable[AccessRequest],
    approve: bool,
    reason: str = "",
    expires_at: datetime | None = None,
) -> BulkDecisionResult:
    """Approve or deny many requests, each in its own transaction; what cannot be decided is
    skipped with the reason (a pending tool, an expiry longer than wished...)."""
    result = BulkDecisionResult()
    for request in requests:
        try:
            if approve:
                decided = access_request_approve(
                    actor=actor, request=request, expires_at=expires_at, note=reason
                )
            else:
                decided = access_request_deny(actor=actor, request=request, reason=reason)
        except ApplicationError as exc:
            result.skipped.append((request, exc.message))
        else:
            result.done.append(decided)
    return result
