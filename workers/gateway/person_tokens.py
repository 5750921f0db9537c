"""Each person's upstream token (or the secret they entered), as one gateway process holds it,
and the HTTP auth that puts it on the person's own upstream session.

More: docs/authentication.md, "Module notes".
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from contextvars import ContextVar
from dataclasses import dataclass

import httpx2

from registry.gateway import port
from registry.gateway.port import UpstreamAccountUnusable, UpstreamToken
from workers.gateway.registry_calls import in_thread

# Ask the registry again this long before the token expires (it refreshes a minute before).
LOCAL_MARGIN_SECONDS = 30.0
HTTP_UNAUTHORIZED = 401

Key = tuple[int, int]  # (server id, person id)
Seen = tuple[int | None, int | None]  # (team id, the team's catalogue version) of the call


@dataclass
class UpstreamUse:
    """One call's use of a person's upstream account: `seen` in (the call's team and version),
    the account out (for the call's record: which upstream identity, never the token)."""

    seen: Seen | None = None
    account_id: int | None = None
    subject: str = ""


current_upstream_use: ContextVar[UpstreamUse | None] = ContextVar(
    "current_upstream_use", default=None
)


def _fresh(token: UpstreamToken | None, refused: str) -> bool:
    if token is None or token.access_token == refused:
        return False
    return token.expires_at is None or token.expires_at - time.time() > LOCAL_MARGIN_SECONDS


class PersonTokens:
    """The upstream tokens of the people who called through this process."""

    def __init__(self) -> None:
        self.tokens: dict[Key, UpstreamToken] = {}
        self.seen: dict[Key, Seen] = {}  # the team version each token was asked for at
        self.locks: dict[Key, asyncio.Lock] = {}
        # Why the last request of a person's session could not be authorized (read by the call).
        self.failures: dict[Key, UpstreamAccountUnusable] = {}

    def _held(self, key: Key, refused: str, seen: Seen | None) -> UpstreamToken | None:
        held = self.tokens.get(key)
        if not _fresh(held, refused):
            return None
        if seen is not None and seen[1] is not None and self.seen.get(key) != seen:
            return None  # the team's version moved since: the account may have changed
        return held

    async def token(
        self, key: Key, *, refused: str = "", seen: Seen | None = None
    ) -> UpstreamToken:
        """The person's token for the server; UpstreamAccountUnusable if there is none.
        `seen`: the call's team and catalogue version (a token held at another is asked again)."""
        held = self._held(key, refused, seen)
        if held is not None:
            return held
        lock = self.locks.setdefault(key, asyncio.Lock())
        async with lock:
            held = self._held(key, refused, seen)
            if held is not None:  # another call of this process got it meanwhile
                return held
            try:
                fetched: UpstreamToken = await in_thread(
                    port.upstream_access_token,
                    server_id=key[0],
                    person_id=key[1],
                    refused=refused,
                )
            except UpstreamAccountUnusable:
                self.tokens.pop(key, None)
                raise
            self.tokens[key] = fetched
            if seen is not None:
                self.seen[key] = seen
            self.failures.pop(key, None)
            return fetched

    def failure(self, key: Key) -> UpstreamAccountUnusable | None:
        return self.failures.pop(key, None)

    def auth(self, key: Key) -> PersonAuth:
        return PersonAuth(self, key)


class PersonAuth(httpx2.Auth):
    """One person's upstream token in its header (`Authorization: Bearer`, or the header the
    admin named for a secret), asked again once on a 401."""

    requires_request_body = True

    def __init__(self, tokens: PersonTokens, key: Key) -> None:
        self.tokens = tokens
        self.key = key

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        await request.aread()
        try:
            token = await self.tokens.token(self.key)
        except UpstreamAccountUnusable as exc:
            self.tokens.failures[self.key] = exc
            yield request  # unauthorized: the upstream's 401 ends the call, which reads why
            return
        request.headers[token.header] = token.value
        response = yield request
        if response.status_code != HTTP_UNAUTHORIZED:
            return
        try:
            token = await self.tokens.token(self.key, refused=token.access_token)
        except UpstreamAccountUnusable as exc:
            self.tokens.failures[self.key] = exc
            return
        request.headers[token.header] = token.value
        yield request
