"""The catalogue in the shapes agents and clients read: native, MCP `tools/list`, OpenAI, Anthropic
and the official MCP registry's server list (each client's `mcp.json` is `client_configs`).

Each function takes a built `Catalogue` and returns plain JSON-ready data; nothing here reads the
database.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.urls import reverse

from registry.catalogue.selectors import Catalogue, CatalogueServer, CatalogueTool, Preflight
from registry.teams.callers import Caller, PersonIdentity

TOOL_FORMATS = ("native", "mcp", "openai", "anthropic")
OFFICIAL_SERVER_SCHEMA = (
    "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
)
OFFICIAL_META = "io.modelcontextprotocol.registry/official"
TOOLROOM_META = "toolroom/catalogue"
EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
# A tool listed but not callable through the gateway (e.g. a task-only tool): the native entry's
# key, which an MCP entry's `_meta["toolroom/catalogue"]` carries too, and the words the portal
# and an MCP entry's description start with.
NOT_CALLABLE_KEY = "notCallableThroughGateway"
NOT_CALLABLE_PREFIX = "Not callable through the gateway"


PER_PERSON = frozenset({"person_oauth", "person_secret"})  # registry.servers.models.UpstreamAuth


def account_page_url() -> str:
    """The portal's Connected accounts page, where a person links or enters their account."""
    return settings.TOOLROOM_PUBLIC_URL.rstrip("/") + reverse("portal:upstream-accounts")


def upstream_mark(mode: str, server_slug: str, caller: Caller | None) -> dict[str, str] | None:
    """A per-person tool's "needs your account" mark for this caller: `linked`, `not_linked`,
    `broken` (re-link, or enter a new secret) or `needs_person` (an agent token cannot call it),
    and where to link. None for a shared server, or when the caller is not known."""
    if caller is None or mode not in PER_PERSON:
        return None
    if isinstance(caller, PersonIdentity):
        state = caller.upstream_accounts.get(server_slug, "")
        state = state if state in ("linked", "broken") else "not_linked"
    else:
        state = "needs_person"
    return {"mode": mode, "state": state, "url": account_page_url()}


def upstream_mark_note(mark: dict[str, str] | None) -> str:
    """The mark as the sentence a model reads at the end of a tool's description (the OpenAI and
    Anthropic formats, whose tool definitions take no field of Toolroom's); '' without a mark."""
    if mark is None:
        return ""
    secret = mark["mode"] == "person_secret"
    url = mark["url"]
    state = mark["state"]
    if state == "linked":
        return "Acts with your own account there (linked)."
    if state == "broken":
        if secret:
            return f"Your token or API key there was refused: enter a new one at {url}."
        return f"Your account there is broken: re-link it at {url}."
    if state == "needs_person":
        return (
            "Needs a person's own account: an agent token cannot call it (call it from a "
            "person's MCP client signed in to Toolroom)."
        )
    if secret:
        return f"Needs your account: enter your token or API key at {url}, then call it."
    return f"Needs your account: link it at {url}, then call it."


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Function-calling APIs want an object schema; MCP tools always declare one, but be sure."""
    if schema.get("type") == "object":
        return schema
    return {**EMPTY_OBJECT_SCHEMA, **schema, "type": "object"}


def _description(tool: CatalogueTool, caller: Caller | None = None) -> str:
    """What a function-calling model reads of a tool: its description, and for a per-person tool
    and a known caller the account mark's sentence on a line of its own."""
    text = tool.description or tool.title or tool.tool_name
    note = upstream_mark_note(upstream_mark(tool.upstream_auth, tool.server_slug, caller))
    return f"{text}\n\n{note}" if note else text


def not_callable_description(tool: CatalogueTool) -> str:
    """The description a client and its model read of a tool the gateway cannot call: it says so
    and why first, then what the tool does."""
    marked = f"{NOT_CALLABLE_PREFIX}: {tool.not_callable_reason}."
    return f"{marked}\n\n{tool.description}" if tool.description else marked


def gateway_url(public_url: str) -> str:
    """The team's MCP endpoint on the gateway: TOOLROOM_GATEWAY_URL, else `/mcp/` under the
    public URL (for a reverse proxy that sends it to the gateway)."""
    return settings.TOOLROOM_GATEWAY_URL or public_url.rstrip("/") + "/mcp/"


