"""The Connect page's set-up snippets, from the catalogue's own renderers: the MCP client configs
(`render_client_config`, the same document as `/api/v1/catalogue/mcp.json`) and the function-calling
formats (`/api/v1/catalogue?format=openai|anthropic`). Nothing here holds a token: every snippet
reads it from the TOOLROOM_AGENT_TOKEN environment variable (or asks for it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from registry.catalogue.formats import TOKEN_ENV, gateway_url, render_client_config
from registry.catalogue.selectors import Catalogue


@dataclass(frozen=True)
class Snippet:
    key: str
    title: str
    where: str  # where it goes, in words
    language: str
    text: str


def _json(data: Any) -> str:
    return json.dumps(data, indent=2)


def connect_snippets(*, catalogue: Catalogue, public_url: str) -> list[Snippet]:
    base = public_url.rstrip("/")
    claude = render_client_config(catalogue, client="claude", public_url=base)
    vscode = render_client_config(catalogue, client="vscode", public_url=base)
    (name, entry), *_ = claude["mcpServers"].items()
    url = gateway_url(base)
    cursor = {
        "mcpServers": {
            name: {"url": url, "headers": {"Authorization": f"Bearer ${{env:{TOKEN_ENV}}}"}}
        }
    }
    desktop = {
        "mcpServers": {
            name: {
                # Claude Desktop's config file starts local programs; mcp-remote bridges to HTTP.
                "command": "npx",
                "args": ["-y", "mcp-remote", url, "--header", "Authorization:${AUTH_HEADER}"],
                "env": {"AUTH_HEADER": "Bearer <your agent token>"},
            }
        }
    }
    catalogue_url = f"{base}/api/v1/catalogue"
    openai = f'''import json, os, urllib.request
from openai import OpenAI

token = os.environ["{TOKEN_ENV}"]
request = urllib.request.Request(
    "{catalogue_url}?format=openai", headers={{"Authorization": f"Bearer {{token}}"}}
)
tools = json.load(urllib.request.urlopen(request))["tools"]
answer = OpenAI().chat.completions.create(
    model="gpt-4.1",
    messages=[{{"role": "user", "content": "What time is it in Tokyo?"}}],
    tools=tools,
)
print(answer.choices[0].message.tool_calls)'''
    anthropic = f'''import json, os, urllib.request
import anthropic

token = os.environ["{TOKEN_ENV}"]
request = urllib.request.Request(
    "{catalogue_url}?format=anthropic", headers={{"Authorization": f"Bearer {{token}}"}}
)
tools = json.load(urllib.request.urlopen(request))["tools"]
answer = anthropic.Anthropic().messages.create(
    model="claude-sonnet-4-5",
    max_tokens=1024,
    messages=[{{"role": "user", "content": "What time is it in Tokyo?"}}],
    tools=tools,
)
print([block for block in answer.content if block.type == "tool_use"])'''
    claude_code = (
        f"export {TOKEN_ENV}=<your agent token>\nclaude mcp add-json {name} '{json.dumps(entry)}'"
    )
    return [
        Snippet(
            "claude-code",
            "Claude Code",
            f"In a shell (or put the mcpServers document in the project's .mcp.json); Claude Code "
            f"expands ${{{TOKEN_ENV}}} from the environment.",
            "shell",
            claude_code,
        ),
        Snippet(
            "claude-desktop",
            "Claude Desktop",
            "claude_desktop_config.json (Settings, Developer, Edit Config); needs Node.js for "
            "mcp-remote.",
            "json",
            _json(desktop),
        ),
        Snippet(
            "vscode",
            "VS Code",
            ".vscode/mcp.json in the workspace; VS Code asks for the token once and keeps it.",
            "json",
            _json(vscode),
        ),
        Snippet(
            "cursor",
            "Cursor",
            f"~/.cursor/mcp.json (or .cursor/mcp.json in the project); set {TOKEN_ENV} in the "
            "environment Cursor starts from.",
            "json",
            _json(cursor),
        ),
        Snippet(
            "openai",
            "OpenAI function calling",
            "Python, with the openai package; the catalogue's OpenAI format is the `tools` list.",
            "python",
            openai,
        ),
        Snippet(
            "anthropic",
            "Anthropic tool use",
            "Python, with the anthropic package; the catalogue's Anthropic format is the `tools` "
            "list.",
            "python",
            anthropic,
        ),
    ]
