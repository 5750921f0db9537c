"""`GET /api/v1/catalogue/mcp.json?client=...`: each client's entry, used by the real client where
it runs here (Claude Code's `claude mcp list`, mcp-remote as Claude Desktop starts it, the MCP
Inspector's CLI) against a real gateway and server, and checked against the documented schema
where the client does not run here (VS Code, Cursor: desktop editors).

The clients come from npm at the versions below (installed once into var/test-npm-clients/).
Claude Code runs without an Anthropic account for `claude mcp add-json` and `claude mcp list`, which
connects to each configured server (initialize with the configured headers) and says whether it
could: it lists no tools without a model, so "Connected" (and a 401 for a wrong token) is what it
can show.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import Client, StdioServerParameters

from registry.catalogue.client_configs import MCP_REMOTE_VERSION, TOKEN_PLACEHOLDER
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import RunningGateway, discovered_http_server, text_of
from tests.mcp_fixtures import http_scenario_server  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = {
    "mcp-remote": MCP_REMOTE_VERSION,
    "@modelcontextprotocol/inspector": "2.12.0",
    "@anthropic-ai/claude-code": "2.1.332",
}
ENTRY = "toolroom-alpha"


@pytest.fixture(scope="session")
def npm_clients() -> Path:
    """The clients' programs (node_modules/.bin), installed from npm once."""
    if shutil.which("npm") is None:
        pytest.fail("npm is needed to install the MCP clients (Node.js >= 20).")
    prefix = ROOT / "var" / "test-npm-clients"
    bin_dir = prefix / "node_modules" / ".bin"
    wanted = [f"{name}@{version}" for name, version in CLIENTS.items()]
    installed = all(
        json.loads((prefix / "node_modules" / name / "package.json").read_text())["version"]
        == version
        for name, version in CLIENTS.items()
        if (prefix / "node_modules" / name / "package.json").exists()
    ) and all((prefix / "node_modules" / name).exists() for name in CLIENTS)
    if not installed:
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix), *wanted],
            check=True,
            capture_output=True,
            timeout=600,
        )
    return bin_dir


pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_cache"),
    pytest.mark.processes,
]


@pytest.fixture
def world(http_scenario_server, settings, api_client):  # noqa: F811 (the fixture imported above)
    """A real gateway in front of the scenario server (HTTP), granted to team alpha; the API
    client holds alpha's token and hands out entries pointing at the gateway."""
    server = discovered_http_server("echo", http_scenario_server.url)
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    token = AgentTokenFactory(team=team)
    gateway = RunningGateway()
    settings.TOOLROOM_GATEWAY_URL = gateway.url
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token.plain}")
    yield {"token": token.plain, "gateway": gateway}
    gateway.stop()


def _entry(api_client, client: str) -> dict[str, Any]:
    response = api_client.get("/api/v1/catalogue/mcp.json", {"client": client})
    assert response.status_code == 200, response.content
    document: dict[str, Any] = response.json()
    return document


def _env(home: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "LANG": "C.UTF-8",
        # Claude Code: no update checks, no telemetry (this machine reaches no such service).
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        **extra,
    }


