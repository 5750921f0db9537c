"""Single sign-on through the company's OpenID Connect provider (mozilla-django-oidc).

The library runs the authorization code flow (with PKCE) and verifies the ID token; this backend
only decides which account the verified identity is: `oidc_user_sign_in` matches it by issuer and
subject and keeps its team memberships in step with the configured claim. The callback view calls
Django's `authenticate()`, so whatever guards it (lockouts, signals) guards single sign-on too.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import SuspiciousOperation
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from registry.core.errors import ApplicationError
from registry.portal.services import oidc_user_sign_in


class PortalOidcBackend(OIDCAuthenticationBackend):
    def get_or_create_user(
        self, access_token: str, id_token: str, payload: dict[str, Any]
    ) -> AbstractBaseUser | None:
        claims: dict[str, Any] = self.get_userinfo(access_token, id_token, payload)  # type: ignore[no-untyped-call]
        if claims.get("sub") != payload.get("sub"):
            # OpenID Connect Core 5.3.2: the UserInfo answer must be about the ID token's subject.
            raise SuspiciousOperation("The UserInfo subject differs from the ID token's.")
        try:
            return oidc_user_sign_in(issuer=str(payload.get("iss") or ""), claims=claims)
        except ApplicationError as exc:
            raise SuspiciousOperation(exc.message) from exc
