"""The gateway's search mode, the registry's side: which agents are in it, what their tools/list
holds (their pinned tools, then the meta-tools `find_tools` and `call_tool`) and what a
`find_tools` search finds (audited). docs/gateway.md, "Search mode", says how agents use it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from registry.audit.services import audit_record
from registry.catalogue.documents import accounts_digest
from registry.catalogue.formats import render_mcp
from registry.catalogue.search import (
    DEFAULT_SEARCH_LIMIT,
    MAX_QUERY_LENGTH,
    MAX_SEARCH_LIMIT,
    catalogue_search,
    kept_catalogue,
)
from registry.catalogue.versions import catalogue_state
from registry.core.process_cache import VersionedCache
from registry.oauth.models import ClientAuthorization
from registry.teams.callers import Caller, PersonIdentity
from registry.teams.models import AgentToken, Team, ToolExposure

FIND_TOOLS = "find_tools"
CALL_TOOL = "call_tool"
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

_team_defaults: VersionedCache[int, str] = VersionedCache("teams' tool exposure", limit=4096)
_lists: VersionedCache[str, bytes] = VersionedCache("search-mode lists", limit=1024)


def tool_exposure_at(*, identity: Caller, version: int) -> str:
    """The agent's exposure (`all` or `search`) at the team's catalogue `version`: the token's
    own choice, else the team's default, kept per version (changing the default bumps it)."""
    if identity.tool_exposure:
        return identity.tool_exposure
    cached = _team_defaults.get(identity.team_id, version)
    if cached is None:
        cached = (
            Team.objects.filter(pk=identity.team_id).values_list("tool_exposure", flat=True).first()
        ) or ToolExposure.ALL
        _team_defaults.put(identity.team_id, cached, version)
    return cached


def tool_exposure(*, identity: Caller) -> tuple[str, int]:
    """The agent's exposure and the team's catalogue version it was read at; no query when both
    are known."""
    version = catalogue_state(team_id=identity.team_id).version
    return tool_exposure_at(identity=identity, version=version), version


def search_mode_on(*, identity: Caller) -> bool:
    """Whether the gateway offers this agent its tools through `find_tools` and `call_tool`."""
    return tool_exposure(identity=identity)[0] == ToolExposure.SEARCH


def pinned_servers(identity: Caller) -> frozenset[str]:
    """The servers the token declared (required, recommended, optional): its pinned tools'."""
    return frozenset(slug for slugs in identity.declared_servers.values() for slug in slugs)


def search_mode_variant(identity: Caller) -> str:
    """What, besides the version, tells one search-mode list from another: the pins, and what
    the pinned tools' account marks depend on."""
    pins = ",".join(sorted(pinned_servers(identity)))
    return f"search-mode|{pins}|{accounts_digest(identity)}"


def search_mode_document(*, identity: Caller, version: int) -> dict[str, Any]:
    """The tools/list result in search mode: the pinned tools the agent may call, then the
    meta-tools (a per-person tool with the caller's account mark)."""
    pins = pinned_servers(identity)
    catalogue = kept_catalogue(team_id=identity.team_id, role_id=identity.role_id, version=version)
    pinned = [tool for tool in catalogue.tools if tool.server_slug in pins]
    document = render_mcp(replace(catalogue, tools=pinned), identity)
    document["tools"] = [*document["tools"], *META_TOOLS]
    return document


def search_mode_body(*, identity: Caller, version: int, key: str) -> bytes:
    """`search_mode_document` as JSON, kept under `key` (the list's ETag)."""
    cached = _lists.get(key)
    if cached is not None:
        return cached
    body = json.dumps(search_mode_document(identity=identity, version=version)).encode()
    return _lists.put(key, body)


def tools_find(*, identity: Caller, query: str, limit: int) -> dict[str, Any]:
    """What `find_tools` answers: the catalogue's search over the agent's callable tools (the
    ranking of `GET /api/v1/catalogue?q=`), as MCP tool definitions with the caller's account
    marks; audited
    (`gateway.tools_found`: the query and the names found)."""
    version = catalogue_state(team_id=identity.team_id).version
    found = catalogue_search(
        team_id=identity.team_id,
        role_id=identity.role_id,
        query=query,
        limit=limit,
        version=version,
    )
    tools = render_mcp(found, identity)["tools"]
    names = [tool["name"] for tool in tools]
    target: Any
    if isinstance(identity, PersonIdentity):
        target = ClientAuthorization.objects.get(pk=identity.authorization_id)
        who = f"{identity.person_name} (through {identity.client_name})"
    else:
        target = AgentToken.objects.select_related("team").get(pk=identity.token_id)
        who = f"The agent {identity.name}"
    audit_record(
        actor=identity.label,
        action="gateway.tools_found",
        target=target,
        summary=f"{who} searched for {query[:80]!r}: "
        + (", ".join(names) if names else "nothing found")
        + ".",
        details={"query": query, "limit": limit, "found": names},
    )
    return {"tools": tools}
