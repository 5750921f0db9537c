"""The gateway's search mode: tools/list shows the pinned tools plus `find_tools` and `call_tool`.

A team owner or an admin chooses per agent token (AgentToken.tool_exposure) or as the team's
default (Team.tool_exposure) how the gateway offers tools: `all` (every tool the agent may call)
or `search`. In search mode `tools/list` holds the tools of the token's declared servers (its
pinned tools: required, recommended and optional) and two meta-tools:

- `find_tools(query, limit)`: the catalogue's search (registry.catalogue.search, the very
  ranking of `GET /api/v1/catalogue?q=`) over the agent's callable tools; answers the tools'
  MCP definitions. Each search is audited (`gateway.tools_found`: the query and the names found).
- `call_tool(name, arguments)`: hands the call to `Gateway.call`, the path of a direct call, so
  it passes exactly the same checks (approval hash, grant, role, ratchet, deadlines) and is
  recorded in the call audit like one, with `via` = `mcp-search`.

Direct calls by name still work in search mode (they are checked as always). The MCP server
(workers/gateway/mcp_server.py) calls `search_mode_list` and `meta_call` first and falls back to
its own handling when they answer None.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Any

import mcp_types as types
from django.conf import settings
from mcp import MCPError

from registry.audit.services import audit_record
from registry.catalogue.formats import render_mcp
from registry.catalogue.search import (
    DEFAULT_SEARCH_LIMIT,
    MAX_QUERY_LENGTH,
    MAX_SEARCH_LIMIT,
    catalogue_search,
    kept_catalogue,
)
from registry.catalogue.versions import catalogue_state
from registry.gateway.calls import UNKNOWN_TOOL
from registry.teams.models import AgentToken, Team, ToolExposure
from registry.teams.tokens import AgentIdentity
from workers.gateway.calls import Gateway, cached_or_in_thread, in_thread

FIND_TOOLS = "find_tools"
CALL_TOOL = "call_tool"
VIA_SEARCH = "mcp-search"  # ToolCall.via of calls made through call_tool (at most 10 characters)
META_TOOLS: list[dict[str, Any]] = [
    {
        "name": FIND_TOOLS,
        "title": "Find tools",
        "description": "Search the tools your team may use for a task, best first. Answers the "
        "tools' names, descriptions and input schemas; call one with call_tool.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "description": "What you want to do, in plain words.",
                    "minLength": 1,
                    "maxLength": MAX_QUERY_LENGTH,
                },
                "limit": {
                    "type": "integer",
                    "description": "At most this many tools.",
                    "minimum": 1,
                    "maximum": MAX_SEARCH_LIMIT,
                    "default": DEFAULT_SEARCH_LIMIT,
                },
            },
            "required": ["query"],
        },
        "annotations": {"readOnlyHint": True, "openWorldHint": False},
    },
    {
        "name": CALL_TOOL,
        "title": "Call a tool",
        "description": "Call a tool that find_tools found, by its name, with its arguments. "
        "Checked exactly like a direct call.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "The tool's name (<server>__<tool>)."},
                "arguments": {"type": "object", "description": "The tool's arguments."},
            },
            "required": ["name"],
        },
    },
]

_TEAM_DEFAULTS_MAX = 4096
_team_defaults: OrderedDict[tuple[int, int], str] = OrderedDict()
_LISTS_MAX = 1024
_lists: OrderedDict[tuple[object, ...], dict[str, Any]] = OrderedDict()
_lock = threading.Lock()


def tool_exposure(*, identity: AgentIdentity) -> tuple[str, int]:
    """The agent's exposure (`all` or `search`) and the team's catalogue version it was read at.

    The token's own choice, else the team's default, kept per catalogue version (changing the
    default bumps the version); no query when both are known."""
    version = catalogue_state(team_id=identity.team_id).version
    if identity.tool_exposure:
        return identity.tool_exposure, version
    key = (identity.team_id, version)
    with _lock:
        cached = _team_defaults.get(key)
    if cached is None:
        cached = (
            Team.objects.filter(pk=identity.team_id).values_list("tool_exposure", flat=True).first()
        ) or ToolExposure.ALL
        with _lock:
            _team_defaults[key] = cached
            while len(_team_defaults) > _TEAM_DEFAULTS_MAX:
                _team_defaults.popitem(last=False)
    return cached, version


def pinned_servers(identity: AgentIdentity) -> frozenset[str]:
    """The servers the token declared (required, recommended, optional): its pinned tools'."""
    return frozenset(slug for slugs in identity.declared_servers.values() for slug in slugs)


