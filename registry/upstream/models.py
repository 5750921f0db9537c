"""A per-person server's OAuth client at the upstream's authorization server, and each person's
linked account there, with its tokens encrypted at rest (registry/core/secret_fields.py)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from registry.core.secret_fields import EncryptedJSONField
from registry.servers.models import McpServer


class Registration(models.TextChoices):
    DYNAMIC = "dynamic", "Dynamic client registration (RFC 7591)"
    ADMIN = "admin", "A client id (and secret) the admin entered"


class UpstreamClient(models.Model):
    """What Toolroom knows of a per-person server's authorization server, and its client there.

    Discovery fills the endpoints (RFC 9728 from the server's 401, then RFC 8414); the client
    comes from dynamic registration, or from the admin (client id and, for a confidential client,
    the secret: encrypted)."""

    server = models.OneToOneField(
        McpServer, on_delete=models.CASCADE, related_name="upstream_client"
    )
    resource = models.CharField(max_length=2000, blank=True, help_text="RFC 8707 resource.")
    issuer = models.CharField(max_length=2000, blank=True)
    authorization_endpoint = models.CharField(max_length=2000, blank=True)
    token_endpoint = models.CharField(max_length=2000, blank=True)
    registration_endpoint = models.CharField(max_length=2000, blank=True)
    revocation_endpoint = models.CharField(max_length=2000, blank=True)
    scopes = models.CharField(
        max_length=1000, blank=True, help_text="Scopes to ask for, space-separated."
    )
    registration = models.CharField(
        max_length=10, choices=Registration.choices, default=Registration.DYNAMIC
    )
    client_id = models.CharField(max_length=500, blank=True)
    # {"client_secret": ...} for a confidential client; {} for a public one.
    client_secret = EncryptedJSONField(help_text="Encrypted at rest; never shown again.")
    redirect_uri = models.CharField(
        max_length=2000, blank=True, help_text="Toolroom's callback the client was registered with."
    )
    discovered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "upstream OAuth client"

    def __str__(self) -> str:
        return f"{self.server.slug} at {self.issuer or '(not discovered)'}"

    @property
    def ready(self) -> bool:
        return bool(self.authorization_endpoint and self.token_endpoint and self.client_id)


class AccountState(models.TextChoices):
    LINKED = "linked", "Linked"
    BROKEN = "broken", "Broken: re-link"


class UpstreamAccount(models.Model):
    """One person's account at one per-person server. Tokens are encrypted at rest and never
    shown, logged or exported; the access token is refreshed before it expires under this row's
    lock (`registry.upstream.tokens`)."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="accounts")
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="upstream_accounts"
    )
    state = models.CharField(max_length=10, choices=AccountState.choices)
    # {"access_token": ..., "refresh_token": ...}
    tokens = EncryptedJSONField(help_text="Encrypted at rest; never shown.")
    expires_at = models.DateTimeField(null=True, blank=True)
    scopes = models.CharField(max_length=1000, blank=True)
    subject = models.CharField(
        max_length=300, blank=True, help_text="Who the upstream says the account is, if it tells."
    )
    problem = models.CharField(max_length=500, blank=True, help_text="Why it broke.")
    linked_at = models.DateTimeField()
    refreshed_at = models.DateTimeField(null=True, blank=True)
    refreshes = models.PositiveIntegerField(default=0)
    # An admin's own account that discovery and health checks use (a per-person server has no
    # credential of Toolroom's own): at most one per server.
    for_discovery = models.BooleanField(
        default=False, help_text="Discovery and health checks of the server use this account."
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["server", "person"], name="one_account_per_server"),
            models.UniqueConstraint(
                fields=["server"],
                condition=models.Q(for_discovery=True),
                name="one_discovery_account_per_server",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.person} at {self.server.slug} ({self.state})"
