"""Handshake sessions counted against the open-session quotas: the SDK's session manager, told
when a session opens and ends, and the ASGI step before it that takes a session's lease (or
answers 429 with `Retry-After`) for a request that would open one."""

from __future__ import annotations

import json
from contextvars import ContextVar
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Receive, Scope, Send

from workers.gateway.auth import VERSION_SCOPE_KEY, CallerPrincipal
from workers.gateway.quotas import QUOTA_ERROR_CODE, QuotaRefused, Quotas
from workers.gateway.shared_sessions import SharedSessionManager

# The session a request opened, for the step that took its lease (same task: a context variable).
_opened: ContextVar[list[str] | None] = ContextVar("toolroom_session_opened", default=None)


class CountedSessions(SharedSessionManager):
    """The shared session manager (any replica serves a session), which releases a session's
    lease however the session ends (client DELETE, idle timeout, crash, an opening request that
    failed). The replica that opened a session holds its lease; a DELETE on any replica gives
    it back (`Quotas.session_ended`)."""

    def __init__(self, quotas: Quotas, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.quotas = quotas

    def _admit_session(
        self, requestor: AuthorizationContext | None
    ) -> StreamableHTTPServerTransport | None:
        transport = super()._admit_session(requestor)
        opened = _opened.get()
        if transport is not None and opened is not None and transport.mcp_session_id:
            opened.append(transport.mcp_session_id)
        return transport

    async def _discard_session(
        self, session_id: str, transport: StreamableHTTPServerTransport
    ) -> None:
        await super()._discard_session(session_id, transport)
        await self.quotas.session_closed(session_id)

    async def session_ended(self, session_id: str) -> None:
        await self.quotas.session_ended(session_id)

    def is_open(self, session_id: str) -> bool:
        return session_id in self._server_instances


def opens_session(scope: Scope) -> bool:
    """Whether the SDK would open a handshake session for this request: no session id, and a
    handshake protocol version (or none; 2026-07-28 requests keep no session)."""
    session = version = None
    for key, value in scope.get("headers", []):
        if key == b"mcp-session-id":
            session = value
        elif key == b"mcp-protocol-version":
            version = value.decode("latin-1")
    return session is None and (version is None or version in HANDSHAKE_PROTOCOL_VERSIONS)


async def quota_response(error: QuotaRefused, send: Send) -> None:
    """429 with Retry-After and a JSON-RPC error naming the limit."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": QUOTA_ERROR_CODE,
                "message": f"Toolroom: {error.message}",
                "data": {"limit": error.limit, "retryAfter": error.retry_after},
            },
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(error.retry_after).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class SessionQuota:
    """Before the SDK opens a handshake session: take its lease from the caller's and the team's
    open-session quotas (429 past one), keep it while the session lives, give it back if the
    opening request did not open one."""

    def __init__(self, app: ASGIApp, manager: CountedSessions) -> None:
        self.app = app
        self.manager = manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = scope.get("user")
        if not isinstance(user, CallerPrincipal) or not opens_session(scope):
            await self.app(scope, receive, send)
            return
        quotas = self.manager.quotas
        try:
            lease = await quotas.session_open(user.caller, scope.get(VERSION_SCOPE_KEY))
        except QuotaRefused as exc:
            await quota_response(exc, send)
            return
        if lease is None:
            await self.app(scope, receive, send)
            return
        opened: list[str] = []
        token = _opened.set(opened)
        try:
            await self.app(scope, receive, send)
        finally:
            _opened.reset(token)
            if opened and self.manager.is_open(opened[0]):
                await quotas.session_opened(lease, opened[0])
            else:
                await quotas.release(lease)