def search_mode_document(*, identity: AgentIdentity, version: int) -> dict[str, Any]:
    """The tools/list result in search mode: pinned tools the agent may call, then the
    meta-tools. Kept per (team, role, version, pins, unhealthy setting)."""
    pins = pinned_servers(identity)
    key = (
        identity.team_id,
        identity.role_id,
        version,
        tuple(sorted(pins)),
        settings.TOOLROOM_CATALOGUE_HIDE_UNHEALTHY,
    )
    with _lock:
        cached = _lists.get(key)
    if cached is not None:
        return cached
    catalogue = kept_catalogue(team_id=identity.team_id, role_id=identity.role_id, version=version)
    pinned = [tool for tool in catalogue.tools if tool.server_slug in pins]
    document = render_mcp(replace(catalogue, tools=pinned))
    document["tools"] = [*document["tools"], *META_TOOLS]
    with _lock:
        _lists[key] = document
        while len(_lists) > _LISTS_MAX:
            _lists.popitem(last=False)
    return document


def _search_list(*, identity: AgentIdentity) -> tuple[int, dict[str, Any]] | None:
    exposure, version = tool_exposure(identity=identity)
    if exposure != ToolExposure.SEARCH:
        return None
    return version, search_mode_document(identity=identity, version=version)


async def search_mode_list(*, identity: AgentIdentity) -> tuple[int, types.ListToolsResult] | None:
    """In search mode, the version and the tools/list result; None in `all` mode."""
    found = await cached_or_in_thread(_search_list, identity=identity)
    if found is None:
        return None
    version, document = found
    return version, types.ListToolsResult.model_validate(document)


def _text_result(payload: Any, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult.model_validate(
        {
            "content": [{"type": "text", "text": json.dumps(payload)}],
            "structuredContent": payload if isinstance(payload, dict) else None,
            "isError": error,
        }
    )


def find_tools(*, identity: AgentIdentity, query: str, limit: int) -> dict[str, Any]:
    """The search and its audit record: what `find_tools` answers."""
    version = catalogue_state(team_id=identity.team_id).version
    found = catalogue_search(
        team_id=identity.team_id,
        role_id=identity.role_id,
        query=query,
        limit=limit,
        version=version,
    )
    tools = render_mcp(found)["tools"]
    names = [tool["name"] for tool in tools]
    token = AgentToken.objects.select_related("team").get(pk=identity.token_id)
    audit_record(
        actor=identity.label,
        action="gateway.tools_found",
        target=token,
        summary=f"The agent {identity.name} searched for {query[:80]!r}: "
        + (", ".join(names) if names else "nothing found")
        + ".",
        details={"query": query, "limit": limit, "found": names},
    )
    return {"tools": tools}


def _arguments_error(message: str) -> types.CallToolResult:
    return _text_result({"error": message}, error=True)


async def meta_call(
    *,
    gateway: Gateway,
    identity: AgentIdentity,
    name: str,
    arguments: dict[str, Any],
    conversation: str,
) -> types.CallToolResult | None:
    """The answer to a meta-tool call in search mode; None for any other call (or in `all`
    mode), which the MCP server then handles as a direct call."""
    if name not in {FIND_TOOLS, CALL_TOOL}:
        return None
    exposure, _ = await cached_or_in_thread(tool_exposure, identity=identity)
    if exposure != ToolExposure.SEARCH:
        return None
    if name == FIND_TOOLS:
        query = arguments.get("query")
        limit = arguments.get("limit", DEFAULT_SEARCH_LIMIT)
        if not isinstance(query, str) or not query.strip() or len(query) > MAX_QUERY_LENGTH:
            return _arguments_error(f"query: give 1 to {MAX_QUERY_LENGTH} characters.")
        if (
            not isinstance(limit, int)
            or isinstance(limit, bool)
            or not 1 <= limit <= MAX_SEARCH_LIMIT
        ):
            return _arguments_error(f"limit: an integer from 1 to {MAX_SEARCH_LIMIT}.")
        payload = await in_thread(find_tools, identity=identity, query=query.strip(), limit=limit)
        return _text_result(payload)
    target = arguments.get("name")
    target_arguments = arguments.get("arguments", {})
    if not isinstance(target, str) or not target:
        return _arguments_error("name: the tool to call (<server>__<tool>).")
    if not isinstance(target_arguments, dict):
        return _arguments_error("arguments: an object.")
    outcome = await gateway.call(
        identity=identity,
        name=target,
        arguments=target_arguments,
        conversation=conversation,
        via=VIA_SEARCH,
    )
    if outcome.code == UNKNOWN_TOOL:  # as a direct call answers it (mcp_server.call_tool)
        raise MCPError(types.INVALID_PARAMS, outcome.decision.message)
    return types.CallToolResult.model_validate(outcome.result)


def search_tools_forget() -> None:
    """Drop what this module keeps (tests that roll back and reuse ids and versions)."""
    with _lock:
        _team_defaults.clear()
        _lists.clear()
