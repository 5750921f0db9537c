"""Callers at the gateway: agent tokens and people's OAuth access tokens, as a Starlette backend.

More: docs/gateway.md, "Module notes".
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from django.core.exceptions import SynchronousOnlyOperation
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.authentication import AuthCredentials, AuthenticationBackend, AuthenticationError
from starlette.requests import HTTPConnection

from registry.gateway.port import (
    NO_TOKEN,
    NOT_A_TOKEN,
    Caller,
    CallerRefused,
    DatabaseUnavailable,
    caller_check,
    caller_key,
    caller_mark_used,
    scope_client_address,
    team_catalogue_version_cached,
    token_failure_count,
    token_hash,
)
from workers.gateway.registry_calls import in_thread

# Where the request scope carries the team's catalogue version read with the token check.
VERSION_SCOPE_KEY = "toolroom.catalogue_version"
CHECKED_TOKENS_MAX = 10_000
_UNCONFIRMED = -1  # a version no team has: the next request checks the token again

logger = logging.getLogger(__name__)


class CallerPrincipal(AuthenticatedUser):
    """An authenticated caller: the SDK's user type, carrying the registry's identity."""

    def __init__(self, caller: Caller, plain: str) -> None:
        super().__init__(
            AccessToken(
                token=plain,
                client_id=caller_key(caller),
                scopes=[],
                expires_at=int(caller.expires_at) if caller.expires_at else None,
            )
        )
        self.caller = caller


class TokenRefused(AuthenticationError):
    """The bearer token is not good; the message is the 401's error_description, `reason` what
    the failure count files it under (`TokenRejected.reason`, or a person's token's code)."""

    def __init__(self, description: str, reason: str = "malformed") -> None:
        super().__init__(description)
        self.reason = reason


class TokenFailuresThrottled(AuthenticationError):
    """Too many refused tokens like this one from this client address: answered 429."""

    def __init__(self, wait: float) -> None:
        super().__init__(f"too many refused tokens; retry in {wait:.0f} s")
        self.wait = wait


class TokenUncheckable(AuthenticationError):
    """The token could not be checked: what it needs (the database) is away. Answered 503."""


def bearer_token(conn: HTTPConnection) -> str | None:
    header = conn.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


@dataclass(frozen=True)
class _Checked:
    principal: CallerPrincipal
    version: int  # the team's version the token (and a person's standing) was checked at


class CheckedTokens:
    """The tokens this process has checked, by SHA-256, with the version they were checked at."""

    def __init__(self, *, limit: int = CHECKED_TOKENS_MAX) -> None:
        self.limit = limit
        self.entries: dict[str, _Checked] = {}

    def authenticate(self, *, plain: str) -> tuple[CallerPrincipal, int | None]:
        """The principal behind `plain` and the team's catalogue version read for this request
        (None: the call check reads it itself); TokenRefused when the token is not good now."""
        digest = token_hash(plain)
        known = self.entries.get(digest)
        version = None
        if known is not None:
            caller = known.principal.caller
            version = team_catalogue_version_cached(team_id=caller.team_id)
            fresh = caller.expires_at is None or caller.expires_at > time.time()
            if version is not None and version == known.version and fresh:
                caller_mark_used(caller, may_write_database=False)
                return known.principal, version
        try:
            checked = caller_check(plain=plain, cached_version=version)
        except CallerRefused as exc:
            self.entries.pop(digest, None)
            raise TokenRefused(exc.description, exc.reason) from exc
        person = checked.caller
        checked_at = _UNCONFIRMED if checked.version is None else checked.version
        if known is not None and known.principal.caller.team_id != person.team_id:
            checked_at = _UNCONFIRMED  # the version read was another team's
        principal = known.principal if known is not None else None
        if principal is None or principal.caller != person:
            principal = CallerPrincipal(person, plain)
        if len(self.entries) >= self.limit:
            self.entries.clear()
        # An agent token checked without a version read first (or a person's standing read at a
        # version the cache does not hold yet) is checked again on the next request.
        self.entries[digest] = _Checked(principal, checked_at)
        if version is not None and checked_at == version:
            return principal, version
        return principal, None


class CallerTokenBackend(AuthenticationBackend):
    """Bearer tokens: agents' and people's. A refused token is counted by client address and
    token prefix (past the rate: 429 instead of 401)."""

    def __init__(self, checked: CheckedTokens | None = None) -> None:
        self.checked = checked or CheckedTokens()

    async def authenticate(
        self, conn: HTTPConnection
    ) -> tuple[AuthCredentials, CallerPrincipal] | None:
        plain = bearer_token(conn)
        if plain is None:
            return None
        try:
            try:  # from the cache, in the event loop; a cache miss reads the database in a thread
                principal, version = self.checked.authenticate(plain=plain)
            except SynchronousOnlyOperation:
                principal, version = await in_thread(self.checked.authenticate, plain=plain)
        except DatabaseUnavailable as exc:
            raise TokenUncheckable(str(exc)) from exc
        except TokenRefused as exc:
            try:
                wait = await in_thread(
                    token_failure_count,
                    address=scope_client_address(conn.scope),
                    plain=plain,
                    reason=exc.reason,
                )
            except DatabaseUnavailable:
                wait = None  # refused all the same; only not counted
            if wait is not None:
                raise TokenFailuresThrottled(wait) from exc
            raise
        conn.scope[VERSION_SCOPE_KEY] = version
        return AuthCredentials([]), principal


def refusal_description(conn: HTTPConnection, exc: Exception | None) -> str:
    """The 401's error_description: the refusal's own, or that no token was sent."""
    if isinstance(exc, TokenRefused) and str(exc):
        return str(exc)
    if bearer_token(conn) is None:
        return NO_TOKEN
    return NOT_A_TOKEN
