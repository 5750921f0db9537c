"""Who signed in through single sign-on: the link from an OpenID Connect identity to an account.

People are matched by the provider's issuer and subject, never by e-mail or user name, so an
identity provider account can never take over a local account (such as the admin's) that happens
to carry the same name or address.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class OidcIdentity(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identities"
    )
    issuer = models.CharField(max_length=300)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "single sign-on identity"
        verbose_name_plural = "single sign-on identities"
        constraints = [
            models.UniqueConstraint(
                fields=["issuer", "subject"],
                name="oidc_identity_unique_subject",
                violation_error_message="This identity is already linked to an account.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
