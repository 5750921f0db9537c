"""Resources and prompts of the servers an agent may use, namespaced like tools.

A server's resources and prompts are offered through the gateway when the agent's catalogue
shows at least one of its tools (the server is approved, granted to the team for the role, and
callable). They are the ones discovery recorded (`ServerResource`, `ServerPrompt`, resource
templates included). Names: prompts `<slug>__<name>` like tools; resource URIs
`toolroom://<slug>/<the server's URI, percent-encoded>`; a template's literal parts are encoded
the same way and its `{expressions}` kept, so a URI the client expands from it reads as the
server's own expansion (`resource_lookup`). Reading a resource is a read-class call of its server
(the private-data ratchet counts it). Kept per process and per team+role version, like the call
table.
"""

from __future__ import annotations

import re
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


_EXPRESSION = re.compile(r"\{[^{}]*\}")


def namespaced_uri(slug: str, uri: str) -> str:
    return f"{URI_SCHEME}{slug}/{quote(uri, safe='')}"


def namespaced_uri_template(slug: str, template: str) -> str:
    """The template under the gateway's scheme: literal parts percent-encoded like a concrete
    URI, `{expressions}` kept for the client to expand."""
    parts: list[str] = []
    last = 0
    for match in _EXPRESSION.finditer(template):
        parts.append(quote(template[last : match.start()], safe=""))
        parts.append(match.group(0))
        last = match.end()
    parts.append(quote(template[last:], safe=""))
    return f"{URI_SCHEME}{slug}/{''.join(parts)}"


def template_pattern(template: str) -> re.Pattern[str]:
    """A pattern the server's URIs expanded from `template` match (any text per expression)."""
    pieces: list[str] = []
    last = 0
    for match in _EXPRESSION.finditer(template):
        pieces.append(re.escape(template[last : match.start()]))
        pieces.append(".*?")
        last = match.end()
    pieces.append(re.escape(template[last:]))
    return re.compile("".join(pieces), re.DOTALL)


@dataclass(frozen=True)
class ContentEntry:
    target: CallTarget  # the server, as a read-class call target
    upstream: str  # the server's own URI or prompt name
    listing: dict[str, Any]  # the MCP list entry, namespaced


@dataclass(frozen=True)
class TemplateEntry:
    target: CallTarget
    upstream: str  # the server's own URI template
    pattern: re.Pattern[str]  # what the server's URIs expanded from it look like
    listing: dict[str, Any]  # the MCP resource template entry, namespaced


@dataclass
class AgentContent:
    version: int
    resources: dict[str, ContentEntry] = field(default_factory=dict)
    prompts: dict[str, ContentEntry] = field(default_factory=dict)
    templates: list[TemplateEntry] = field(default_factory=list)


def resource_lookup(content: AgentContent, uri: str) -> ContentEntry | None:
    """What reading a namespaced URI reads: a listed resource, or a URI expanded from a listed
    template of that server (the server's URI must match the template); else None."""
    entry = content.resources.get(uri)
    if entry is not None:
        return entry
    parts = resource_uri_parts(uri)
    if parts is None:
        return None
    slug, upstream = parts
    for template in content.templates:
        if template.target.server_slug == slug and template.pattern.fullmatch(upstream):
            return ContentEntry(template.target, upstream, {"uri": uri})
    return None


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
        ServerResource.objects.filter(server_id__in=list(servers)).values(
            "server_id", "uri", "name", "title", "description", "mime_type", "is_template"
        )
    )
    prompts: list[Any] = list(
        ServerPrompt.objects.filter(server_id__in=list(servers)).values(
            "server_id", "name", "title", "description", "arguments"
        )
    )
    for row in resources:
        target = servers[row["server_id"]]
        template = row["is_template"]
        uri = (namespaced_uri_template if template else namespaced_uri)(
            target.server_slug, row["uri"]
        )
        listing: dict[str, Any] = {
            "uriTemplate" if template else "uri": uri,
            "name": namespaced_tool_name(target.server_slug, row["name"] or "resource"),
        }
        for field_name, key_name in (
            ("title", "title"),
            ("description", "description"),
            ("mime_type", "mimeType"),
        ):
            if row[field_name]:
                listing[key_name] = row[field_name]
        if template:
            content.templates.append(
                TemplateEntry(target, row["uri"], template_pattern(row["uri"]), listing)
            )
        else:
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