def server_entry_native(server: CatalogueServer) -> dict[str, Any]:
    return {
        "slug": server.slug,
        "name": server.name,
        "description": server.description,
        "version": server.version,
        "category": (
            {"slug": server.category_slug, "name": server.category_name}
            if server.category_slug
            else None
        ),
        "health": server.health,
        "unhealthy": server.unhealthy,
        "toolCount": server.tool_count,
    }


def tool_entry_native(tool: CatalogueTool, caller: Caller | None = None) -> dict[str, Any]:
    """`caller`: whose account marks a per-person tool carries (none: no mark)."""
    entry = {
        "name": tool.name,
        "server": tool.server_slug,
        "tool": tool.tool_name,
        "title": tool.title,
        "description": tool.description,
        "inputSchema": tool.input_schema,
        "outputSchema": tool.output_schema,
        "annotations": tool.annotations,
        "permissionClass": tool.permission_class,
        "definitionHash": tool.definition_hash,
        # Listed, but the gateway cannot call it (the reason), e.g. a task-only tool; else null.
        NOT_CALLABLE_KEY: tool.not_callable_reason,
        "serverHealth": tool.server_health,
        "unhealthy": tool.unhealthy,
        "accessExpiresAt": _iso(tool.access_expires_at),
        # The gateway's deadline for a call, and how far the server's progress may extend it.
        "callDeadlineSeconds": tool.call_deadline_seconds,
        "maxCallSeconds": tool.max_call_seconds,
    }
    mark = upstream_mark(tool.upstream_auth, tool.server_slug, caller)
    if mark is not None:
        entry["upstreamAccount"] = mark
    return entry


def preflight_data(preflight: Preflight) -> dict[str, Any]:
    return {
        "ok": preflight.ok,
        "servers": [
            {"server": i.server, "level": i.level, "status": i.status, "detail": i.detail}
            for i in preflight.items
        ],
    }


def render_native(
    catalogue: Catalogue,
    *,
    version: int,
    preflight: Preflight | None = None,
    caller: Caller | None = None,
) -> dict[str, Any]:
    document: dict[str, Any] = {
        "team": {"slug": catalogue.team_slug, "name": catalogue.team_name},
        "role": {"name": catalogue.role_name, "permissionClasses": catalogue.permission_classes},
        "version": version,
        "generatedAt": _iso(catalogue.generated_at),
        "servers": [server_entry_native(server) for server in catalogue.servers],
        "tools": [tool_entry_native(tool, caller) for tool in catalogue.tools],
    }
    if preflight is not None:
        document["preflight"] = preflight_data(preflight)
    return document


def tool_entry_mcp(tool: CatalogueTool, caller: Caller | None = None) -> dict[str, Any]:
    """One tool of a `tools/list` result; `_meta` says which server and tool a name stands for
    (and, for a per-person tool and a known caller, the caller's account mark)."""
    reason = tool.not_callable_reason
    entry: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description if reason is None else not_callable_description(tool),
        "inputSchema": _object_schema(tool.input_schema),
    }
    if tool.title:
        entry["title"] = tool.title
    if tool.output_schema:
        entry["outputSchema"] = tool.output_schema
    if tool.annotations:
        entry["annotations"] = tool.annotations
    inner: dict[str, Any] = {"server": tool.server_slug, "tool": tool.tool_name}
    if reason is not None:  # the native entry's key, there for every tool (null when callable)
        inner[NOT_CALLABLE_KEY] = reason
    inner["serverHealth"] = tool.server_health  # last but the account mark (fragments.py)
    mark = upstream_mark(tool.upstream_auth, tool.server_slug, caller)
    if mark is not None:
        inner["upstreamAccount"] = mark
    entry["_meta"] = {TOOLROOM_META: inner}
    return entry


