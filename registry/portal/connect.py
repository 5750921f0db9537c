"""The Connect page's set-up snippets, from the catalogue's own renderers: each MCP client's entry
(`render_client_config`, the same document as `/api/v1/catalogue/mcp.json?client=...`) and the
function-calling loops (list the tools with `/api/v1/catalogue?format=openai|anthropic`, let the
model pick one, call it with `/api/v1/tools/{name}/call?format=openai|anthropic`, hand the result
back). Nothing here holds a token: every snippet reads it from the TOOLROOM_AGENT_TOKEN
environment variable (or asks for it), and the first one, for a person's own OAuth-capable client,
needs none (the client signs the person in)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from registry.catalogue.client_configs import TOKEN_ENV, render_client_config
from registry.catalogue.formats import gateway_url
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


# The OpenAI loop on the Responses API: a function_call_output's `output` takes text, images and
# files, which the REST call's format=openai gives. The catalogue's OpenAI tools are in the Chat
# Completions shape ({"type": "function", "function": {...}}), flattened for Responses.
OPENAI_LOOP = """import json, os, urllib.request
from openai import OpenAI

BASE, TOKEN = "{base}", os.environ["{token_env}"]


def toolroom(path, body=None):
    request = urllib.request.Request(
        BASE + path,
        data=None if body is None else json.dumps(body).encode(),
        headers={{"Authorization": f"Bearer {{TOKEN}}", "Content-Type": "application/json"}},
    )
    return json.load(urllib.request.urlopen(request))


tools = [{{"type": "function", **t["function"]}}
         for t in toolroom("/api/v1/catalogue?format=openai")["tools"]]
client = OpenAI()
items = [{{"role": "user", "content": "What time is it in Tokyo?"}}]
while True:
    response = client.responses.create(model="gpt-4.1", input=items, tools=tools)
    calls = [item for item in response.output if item.type == "function_call"]
    if not calls:
        print(response.output_text)
        break
    items += response.output
    for call in calls:  # the model picked a tool: call it through Toolroom, hand back the result
        result = toolroom(f"/api/v1/tools/{{call.name}}/call?format=openai",
                          {{"arguments": json.loads(call.arguments)}})
        items.append({{**result, "call_id": call.call_id}})"""

ANTHROPIC_LOOP = """import json, os, urllib.request
import anthropic

BASE, TOKEN = "{base}", os.environ["{token_env}"]


def toolroom(path, body=None):
    request = urllib.request.Request(
        BASE + path,
        data=None if body is None else json.dumps(body).encode(),
        headers={{"Authorization": f"Bearer {{TOKEN}}", "Content-Type": "application/json"}},
    )
    return json.load(urllib.request.urlopen(request))


tools = toolroom("/api/v1/catalogue?format=anthropic")["tools"]
client = anthropic.Anthropic()
messages = [{{"role": "user", "content": "What time is it in Tokyo?"}}]
while True:
    answer = client.messages.create(
        model="claude-sonnet-4-5", max_tokens=1024, messages=messages, tools=tools
    )
    messages.append({{"role": "assistant", "content": answer.content}})
    uses = [block for block in answer.content if block.type == "tool_use"]
    if not uses:
        print("".join(block.text for block in answer.content if block.type == "text"))
        break
    results = []
    for use in uses:  # the model picked a tool: call it through Toolroom, hand back the result
        result = toolroom(f"/api/v1/tools/{{use.name}}/call?format=anthropic",
                          {{"arguments": use.input}})
        results.append({{**result, "tool_use_id": use.id}})
    messages.append({{"role": "user", "content": results}})"""


def connect_snippets(*, catalogue: Catalogue, public_url: str) -> list[Snippet]:
    base = public_url.rstrip("/")
    url = gateway_url(base)

    def config(client: str) -> dict[str, Any]:
        return render_client_config(catalogue, client=client, gateway=url)

    (name, entry), *_ = config("claude-code")["mcpServers"].items()
    inspector_file = "toolroom-inspector.json"
    claude_code = (
        f"export {TOKEN_ENV}=<your agent token>\n"
        f"claude mcp add-json {name} '{json.dumps(entry)}'\n"
        f"claude mcp list   # {name}: ... - Connected"
    )
    inspector = (
        f"cat > {inspector_file} <<'EOF'\n{_json(config('inspector'))}\nEOF\n"
        "npx -y @modelcontextprotocol/inspector --cli "
        f"--config {inspector_file} --server {name} \\\n"
        f'  --header "Authorization: Bearer ${TOKEN_ENV}" --method tools/list'
    )
    loop = {"base": base, "token_env": TOKEN_ENV}
    signs_in = (
        f"claude mcp add --transport http toolroom {url}\n"
        f"# Claude Desktop and claude.ai: Settings, Connectors, Add custom connector: {url}\n"
        "# VS Code, Cursor: this mcp.json entry (mcp.json?client=oauth):\n"
        f"{_json(config('oauth'))}"
    )
    return [
        Snippet(
            "sign-in",
            "Your own MCP client: sign in, no token",
            "Claude Code, Claude Desktop, claude.ai, VS Code, Cursor: give them the gateway's URL; "
            "they open Toolroom's sign-in, you choose the team and role, and every call is yours "
            "(revoke it under Connected apps).",
            "shell",
            signs_in,
        ),
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
            "claude_desktop_config.json (Settings, Developer, Edit Config); put your token in "
            "AUTH_HEADER. Claude Desktop starts local programs only: mcp-remote (Node.js) "
            "bridges to the gateway.",
            "json",
            _json(config("claude-desktop")),
        ),
        Snippet(
            "vscode",
            "VS Code",
            ".vscode/mcp.json in the workspace; VS Code asks for the token once (a password "
            "prompt) and keeps it.",
            "json",
            _json(config("vscode")),
        ),
        Snippet(
            "cursor",
            "Cursor",
            f"~/.cursor/mcp.json (or .cursor/mcp.json in the project); set {TOKEN_ENV} in the "
            "environment Cursor starts from.",
            "json",
            _json(config("cursor")),
        ),
        Snippet(
            "inspector",
            "MCP Inspector",
            "In a shell: the Inspector expands no variable in its config file, so the token "
            "goes on its command line.",
            "shell",
            inspector,
        ),
        Snippet(
            "openai",
            "OpenAI function calling",
            "Python, with the openai package: list the tools, let the model pick, call through "
            "Toolroom, hand the result back (format=openai gives what the Responses API takes, "
            "images included).",
            "python",
            OPENAI_LOOP.format(**loop),
        ),
        Snippet(
            "anthropic",
            "Anthropic tool use",
            "Python, with the anthropic package: the same loop; format=anthropic gives a "
            "tool_result block (add its tool_use_id).",
            "python",
            ANTHROPIC_LOOP.format(**loop),
        ),
    ]
