"""Resources and prompts pass the gateway's rules like tool calls (issue 26, medium 5): a real
gateway in front of a real Streamable HTTP server offering a resource and a prompt.

What a grant covers (docs/access.md): a grant of a whole server covers its tools, resources and
prompts; a grant of one tool covers that tool only. A server set to "not callable", suspended, or
whose grant covers one tool answers no `resources/read` or `prompts/get`; each refusal is audited.
"""

from __future__ import annotations

import pytest

from registry.access.private_data import private_data_seen
from registry.gateway.models import CallOutcome, ToolCall
from registry.gateway.services import server_gateway_policy_set
from registry.servers import services as server_services
from registry.servers.models import McpServer, Tool
from registry.teams.tokens import token_authenticate
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import (
    RunningGateway,
    content_tried,
    discovered_http_server,
)
from tests.mcp_fixtures import http_scenario_server  # noqa: F401 (a fixture)
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_cache"),
    pytest.mark.processes,
]

RESOURCE = "toolroom://echo/memo%3A%2F%2Fgreeting"
PROMPT = "echo__summarise"


@pytest.fixture
def gateway():
    running = RunningGateway()
    yield running
    running.stop()


@pytest.fixture
def server(http_scenario_server):  # noqa: F811 (the fixture imported above)
    return discovered_http_server("echo", http_scenario_server.url)


def _try(gateway, token):
    return content_tried(gateway.url, token, resource=RESOURCE, prompt=PROMPT)


def test_a_server_not_callable_answers_no_resource_or_prompt_and_it_is_audited(gateway, server):
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    token = AgentTokenFactory(team=team).plain
    assert _try(gateway, token) == ([RESOURCE], [PROMPT], "ok", "ok")

    server_gateway_policy_set(actor="test", server=server, mode="not_callable")
    _, _, read, get = _try(gateway, token)

    assert "not callable through the gateway" in read
    assert "not callable through the gateway" in get
    refused = ToolCall.objects.filter(outcome=CallOutcome.REFUSED, error_class="not_callable")
    wait_for(lambda: refused.count() == 2, what="the two refusals in the audit")
    assert sorted(row.name for row in refused) == sorted([RESOURCE, PROMPT])


def test_a_grant_of_one_tool_opens_none_of_the_servers_resources_or_prompts(gateway, server):
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server, tool=Tool.objects.get(server=server, name="echo"))
    McpServer.objects.filter(pk=server.pk).update(data_sensitivity="confidential")
    token = AgentTokenFactory(team=team).plain

    resources, prompts, read, get = _try(gateway, token)

    assert (resources, prompts) == ([], [])
    assert read == f"No resource '{RESOURCE}' is offered to this team."
    assert get == f"No prompt '{PROMPT}' is offered to this team."


def test_a_suspended_server_answers_no_resource_or_prompt(gateway, server):
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    token = AgentTokenFactory(team=team).plain
    server_services.server_suspend(actor="test", server=server, reason="under review")

    resources, prompts, read, get = _try(gateway, token)

    assert (resources, prompts) == ([], [])
    assert "is suspended in Toolroom" in read
    assert "is suspended in Toolroom" in get


def test_reading_a_confidential_servers_resource_marks_the_ratchet(gateway, server):
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    McpServer.objects.filter(pk=server.pk).update(data_sensitivity="confidential")
    token = AgentTokenFactory(team=team)
    assert private_data_seen(token_authenticate(token.plain)) is None

    assert _try(gateway, token.plain)[2] == "ok"

    assert private_data_seen(token_authenticate(token.plain)) == "echo"
