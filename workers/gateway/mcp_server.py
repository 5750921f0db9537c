"""The gateway's MCP server: the SDK's low-level `Server` with handlers that serve the caller's
team catalogue and call its tools through `Gateway.call`.

Handlers find the caller in the HTTP request the SDK hands them (`ctx.request.user`, set by the
agent-token backend on every request), so each request is judged by its own credential.
"""

from __future__ import annotations

import json
import time
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from registry.gateway.calls import UNKNOWN_TOOL
from registry.gateway.listing import tools_list_document
from registry.teams.tokens import AgentIdentity
from workers.gateway.auth import AgentPrincipal
from workers.gateway.calls import Gateway, cached_or_in_thread

SERVER_NAME = "toolroom"
CONVERSATION_HEADER = "mcp-conversation-id"
# A team's list is per caller: a shared cache must never hand it to another (cacheScope private).
LIST_CACHE_HINT = CacheHint(ttl_ms=10_000, scope="private")
_LISTS_MAX = 4096


def _no_header_schema(name: str) -> None:
    return None


def caller(ctx: ServerRequestContext[Any, Any]) -> AgentIdentity:
    request = ctx.request
    user = request.scope.get("user") if request is not None else None
    if not isinstance(user, AgentPrincipal):  # RequireAuthMiddleware lets no one else in
        raise MCPError(types.INVALID_REQUEST, "Not authenticated with an agent token.")
    return user.agent


def conversation_key(
    ctx: ServerRequestContext[Any, Any], identity: AgentIdentity, *, window_seconds: int
) -> str:
    """What one conversation is (docs/gateway.md): the MCP session on handshake connections;
    on stateless ones the client's conversation id (scoped to the token), else the token over a
    time window."""
    request = ctx.request
    headers = request.headers if request is not None else {}
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        session_id = headers.get("mcp-session-id", "")
        if session_id:
            return f"session:{session_id}"
    given = headers.get(CONVERSATION_HEADER, "").strip()[:200]
    if given:
        return f"token:{identity.token_id}:conversation:{given}"
    window = int(time.time() // max(1, window_seconds))
    return f"token:{identity.token_id}:window:{window}"


class GatewayServer:
    """Builds the SDK `Server` whose handlers use one `Gateway`."""

    def __init__(self, gateway: Gateway, *, conversation_window_seconds: int) -> None:
        self.gateway = gateway
        self.window = conversation_window_seconds
        self._lists: dict[str, types.ListToolsResult] = {}

    def build(self) -> Server[Any]:
        return Server(
            SERVER_NAME,
            version="1.0.0",
            title="Toolroom",
            instructions="The tools your team may use, checked by Toolroom at every call. "
            "Names are <server>__<tool>.",
            cache_hints={"tools/list": LIST_CACHE_HINT},
            # The SDK would otherwise run the whole tools/list handler on every 2026-07-28 call
            # to validate Mcp-Param headers; the gateway validates every call's arguments against
            # the approved schema itself (call_check), so no header schema is offered.
            get_tool_input_schema=_no_header_schema,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        identity = caller(ctx)
        document = await cached_or_in_thread(tools_list_document, identity=identity)
        parsed = self._lists.get(document.etag)
        if parsed is None:
            parsed = types.ListToolsResult.model_validate(json.loads(document.body))
            if len(self._lists) >= _LISTS_MAX:
                self._lists.clear()
            self._lists[document.etag] = parsed
        # A copy: the SDK fills cache hints into the result it is given.
        return parsed.model_copy()

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        identity = caller(ctx)
        outcome = await self.gateway.call(
            identity=identity,
            name=params.name,
            arguments=params.arguments or {},
            conversation=conversation_key(ctx, identity, window_seconds=self.window),
            via="mcp",
        )
        if outcome.code == UNKNOWN_TOOL:
            raise MCPError(types.INVALID_PARAMS, outcome.decision.message)
        return types.CallToolResult.model_validate(outcome.result)
