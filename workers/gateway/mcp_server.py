"""The gateway's MCP server: the SDK's low-level `Server` with handlers that serve the caller's
team catalogue and call its tools through `Gateway.call`.

Handlers find the caller in the HTTP request the SDK hands them (`ctx.request.user`, set by the
agent-token backend on every request), so each request is judged by its own credential.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import mcp_types as types
from mcp import MCPError
from mcp.server.caching import CacheHint
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.types import Scope

from registry.gateway.port import (
    QUOTA_EXCEEDED,
    UNKNOWN_TOOL,
    UPSTREAM_ACCOUNT_BROKEN,
    UPSTREAM_ACCOUNT_NOT_LINKED,
    AgentContent,
    Caller,
    CallOutcome,
    ContentEntry,
    DatabaseUnavailable,
    VersionedCache,
    agent_content,
    caller_key,
    caller_refusal,
    resource_lookup,
    token_conversation,
    tools_list_document,
    upstream_link_page_url,
)
from workers.gateway.auth import VERSION_SCOPE_KEY, CallerPrincipal
from workers.gateway.list_changed import ListChanged
from workers.gateway.outcomes import DATABASE_UNAVAILABLE, Operation, error_result
from workers.gateway.progress import SessionLogLevels, client_log, client_progress
from workers.gateway.questions import (
    INPUT_REQUIRED,
    InvalidState,
    client_asker,
    input_required_result,
)
from workers.gateway.quotas import quota_mcp_error
from workers.gateway.registry_calls import cached_or_in_thread as _cached_or_in_thread
from workers.gateway.search_tools import meta_call
from workers.gateway.shared_sessions import STORE_ERRORS, SessionStore
from workers.gateway.subscriptions import TeamListen
from workers.gateway.upstream import Gateway

logger = logging.getLogger(__name__)

SERVER_NAME = "toolroom"
CONVERSATION_HEADER = "mcp-conversation-id"
# A team's list is per caller: a shared cache must never hand it to another (cacheScope private).
LIST_CACHE_HINT = CacheHint(ttl_ms=10_000, scope="private")
_LISTS_MAX = 4096


def _no_header_schema(name: str) -> None:
    return None


def _no_connection(session_id: str) -> Connection | None:
    return None


T = TypeVar("T")


async def cached_or_in_thread(fn: Callable[..., T], /, **kwargs: Any) -> T:
    """The registry's answer (registry_calls.cached_or_in_thread); while the database is away,
    what needs it is an MCP error that says so instead of "Internal server error"."""
    try:
        return await _cached_or_in_thread(fn, **kwargs)
    except DatabaseUnavailable as exc:
        raise MCPError(types.INTERNAL_ERROR, f"Toolroom: {exc}") from exc


def caller(ctx: ServerRequestContext[Any, Any]) -> Caller:
    request = ctx.request
    user = request.scope.get("user") if request is not None else None
    if not isinstance(user, CallerPrincipal):  # RequireAuthMiddleware lets no one else in
        raise MCPError(types.INVALID_REQUEST, "Not authenticated.")
    return user.caller


def listing_caller(ctx: ServerRequestContext[Any, Any]) -> Caller:
    """The caller of a list or read request, refused (an MCP error) when a person's token no
    longer acts for them: the caller rules the call check applies first (`caller_refusal`)."""
    identity = caller(ctx)
    refusal = caller_refusal(identity, time.time())
    if refusal is not None:
        raise MCPError(types.INVALID_REQUEST, f"Toolroom: {refusal.message}")
    return identity


def conversation_key(ctx: ServerRequestContext[Any, Any], identity: Caller) -> str:
    """What one conversation is (docs/gateway.md, "Conversation key"): the MCP session on
    handshake connections; on stateless ones the client's conversation id (scoped to the token),
    else the token. The private-data ratchet does not read it: it holds for the caller."""
    request = ctx.request
    headers = request.headers if request is not None else {}
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        session_id = headers.get("mcp-session-id", "")
        if session_id:
            return f"session:{session_id}"
    given = headers.get(CONVERSATION_HEADER, "").strip()[:200]
    if given:
        return f"{caller_key(identity)}:conversation:{given}"
    return token_conversation(caller_key(identity))


LINK_CODES = frozenset({UPSTREAM_ACCOUNT_NOT_LINKED, UPSTREAM_ACCOUNT_BROKEN})


def _declares_url_elicitation(ctx: ServerRequestContext[Any, Any]) -> bool:
    """A handshake client that declared URL-mode elicitation (2026-07-28 retired -32042)."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and elicitation.url is not None


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

    def __init__(self, gateway: Gateway, sessions: SessionStore | None = None) -> None:
        self.gateway = gateway
        self.sessions = sessions
        self.list_changed = ListChanged(sessions)
        self._lists: VersionedCache[str, types.ListToolsResult] = VersionedCache(
            "parsed tools lists", limit=_LISTS_MAX
        )
        self.listen = TeamListen()
        self.log_levels = SessionLogLevels()
        # The handshake session's connection by id (the session manager's), set by the app.
        self.connection_of: Callable[[str], Connection | None] = _no_connection

    def build(self) -> Server[Any]:
        with warnings.catch_warnings():
            # `logging/setLevel` is deprecated by 2026-07-28 (per-request levels there), but
            # handshake clients still ask for log messages with it.
            warnings.simplefilter("ignore")
            return self._build()

    async def set_logging_level(
        self, ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        """A handshake client asks for log messages at `params.level` or above (progress.py):
        kept here and with the session's record, so a call on any replica relays them."""
        request = ctx.request
        session_id = request.headers.get("mcp-session-id", "") if request is not None else ""
        if session_id:
            self.log_levels.set(session_id, params.level)
            if self.sessions is not None:
                try:
                    await self.sessions.set_log_level(session_id, params.level)
                except STORE_ERRORS as exc:  # this replica still relays them
                    logger.warning(
                        "log level of session %s kept here only: %s", session_id[:12], exc
                    )
        return types.EmptyResult()

    def _build(self) -> Server[Any]:
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
            on_set_logging_level=self.set_logging_level,
        )

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        identity = listing_caller(ctx)
        # Every tool the caller may use, or in search mode its pinned ones and the meta-tools.
        document = await cached_or_in_thread(tools_list_document, identity=identity)
        await self._listed(ctx, document.version)
        parsed = self._lists.get(document.etag)
        if parsed is None:
            parsed = types.ListToolsResult.model_validate(json.loads(document.body))
            self._lists.put(document.etag, parsed)
        # A copy: the SDK fills cache hints into the result it is given.
        return parsed.model_copy()

    async def _listed(self, ctx: ServerRequestContext[Any, Any], version: int) -> None:
        """A handshake session listed the tools at `version` (list_changed.py)."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS or ctx.request is None:
            return
        session_id = ctx.request.headers.get("mcp-session-id", "")
        if session_id:
            await self.list_changed.listed(session_id, version)

    def _connection(self, ctx: ServerRequestContext[Any, Any]) -> Connection | None:
        """The handshake session's connection (None for 2026-07-28 requests)."""
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS or ctx.request is None:
            return None
        session_id = ctx.request.headers.get("mcp-session-id", "")
        return self.connection_of(session_id) if session_id else None

    async def stream_watch(self, session_id: str, scope: Scope, connection: Connection) -> None:
        """While a handshake session's GET stream is open in this process: tell it when its
        team's catalogue moves past what its client knows (list_changed.py)."""
        user = scope.get("user")
        if isinstance(user, CallerPrincipal):
            await self.list_changed.watch(session_id, user.caller.team_id, connection)

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        content = await cached_or_in_thread(agent_content, identity=listing_caller(ctx))
        return types.ListResourcesResult.model_validate({"resources": content.listed_resources()})

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        content = await cached_or_in_thread(agent_content, identity=listing_caller(ctx))
        return types.ListResourceTemplatesResult.model_validate(
            {"resourceTemplates": content.listed_templates()}
        )

    async def list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        content = await cached_or_in_thread(agent_content, identity=listing_caller(ctx))
        return types.ListPromptsResult.model_validate({"prompts": content.listed_prompts()})

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        identity = listing_caller(ctx)
        content = await cached_or_in_thread(agent_content, identity=identity)
        uri = str(params.uri)
        entry = resource_lookup(content, uri)
        if entry is None:
            raise MCPError(types.INVALID_PARAMS, f"No resource '{uri}' is offered to this team.")
        outcome = await self._forward(
            ctx, identity, entry, uri, Operation("read_resource", entry.upstream), content
        )
        result = dict(outcome)
        for item in result.get("contents", []):
            item["uri"] = uri  # the namespaced URI the client asked for
        return types.ReadResourceResult.model_validate(result)

    async def get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        identity = listing_caller(ctx)
        content = await cached_or_in_thread(agent_content, identity=identity)
        entry = content.prompts.get(params.name)
        if entry is None:
            raise MCPError(
                types.INVALID_PARAMS, f"No prompt '{params.name}' is offered to this team."
            )
        operation = Operation("get_prompt", entry.upstream, dict(params.arguments or {}))
        outcome = await self._forward(ctx, identity, entry, params.name, operation, content)
        return types.GetPromptResult.model_validate(outcome)

    async def _forward(  # noqa: PLR0917 (one private step)
        self,
        ctx: ServerRequestContext[Any, Any],
        identity: Caller,
        entry: ContentEntry,
        name: str,
        operation: Operation,
        content: AgentContent,
    ) -> dict[str, Any]:
        outcome = await self.gateway.forward(
            identity=identity,
            entry=entry,
            name=name,
            op=operation,
            conversation=conversation_key(ctx, identity),
            content=content,
        )
        if outcome.code == QUOTA_EXCEEDED:
            raise quota_mcp_error(outcome)
        if outcome.code == UNKNOWN_TOOL:  # hidden, or its server not granted whole: unknown
            raise MCPError(types.INVALID_PARAMS, outcome.decision.message)
        if outcome.outcome == CallOutcome.REFUSED:
            raise MCPError(types.INVALID_REQUEST, f"Toolroom: {outcome.decision.message}")
        if outcome.code != "allowed":
            raise MCPError(types.INTERNAL_ERROR, f"Toolroom: {outcome.message}")
        return outcome.result

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        identity = caller(ctx)
        try:
            questions = client_asker(
                ctx, params, caller=caller_key(identity), connection=self._connection(ctx)
            )
        except InvalidState as exc:
            raise MCPError(types.INVALID_PARAMS, f"Toolroom: {exc}") from exc
        conversation = conversation_key(ctx, identity)
        try:
            meta = await meta_call(  # find_tools and call_tool in search mode (search_tools.py)
                gateway=self.gateway,
                identity=identity,
                name=params.name,
                arguments=dict(params.arguments or {}),
                conversation=conversation,
            )
        except DatabaseUnavailable as exc:
            return types.CallToolResult.model_validate(
                error_result(code=DATABASE_UNAVAILABLE, message=str(exc))
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
            progress=client_progress(ctx),
            log=client_log(ctx, self.log_levels),
        )
        if outcome.code == UNKNOWN_TOOL:
            raise MCPError(types.INVALID_PARAMS, outcome.decision.message)
        if outcome.code == QUOTA_EXCEEDED:
            raise quota_mcp_error(outcome)
        if outcome.code in LINK_CODES and _declares_url_elicitation(ctx):
            # The person must link (or re-link) their own account upstream: a 2025-11-25 client
            # that declared URL-mode elicitation is given the page to open (-32042).
            raise UrlElicitationRequiredError(
                [
                    types.ElicitRequestURLParams(
                        message=outcome.message,
                        url=upstream_link_page_url(),
                        elicitation_id=f"toolroom-link-{uuid.uuid4().hex}",
                    )
                ],
                message=outcome.message,
            )
        if outcome.code == INPUT_REQUIRED:  # the server asked: ask the client, statelessly
            return input_required_result(
                questions,
                caller=caller_key(identity),
                name=params.name,
                arguments=dict(params.arguments or {}),
            )
        return types.CallToolResult.model_validate(outcome.result)
