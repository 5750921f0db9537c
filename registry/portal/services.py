"""The portal's writes: single sign-on accounts and their team memberships, and access requests
asked from the portal. Every rule stays in `registry.teams.services`; this module only maps the
identity provider's claims onto those services and refuses requests no admin could approve."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from registry.core.errors import ApplicationError
from registry.portal.models import OidcIdentity
from registry.servers.models import McpServer, Tool
from registry.teams import services as team_services
from registry.teams.models import AccessRequest, Membership, MembershipLevel, Team, TeamRole

logger = logging.getLogger(__name__)

USERNAME_MAX = 150


@dataclass(frozen=True)
class TeamClaim:
    slug: str
    level: str


def oidc_team_claims(claims: Mapping[str, Any]) -> list[TeamClaim] | None:
    """The teams (and levels) the configured claim names, or None when no claim is configured.

    `TOOLROOM_OIDC_TEAMS_CLAIM` names the claim (a list of strings, or one string); values
    starting with `TOOLROOM_OIDC_TEAM_PREFIX` name a team by its slug after the prefix, and a value
    ending with `TOOLROOM_OIDC_OWNER_SUFFIX` makes the person an owner of that team. The prefix is
    required (the settings refuse a claim without one): without it no value names a team, since
    any group the provider has that happens to be named like a team would grant its membership.
    """
    claim_name: str = settings.TOOLROOM_OIDC_TEAMS_CLAIM
    if not claim_name:
        return None
    raw = claims.get(claim_name) or []
    values = [raw] if isinstance(raw, str) else [v for v in raw if isinstance(v, str)]
    prefix: str = settings.TOOLROOM_OIDC_TEAM_PREFIX
    owner_suffix: str = settings.TOOLROOM_OIDC_OWNER_SUFFIX
    if not prefix:
        logger.error("TOOLROOM_OIDC_TEAMS_CLAIM without TOOLROOM_OIDC_TEAM_PREFIX maps no team")
        return []
    levels: dict[str, str] = {}
    for value in values:
        if not value.startswith(prefix):
            continue
        slug = value[len(prefix) :]
        level = MembershipLevel.MEMBER
        if owner_suffix and slug.endswith(owner_suffix):
            slug, level = slug[: -len(owner_suffix)], MembershipLevel.OWNER
        if slug and levels.get(slug) != MembershipLevel.OWNER:
            levels[slug] = level
    return [TeamClaim(slug=slug, level=level) for slug, level in sorted(levels.items())]


@transaction.atomic
def oidc_memberships_sync(*, user: AbstractBaseUser, claims: Mapping[str, Any], actor: str) -> None:
    """Make the person's team memberships what the identity provider says, when the operator
    maps a claim to teams. Teams the claim names that do not exist are ignored (the provider
    never creates teams); memberships of teams the claim no longer names end."""
    wanted = oidc_team_claims(claims)
    if wanted is None:
        return
    teams = {team.slug: team for team in Team.objects.filter(slug__in=[w.slug for w in wanted])}
    unknown = sorted({w.slug for w in wanted} - set(teams))
    if unknown:
        logger.info("Single sign-on names unknown teams for %s: %s", user.get_username(), unknown)
    for claim in wanted:
        if claim.slug in teams:
            team_services.team_member_set(
                actor=actor, team=teams[claim.slug], user=user, level=claim.level
            )
    for membership in (
        Membership.objects.filter(user=cast(Any, user))
        .exclude(team__slug__in=list(teams))
        .select_related("team")
    ):
        team_services.team_member_remove(actor=actor, team=membership.team, user=user)


def _free_username(wanted: str) -> str:
    user_model = get_user_model()
    base = (wanted or "user")[: USERNAME_MAX - 8]
    candidate, n = base, 1
    while user_model._default_manager.filter(username__iexact=candidate).exists():
        n += 1
        candidate = f"{base}-{n}"
    return candidate


@transaction.atomic
def oidc_user_sign_in(*, issuer: str, claims: Mapping[str, Any]) -> AbstractBaseUser:
    """The account of the identity (issuer, subject), created on first sign-in, with its
    e-mail, name and (where configured) team memberships brought up to date.

    Accounts made here are never staff: platform admins are made in the admin or with
    `createsuperuser`, never by an identity provider."""
    subject = str(claims.get("sub") or "")
    if not subject:
        raise ApplicationError("The identity provider sent no subject (sub) claim.")
    identity = (
        OidcIdentity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=issuer, subject=subject)
        .first()
    )
    email = str(claims.get("email") or "")
    name = str(claims.get("name") or "")
    if identity is None:
        user_model = get_user_model()
        wanted = str(claims.get("preferred_username") or email.partition("@")[0] or subject)
        user = user_model._default_manager.create_user(username=_free_username(wanted), email=email)
        user.set_unusable_password()
        identity = OidcIdentity(user=user, issuer=issuer, subject=subject)
    user = identity.user
    if not user.is_active:
        raise ApplicationError("This account is disabled.")
    first, _, last = name.partition(" ")
    changed = {
        field: value
        for field, value in (("email", email), ("first_name", first), ("last_name", last))
        if value and getattr(user, field, value) != value
    }
    for field, value in changed.items():
        setattr(user, field, value)
    user.save()
    identity.last_login_at = timezone.now()
    identity.save()
    oidc_memberships_sync(user=user, claims=claims, actor=f"sso:{issuer}")
    return user


def portal_access_request_create(
    *,
    actor: AbstractBaseUser,
    team: Team,
    server: McpServer,
    tool: Tool | None,
    role: TeamRole | None,
    justification: str,
    wished_expires_at: datetime | None,
) -> AccessRequest:
    """Ask for access from the portal: what the teams service accepts, except requests no admin
    could approve now (a tool that is not approved), which are explained instead of queued.

    The test is the teams service's own (`access_request_waiting_for`), asked of the request
    before it exists; duplicates, covered access and servers that are not approved are refused
    by `access_request_create` itself."""
    candidate = AccessRequest(team=team, server=server, tool=tool, role=role)
    blocked = team_services.access_request_waiting_for(candidate)
    if blocked:
        raise ApplicationError(
            f"This cannot be granted at the moment: {blocked} Ask again once it is approved.",
            field="target",
        )
    return team_services.access_request_create(
        actor=actor,
        team=team,
        server=server,
        tool=tool,
        role=role,
        justification=justification,
        wished_expires_at=wished_expires_at,
    )


def _last_owner(team: Team, user: AbstractBaseUser) -> bool:
    owners = Membership.objects.filter(team=team, level=MembershipLevel.OWNER)
    return not owners.exclude(user_id=user.pk).exists()


@transaction.atomic
def portal_member_set(*, actor: AbstractBaseUser, team: Team, who: str, level: str) -> Membership:
    """An owner adds a person (by user name or e-mail address, an active account) to the team or
    changes their level, through `team_member_set` (audited). The team's last owner stays an
    owner: a team nobody can manage from the portal is an admin's to fix."""
    who = who.strip()
    users = get_user_model()._default_manager.filter(is_active=True)
    found = list(users.filter(username=who)[:1]) or list(users.filter(email__iexact=who)[:2])
    if len(found) != 1:
        raise ApplicationError(
            f"No single Toolroom account is named or reached at '{who}'. People who sign in "
            "with single sign-on have an account from their first sign-in.",
            field="who",
        )
    user = found[0]
    Team.objects.select_for_update().get(pk=team.pk)  # one owner change at a time
    membership = Membership.objects.filter(team=team, user_id=user.pk).first()
    if (
        membership is not None
        and membership.level == MembershipLevel.OWNER
        and level != MembershipLevel.OWNER
        and _last_owner(team, user)
    ):
        raise ApplicationError(
            f"{user.get_username()} is the last owner of {team.name}: make someone else an "
            "owner first.",
            field="level",
        )
    return team_services.team_member_set(actor=actor, team=team, user=user, level=level)


@transaction.atomic
def portal_member_remove(*, actor: AbstractBaseUser, team: Team, membership: Membership) -> None:
    """An owner removes a member (through `team_member_remove`, audited); never the last
    owner."""
    Team.objects.select_for_update().get(pk=team.pk)
    if membership.level == MembershipLevel.OWNER and _last_owner(team, membership.user):
        raise ApplicationError(
            f"{membership.user.get_username()} is the last owner of {team.name}: make someone "
            "else an owner first."
        )
    team_services.team_member_remove(actor=actor, team=team, user=membership.user)