def tool_entry_openai(tool: CatalogueTool, caller: Caller | None = None) -> dict[str, Any]:
    """A Chat Completions function tool (no field but the API's: a per-person tool's mark is a
    line of its description)."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": _description(tool, caller),
            "parameters": _object_schema(tool.input_schema),
        },
    }


def tool_entry_anthropic(tool: CatalogueTool, caller: Caller | None = None) -> dict[str, Any]:
    """A Messages API tool definition (its mark a line of the description, as OpenAI's)."""
    return {
        "name": tool.name,
        "description": _description(tool, caller),
        "input_schema": _object_schema(tool.input_schema),
    }


def render_mcp(catalogue: Catalogue, caller: Caller | None = None) -> dict[str, Any]:
    """A `tools/list` result."""
    return {"tools": [tool_entry_mcp(tool, caller) for tool in catalogue.tools]}


def render_openai(catalogue: Catalogue, caller: Caller | None = None) -> dict[str, Any]:
    """Chat Completions function tools: pass `tools` as the request's `tools`."""
    return {"tools": [tool_entry_openai(tool, caller) for tool in catalogue.tools]}


def render_anthropic(catalogue: Catalogue, caller: Caller | None = None) -> dict[str, Any]:
    """Messages API tool definitions: pass `tools` as the request's `tools`."""
    return {"tools": [tool_entry_anthropic(tool, caller) for tool in catalogue.tools]}


def render_tools(
    fmt: str,
    catalogue: Catalogue,
    *,
    version: int,
    preflight: Preflight | None,
    caller: Caller | None = None,
) -> dict[str, Any]:
    """`caller`: whose account marks per-person tools carry (a field in the native and MCP
    formats, a line of the description in the OpenAI and Anthropic ones; none: no mark)."""
    if fmt == "mcp":
        return render_mcp(catalogue, caller)
    if fmt == "openai":
        return render_openai(catalogue, caller)
    if fmt == "anthropic":
        return render_anthropic(catalogue, caller)
    return render_native(catalogue, version=version, preflight=preflight, caller=caller)


def registry_namespace(public_url: str, configured: str = "") -> str:
    """The reverse-DNS namespace of server names in the official registry shape."""
    if configured:
        return configured
    host = (urlsplit(public_url).hostname or "localhost").strip(".")
    labels = [label for label in host.split(".") if label]
    if all(label.isdigit() for label in labels):  # an IP address is no DNS name
        return "local.toolroom"
    return ".".join(reversed(labels)) or "local.toolroom"


def _repository(url: str) -> dict[str, str] | None:
    if not url:
        return None
    host = (urlsplit(url).hostname or "").lower()
    source = host.split(".")[-2] if host.count(".") >= 1 else host
    return {"url": url, "source": source or "git"}


def render_official_server(
    server: CatalogueServer, *, namespace: str, public_url: str
) -> dict[str, Any]:
    """One `ServerResponse` of the official registry API (v0.1). The only remote is the gateway:
    agents reach a server's tools through Toolroom, where approval and audit apply, so packages
    (which would run the server around Toolroom) are not listed."""
    detail: dict[str, Any] = {
        "$schema": OFFICIAL_SERVER_SCHEMA,
        "name": f"{namespace}/{server.slug}",
        "title": server.name[:100],
        "description": (server.description or server.name)[:100],
        "version": server.version or "0.0.0",
        "remotes": [
            {
                "type": "streamable-http",
                "url": gateway_url(public_url),
                "headers": [
                    {
                        "name": "Authorization",
                        "description": "Bearer followed by a Toolroom agent token",
                        "isRequired": True,
                        "isSecret": True,
                    }
                ],
            }
        ],
        "_meta": {
            TOOLROOM_META: {
                "slug": server.slug,
                "category": server.category_slug,
                "health": server.health,
                "toolCount": server.tool_count,
            }
        },
    }
    if server.homepage_url:
        detail["websiteUrl"] = server.homepage_url
    repository = _repository(server.repository_url)
    if repository:
        detail["repository"] = repository
    return {
        "server": detail,
        "_meta": {
            OFFICIAL_META: {
                "status": "active",
                "publishedAt": _iso(server.created_at),
                "updatedAt": _iso(server.updated_at),
                "isLatest": True,
            }
        },
    }


def render_official_list(
    servers: list[CatalogueServer], *, namespace: str, public_url: str, next_cursor: str | None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"count": len(servers)}
    if next_cursor:
        metadata["nextCursor"] = next_cursor
    return {
        "servers": [
            render_official_server(server, namespace=namespace, public_url=public_url)
            for server in servers
        ],
        "metadata": metadata,
    }
