"""Every change to teams, memberships, roles, grants, access requests and agent tokens.

Each service validates, runs in a transaction, keeps guardian's object permissions in step,
writes the audit trail and bumps the catalogue versions of the teams whose agents could see
something else afterwards (after commit). The admin, the API and the management commands call
these and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from guardian.models import GroupObjectPermission, UserObjectPermission
from guardian.shortcuts import assign_perm, remove_perm

from registry.audit.services import Actor, actor_label, audit_record
from registry.core.errors import ApplicationError
from registry.servers.models import McpServer, ReviewStatus, Tool
from registry.teams.models import (
    TEAM_PERMISSIONS,
    AccessRequest,
    AccessRequestState,
    AgentToken,
    DependencyLevel,
    Grant,
    Membership,
    MembershipLevel,
    Team,
    TeamAction,
    TeamRole,
    ToolExposure,
)
from registry.teams.signals import announce_team_change
from registry.teams.tokens import token_generate, token_lookup_evict_on_commit

# Roles every new team starts with; a team may change or add to them.
DEFAULT_ROLES: tuple[tuple[str, str, bool, bool, bool], ...] = (
    ("review", "Sees read-only tools.", True, False, False),
    ("implementation", "Sees read and write tools.", True, True, False),
    ("operations", "Sees read, write and connect tools.", True, True, True),
)


def _full_clean(instance: Any) -> None:
    try:
        instance.full_clean()
    except ValidationError as exc:
        if hasattr(exc, "error_dict"):
            first = next(iter(exc.message_dict))
            text = " ".join(" ".join(msgs) for msgs in exc.message_dict.values())
            raise ApplicationError(text, field=first, extra={"fields": exc.message_dict}) from exc
        raise ApplicationError(" ".join(exc.messages)) from exc


def _bump(team_ids: Iterable[int], reason: str) -> None:
    announce_team_change(team_ids=team_ids, reason=reason)


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


# --- Teams, memberships, roles ------------------------------------------------------------------


@transaction.atomic
def team_create(
    *,
    actor: Actor,
    slug: str,
    name: str = "",
    description: str = "",
    with_default_roles: bool = True,
) -> Team:
    if Team.objects.filter(slug=slug).exists():
        raise ApplicationError(f"A team {slug!r} already exists.", field="slug")
    _group_leftover_remove(actor=actor, name=f"team:{slug}")
    group = Group.objects.create(name=f"team:{slug}")
    team = Team(slug=slug, name=name or slug.replace("-", " ").title(), description=description)
    team.group = group
    _full_clean(team)
    team.save()
    assign_perm(TEAM_PERMISSIONS[TeamAction.VIEW], group, team)
    if with_default_roles:
        for role_name, role_description, read, write, connect in DEFAULT_ROLES:
            TeamRole.objects.create(
                team=team,
                name=role_name,
                description=role_description,
                allows_read=read,
                allows_write=write,
                allows_connect=connect,
            )
    audit_record(
        actor=actor,
        action="team.created",
        target=team,
        summary=f"Created the team {team.name} ({team.slug}).",
        after={"slug": team.slug, "roles": list(team.roles.values_list("name", flat=True))},
    )
    return team


def _group_leftover_remove(*, actor: Actor, name: str) -> None:
    """A group of a team deleted before teams took their groups along: a new team with the
    same slug must not inherit its members or permissions."""
    leftover = Group.objects.filter(name=name, toolroom_team__isnull=True).first()
    if leftover is None:
        return
    members = sorted(leftover.user_set.values_list("username", flat=True))
    audit_record(
        actor=actor,
        action="team.leftover_group_deleted",
        target=leftover,
        summary=f"Deleted the group {name} left by a deleted team, and its "
        f"{len(members)} member link(s), before creating a new team with its slug.",
        before={"members": members},
    )
    leftover.delete()


@transaction.atomic
def team_delete(*, actor: Actor, team: Team) -> None:
    """Delete a team with everything that belongs to it: its Django group (so its members and
    object permissions do not pass to a later team with the same slug), roles, memberships,
    grants, requests and agent tokens; in one transaction, audited."""
    locked = Team.objects.select_for_update().select_related("group").get(pk=team.pk)
    group = locked.group
    members = sorted(group.user_set.values_list("username", flat=True))
    tokens = list(AgentToken.objects.filter(team=locked).values_list("prefix", flat=True))
    before = {
        "slug": locked.slug,
        "group": group.name,
        "members": members,
        "grants": Grant.objects.filter(team=locked).count(),
        "agent_tokens": len(tokens),
        "access_requests": AccessRequest.objects.filter(team=locked).count(),
    }
    audit_record(
        actor=actor,
        action="team.deleted",
        target=locked,
        summary=f"Deleted the team {locked.name} ({locked.slug}), its group {group.name} "
        f"({len(members)} member(s)), {before['grants']} grant(s) and {len(tokens)} agent "
        "token(s).",
        before=before,
    )
    content_type = ContentType.objects.get_for_model(Team)
    UserObjectPermission.objects.filter(
        content_type=content_type, object_pk=str(locked.pk)
    ).delete()
    GroupObjectPermission.objects.filter(
        content_type=content_type, object_pk=str(locked.pk)
    ).delete()
    # Its version moves first (in this transaction): a gateway that knows one of its tokens as
    # good at the old version checks it again, and finds it gone.
    _bump([locked.pk], "team.deleted")
    # Tokens before the team: a token's role is a protected key, so the team's cascade refuses.
    AgentToken.objects.filter(team=locked).delete()
    locked.delete()
    group.delete()  # its member links and object permissions go with it
    for prefix in tokens:
        token_lookup_evict_on_commit(prefix)


@transaction.atomic
def team_update(*, actor: Actor, team: Team, name: str, description: str) -> Team:
    locked = Team.objects.select_for_update().get(pk=team.pk)
    before = {"name": locked.name, "description": locked.description}
    locked.name, locked.description = name, description
    _full_clean(locked)
    locked.save(update_fields=["name", "description"])
    audit_record(
        actor=actor,
        action="team.updated",
        target=locked,
        summary=f"Changed the name or description of the team {locked.slug}.",
        before=before,
        after={"name": name, "description": description},
    )
    _bump([locked.pk], "team.updated")  # the name is part of the native catalogue
    return locked


@transaction.atomic
def team_member_set(
    *, actor: Actor, team: Team, user: AbstractBaseUser, level: str = MembershipLevel.MEMBER
) -> Membership:
    """Add `user` to the team, or change their level; owners may manage agents and requests."""
    if level not in MembershipLevel.values:
        raise ApplicationError(f"{level!r} is not a membership level.", field="level")
    membership, created = Membership.objects.select_for_update().get_or_create(
        team=team, user=user, defaults={"level": level}
    )
    before = None if created else membership.level
    if not created and membership.level == level:
        return membership
    membership.level = level
    membership.save(update_fields=["level"])
    user.groups.add(team.group)  # type: ignore[attr-defined]
    if level == MembershipLevel.OWNER:
        assign_perm(TEAM_PERMISSIONS[TeamAction.MANAGE], user, team)
    else:
        remove_perm(TEAM_PERMISSIONS[TeamAction.MANAGE], user, team)
    audit_record(
        actor=actor,
        action="team.member_set",
        target=team,
        summary=f"{user.get_username()} is now {level} of {team.name}.",
        before={"level": before},
        after={"level": level, "user": user.get_username()},
    )
    return membership


@transaction.atomic
def team_member_remove(*, actor: Actor, team: Team, user: AbstractBaseUser) -> None:
    deleted, _ = Membership.objects.filter(team=team, user=cast(Any, user)).delete()
    if not deleted:
        raise ApplicationError(f"{user.get_username()} is not a member of {team.name}.")
    user.groups.remove(team.group)  # type: ignore[attr-defined]
    remove_perm(TEAM_PERMISSIONS[TeamAction.MANAGE], user, team)
    audit_record(
        actor=actor,
        action="team.member_removed",
        target=team,
        summary=f"{user.get_username()} left {team.name}.",
        before={"user": user.get_username()},
    )


@transaction.atomic
def role_create(
    *,
    actor: Actor,
    team: Team,
    name: str,
    allows_read: bool = True,
    allows_write: bool = False,
    allows_connect: bool = False,
    description: str = "",
) -> TeamRole:
    role = TeamRole(
        team=team,
        name=name,
        description=description,
        allows_read=allows_read,
        allows_write=allows_write,
        allows_connect=allows_connect,
    )
    _full_clean(role)
    role.save()
    audit_record(
        actor=actor,
        action="team.role_created",
        target=role,
        summary=f"Created the role {role} ({', '.join(role.permission_classes)}).",
        after={"permission_classes": role.permission_classes},
    )
    return role


@transaction.atomic
def role_update(*, actor: Actor, role: TeamRole, changes: Mapping[str, Any]) -> TeamRole:
    allowed = {"description", "allows_read", "allows_write", "allows_connect"}
    unknown = set(changes) - allowed
    if unknown:
        raise ApplicationError(f"These role fields cannot be edited: {', '.join(sorted(unknown))}.")
    locked = TeamRole.objects.select_for_update().select_related("team").get(pk=role.pk)
    before = locked.permission_classes
    for name, value in changes.items():
        setattr(locked, name, value)
    _full_clean(locked)
    locked.save(update_fields=list(changes))
    audit_record(
        actor=actor,
        action="team.role_updated",
        target=locked,
        summary=f"The role {locked} now allows {', '.join(locked.permission_classes)}.",
        before={"permission_classes": before},
        after={"permission_classes": locked.permission_classes},
    )
    if before != locked.permission_classes:
        _bump([locked.team_id], "role.updated")
    return locked


# --- Grants -------------------------------------------------------------------------------------


def _grant_scope(grant: Grant | AccessRequest) -> str:
    what = f"{grant.server.slug}/{grant.tool.name}" if grant.tool_id else grant.server.slug  # type: ignore[union-attr]
    return what + (f" for the {grant.role.name} role" if grant.role_id else "")  # type: ignore[union-attr]


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
        existing.save(update_fields=["expires_at"])
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


# --- Access requests ----------------------------------------------------------------------------


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


# --- Agent tokens -------------------------------------------------------------------------------


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


# --- How the gateway offers tools ---------------------------------------------------------------


@transaction.atomic
def team_tool_exposure_set(*, actor: Actor, team: Team, exposure: str) -> Team:
    """The team's default for its agents' tools/list: `all` tools, or `search` (pinned tools
    plus find_tools and call_tool). Tokens that chose for themselves keep their choice."""
    if exposure not in ToolExposure.values:
        raise ApplicationError(f"Choose one of {', '.join(ToolExposure.values)}.")
    locked: Team = Team.objects.select_for_update().get(pk=team.pk)
    before = locked.tool_exposure
    if before == exposure:
        return locked
    locked.tool_exposure = exposure
    locked.save(update_fields=["tool_exposure"])
    audit_record(
        actor=actor,
        action="team.tool_exposure_set",
        target=locked,
        summary=f"The agents of {locked.name} now get {exposure} tools by default.",
        before={"tool_exposure": before},
        after={"tool_exposure": exposure},
    )
    _bump([locked.pk], "team.tool_exposure_set")
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