def test_claude_code_connects_with_its_entry_and_the_token_from_the_environment(
    world, api_client, npm_clients, tmp_path
):
    document = _entry(api_client, "claude-code")
    entry = document["mcpServers"][ENTRY]
    claude = str(npm_clients / "claude")

    def run(*args: str, token: str) -> str:
        result = subprocess.run(
            [claude, *args],
            cwd=tmp_path,
            env=_env(tmp_path, TOOLROOM_AGENT_TOKEN=token),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return result.stdout + result.stderr

    added = run("mcp", "add-json", ENTRY, json.dumps(entry), token="")
    assert f"Added http MCP server {ENTRY}" in added

    connected = run("mcp", "list", token=world["token"])
    refused = run("mcp", "list", token="trm_000000000000_" + "x" * 43)

    assert f"{ENTRY}: {world['gateway'].url} (HTTP) - ✔ Connected" in connected
    assert "401" in refused
    assert "Connected" not in refused
    # The token stays out of Claude Code's own configuration.
    stored = (tmp_path / ".claude.json").read_text()
    assert world["token"] not in stored
    assert "${TOOLROOM_AGENT_TOKEN}" in stored


def test_claude_desktop_runs_mcp_remote_with_its_entry(world, api_client, npm_clients, tmp_path):
    entry = _entry(api_client, "claude-desktop")["mcpServers"][ENTRY]
    assert entry["command"] == "npx"
    assert entry["args"][:2] == ["-y", f"mcp-remote@{MCP_REMOTE_VERSION}"]
    # As Claude Desktop starts it, with the installed mcp-remote of that version instead of npx
    # downloading it, and the person's token where the entry says to put it.
    env = {
        key: value.replace(TOKEN_PLACEHOLDER, world["token"]) for key, value in entry["env"].items()
    }
    params = StdioServerParameters(
        command=str(npm_clients / "mcp-remote"),
        args=entry["args"][2:],
        env=_env(tmp_path, **env),
    )

    async def run() -> tuple[list[str], str]:
        async with Client(params) as client:
            listed = await client.list_tools()
            result = await client.call_tool("echo__echo", {"text": "through mcp-remote"})
            return [tool.name for tool in listed.tools], text_of(result)

    names, text = anyio.run(run)

    assert "echo__echo" in names
    assert text == "through mcp-remote"


def test_the_inspector_cli_lists_and_calls_with_its_entry(world, api_client, npm_clients, tmp_path):
    config = tmp_path / "toolroom-inspector.json"
    config.write_text(json.dumps(_entry(api_client, "inspector")))

    def inspector(*args: str) -> dict[str, Any]:
        result = subprocess.run(
            [
                str(npm_clients / "mcp-inspector"),
                "--cli",
                "--config",
                str(config),
                "--server",
                ENTRY,
                "--header",
                f"Authorization: Bearer {world['token']}",
                *args,
            ],
            env=_env(tmp_path, MCP_INSPECTOR_SECRET_STORE="memory"),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        answer: dict[str, Any] = json.loads(result.stdout)
        return answer

    listed = inspector("--method", "tools/list")
    called = inspector(
        "--method", "tools/call", "--tool-name", "echo__echo", "--tool-arg", "text=inspected"
    )

    assert "echo__echo" in [tool["name"] for tool in listed["tools"]]
    assert called["content"] == [{"type": "text", "text": "inspected"}]


# VS Code's mcp.json as its documentation describes it ("MCP configuration reference",
# code.visualstudio.com/docs/copilot/reference/mcp-configuration): `servers` (HTTP: type, url,
# headers) and `inputs` (promptString: id, description, password), values referring to an input
# as ${input:<id>}.
VSCODE_SCHEMA = {
    "type": "object",
    "required": ["servers"],
    "additionalProperties": False,
    "properties": {
        "inputs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["type", "id"],
                "additionalProperties": False,
                "properties": {
                    "type": {"enum": ["promptString", "pickString"]},
                    "id": {"type": "string"},
                    "description": {"type": "string"},
                    "password": {"type": "boolean"},
                },
            },
        },
        "servers": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["type", "url"],
                "additionalProperties": False,
                "properties": {
                    "type": {"enum": ["http", "sse"]},
                    "url": {"type": "string", "format": "uri"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
        },
    },
}
# Cursor's mcp.json for a remote server (cursor.com/docs/context/mcp): `mcpServers`, each with
# `url` and `headers`; "config interpolation" fills ${env:NAME} in url and headers from the
# environment Cursor runs in.
CURSOR_SCHEMA = {
    "type": "object",
    "required": ["mcpServers"],
    "additionalProperties": False,
    "properties": {
        "mcpServers": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["url"],
                "additionalProperties": False,
                "properties": {
                    "url": {"type": "string"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
        }
    },
}


def test_the_vscode_entry_fits_its_schema_and_prompts_for_the_token_as_a_password(
    world, api_client
):
    document = _entry(api_client, "vscode")

    jsonschema.validate(document, VSCODE_SCHEMA)
    header = document["servers"][ENTRY]["headers"]["Authorization"]
    assert header.startswith("Bearer ${input:")
    assert header.endswith("}")
    input_id = header.removeprefix("Bearer ${input:").removesuffix("}")
    (prompt,) = [i for i in document["inputs"] if i["id"] == input_id]
    assert (prompt["type"], prompt["password"]) == ("promptString", True)
    assert document["servers"][ENTRY]["url"] == world["gateway"].url


def test_the_cursor_entry_fits_its_schema_and_reads_the_token_from_the_environment(
    world, api_client
):
    document = _entry(api_client, "cursor")

    jsonschema.validate(document, CURSOR_SCHEMA)
    entry = document["mcpServers"][ENTRY]
    assert entry["headers"] == {"Authorization": "Bearer ${env:TOOLROOM_AGENT_TOKEN}"}
    assert entry["url"] == world["gateway"].url
