"""Agent tokens at the gateway: the registry's token authentication as a Starlette backend.

The SDK's `RequireAuthMiddleware` refuses requests without an `AuthenticatedUser`, and its session
manager binds every `Mcp-Session-Id` to the principal (`client_id`) that opened it. The lookup is
the registry's `token_authenticate` (cached; the same checks as the REST API), in the event loop,
rerun in a thread when a cache miss needs the database.

A token checked once is kept in this process with the team's catalogue version read from the
cache *before* that check. While the team's cached version is still that one (one cache read per
request, which the call check then reuses) the token is known good without a lookup: revoking a
token, like every change that can alter a decision, bumps the version, and expiry is compared with
the clock on every request.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from django.core.exceptions import SynchronousOnlyOperation
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.authentication import AuthCredentials, AuthenticationBackend
from starlette.requests import HTTPConnection

from registry.catalogue.versions import catalogue_state_cached
from registry.teams.tokens import (
    TOKEN_PREFIX,
    AgentIdentity,
    TokenRejected,
    token_authenticate,
    token_hash,
    token_mark_used,
)
from workers.gateway.calls import in_thread

# Where the request scope carries the team's catalogue version read with the token check.
VERSION_SCOPE_KEY = "toolroom.catalogue_version"
CHECKED_TOKENS_MAX = 10_000
_UNCONFIRMED = -1  # a version no team has: the next request checks the token again

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


@dataclass(frozen=True)
class _Checked:
    principal: AgentPrincipal
    version: int  # the team's version read from the cache before the token was last checked


class CheckedTokens:
    """The tokens this process has checked, by SHA-256, with the version they were checked at."""

    def __init__(self, *, limit: int = CHECKED_TOKENS_MAX) -> None:
        self.limit = limit
        self.entries: dict[str, _Checked] = {}

    def authenticate(self, *, plain: str) -> tuple[AgentPrincipal, int | None] | None:
        """The principal behind `plain` and the team's catalogue version read for this request
        (None: the call check reads it itself), or None when the token is not good now."""
        digest = token_hash(plain)
        known = self.entries.get(digest)
        state = None
        if known is not None:
            agent = known.principal.agent
            state = catalogue_state_cached(team_id=agent.team_id)
            fresh = agent.expires_at is None or agent.expires_at > time.time()
            if state is not None and state.version == known.version and fresh:
                token_mark_used(agent, may_write_database=False)
                return known.principal, state.version
        identity = agent_identity(plain=plain)
        if identity is None:
            self.entries.pop(digest, None)
            return None
        if (
            known is not None
            and state is not None
            and known.principal.agent.team_id == identity.team_id
        ):
            # Checked after this version was read: good for as long as the version holds.
            principal = known.principal
            if principal.agent != identity:
                principal = AgentPrincipal(identity, plain)
            self.entries[digest] = _Checked(principal, state.version)
            return principal, state.version
        if len(self.entries) >= self.limit:
            self.entries.clear()
        # No version was read before this check: the next request checks the token again and
        # confirms it at the version it reads first.
        principal = AgentPrincipal(identity, plain)
        self.entries[digest] = _Checked(principal, _UNCONFIRMED)
        return principal, None


class AgentTokenBackend(AuthenticationBackend):
    def __init__(self, checked: CheckedTokens | None = None) -> None:
        self.checked = checked or CheckedTokens()

    async def authenticate(
        self, conn: HTTPConnection
    ) -> tuple[AuthCredentials, AgentPrincipal] | None:
        plain = bearer_token(conn)
        if plain is None:
            return None
        try:  # from the cache, in the event loop; a cache miss reads the database in a thread
            found = self.checked.authenticate(plain=plain)
        except SynchronousOnlyOperation:
            found = await in_thread(self.checked.authenticate, plain=plain)
        if found is None:
            return None
        principal, version = found
        conn.scope[VERSION_SCOPE_KEY] = version
        return AuthCredentials([]), principal
