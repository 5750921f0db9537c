"""What the gateway lists at `tools/list`, in both modes: every tool the agent may call (the very
document, ETag and cache entry of `GET /api/v1/catalogue?format=mcp`), or in search mode its
pinned tools and the meta-tools (registry.gateway.search_mode)."""

from __future__ import annotations

from dataclasses import dataclass

from registry.catalogue.documents import catalogue_document, catalogue_etag, tools_variant
from registry.catalogue.formats import render_tools
from registry.catalogue.selectors import catalogue_for_agent
from registry.catalogue.versions import catalogue_state
from registry.gateway.search_mode import (
    search_mode_body,
    search_mode_variant,
    tool_exposure_at,
)
from registry.teams.callers import Caller
from registry.teams.models import ToolExposure


@dataclass(frozen=True)
class ToolsListDocument:
    version: int
    etag: str  # tells this list from every other (team, role, version, mode, pins)
    body: bytes  # a `tools/list` result as JSON


def tools_list_document(*, identity: Caller) -> ToolsListDocument:
    """The agent's `tools/list` result; no query when the version and document are kept."""
    state = catalogue_state(team_id=identity.team_id)
    if tool_exposure_at(identity=identity, version=state.version) == ToolExposure.SEARCH:
        etag = catalogue_etag(identity=identity, state=state, variant=search_mode_variant(identity))
        body = search_mode_body(identity=identity, version=state.version, key=etag)
        return ToolsListDocument(version=state.version, etag=etag, body=body)
    etag = catalogue_etag(
        identity=identity,
        state=state,
        variant=tools_variant(fmt="mcp", category=None, identity=identity),
    )
    listed = catalogue_document(
        etag=etag,
        build=lambda: render_tools(
            "mcp",
            catalogue_for_agent(team_id=identity.team_id, role_id=identity.role_id),
            version=state.version,
            preflight=None,
            caller=identity,
        ),
    )
    return ToolsListDocument(version=state.version, etag=etag, body=listed.body)


def team_catalogue_version(*, team_id: int) -> int:
    """The team's catalogue version (from the cache): what list_changed watches."""
    return catalogue_state(team_id=team_id).version
