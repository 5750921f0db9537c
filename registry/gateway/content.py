"""Resources and prompts of the servers an agent may use, namespaced like tools.

A server's resources and prompts are offered through the gateway when the agent's catalogue
shows at least one of its tools (the server is approved, granted to the team for the role, and
callable). They are the ones discovery recorded (`ServerResource`, `ServerPrompt`; concrete
resources, not templates). Names: prompts `<slug>__<name>` like tools; resource URIs
`toolroom://<slug>/<the server's URI, percent-encoded>`. Reading a resource is a read-class call
of its server (the private-data ratchet counts it). Kept per process and per team+role version,
like the call table.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote, unquote

from registry.catalogue.naming import namespaced_tool_name
from registry.gateway.calls import CallTarget, call_table
from registry.servers.models import ServerPrompt, ServerResource
from registry.teams.tokens import AgentIdentity

URI_SCHEME = "toolroom://"
_MAX = 4096


def namespaced_uri(slug: str, uri: str) -> str:
    return f"{URI_SCHEME}{slug}/{quote(uri, safe='')}"


@dataclass(frozen=True)
class ContentEntry:
    target: CallTarget  # the server, as a read-class call target
    upstream: str  # the server's own URI or prompt name
    listing: dict[str, Any]  # the MCP list entry, namespaced


@dataclass
class AgentContent:
    version: int
    resources: dict[str, ContentEntry] = field(default_factory=dict)
    prompts: dict[str, ContentEntry] = field(default_factory=dict)


_contents: dict[tuple[int, int], AgentContent] = {}
_lock = threading.Lock()


def agent_content(*, identity: AgentIdentity) -> AgentContent:
    """The resources and prompts the agent may use now; no query while the version holds."""
    table = call_table(team_id=identity.team_id, role_id=identity.role_id)
    key = (identity.team_id, identity.role_id)
    content = _contents.get(key)
    if content is not None and content.version == table.version:
        return content
    servers: dict[int, CallTarget] = {}
    for target in table.targets.values():
        servers.setdefault(
            target.server_id,
            replace(target, tool_name="", permission_class="read", input_schema={}),
        )
    content = AgentContent(version=table.version)
    resources: list[Any] = list(
        ServerResource.objects.filter(server_id__in=list(servers), is_template=False).values(
            "server_id", "uri", "name", "title", "description", "mime_type"
        )
    )
    prompts: list[Any] = list(
        ServerPrompt.objects.filter(server_id__in=list(servers)).values(
            "server_id", "name", "title", "description", "arguments"
        )
    )
    for row in resources:
        target = servers[row["server_id"]]
        uri = namespaced_uri(target.server_slug, row["uri"])
        listing: dict[str, Any] = {
            "uri": uri,
            "name": namespaced_tool_name(target.server_slug, row["name"] or "resource"),
        }
        for field_name, key_name in (
            ("title", "title"),
            ("description", "description"),
            ("mime_type", "mimeType"),
        ):
            if row[field_name]:
                listing[key_name] = row[field_name]
        content.resources[uri] = ContentEntry(target, row["uri"], listing)
    for row in prompts:
        target = servers[row["server_id"]]
        name = namespaced_tool_name(target.server_slug, row["name"])
        listing = {"name": name, "arguments": row["arguments"] or []}
        for field_name in ("title", "description"):
            if row[field_name]:
                listing[field_name] = row[field_name]
        content.prompts[name] = ContentEntry(target, row["name"], listing)
    with _lock:
        if len(_contents) >= _MAX:
            _contents.clear()
        _contents[key] = content
    return content


def resource_uri_parts(uri: str) -> tuple[str, str] | None:
    """(slug, the server's URI) of a namespaced resource URI, else None."""
    if not uri.startswith(URI_SCHEME):
        return None
    slug, _, encoded = uri[len(URI_SCHEME) :].partition("/")
    return (slug, unquote(encoded)) if slug and encoded else None
