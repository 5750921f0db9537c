"""The `mcp.json` entry each MCP client accepts for the team's endpoint on the gateway
(`GET /api/v1/catalogue/mcp.json?client=...` and the portal's Connect page).

More: docs/catalogue.md, "Module notes"."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from registry.catalogue.selectors import Catalogue

TOKEN_ENV = "TOOLROOM_AGENT_TOKEN"  # noqa: S105 (a variable name)
# The mcp-remote release the Claude Desktop entry runs, the one
# tests/catalogue/test_client_entries.py runs: npx would otherwise fetch whatever is newest on
# every start.
MCP_REMOTE_VERSION = "0.15.1"
VSCODE_INPUT_ID = "toolroom-token"
TOKEN_PLACEHOLDER = "<your agent token>"  # noqa: S105 (what a person replaces)
CLIENT_ALIASES = {"claude": "claude-code"}


def _claude_code(name: str, url: str, catalogue: Catalogue) -> dict[str, Any]:
    return {
        "mcpServers": {
            name: {
                "type": "http",
                "url": url,
                "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"},
            }
        }
    }


def _claude_desktop(name: str, url: str, catalogue: Catalogue) -> dict[str, Any]:
    # mcp-remote sends credentials over plain HTTP only to loopback unless told otherwise.
    parts = urlsplit(url)
    loopback = parts.hostname in ("localhost", "127.0.0.1", "::1")
    allow_http = ["--allow-http"] if parts.scheme == "http" and not loopback else []
    return {
        "mcpServers": {
            name: {
                "command": "npx",
                "args": [
                    "-y",
                    f"mcp-remote@{MCP_REMOTE_VERSION}",
                    url,
                    # No space after the colon: some clients split arguments on spaces.
                    "--header",
                    "Authorization:${AUTH_HEADER}",
                    *allow_http,
                ],
                "env": {"AUTH_HEADER": f"Bearer {TOKEN_PLACEHOLDER}"},
            }
        }
    }


def _vscode(name: str, url: str, catalogue: Catalogue) -> dict[str, Any]:
    return {
        "inputs": [
            {
                "type": "promptString",
                "id": VSCODE_INPUT_ID,
                "description": f"Toolroom agent token of the team {catalogue.team_name}",
                "password": True,
            }
        ],
        "servers": {
            name: {
                "type": "http",
                "url": url,
                "headers": {"Authorization": f"Bearer ${{input:{VSCODE_INPUT_ID}}}"},
            }
        },
    }


def _cursor(name: str, url: str, catalogue: Catalogue) -> dict[str, Any]:
    return {
        "mcpServers": {
            name: {"url": url, "headers": {"Authorization": f"Bearer ${{env:{TOKEN_ENV}}}"}}
        }
    }


# The entry of a person's OAuth-capable client: one for every team (the team is chosen at sign-in).
OAUTH_ENTRY = "toolroom"


def _oauth(name: str, url: str, catalogue: Catalogue) -> dict[str, Any]:
    return {"mcpServers": {OAUTH_ENTRY: {"type": "http", "url": url}}}


def _inspector(name: str, url: str, catalogue: Catalogue) -> dict[str, Any]:
    return {"mcpServers": {name: {"type": "streamable-http", "url": url}}}


CLIENT_RENDERERS: dict[str, Callable[[str, str, Catalogue], dict[str, Any]]] = {
    "claude-code": _claude_code,
    "claude-desktop": _claude_desktop,
    "cursor": _cursor,
    "inspector": _inspector,
    "vscode": _vscode,
    "oauth": _oauth,
}
CLIENT_CONFIGS = (*CLIENT_RENDERERS, *CLIENT_ALIASES)


def client_config_error(value: str) -> str | None:
    """Why `value` is not a client the catalogue has an entry for (None when it is one)."""
    if value in CLIENT_CONFIGS:
        return None
    return CLIENT_CHOICES_MESSAGE.format(input=value)


CLIENT_CHOICES_MESSAGE = (
    f"client must be one of {', '.join(CLIENT_RENDERERS)} "
    f"({', '.join(f'{alias} means {name}' for alias, name in CLIENT_ALIASES.items())}), "
    "not '{input}'."
)


def client_entry_name(catalogue: Catalogue) -> str:
    return f"toolroom-{catalogue.team_slug}"


def render_client_config(catalogue: Catalogue, *, client: str, gateway: str) -> dict[str, Any]:
    """The configuration document of `client` (one of CLIENT_CONFIGS) with one entry: the team's
    endpoint on the gateway (`gateway`), which serves every tool of the catalogue."""
    renderer = CLIENT_RENDERERS[CLIENT_ALIASES.get(client, client)]
    return renderer(client_entry_name(catalogue), gateway, catalogue)
