"""The MCP adapter against real servers: SDK-written scenario servers and published PyPI servers.

No database: the adapter takes plain targets and returns plain dicts.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tests.mcp_fixtures import (
    http_scenario_server,  # noqa: F401 - fixtures
    scenario_argv,
    sse_scenario_server,  # noqa: F401
)
from workers.adapters.mcp_client import (
    Deadlines,
    HttpTarget,
    McpFailure,
    StdioTarget,
    connect,
)

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

QUICK = Deadlines(connect=10, call=5)


async def test_it_lists_and_calls_tools_of_a_stdio_server():
    async with connect(StdioTarget(scenario_argv()), deadlines=QUICK) as session:
        tools = await session.list_tools()
        result = await session.call_tool("add", {"a": 2, "b": 40})
        resources = await session.list_resources()
        prompts = await session.list_prompts()

    assert [t["name"] for t in tools] == ["echo", "add", "sleep"]
    assert tools[0]["inputSchema"]["required"] == ["text"]  # wire form, camelCase
    assert result["content"][0]["text"] == "42"
    assert result.get("isError") in (None, False)
    assert resources[0]["uri"] == "memo://greeting"
    assert prompts[0]["name"] == "summarise"
    assert session.identity.server_info["name"] == "scenario"
    assert session.identity.protocol_version == "2026-07-28"


async def test_it_speaks_the_older_handshake_when_asked():
    async with connect(StdioTarget(scenario_argv()), deadlines=QUICK, mode="legacy") as session:
        await session.ping()
        assert session.identity.protocol_version == "2025-11-25"
        assert len(await session.list_tools()) == 3


async def test_ping_is_refused_on_the_2026_protocol_with_a_clear_message():
    async with connect(StdioTarget(scenario_argv()), deadlines=QUICK) as session:
        with pytest.raises(McpFailure, match="has no ping"):
            await session.ping()


async def test_it_follows_pagination_through_10000_tools():
    async with connect(
        StdioTarget(scenario_argv("--tool-count", "10000")), deadlines=QUICK
    ) as session:
        tools = await session.list_tools()
    assert len(tools) == 10000
    assert tools[-1]["name"] == "tool_09999"


async def test_it_receives_a_2_mb_schema():
    async with connect(
        StdioTarget(scenario_argv("--schema-bytes", str(2 * 1024 * 1024))), deadlines=QUICK
    ) as session:
        tools = await session.list_tools()
    huge = next(t for t in tools if t["name"] == "huge")
    assert len(json.dumps(huge["inputSchema"])) >= 2 * 1024 * 1024


async def test_a_command_that_does_not_exist_is_a_spawn_failure():
    with pytest.raises(McpFailure) as excinfo:
        async with connect(StdioTarget(["/nonexistent/mcp-server"]), deadlines=QUICK):
            pass
    assert excinfo.value.kind == "spawn"
    assert "/nonexistent/mcp-server" in excinfo.value.message


async def test_a_server_that_never_answers_times_out_at_the_connect_deadline():
    started = time.monotonic()
    with pytest.raises(McpFailure) as excinfo:
        async with connect(
            StdioTarget(scenario_argv("--hang-on", "start", "--stderr-lines", "2")),
            deadlines=Deadlines(connect=1.5, call=1),
        ):
            pass
    assert excinfo.value.kind == "timeout"
    assert "handshake within 1.5 s" in excinfo.value.message
    assert "stderr line 1" in excinfo.value.stderr_tail
    assert time.monotonic() - started < 10


async def test_a_call_that_never_returns_times_out_at_the_call_deadline():
    async with connect(
        StdioTarget(scenario_argv("--hang-on", "call")), deadlines=Deadlines(connect=10, call=1)
    ) as session:
        with pytest.raises(McpFailure) as excinfo:
            await session.call_tool("echo", {"text": "x"})
        assert excinfo.value.kind == "timeout"
        assert len(await session.list_tools()) == 3  # the session itself still works


async def test_a_server_that_crashes_mid_call_is_reported_with_its_stderr():
    with pytest.raises(McpFailure) as excinfo:
        async with connect(
            StdioTarget(scenario_argv("--crash-on-call")), deadlines=Deadlines(connect=10, call=5)
        ) as session:
            await session.call_tool("echo", {"text": "x"})
    assert excinfo.value.kind in ("closed", "timeout")
    assert "crashing on purpose" in excinfo.value.stderr_tail


async def test_a_server_that_prints_garbage_fails_to_connect():
    with pytest.raises(McpFailure) as excinfo:
        async with connect(
            StdioTarget(scenario_argv("--garbage")), deadlines=Deadlines(connect=3, call=2)
        ):
            pass
    assert excinfo.value.kind in ("protocol", "timeout")


async def test_stderr_is_captured_but_bounded():
    async with connect(
        StdioTarget(scenario_argv("--stderr-lines", "5000")), deadlines=QUICK
    ) as session:
        await session.list_tools()
        tail = session.stderr_tail().splitlines()
    assert len(tail) <= 200
    assert tail[-1] == "scenario server stderr line 4999"


async def test_the_callers_own_errors_come_back_unchanged():
    with pytest.raises(KeyError, match="mine"):
        async with connect(StdioTarget(scenario_argv()), deadlines=QUICK):
            raise KeyError("mine")


async def test_it_talks_streamable_http(http_scenario_server):  # noqa: F811
    target = HttpTarget(url=http_scenario_server.url, allowed_networks=["127.0.0.0/8"])
    async with connect(target, deadlines=QUICK) as session:
        tools = await session.list_tools()
        echoed = await session.call_tool("echo", {"text": "over http"})
    assert len(tools) == 3
    assert echoed["content"][0]["text"] == "over http"


async def test_it_talks_legacy_sse(sse_scenario_server):  # noqa: F811
    target = HttpTarget(
        url=sse_scenario_server.url, transport="sse", allowed_networks=["127.0.0.0/8"]
    )
    async with connect(target, deadlines=QUICK) as session:
        assert len(await session.list_tools()) == 3


async def test_the_network_guard_refuses_loopback_at_connect_time(http_scenario_server):  # noqa: F811
    # "localhost" passes no literal-address check; only resolving it shows it is loopback.
    url = http_scenario_server.url.replace("127.0.0.1", "localhost")
    with pytest.raises(McpFailure) as excinfo:
        async with connect(HttpTarget(url=url, allowed_networks=[]), deadlines=QUICK):
            pass
    assert excinfo.value.kind == "refused"
    assert "loopback" in excinfo.value.message


async def test_an_unreachable_http_server_is_a_connect_failure():
    from tests.mcp_fixtures import free_port

    target = HttpTarget(url=f"http://127.0.0.1:{free_port()}/mcp", allowed_networks=["127.0.0.0/8"])
    with pytest.raises(McpFailure) as excinfo:
        async with connect(target, deadlines=QUICK):
            pass
    assert excinfo.value.kind == "connect"


async def test_it_discovers_the_published_mcp_server_time():
    async with connect(
        StdioTarget([sys.executable, "-m", "mcp_server_time"]), deadlines=QUICK
    ) as session:
        tools = {t["name"]: t for t in await session.list_tools()}
        now = await session.call_tool("get_current_time", {"timezone": "Etc/UTC"})
    assert set(tools) == {"get_current_time", "convert_time"}
    assert tools["get_current_time"]["annotations"]["readOnlyHint"] is True
    assert session.identity.protocol_version == "2026-07-28"
    assert '"timezone": "Etc/UTC"' in now["content"][0]["text"]


async def test_it_discovers_the_published_mcp_server_git():
    repository = str(Path(__file__).resolve().parents[2])
    async with connect(
        StdioTarget([sys.executable, "-m", "mcp_server_git", "--repository", repository]),
        deadlines=QUICK,
    ) as session:
        names = {t["name"] for t in await session.list_tools()}
        status = await session.call_tool("git_status", {"repo_path": repository})
    assert {"git_status", "git_log", "git_diff"} <= names
    assert "branch" in status["content"][0]["text"].lower()
