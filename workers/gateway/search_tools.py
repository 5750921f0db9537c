"""The gateway's search mode, the process's side: answering the meta-tools `find_tools` and
`call_tool` (what search mode lists, and which agents are in it, is the registry's:
registry.gateway.search_mode, through the port).

`call_tool` hands the call to `Gateway.call`, the path of a direct call, so it passes exactly
the same checks and is recorded in the call audit like one, with `via` = `mcp-search`. The MCP
server (workers/gateway/mcp_server.py) asks `meta_call` first and handles the call itself when
it answers None.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from mcp import MCPError

from registry.gateway.port import (
    CALL_TOOL,
    DEFAULT_SEARCH_LIMIT,
    FIND_TOOLS,
    MAX_QUERY_LENGTH,
    MAX_SEARCH_LIMIT,
    UNKNOWN_TOOL,
    Caller,
    search_mode_on,
    tools_find,
)
from workers.gateway.registry_calls import cached_or_in_thread, in_thread
from workers.gateway.upstream import Gateway

VIA_SEARCH = "mcp-search"  # ToolCall.via of calls made through call_tool (at most 10 characters)


def _text_result(payload: Any, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult.model_validate(
        {
            "content": [{"type": "text", "text": json.dumps(payload)}],
            "structuredContent": payload if isinstance(payload, dict) else None,
            "isError": error,
        }
    )


def _arguments_error(message: str) -> types.CallToolResult:
    return _text_result({"error": message}, error=True)


async def meta_call(
    *,
    gateway: Gateway,
    identity: Caller,
    name: str,
    arguments: dict[str, Any],
    conversation: str,
) -> types.CallToolResult | None:
    """The answer to a meta-tool call in search mode; None for any other call (or in `all`
    mode), which the MCP server then handles as a direct call."""
    if name not in {FIND_TOOLS, CALL_TOOL}:
        return None
    if not await cached_or_in_thread(search_mode_on, identity=identity):
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
        payload = await in_thread(tools_find, identity=identity, query=query.strip(), limit=limit)
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
