"""Teams, their memberships and roles, and how the gateway offers a team's tools by default;
also the helpers the other team services share (validation, version bumps).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, cast

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db import transaction
from guardian.models import GroupObjectPermission, UserObjectPermission
from guardian.shortcuts import assign_perm, remove_perm

from registry.audit.services import Actor, audit_record
from registry.core.errors import ApplicationError
from registry.teams.models import (
    TEAM_PERMISSIONS,
    AccessRequest,
    AgentToken,
    Grant,
    Membership,
    MembershipLevel,
    Team,
    TeamAction,
    TeamRole,
    ToolExposure,
)
from registry.teams.signals import announce_team_change
from registry.teams.tokens import token_lookup_evict_on_commit

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


RATCHET_WINDOW_MIN_SECONDS = 60


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
    *,
    actor: Actor,
    team: Team,
    user: AbstractBaseUser,
    level: str = MembershipLevel.MEMBER,
    roles: Iterable[TeamRole] | None = None,
) -> Membership:
    """Add `user` to the team, or change their level (owners manage agents and requests) and, when
    `roles` is given, the roles they may act as through the apps they sign in to (owners: all).

    A change that narrows what the person may do bumps the team's catalogue version, so a person's
    token (docs/authentication.md) is checked again on its very next call."""
    if level not in MembershipLevel.values:
        raise ApplicationError(f"{level!r} is not a membership level.", field="level")
    wanted = None if roles is None else sorted({role.pk: role for role in roles}.values(), key=str)
    if wanted is not None and any(role.team_id != team.pk for role in wanted):
        raise ApplicationError("A member may only act as roles of their own team.", field="roles")
    membership, created = Membership.objects.select_for_update().get_or_create(
        team=team, user=user, defaults={"level": level}
    )
    before = None if created else membership.level
    before_roles = [] if created else sorted(membership.roles.values_list("name", flat=True))
    after_roles = before_roles if wanted is None else sorted(role.name for role in wanted)
    if not created and membership.level == level and before_roles == after_roles:
        return membership
    membership.level = level
    membership.save(update_fields=["level"])
    if wanted is not None:
        membership.roles.set(wanted)
    team.group.user_set.add(cast(Any, user))
    if level == MembershipLevel.OWNER:
        assign_perm(TEAM_PERMISSIONS[TeamAction.MANAGE], user, team)
    else:
        remove_perm(TEAM_PERMISSIONS[TeamAction.MANAGE], user, team)
    audit_record(
        actor=actor,
        action="team.member_set",
        target=team,
        summary=f"{user.get_username()} is now {level} of {team.name}"
        + (f" (may act as {', '.join(after_roles) or 'no role'})." if wanted is not None else "."),
        before={"level": before, "roles": before_roles},
        after={"level": level, "user": user.get_username(), "roles": after_roles},
    )
    if not created:
        _bump([team.pk], "membership.changed")  # people's tokens are checked again
    return membership


@transaction.atomic
def team_member_remove(*, actor: Actor, team: Team, user: AbstractBaseUser) -> None:
    """Remove `user` from the team; their tokens for it are refused from the very next call (the
    team's version moves, and a person's token is checked against it)."""
    deleted, _ = Membership.objects.filter(team=team, user=cast(Any, user)).delete()
    if not deleted:
        raise ApplicationError(f"{user.get_username()} is not a member of {team.name}.")
    team.group.user_set.remove(cast(Any, user))
    remove_perm(TEAM_PERMISSIONS[TeamAction.MANAGE], user, team)
    audit_record(
        actor=actor,
        action="team.member_removed",
        target=team,
        summary=f"{user.get_username()} left {team.name}.",
        before={"user": user.get_username()},
    )
    _bump([team.pk], "membership.removed")


def membership_roles(*, membership: Membership) -> list[TeamRole]:
    """The roles a member may act as through the apps they sign in to: every role of the team for
    an owner, the roles listed on the membership for a member."""
    if membership.level == MembershipLevel.OWNER:
        return list(TeamRole.objects.filter(team_id=membership.team_id).order_by("name"))
    return list(membership.roles.order_by("name"))


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


@transaction.atomic
def team_ratchet_window_set(*, actor: Actor, team: Team, seconds: int | None) -> Team:
    """How long a confidential read keeps the team's tokens and people from connect-class tools
    (the private-data ratchet, docs/gateway.md); None: the installation's default. It applies to
    marks made from now on (a mark keeps the window it was made with)."""
    if seconds is not None and seconds < RATCHET_WINDOW_MIN_SECONDS:
        raise ApplicationError(
            f"The window is at least {RATCHET_WINDOW_MIN_SECONDS} seconds.",
            field="ratchet_window_seconds",
        )
    locked: Team = Team.objects.select_for_update().get(pk=team.pk)
    before = locked.ratchet_window_seconds
    if before == seconds:
        return locked
    locked.ratchet_window_seconds = seconds
    locked.save(update_fields=["ratchet_window_seconds"])
    audit_record(
        actor=actor,
        action="team.ratchet_window_set",
        target=locked,
        summary=f"The private-data ratchet of {locked.slug} now holds "
        f"{'the default time' if seconds is None else f'{seconds} s'} after a confidential read.",
        before={"ratchet_window_seconds": before},
        after={"ratchet_window_seconds": seconds},
    )
    _bump([locked.pk], "team.ratchet_window_set")  # the call tables carry the window
    return locked


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
