"""Reads of the authorization server: what a person may consent to, what they consented to, and
whether an authorization still stands."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db.models import QuerySet

from registry.oauth.models import ClientAuthorization
from registry.teams.models import Membership, MembershipLevel, Team, TeamRole


@dataclass(frozen=True)
class TeamChoice:
    """One of the person's teams and the roles their membership lets them act as."""

    team: Team
    roles: list[TeamRole]


def person_team_choices(*, person: AbstractBaseUser | AnonymousUser) -> list[TeamChoice]:
    """The person's teams, each with the roles they may act as (owners: every role; members: the
    roles listed on their membership); teams that allow them no role are left out. Two queries."""
    if person.pk is None:
        return []
    memberships = list(
        Membership.objects.filter(user_id=person.pk)
        .select_related("team")
        .prefetch_related("roles")
        .order_by("team__name")
    )
    owned = [m.team_id for m in memberships if m.level == MembershipLevel.OWNER]
    all_roles: dict[int, list[TeamRole]] = {}
    for role in TeamRole.objects.filter(team_id__in=owned).order_by("name"):
        all_roles.setdefault(role.team_id, []).append(role)
    choices = []
    for membership in memberships:
        if membership.level == MembershipLevel.OWNER:
            roles = all_roles.get(membership.team_id, [])
        else:
            roles = sorted(membership.roles.all(), key=lambda role: role.name)
        if roles:
            choices.append(TeamChoice(team=membership.team, roles=roles))
    return choices


def person_may_act_as(
    *, person: AbstractBaseUser | AnonymousUser, team_id: int, role_id: int
) -> bool:
    """Whether the person is an active member of the team allowed to act as the role."""
    if not person.is_active:
        return False
    membership = Membership.objects.filter(user_id=person.pk, team_id=team_id).first()
    if membership is None:
        return False
    if not TeamRole.objects.filter(pk=role_id, team_id=team_id).exists():
        return False
    return membership.level == MembershipLevel.OWNER or membership.roles.filter(pk=role_id).exists()


def authorization_standing_problem(*, authorization: ClientAuthorization | None) -> str:
    """Why tokens may no longer be issued for this authorization, in words; "" if they may."""
    if authorization is None:
        return "This sign-in has no client authorization behind it; sign in again."
    if authorization.revoked_at is not None:
        return "The person revoked this app's access (or an admin did); sign in again."
    person = authorization.person
    if not person.is_active:
        return f"{person.get_username()}'s account is deactivated."
    if not person_may_act_as(
        person=person, team_id=authorization.team_id, role_id=authorization.role_id
    ):
        return (
            f"{person.get_username()} is no longer a member of the team this app acts for, or "
            "may no longer act as its role; sign in again to choose another."
        )
    return ""


def person_authorizations(
    *, person: AbstractBaseUser | AnonymousUser
) -> QuerySet[ClientAuthorization]:
    """The person's live client authorizations ("Connected apps"), newest first."""
    return (
        ClientAuthorization.objects.filter(person_id=person.pk, revoked_at__isnull=True)
        .select_related("client", "team", "role")
        .order_by("-created_at")
    )


def authorization_remembered(
    *, person: AbstractBaseUser | AnonymousUser, client_id: int
) -> list[ClientAuthorization]:
    """The person's live authorizations of this client (one per team)."""
    return list(
        ClientAuthorization.objects.filter(
            person_id=person.pk, client_id=client_id, revoked_at__isnull=True
        ).select_related("team", "role")
    )
