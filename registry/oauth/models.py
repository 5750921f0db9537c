"""The authorization server's rows: registered clients, codes, tokens (django-oauth-toolkit's
models, swapped for these so each carries the person's client authorization), the authorizations
themselves, and the admin's switches for client registration.

A `ClientAuthorization` is a person's consent that one client acts for them in one team, as one
role. Codes and tokens point at it: revoking it revokes them, and the gateway checks it (with the
person's membership) on every call. Access tokens are revoked by marking them, not deleting them,
so a client presenting one is told it was revoked rather than that it is unknown.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models, router, transaction
from django.db.models import Q
from django.utils import timezone
from oauth2_provider.models import (
    AbstractAccessToken,
    AbstractApplication,
    AbstractDeviceGrant,
    AbstractGrant,
    AbstractIDToken,
    AbstractRefreshToken,
)

from registry.teams.models import Team, TeamRole


class Client(AbstractApplication):
    """A registered client: an admin's, one that registered itself (RFC 7591), or one known by
    its metadata document's URL (Client ID Metadata Documents)."""

    class Meta(AbstractApplication.Meta):
        swappable = "OAUTH2_PROVIDER_APPLICATION_MODEL"
        verbose_name = "registered client"
        ordering = ["name", "client_id"]

    def natural_key(self) -> tuple[str]:
        return (self.client_id,)

    @property
    def display_name(self) -> str:
        return str(self.name or self.client_id)

    @property
    def metadata_verified(self) -> bool:
        """Whether the client's name and redirect addresses come from somewhere other than the
        client's own claim: an admin registered it, or its metadata document was fetched from the
        HTTPS address that is its identifier. Self-registered (RFC 7591) clients say what they
        like about themselves."""
        return str(self.registration_source) != "dcr"


class ClientAuthorization(models.Model):
    """A person's consent: `client` may act for `person` in `team` as `role`, until revoked."""

    person = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="client_authorizations"
    )
    client = models.ForeignKey(Client, on_delete=models.CASCADE, related_name="authorizations")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="client_authorizations")
    role = models.ForeignKey(TeamRole, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "connected app"
        constraints = [
            models.UniqueConstraint(
                fields=["person", "client", "team"],
                condition=Q(revoked_at__isnull=True),
                name="client_authorization_one_live_per_team",
                violation_error_message="This person already authorized this client for the team.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.client} for {self.person} in {self.team_id}"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class Grant(AbstractGrant):
    """An authorization code. Kept after its exchange (marked used, with the token family it
    started), so a second exchange is recognised and revokes what the first one issued."""

    authorization: models.ForeignKey[ClientAuthorization | None, ClientAuthorization | None] = (
        models.ForeignKey(
            ClientAuthorization, null=True, on_delete=models.CASCADE, related_name="+"
        )
    )
    used_at: models.DateTimeField[Any, Any] = models.DateTimeField(null=True, blank=True)
    token_family: models.UUIDField[Any, Any] = models.UUIDField(
        null=True, blank=True, editable=False
    )

    class Meta(AbstractGrant.Meta):
        swappable = "OAUTH2_PROVIDER_GRANT_MODEL"
        verbose_name = "authorization code"


class AccessToken(AbstractAccessToken):
    authorization: models.ForeignKey[ClientAuthorization | None, ClientAuthorization | None] = (
        models.ForeignKey(
            ClientAuthorization, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
        )
    )
    revoked_at: models.DateTimeField[Any, Any] = models.DateTimeField(null=True, blank=True)

    class Meta(AbstractAccessToken.Meta):
        swappable = "OAUTH2_PROVIDER_ACCESS_TOKEN_MODEL"

    def revoke(self) -> None:
        """Mark the token revoked (the toolkit deletes it): a client presenting it is told so."""
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            type(self).objects.filter(pk=self.pk, revoked_at__isnull=True).update(
                revoked_at=self.revoked_at
            )
        tokens_revoked_hook([self.pk])


class RefreshToken(AbstractRefreshToken):
    authorization: models.ForeignKey[ClientAuthorization | None, ClientAuthorization | None] = (
        models.ForeignKey(
            ClientAuthorization, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
        )
    )

    class Meta(AbstractRefreshToken.Meta):
        swappable = "OAUTH2_PROVIDER_REFRESH_TOKEN_MODEL"

    @classmethod
    def revoke_family(cls, token_family: Any) -> None:
        """Revoke every refresh token of the family and mark its access tokens revoked (the
        toolkit deletes them), in a constant number of queries."""
        if not token_family:
            return
        with transaction.atomic(using=router.db_for_write(AccessToken)):
            now = timezone.now()
            cls.objects.filter(token_family=token_family, revoked__isnull=True).update(
                revoked=now, updated=now
            )
            family_access = AccessToken.objects.filter(
                Q(pk__in=cls.objects.filter(token_family=token_family).values("access_token_id"))
                | Q(source_refresh_token__token_family=token_family)
            )
            ids = list(family_access.filter(revoked_at__isnull=True).values_list("pk", flat=True))
            AccessToken.objects.filter(pk__in=ids).update(revoked_at=now)
            tokens_revoked_hook(ids, family=True)


class IDToken(AbstractIDToken):
    class Meta(AbstractIDToken.Meta):
        swappable = "OAUTH2_PROVIDER_ID_TOKEN_MODEL"


class DeviceGrant(AbstractDeviceGrant):
    class Meta(AbstractDeviceGrant.Meta):
        swappable = "OAUTH2_PROVIDER_DEVICE_GRANT_MODEL"


class AuthorizationServerPolicy(models.Model):
    """The admin's switches for how clients may register (one row)."""

    client_id_metadata_documents = models.BooleanField(
        default=True,
        help_text="Clients may use the HTTPS address of their metadata document as their client "
        "ID (the way the MCP specification prefers); Toolroom fetches it through the network "
        "guard.",
    )
    dynamic_client_registration = models.BooleanField(
        default=True,
        help_text="Clients may register themselves (RFC 7591). Their names are unverified and "
        "shown as such on the consent page.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "client registration policy"
        verbose_name_plural = "client registration policy"

    def __str__(self) -> str:
        return "Client registration policy"


def tokens_revoked_hook(access_token_ids: list[int], *, family: bool = False) -> None:
    """Tell the gateway's caches (registry.oauth.tokens) that these access tokens were revoked;
    a refresh's own rotation included. Set by registry.oauth.tokens (the model layer below it)."""
    from registry.oauth.tokens import access_tokens_revoked  # noqa: PLC0415 (a cycle otherwise)

    access_tokens_revoked(access_token_ids=access_token_ids, family=family)
