"""Agent tokens at the gateway: the registry's token authentication as a Starlette backend.

The SDK's `RequireAuthMiddleware` refuses requests without an `AuthenticatedUser`, and its session
manager binds every `Mcp-Session-Id` to the principal (`client_id`) that opened it. The lookup is
the registry's `token_authenticate` (cached; the same checks as the REST API), run in a thread
because a cache miss reads the database.
"""

from __future__ import annotations

import logging

from django.core.exceptions import SynchronousOnlyOperation
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.authentication import AuthCredentials, AuthenticationBackend
from starlette.requests import HTTPConnection

from registry.teams.tokens import (
    TOKEN_PREFIX,
    AgentIdentity,
    TokenRejected,
    token_authenticate,
    token_mark_used,
)
from workers.gateway.calls import in_thread

logger = logging.getLogger(__name__)


class AgentPrincipal(AuthenticatedUser):
    """An authenticated agent: the SDK's user type, carrying the registry's identity."""

    def __init__(self, identity: AgentIdentity, plain: str) -> None:
        super().__init__(
            AccessToken(
                token=plain,
                client_id=f"agent-token:{identity.token_id}",
                scopes=[],
                expires_at=int(identity.expires_at) if identity.expires_at else None,
            )
        )
        self.agent = identity


def agent_identity(*, plain: str) -> AgentIdentity | None:
    """The identity behind a bearer token, or None (and the last use recorded)."""
    if not plain.startswith(f"{TOKEN_PREFIX}_"):
        return None
    try:
        identity = token_authenticate(plain)
    except TokenRejected as exc:
        logger.info("gateway: agent token refused: %s", exc.reason)
        return None
    token_mark_used(identity, may_write_database=False)
    return identity


def bearer_token(conn: HTTPConnection) -> str | None:
    header = conn.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


class AgentTokenBackend(AuthenticationBackend):
    async def authenticate(
        self, conn: HTTPConnection
    ) -> tuple[AuthCredentials, AgentPrincipal] | None:
        plain = bearer_token(conn)
        if plain is None:
            return None
        try:  # from the cache, in the event loop; a cache miss reads the database in a thread
            identity = agent_identity(plain=plain)
        except SynchronousOnlyOperation:
            identity = await in_thread(agent_identity, plain=plain)
        if identity is None:
            return None
        return AuthCredentials([]), AgentPrincipal(identity, plain)
