"""Bearer tokens for DRF: an agent token (`trm_...`) -> the agent's identity; a person's OAuth
access token (`tra_...`, docs/authentication.md) -> the person acting through an app.

More: docs/authentication.md, "Module notes"."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from registry.core.client_address import request_client_address
from registry.oauth.tokens import PersonTokenRejected, is_access_token, person_token_authenticate
from registry.teams.callers import Caller
from registry.teams.token_failures import token_failure_count
from registry.teams.tokens import TOKEN_PREFIX, TokenRejected, token_authenticate

logger = logging.getLogger(__name__)

INVALID_TOKEN_MESSAGE = "The agent token is invalid, expired or revoked."  # noqa: S105


class AgentUser(AnonymousUser):
    """What `request.user` is for a bearer token: authenticated, no session, no permissions (a
    person's token acts only as far as their team's catalogue, never as their Django user)."""

    def __init__(self, identity: Caller) -> None:
        super().__init__()
        self.identity = identity
        self.username = identity.label  # type: ignore[assignment]

    @property
    def is_anonymous(self) -> bool:  # type: ignore[override]
        return False

    @property
    def is_authenticated(self) -> bool:  # type: ignore[override]
        return True

    def __str__(self) -> str:
        return self.username


class AgentTokenAuthentication(BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[AgentUser, Caller] | None:
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        plain = ""
        try:
            if len(header) != 2:
                raise TokenRejected("malformed")
            try:
                plain = header[1].decode("ascii")
            except UnicodeDecodeError as exc:
                raise TokenRejected("malformed") from exc
            if is_access_token(plain):
                identity: Caller = person_token_authenticate(plain).identity
            elif not plain.startswith(f"{TOKEN_PREFIX}_"):
                raise TokenRejected("malformed")
            else:
                identity = token_authenticate(plain)
        except PersonTokenRejected as exc:
            logger.info("person's token refused: %s", exc.code)
            wait = token_failure_count(
                address=request_client_address(request), plain=plain, reason=exc.code
            )
            if wait is not None:
                raise exceptions.Throttled(wait=wait) from exc
            raise exceptions.AuthenticationFailed(exc.description) from exc
        except TokenRejected as exc:
            logger.info("agent token refused: %s", exc.reason)
            wait = token_failure_count(
                address=request_client_address(request),
                plain=plain,
                reason=exc.reason,
            )
            if wait is not None:
                # Too many refusals of this token (or of made-up ones) from this address.
                raise exceptions.Throttled(wait=wait) from exc
            raise exceptions.AuthenticationFailed(INVALID_TOKEN_MESSAGE) from exc
        return AgentUser(identity), identity

    def authenticate_header(self, request: Any) -> str:
        return f'{self.keyword} realm="toolroom"'


class AgentTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """Describes agent tokens in the OpenAPI schema as HTTP bearer authentication."""

    target_class = "registry.api.authentication.AgentTokenAuthentication"
    name = "agentToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "trm_<prefix>_<secret> or tra_<token>",
            "description": "An agent token of one team and role, or the OAuth access token of a "
            "person's app (for one of their teams and roles; docs/authentication.md).",
        }
