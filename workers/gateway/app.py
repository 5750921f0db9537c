"""The gateway's ASGI application: `/mcp` (the SDK's Streamable HTTP transport, both protocol
generations), `POST /api/v1/tools/{name}/call` for agents that do not speak MCP, and `/healthz`.

More: docs/gateway.md, "Module notes"."""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import AsyncIterator

import anyio
from django.conf import settings
from django.core.exceptions import SynchronousOnlyOperation
from django.db import close_old_connections
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from registry.gateway.port import (
    ALLOWED,
    LONE_SURROGATE_MESSAGE,
    PRM_PATH,
    QUOTA_EXCEEDED,
    CallOutcome,
    DatabaseUnavailable,
    api_error_body,
    caller_key,
    degraded_answer_counted,
    degraded_marker,
    gateway_health,
    identity_jwks,
    json_has_lone_surrogate,
    protected_resource_metadata,
    refusal_http_status,
    render_result,
    resource_metadata_url,
    rest_conversation_key,
    result_format_error,
)
from workers.definitions import DefinitionWatch
from workers.gateway.auth import (
    VERSION_SCOPE_KEY,
    CallerPrincipal,
    CallerTokenBackend,
    TokenFailuresThrottled,
    TokenUncheckable,
    refusal_description,
)
from workers.gateway.mcp_server import CONVERSATION_HEADER, GatewayServer
from workers.gateway.outcomes import (
    DATABASE_UNAVAILABLE,
    ERROR_META,
    NOT_RUNNING,
    SERVER_BUSY,
    UPSTREAM_TIMEOUT,
)
from workers.gateway.quotas import Quotas
from workers.gateway.recorder import CallRecorder
from workers.gateway.sessions import CountedSessions, SessionQuota
from workers.gateway.shared_sessions import store_from_settings
from workers.gateway.upstream import (
    IDENTITY_HEADER,
    IDENTITY_META,
    Gateway,
)
from workers.gateway.upstream_sessions import definitions_checked
from workers.session_pool import UpstreamPool

logger = logging.getLogger(__name__)

MAX_REST_BODY_BYTES = 4 * 1024 * 1024
# What /healthz may take (a balancer checks every 2 s).
HEALTH_SECONDS = 1.5
DEGRADED_HEADER = b"x-toolroom-degraded"
# How an upstream failure maps onto HTTP for the REST endpoint (refusals: the registry's map).
_UPSTREAM_STATUS = {
    DATABASE_UNAVAILABLE: 503,
    SERVER_BUSY: 503,
    NOT_RUNNING: 503,
    UPSTREAM_TIMEOUT: 504,
}


def _error(status: int, code: str, message: str, **headers: str) -> JSONResponse:
    return JSONResponse(
        api_error_body(code, message),
        status_code=status,
        headers=headers or None,
    )


def _unauthorized(description: str) -> JSONResponse:
    """401 with the challenge an MCP client follows to Toolroom's authorization server."""
    quoted = description.replace("\\", "\\\\").replace('"', '\\"')
    challenge = (
        f'Bearer error="invalid_token", error_description="{quoted}", '
        f'resource_metadata="{resource_metadata_url()}"'
    )
    return _error(401, "not_authenticated", description, **{"WWW-Authenticate": challenge})


def _streams_its_answer(scope: Scope) -> bool:
    """A 2026-07-28 `tools/call`: answered on an SSE stream that carries the call's progress
    (and ends the call when the client closes it), not as plain JSON."""
    version = method = None
    for name, value in scope["headers"]:
        if name == b"mcp-protocol-version":
            version = value.decode("latin-1")
        elif name == b"mcp-method":
            method = value
    return method == b"tools/call" and version is not None and version in MODERN_PROTOCOL_VERSIONS


