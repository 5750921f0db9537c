"""The gateway's ASGI application: `/mcp` (the SDK's Streamable HTTP transport, both protocol
generations), `POST /api/v1/tools/{name}/call` for agents that do not speak MCP, and `/healthz`.

Every route but `/healthz` needs an agent token (`Authorization: Bearer trm_...`). The lifespan
runs the SDK's session manager, the upstream pool and the audit recorder in one task group.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator

import anyio
from django.conf import settings
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from registry.gateway import calls as checks
from registry.gateway.identity import identity_jwks
from registry.gateway.models import CallOutcome
from workers.gateway.auth import VERSION_SCOPE_KEY, AgentPrincipal, AgentTokenBackend
from workers.gateway.calls import (
    ERROR_META,
    IDENTITY_HEADER,
    IDENTITY_META,
    NOT_RUNNING,
    SERVER_BUSY,
    UPSTREAM_TIMEOUT,
    Gateway,
)
from workers.gateway.mcp_server import CONVERSATION_HEADER, GatewayServer
from workers.gateway.recorder import CallRecorder
from workers.session_pool import UpstreamPool

logger = logging.getLogger(__name__)

MAX_REST_BODY_BYTES = 4 * 1024 * 1024
# How an upstream failure maps onto HTTP for the REST endpoint (refusals: the registry's map).
_UPSTREAM_STATUS = {
    SERVER_BUSY: 503,
    NOT_RUNNING: 503,
    UPSTREAM_TIMEOUT: 504,
}


def _error(status: int, code: str, message: str, **headers: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message, "fields": {}}},
        status_code=status,
        headers=headers or None,
    )


def _unauthorized() -> JSONResponse:
    return _error(
        401,
        "not_authenticated",
        "The agent token is invalid, expired or revoked.",
        **{"WWW-Authenticate": 'Bearer realm="toolroom"'},
    )


def build_gateway_app() -> Starlette:
    """A new gateway application (one per process; tests build their own)."""
    recorder = CallRecorder()
    # The caller's identity token also travels as a header to HTTP servers (docs/gateway.md).
    pool = UpstreamPool(
        idle_seconds=float(settings.TOOLROOM_GATEWAY_IDLE_SECONDS),
        meta_headers={IDENTITY_META: IDENTITY_HEADER},
        answer_questions=True,
    )
    gateway = Gateway(pool=pool, recorder=recorder)
    server = GatewayServer(gateway).build()
    # Agents authenticate with a bearer token, never an ambient credential (cookie), so a
    # DNS-rebound page cannot act as an agent; the Host header is checked by the proxy in front.
    # Plain JSON answers (no SSE framing) for requests: cheaper on both sides. Servers' messages
    # to the client outside a request go on the session's GET stream, as the transport has it.
    manager = StreamableHTTPSessionManager(
        app=server,
        json_response=True,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        session_idle_timeout=float(settings.TOOLROOM_GATEWAY_IDLE_SECONDS),
    )
    mcp_endpoint = RequireAuthMiddleware(StreamableHTTPASGIApp(manager), [])

    async def rest_call(request: Request) -> Response:
        user = request.scope.get("user")
        if not isinstance(user, AgentPrincipal):
            return _unauthorized()
        body = await request.body()
        if len(body) > MAX_REST_BODY_BYTES:
            return _error(413, "too_large", "The request body is larger than 4 MiB.")
        try:
            payload = json.loads(body or b"{}")
        except (ValueError, RecursionError):
            return _error(400, "invalid", "The body is not JSON.")
        arguments = payload.get("arguments", {}) if isinstance(payload, dict) else None
        if not isinstance(arguments, dict):
            return _error(400, "invalid", 'The body must be {"arguments": {...}}.')
        identity = user.agent
        outcome = await gateway.call(
            identity=identity,
            name=request.path_params["name"],
            arguments=arguments,
            conversation=checks.rest_conversation_key(
                token_id=identity.token_id,
                conversation=request.headers.get(CONVERSATION_HEADER, ""),
            ),
            via="rest",
            version=request.scope.get(VERSION_SCOPE_KEY),
        )
        if outcome.code != checks.ALLOWED:
            meta = outcome.result["_meta"][ERROR_META]
            if outcome.outcome == CallOutcome.REFUSED:
                status = checks.refusal_http_status(outcome.code)
            else:
                status = _UPSTREAM_STATUS.get(outcome.code, 502)
            return _error(status, outcome.code, meta["message"])
        result = outcome.result
        return JSONResponse(
            {
                "content": result.get("content", []),
                "structuredContent": result.get("structuredContent"),
                "isError": bool(result.get("isError", False)),
            }
        )

    async def jwks(request: Request) -> Response:
        keys = await anyio.to_thread.run_sync(identity_jwks)
        return JSONResponse(keys, headers={"Cache-Control": "public, max-age=300"})

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True, "upstreamSessions": len(pool.sessions)})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run(), anyio.create_task_group() as group:
            pool.attach(group)
            group.start_soon(recorder.run)
            try:
                yield
            finally:
                await pool.close()
                await recorder.flush()
                group.cancel_scope.cancel()

    def auth_error(conn: HTTPConnection, exc: Exception) -> Response:
        return _unauthorized()

    app = Starlette(
        routes=[
            Route("/mcp", endpoint=mcp_endpoint),
            Route("/mcp/", endpoint=mcp_endpoint),
            Route("/api/v1/tools/{name}/call", endpoint=rest_call, methods=["POST"]),
            Route("/healthz", endpoint=healthz, methods=["GET"]),
            Route("/.well-known/jwks.json", endpoint=jwks, methods=["GET"]),
        ],
        middleware=[
            Middleware(AuthenticationMiddleware, backend=AgentTokenBackend(), on_error=auth_error),
            Middleware(AuthContextMiddleware),
        ],
        lifespan=lifespan,
    )
    app.state.gateway = gateway
    app.state.recorder = recorder
    app.state.pool = pool
    return app
