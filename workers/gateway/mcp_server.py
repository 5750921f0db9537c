"""The gateway's MCP server: the SDK's low-level `Server` with handlers that serve the caller's
team catalogue and call its tools through `Gateway.call`.

Handlers find the caller in the HTTP request the SDK hands them (`ctx.request.user`, set by the
agent-token backend on every request), so each request is judged by its own credential.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import mcp_types as types
from mcp import MCPError
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from registry.gateway.calls import UNKNOWN_TOOL, token_conversation
from registry.gateway.content import ContentEntry, agent_content, resource_lookup
from registry.gateway.listing import team_catalogue_version, tools_list_document
from registry.teams.tokens import AgentIdentity
from workers.gateway.auth import VERSION_SCOPE_KEY, AgentPrincipal
from workers.gateway.calls import Gateway, Operation, cached_or_in_thread
from workers.gateway.questions import (
    INPUT_REQUIRED,
    InvalidState,
    client_asker,
    input_required_result,
)
from workers.gateway.search_tools import meta_call, search_mode_list
from workers.gateway.subscriptions import TeamListen

logger = logging.getLogger(__name__)

SERVER_NAME = "toolroom"
CONVERSATION_HEADER = "mcp-conversation-id"
# A team's list is per caller: a shared cache must never hand it to another (cacheScope private).
LIST_CACHE_HINT = CacheHint(ttl_ms=10_000, scope="private")
_LISTS_MAX = 4096
_WATCH_MAX = 10_000
WATCH_SECONDS = 1.0


def _no_header_schema(name: str) -> None:
    return None


def caller(ctx: ServerRequestContext[Any, Any]) -> AgentIdentity:
    request = ctx.request
    user = request.scope.get("user") if request is not None else None
    if not isinstance(user, AgentPrincipal):  # RequireAuthMiddleware lets no one else in
        raise MCPError(types.INVALID_REQUEST, "Not authenticated with an agent token.")
    return user.agent


def conversation_key(ctx: ServerRequestContext[Any, Any], identity: AgentIdentity) -> str:
    """What one conversation is (docs/gateway.md): the MCP session on handshake connections;
    on stateless ones the client's conversation id (scoped to the token), else the token (whose
    private-data mark then lasts a sliding window after its last private read)."""
    request = ctx.request
    headers = request.headers if request is not None else {}
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        session_id = headers.get("mcp-session-id", "")
        if session_id:
            return f"session:{session_id}"
    given = headers.get(CONVERSATION_HEADER, "").strip()[:200]
    if given:
        return f"token:{identity.token_id}:conversation:{given}"
    return token_conversation(identity.token_id)


class _ToolroomServer(Server[Any]):
    """The SDK server, announcing `tools.listChanged` to handshake clients (the gateway sends
    `notifications/tools/list_changed` when the team's catalogue version moves)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


class GatewayServer:
    """Builds the SDK `Server` whose handlers use one `Gateway`."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self._lists: dict[str, types.ListToolsResult] = {}
        self._watched: dict[str, asyncio.Task[None]] = {}
        self.listen = TeamListen()

    def build(self) -> Server[Any]:
        return _ToolroomServer(
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
            on_list_resources=self.list_resources,
            on_list_resource_templates=self.list_resource_templates,
            on_read_resource=self.read_resource,
            on_list_prompts=self.list_prompts,
            on_get_prompt=self.get_prompt,
            on_subscriptions_listen=self.listen,
        )

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        identity = caller(ctx)
        searching = await search_mode_list(identity=identity)  # search mode (search_tools.py)
        if searching is not None:
            self._watch(ctx, identity, searching[0])
            return searching[1]
        document = await cached_or_in_thread(tools_list_document, identity=identity)
        self._watch(ctx, identity, document.version)
        parsed = self._lists.get(document.etag)
        if parsed is None:
            parsed = types.ListToolsResult.model_validate(json.loads(document.body))
            if len(self._lists) >= _LISTS_MAX:
                self._lists.clear()
            self._lists[document.etag] = parsed
        # A copy: the SDK fills cache hints into the result it is given.
        return parsed.model_copy()

    def _watch(
        self, ctx: ServerRequestContext[Any, Any], identity: AgentIdentity, version: int
    ) -> None:
        """On a handshake session that listed the tools, watch the team's catalogue version and
        send `notifications/tools/list_changed` when it moves (until the session ends)."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS or ctx.request is None:
            return
        session_id = ctx.request.headers.get("mcp-session-id", "")
        if not session_id or session_id in self._watched or len(self._watched) >= _WATCH_MAX:
            return
        session = ctx.session

        async def watch() -> None:
            seen = version
            try:
                while True:
                    await asyncio.sleep(WATCH_SECONDS)
                    current = await cached_or_in_thread(
                        team_catalogue_version, team_id=identity.team_id
                    )
                    if current != seen:
                        seen = current
                        await session.send_tool_list_changed()
            except Exception:  # the session ended: its streams are closed
                logger.debug("stopped watching the catalogue for session %s", session_id[:12])
            finally:
                self._watched.pop(session_id, None)

        self._watched[session_id] = asyncio.get_running_loop().create_task(watch())

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        content = await cached_or_in_thread(agent_content, identity=caller(ctx))
        return types.ListResourcesResult.model_validate(
            {"resources": [entry.listing for entry in content.resources.values()]}
        )

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        content = await cached_or_in_thread(agent_content, identity=caller(ctx))
        return types.ListResourceTemplatesResult.model_validate(
            {"resourceTemplates": [entry.listing for entry in content.templates]}
        )

    async def list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        content = await cached_or_in_thread(agent_content, identity=caller(ctx))
        return types.ListPromptsResult.model_validate(
            {"prompts": [entry.listing for entry in content.prompts.values()]}
        )

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        identity = caller(ctx)
        content = await cached_or_in_thread(agent_content, identity=identity)
        uri = str(params.uri)
        entry = resource_lookup(content, uri)
        if entry is None:
            raise MCPError(types.INVALID_PARAMS, f"No resource '{uri}' is offered to this team.")
        outcome = await self._forward(
            ctx, identity, entry, uri, Operation("read_resource", entry.upstream), content.version
        )
        result = dict(outcome)
        for item in result.get("contents", []):
            item["uri"] = uri  # the namespaced URI the client asked for
        return types.ReadResourceResult.model_validate(result)

    async def get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        identity = caller(ctx)
        content = await cached_or_in_thread(agent_content, identity=identity)
        entry = content.prompts.get(params.name)
        if entry is None:
            raise MCPError(
                types.INVALID_PARAMS, f"No prompt '{params.name}' is offered to this team."
            )
        operation = Operation("get_prompt", entry.upstream, dict(params.arguments or {}))
        outcome = await self._forward(ctx, identity, entry, params.name, operation, content.version)
        return types.GetPromptResult.model_validate(outcome)

    async def _forward(  # noqa: PLR0917 (one private step)
        self,
        ctx: ServerRequestContext[Any, Any],
        identity: AgentIdentity,
        entry: ContentEntry,
        name: str,
        operation: Operation,
        version: int,
    ) -> dict[str, Any]:
        outcome = await self.gateway.forward(
            identity=identity,
            target=entry.target,
            name=name,
            op=operation,
            conversation=conversation_key(ctx, identity),
            version=version,
        )
        if outcome.code != "allowed":
            raise MCPError(types.INTERNAL_ERROR, f"Toolroom: {outcome.message}")
        return outcome.result

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        identity = caller(ctx)
        try:
            questions = client_asker(ctx, params, token_id=identity.token_id)
        except InvalidState as exc:
            raise MCPError(types.INVALID_PARAMS, f"Toolroom: {exc}") from exc
        conversation = conversation_key(ctx, identity)
        meta = await meta_call(  # find_tools and call_tool in search mode (search_tools.py)
            gateway=self.gateway,
            identity=identity,
            name=params.name,
            arguments=dict(params.arguments or {}),
            conversation=conversation,
        )
        if meta is not None:
            return meta
        outcome = await self.gateway.call(
            identity=identity,
            name=params.name,
            arguments=params.arguments or {},
            conversation=conversation,
            via="mcp",
            questions=questions,
            version=ctx.request.scope.get(VERSION_SCOPE_KEY) if ctx.request is not None else None,
        )
        if outcome.code == UNKNOWN_TOOL:
            raise MCPError(types.INVALID_PARAMS, outcome.decision.message)
        if outcome.code == INPUT_REQUIRED:  # the server asked: ask the client, statelessly
            return input_required_result(
                questions,
                token_id=identity.token_id,
                name=params.name,
                arguments=dict(params.arguments or {}),
            )
        return types.CallToolResult.model_validate(outcome.result)