class RequireCaller:
    """The MCP endpoint for authenticated callers only; anyone else gets the 401 above (the SDK's
    RequireAuthMiddleware would say "Authentication required" whatever the failure). A
    2026-07-28 tool call goes to `streamed` (see `_streams_its_answer`)."""

    def __init__(self, app: ASGIApp, streamed: ASGIApp) -> None:
        self.app = app
        self.streamed = streamed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not isinstance(scope.get("user"), CallerPrincipal):
            conn = HTTPConnection(scope)
            await _unauthorized(refusal_description(conn, None))(scope, receive, send)
            return
        if _streams_its_answer(scope):
            await self.streamed(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _health_in_thread() -> tuple[bool, dict[str, object]]:
    try:
        return gateway_health()
    finally:
        close_old_connections()


class DegradedMark:
    """`X-Toolroom-Degraded: cache|database` on every answer given while this process serves
    without the cache or from the last confirmed state (database away)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == "/healthz":
            await self.app(scope, receive, send)
            return

        async def marking(message: Message) -> None:
            if message["type"] == "http.response.start":
                marker = degraded_marker()
                if marker is not None:
                    if marker == "database":
                        degraded_answer_counted()
                    message["headers"] = [
                        *message.get("headers", []),
                        (DEGRADED_HEADER, marker.encode()),
                    ]
            await send(message)

        await self.app(scope, receive, marking)


def build_gateway_app() -> Starlette:
    """A new gateway application (one per process; tests build their own)."""
    recorder = CallRecorder()
    # The caller's identity token also travels as a header to HTTP servers (docs/gateway.md).
    pool = UpstreamPool(
        idle_seconds=float(settings.TOOLROOM_GATEWAY_IDLE_SECONDS),
        meta_headers={IDENTITY_META: IDENTITY_HEADER},
        # A rug pull is checked on every session open and on the server's list_changed.
        definitions=DefinitionWatch(definitions_checked),
    )
    quotas = Quotas()
    gateway = Gateway(pool=pool, recorder=recorder, quotas=quotas)
    # Handshake sessions are recorded in Redis, so any replica serves them (shared_sessions.py).
    sessions = store_from_settings()
    gateway_server = GatewayServer(gateway, sessions)
    server = gateway_server.build()
    # Agents authenticate with a bearer token, never an ambient credential (cookie), so a
    # DNS-rebound page cannot act as an agent; the Host header is checked by the proxy in front.
    # Plain JSON answers (no SSE framing) for requests: cheaper on both sides. Servers' messages
    # to the client outside a request go on the session's GET stream, as the transport has it.
    manager = CountedSessions(
        quotas,
        app=server,
        store=sessions,
        json_response=True,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        session_idle_timeout=float(settings.TOOLROOM_GATEWAY_IDLE_SECONDS),
        max_sessions=settings.TOOLROOM_GATEWAY_MAX_SESSIONS,
    )
    manager.stream_watch = gateway_server.stream_watch
    manager.log_level_seen = gateway_server.log_levels.set  # a level set on another replica
    gateway_server.connection_of = manager.connections.get
    # 2026-07-28 tool calls: SSE when the call has something to say before its result (progress;
    # a call that says nothing within the SDK's deferral window is still answered as JSON).
    streaming = StreamableHTTPSessionManager(
        app=server,
        json_response=False,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    mcp_endpoint = RequireCaller(
        SessionQuota(StreamableHTTPASGIApp(manager), manager), StreamableHTTPASGIApp(streaming)
    )

    async def rest_call(request: Request) -> Response:
        user = request.scope.get("user")
        if not isinstance(user, CallerPrincipal):
            return _unauthorized(refusal_description(request, None))
        fmt = request.query_params.get("format") or "mcp"
        format_error = result_format_error(fmt)
        if format_error is not None:  # said before the tool runs
            return _error(400, "invalid_format", format_error)
        body = await request.body()
        if len(body) > MAX_REST_BODY_BYTES:
            return _error(413, "too_large", "The request body is larger than 4 MiB.")
        try:
            payload = json.loads(body or b"{}")
        except (ValueError, RecursionError):
            return _error(400, "invalid", "The body is not JSON.")
        if json_has_lone_surrogate(payload, raw=body):
            return _error(400, "invalid", LONE_SURROGATE_MESSAGE)
        arguments = payload.get("arguments", {}) if isinstance(payload, dict) else None
        if not isinstance(arguments, dict):
            return _error(400, "invalid", 'The body must be {"arguments": {...}}.')
        identity = user.caller
        outcome = await gateway.call(
            identity=identity,
            name=request.path_params["name"],
            arguments=arguments,
            conversation=rest_conversation_key(
                caller=caller_key(identity),
                conversation=request.headers.get(CONVERSATION_HEADER, ""),
            ),
            via="rest",
            version=request.scope.get(VERSION_SCOPE_KEY),
        )
        if outcome.code != ALLOWED:
            meta = outcome.result["_meta"][ERROR_META]
            if outcome.code == QUOTA_EXCEEDED:
                retry = {"Retry-After": str(meta["retryAfter"])}
                return _error(429, outcome.code, meta["message"], **retry)
            if outcome.outcome == CallOutcome.REFUSED:
                status = refusal_http_status(outcome.code)
            else:
                status = _UPSTREAM_STATUS.get(outcome.code, 502)
            return _error(status, outcome.code, meta["message"])
        return JSONResponse(render_result(outcome.result, fmt))

    async def jwks(request: Request) -> Response:
        keys = await anyio.to_thread.run_sync(identity_jwks)
        return JSONResponse(keys, headers={"Cache-Control": "public, max-age=300"})

    async def resource_metadata(request: Request) -> Response:
        return JSONResponse(
            protected_resource_metadata(), headers={"Access-Control-Allow-Origin": "*"}
        )

    async def healthz(request: Request) -> Response:
        """200 while calls can succeed: the database answers, or this process serves the last
        confirmed state within the outage window; else 503 (the balancer takes it out)."""
        try:
            try:  # in the loop while the cache answers
                ok, parts = gateway_health()
            except SynchronousOnlyOperation:  # a confirmation is due: never past HEALTH_SECONDS
                with anyio.fail_after(HEALTH_SECONDS):
                    ok, parts = await anyio.to_thread.run_sync(
                        _health_in_thread, abandon_on_cancel=True
                    )
        except (TimeoutError, DatabaseUnavailable) as exc:
            ok, parts = False, {"database": {"state": "failing", "lastError": str(exc)}}
        return JSONResponse(
            {
                "ok": ok,
                **parts,
                "upstreamSessions": len(pool.sessions),
                "sessions": len(manager.connections),
                "streams": gateway_server.list_changed.streams,
                # Questions and answers passed to another replica (session_relay.py).
                "relayed": dict(manager.relay.counts) if manager.relay is not None else {},
            },
            status_code=200 if ok else 503,
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run(), streaming.run(), anyio.create_task_group() as group:
            pool.attach(group)
            group.start_soon(recorder.run)
            group.start_soon(quotas.run)
            try:
                yield
            finally:
                await pool.close()
                if pool.definitions is not None:
                    await pool.definitions.close()
                await recorder.close()
                await quotas.close()
                group.cancel_scope.cancel()

    def auth_error(conn: HTTPConnection, exc: Exception) -> Response:
        if isinstance(exc, TokenUncheckable):
            return _error(503, DATABASE_UNAVAILABLE, str(exc), **{"Retry-After": "2"})
        if isinstance(exc, TokenFailuresThrottled):
            return _error(
                429,
                "throttled",
                "Too many refused tokens from this address; retry later.",
                **{"Retry-After": str(math.ceil(exc.wait))},
            )
        return _unauthorized(refusal_description(conn, exc))

    app = Starlette(
        routes=[
            Route("/mcp", endpoint=mcp_endpoint),
            Route("/mcp/", endpoint=mcp_endpoint),
            Route("/api/v1/tools/{name}/call", endpoint=rest_call, methods=["POST"]),
            Route("/healthz", endpoint=healthz, methods=["GET"]),
            Route("/.well-known/jwks.json", endpoint=jwks, methods=["GET"]),
            Route(PRM_PATH, endpoint=resource_metadata, methods=["GET"]),
            Route(PRM_PATH + "/{resource_path:path}", endpoint=resource_metadata, methods=["GET"]),
        ],
        middleware=[
            Middleware(DegradedMark),
            Middleware(AuthenticationMiddleware, backend=CallerTokenBackend(), on_error=auth_error),
            Middleware(AuthContextMiddleware),
        ],
        lifespan=lifespan,
    )
    app.state.gateway = gateway
    app.state.recorder = recorder
    app.state.pool = pool
    app.state.quotas = quotas
    app.state.sessions = manager
    return app
