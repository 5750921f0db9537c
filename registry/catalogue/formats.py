"""The catalogue in the shapes agents and clients read: native, MCP `tools/list`, OpenAI, Anthropic,
client configs (Claude `mcpServers`, VS Code `servers`) and the official MCP registry's server list.

Each function takes a built `Catalogue` and returns plain JSON-ready data; nothing here reads the
database.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from registry.catalogue.selectors import Catalogue, CatalogueServer, CatalogueTool, Preflight

TOOL_FORMATS = ("native", "mcp", "openai", "anthropic")
CLIENT_CONFIGS = ("claude", "vscode")
OFFICIAL_SERVER_SCHEMA = (
    "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
)
OFFICIAL_META = "io.modelcontextprotocol.registry/official"
TOOLROOM_META = "toolroom/catalogue"
TOKEN_ENV = "TOOLROOM_AGENT_TOKEN"  # noqa: S105 (a variable name)
EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def _object_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Function-calling APIs want an object schema; MCP tools always declare one, but be sure."""
    if schema.get("type") == "object":
        return schema
    return {**EMPTY_OBJECT_SCHEMA, **schema, "type": "object"}


def _description(tool: CatalogueTool) -> str:
    return tool.description or tool.title or tool.tool_name


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


def tool_entry_native(tool: CatalogueTool) -> dict[str, Any]:
    return {
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
        "serverHealth": tool.server_health,
        "unhealthy": tool.unhealthy,
        "accessExpiresAt": _iso(tool.access_expires_at),
    }


def preflight_data(preflight: Preflight) -> dict[str, Any]:
    return {
        "ok": preflight.ok,
        "servers": [
            {"server": i.server, "level": i.level, "status": i.status, "detail": i.detail}
            for i in preflight.items
        ],
    }


def render_native(
    catalogue: Catalogue, *, version: int, preflight: Preflight | None = None
) -> dict[str, Any]:
    document: dict[str, Any] = {
        "team": {"slug": catalogue.team_slug, "name": catalogue.team_name},
        "role": {"name": catalogue.role_name, "permissionClasses": catalogue.permission_classes},
        "version": version,
        "generatedAt": _iso(catalogue.generated_at),
        "servers": [server_entry_native(server) for server in catalogue.servers],
        "tools": [tool_entry_native(tool) for tool in catalogue.tools],
    }
    if preflight is not None:
        document["preflight"] = preflight_data(preflight)
    return document


def tool_entry_mcp(tool: CatalogueTool) -> dict[str, Any]:
    """One tool of a `tools/list` result; `_meta` says which server and tool a name stands for."""
    entry: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description,
        "inputSchema": _object_schema(tool.input_schema),
    }
    if tool.title:
        entry["title"] = tool.title
    if tool.output_schema:
        entry["outputSchema"] = tool.output_schema
    if tool.annotations:
        entry["annotations"] = tool.annotations
    entry["_meta"] = {
        TOOLROOM_META: {
            "server": tool.server_slug,
            "tool": tool.tool_name,
            "serverHealth": tool.server_health,
        }
    }
    return entry


def tool_entry_openai(tool: CatalogueTool) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": _description(tool),
            "parameters": _object_schema(tool.input_schema),
        },
    }


def tool_entry_anthropic(tool: CatalogueTool) -> dict[str, Any]:
    return {
        "name": tool.name,
        "description": _description(tool),
        "input_schema": _object_schema(tool.input_schema),
    }


def render_mcp(catalogue: Catalogue) -> dict[str, Any]:
    """A `tools/list` result."""
    return {"tools": [tool_entry_mcp(tool) for tool in catalogue.tools]}


def render_openai(catalogue: Catalogue) -> dict[str, Any]:
    """Chat Completions function tools: pass `tools` as the request's `tools`."""
    return {"tools": [tool_entry_openai(tool) for tool in catalogue.tools]}


def render_anthropic(catalogue: Catalogue) -> dict[str, Any]:
    """Messages API tool definitions: pass `tools` as the request's `tools`."""
    return {"tools": [tool_entry_anthropic(tool) for tool in catalogue.tools]}


def render_tools(
    fmt: str, catalogue: Catalogue, *, version: int, preflight: Preflight | None
) -> dict[str, Any]:
    if fmt == "mcp":
        return render_mcp(catalogue)
    if fmt == "openai":
        return render_openai(catalogue)
    if fmt == "anthropic":
        return render_anthropic(catalogue)
    return render_native(catalogue, version=version, preflight=preflight)


def render_client_config(catalogue: Catalogue, *, client: str, public_url: str) -> dict[str, Any]:
    """A client configuration with one entry: the team's endpoint on the gateway, which serves
    every tool of the catalogue under its namespaced name. The token stays out of the file."""
    name = f"toolroom-{catalogue.team_slug}"
    url = gateway_url(public_url)
    if client == "vscode":
        return {
            "inputs": [
                {
                    "type": "promptString",
                    "id": "toolroom-token",
                    "description": f"Toolroom agent token of the team {catalogue.team_name}",
                    "password": True,
                }
            ],
            "servers": {
                name: {
                    "type": "http",
                    "url": url,
                    "headers": {"Authorization": "Bearer ${input:toolroom-token}"},
                }
            },
        }
    return {
        "mcpServers": {
            name: {
                "type": "http",
                "url": url,
                "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"},
            }
        }
    }


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
