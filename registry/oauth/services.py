"""Every change to people's client authorizations, registered clients and the registration policy.

Each runs in one transaction and writes the audit trail. Revoking an authorization revokes its
refresh and access tokens and bumps the team's catalogue version, so every gateway process checks
the person's tokens again on their very next request (docs/authentication.md).
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db import transaction
from django.utils import timezone

from registry.audit.services import Actor, actor_label, audit_record
from registry.core.errors import ApplicationError
from registry.oauth.models import (
    AccessToken,
    AuthorizationServerPolicy,
    Client,
    ClientAuthorization,
    RefreshToken,
)
from registry.oauth.policy import registration_policy
from registry.oauth.selectors import person_may_act_as
from registry.oauth.tokens import access_tokens_forget
from registry.teams.models import Team, TeamRole
from registry.teams.signals import announce_team_change


@transaction.atomic
def client_authorization_grant(
    *, person: AbstractBaseUser | AnonymousUser, client: Client, team: Team, role: TeamRole
) -> ClientAuthorization:
    """Record the person's consent that `client` acts for them in `team` as `role` (kept until
    revoked; a new consent for the same client and team replaces the role)."""
    if not person_may_act_as(person=person, team_id=team.pk, role_id=role.pk):
        raise ApplicationError(
            f"{person.get_username()} may not act as '{role.name}' in '{team.slug}': choose one of "
            "your own teams and a role your membership allows.",
            field="choice",
        )
    existing = (
        ClientAuthorization.objects.select_for_update()
        .filter(person_id=person.pk, client=client, team=team, revoked_at__isnull=True)
        .first()
    )
    if existing is not None and existing.role_id == role.pk:
        return existing
    if existing is not None:
        _revoke(existing, actor=person, reason="replaced by a consent for another role")
    authorization = ClientAuthorization.objects.create(
        person=cast(Any, person), client=client, team=team, role=role
    )
    audit_record(
        actor=person,
        action="oauth.authorized",
        target=authorization,
        summary=f"{person.get_username()} let {client.display_name} act for them in {team.slug} "
        f"as {role.name}.",
        after={"client": client.client_id, "team": team.slug, "role": role.name},
    )
    return authorization


def _revoke(authorization: ClientAuthorization, *, actor: Actor, reason: str) -> None:
    now = timezone.now()
    ClientAuthorization.objects.filter(pk=authorization.pk).update(
        revoked_at=now, revoked_by=actor_label(actor)[:200]
    )
    authorization.revoked_at = now
    RefreshToken.objects.filter(authorization=authorization, revoked__isnull=True).update(
        revoked=now, updated=now
    )
    live = list(
        AccessToken.objects.filter(
            authorization=authorization, revoked_at__isnull=True
        ).values_list("pk", flat=True)
    )
    AccessToken.objects.filter(pk__in=live).update(revoked_at=now)
    # The cached lookups go, and the team's version moves even with no live token left: a
    # gateway process may still hold an identity checked at the old version.
    access_tokens_forget(access_token_ids=live)
    announce_team_change(team_ids=[authorization.team_id], reason="oauth.authorization_revoked")
    audit_record(
        actor=actor,
        action="oauth.authorization_revoked",
        target=authorization,
        summary=f"Revoked {authorization.client.display_name}'s access for "
        f"{authorization.person.get_username()} in {authorization.team.slug}"
        + (f": {reason}" if reason else "."),
        before={"tokens": len(live)},
    )


@transaction.atomic
def client_authorization_revoke(
    *, actor: Actor, authorization: ClientAuthorization, reason: str = ""
) -> ClientAuthorization:
    """Revoke a person's authorization of a client: its tokens stop working at once."""
    locked = (
        ClientAuthorization.objects.select_for_update()
        .select_related("client", "person", "team")
        .get(pk=authorization.pk)
    )
    if locked.revoked_at is not None:
        raise ApplicationError("This app's access was already revoked.")
    _revoke(locked, actor=actor, reason=reason)
    return locked


@transaction.atomic
def client_delete(*, actor: Actor, client: Client) -> None:
    """Remove a registered client: its authorizations are revoked (audited), then it goes with
    its codes and tokens."""
    for authorization in (
        ClientAuthorization.objects.select_for_update()
        .select_related("client", "person", "team")
        .filter(client=client, revoked_at__isnull=True)
    ):
        _revoke(authorization, actor=actor, reason="the client was removed")
    audit_record(
        actor=actor,
        action="oauth.client_removed",
        target=client,
        summary=f"Removed the registered client {client.display_name} ({client.client_id}).",
        before={"client_id": client.client_id, "source": str(client.registration_source)},
    )
    client.delete()


@transaction.atomic
def registration_policy_update(
    *, actor: Actor, metadata_documents: bool, dynamic_registration: bool
) -> AuthorizationServerPolicy:
    policy = AuthorizationServerPolicy.objects.select_for_update().get(pk=registration_policy().pk)
    before = {
        "client_id_metadata_documents": policy.client_id_metadata_documents,
        "dynamic_client_registration": policy.dynamic_client_registration,
    }
    policy.client_id_metadata_documents = metadata_documents
    policy.dynamic_client_registration = dynamic_registration
    policy.save()
    after = {
        "client_id_metadata_documents": metadata_documents,
        "dynamic_client_registration": dynamic_registration,
    }
    if before != after:
        audit_record(
            actor=actor,
            action="oauth.registration_policy_updated",
            target=policy,
            summary="Client registration: metadata documents "
            f"{'on' if metadata_documents else 'off'}, dynamic registration "
            f"{'on' if dynamic_registration else 'off'}.",
            before=before,
            after=after,
        )
    return policy
