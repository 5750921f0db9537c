"""Agent-token authentication for DRF: `Authorization: Bearer trm_...` -> the agent's identity.

An agent is not a Django user: `request.user` is an `AgentUser` (authenticated, no permissions)
and `request.auth` the `AgentIdentity` (team, role, token). Unknown, wrong, revoked and expired
tokens all get the same 401, so the answer tells nothing about which it was.
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from registry.core.cache import CatalogueCache, catalogue_cache
from registry.teams.tokens import TOKEN_PREFIX, AgentIdentity, TokenRejected, token_authenticate

logger = logging.getLogger(__name__)

INVALID_TOKEN_MESSAGE = "The agent token is invalid, expired or revoked."  # noqa: S105


class AgentUser(AnonymousUser):
    """What `request.user` is for an agent: authenticated, but no person and no permissions."""

    def __init__(self, identity: AgentIdentity) -> None:
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


class AgentTokenFailureThrottle(SimpleRateThrottle):
    """Failed agent-token authentications per client address (the `agent_token_failures` rate,
    counted in the cache, Redis in production). Past the rate, that address is refused with 429
    before its tokens are looked up, until the window moves on.

    The counts go through the catalogue's cache handle (short timeouts, a circuit): while the
    cache is down (degraded mode) agents keep being served from the database and failures are
    not counted, rather than every request waiting for or failing on Redis."""

    scope = "agent_token_failures"

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def _load(self, request: Any) -> tuple[CatalogueCache, str, int, int] | None:
        cache = catalogue_cache()
        if cache is None:
            return None
        limit, window = self.parse_rate(self.rate)
        key = self.get_cache_key(request, None)
        self.history = cache.get(key) or []
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - (window or 0):
            self.history.pop()
        return cache, key, limit or 0, window or 0

    def blocked_for(self, request: Any) -> float | None:
        """Seconds this address must wait, or None if it may try a token."""
        if self.rate is None or (loaded := self._load(request)) is None:
            return None
        _cache, _key, limit, window = loaded
        if len(self.history) < limit:
            return None
        return max(0.0, float(window - (self.now - self.history[-1])))

    def record_failure(self, request: Any) -> None:
        if self.rate is None or (loaded := self._load(request)) is None:
            return
        cache, key, _limit, window = loaded
        self.history.insert(0, self.now)
        cache.set(key, self.history, window)


class AgentTokenAuthentication(BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[AgentUser, AgentIdentity] | None:
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        failures = AgentTokenFailureThrottle()
        wait = failures.blocked_for(request)
        if wait is not None:
            # Too many wrong tokens from this address: refused before any lookup.
            raise exceptions.Throttled(wait=wait)
        try:
            if len(header) != 2:
                raise TokenRejected("malformed")
            try:
                plain = header[1].decode("ascii")
            except UnicodeDecodeError as exc:
                raise TokenRejected("malformed") from exc
            if not plain.startswith(f"{TOKEN_PREFIX}_"):
                raise TokenRejected("malformed")
            identity = token_authenticate(plain)
        except TokenRejected as exc:
            logger.info("agent token refused: %s", exc.reason)
            failures.record_failure(request)
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
            "bearerFormat": "trm_<prefix>_<secret>",
            "description": "An agent token of one team and role.",
        }
