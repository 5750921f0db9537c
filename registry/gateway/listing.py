"""What the gateway lists: the team's catalogue in MCP form, the very document (selector, version,
ETag and cache entry) that `GET /api/v1/catalogue?format=mcp` serves."""

from __future__ import annotations

from dataclasses import dataclass

from registry.catalogue.documents import catalogue_document, catalogue_etag, tools_variant
from registry.catalogue.formats import render_tools
from registry.catalogue.selectors import catalogue_for_agent
from registry.catalogue.versions import catalogue_state
from registry.teams.tokens import AgentIdentity


@dataclass(frozen=True)
class ToolsListDocument:
    version: int
    etag: str
    body: bytes  # a `tools/list` result as JSON


def tools_list_document(*, identity: AgentIdentity) -> ToolsListDocument:
    """The team's `tools/list` result; no query when the version and document are cached."""
    state = catalogue_state(team_id=identity.team_id)
    etag = catalogue_etag(
        identity=identity,
        state=state,
        variant=tools_variant(fmt="mcp", category=None, identity=identity),
    )
    document = catalogue_document(
        etag=etag,
        build=lambda: render_tools(
            "mcp",
            catalogue_for_agent(team_id=identity.team_id, role_id=identity.role_id),
            version=state.version,
            preflight=None,
        ),
    )
    return ToolsListDocument(version=state.version, etag=etag, body=document.body)


def team_catalogue_version(*, team_id: int) -> int:
    """The team's catalogue version (from the cache): what list_changed watches."""
    return catalogue_state(team_id=team_id).version
