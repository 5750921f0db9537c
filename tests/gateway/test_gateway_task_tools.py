"""A tool a real SDK server offers only as a task (`execution.taskSupport: "required"`, which the
gateway does not support) is listed by the real gateway's `tools/list` marked, the way an MCP
client and its model read it: the description says it is not callable through the gateway and
why, and `_meta["toolroom/catalogue"]` carries the native catalogue's `notCallableThroughGateway`
reason; a call of it is refused before it reaches the server. Both protocol generations, and the
list of search mode (pinned tools, `find_tools`) too."""

from __future__ import annotations

import json

import anyio
import pytest

from registry.catalogue.formats import NOT_CALLABLE_KEY, TOOLROOM_META
from registry.servers.tool_definitions import TASK_REQUIRED_REASON
from registry.teams import services as team_services
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import discovered_http_server, gateway_client, text_of
from tests.mcp_fixtures import start_http_scenario

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_cache"),
    pytest.mark.processes,
]

RESEARCH_DESCRIPTION = "Research a question at length (it must be called as a task)."


@pytest.fixture
def task_server():
    upstream = start_http_scenario("--task-tool")
    yield upstream
    upstream.stop()


@pytest.fixture
def token(task_server):
    # A 2025-11-25 discovery: the 2026-07-28 generation has no `execution` in a tool (the SDK's
    # server leaves it out there), so only a handshake discovery records that it must be a task.
    server = discovered_http_server("lab", task_server.url, protocol_version="2025-11-25")
    assert server.tools.get(name="research").definition["execution"] == {"taskSupport": "required"}
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    return AgentTokenFactory(team=team)


def _assert_marked(research, echo):
    assert research.description == (
        f"Not callable through the gateway: {TASK_REQUIRED_REASON}.\n\n{RESEARCH_DESCRIPTION}"
    )
    assert research.meta[TOOLROOM_META][NOT_CALLABLE_KEY] == TASK_REQUIRED_REASON
    assert research.meta[TOOLROOM_META]["tool"] == "research"
    assert echo.description == "Return the text it was given."  # a callable tool: as it was
    assert NOT_CALLABLE_KEY not in echo.meta[TOOLROOM_META]


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["client handshake", "client 2026"])
def test_a_task_only_tool_is_listed_marked_and_refused(gateway, token, mode):
    async def run():
        async with gateway_client(gateway.url, token.plain, mode=mode) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            called = await client.call_tool("lab__research", {"question": "why?"})
            return listed, called

    listed, called = anyio.run(run)

    _assert_marked(listed["lab__research"], listed["lab__echo"])
    assert called.is_error is True
    assert called.meta["toolroom/error"]["code"] == "not_callable"
    assert TASK_REQUIRED_REASON in text_of(called)
    assert "researched without a task" not in text_of(called)  # the server was never reached


def test_search_mode_lists_and_finds_a_task_only_tool_marked(gateway, token):
    team_services.agent_token_tool_exposure_set(actor="test", token=token, exposure="search")
    team_services.agent_token_declare_servers(
        actor="test", token=token, declared_servers={"required": ["lab"]}
    )

    async def run():
        async with gateway_client(gateway.url, token.plain) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            found = await client.call_tool("find_tools", {"query": "research", "limit": 10})
            return listed, found

    listed, found = anyio.run(run)

    _assert_marked(listed["lab__research"], listed["lab__echo"])
    assert found.is_error is False, text_of(found)
    found_tools = {tool["name"]: tool for tool in json.loads(text_of(found))["tools"]}
    assert found_tools["lab__research"]["_meta"][TOOLROOM_META][NOT_CALLABLE_KEY] == (
        TASK_REQUIRED_REASON
    )
    assert found_tools["lab__research"]["description"].startswith(
        "Not callable through the gateway: "
    )
