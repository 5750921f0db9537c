"""Issue 26, Low 2: a lone surrogate in REST call arguments is a 400, not a 500; and the gateway's
errors name the server, never its URL (a URL can carry a token in its path).

A real gateway (uvicorn) and a real Streamable HTTP MCP server, called over HTTP as an agent would.
"""

from __future__ import annotations

import httpx2
import pytest

from registry.servers.models import McpServer
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import RunningGateway, discovered_http_server
from tests.mcp_fixtures import free_port, http_scenario_server  # noqa: F401 (a fixture)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_cache"),
    pytest.mark.processes,
]

# JSON's own escape of a lone high surrogate: valid JSON text, no valid Unicode string.
LONE_SURROGATE_BODY = b'{"arguments": {"text": "\\ud800"}}'
PATH_TOKEN = "t0ken-9f8e7d6c5b4a39281706"  # a made-up token in a URL's path


@pytest.fixture
def gateway():
    running = RunningGateway()
    yield running
    running.stop()


@pytest.fixture
def agent(http_scenario_server):  # noqa: F811 (the fixture imported above)
    server = discovered_http_server("echo", http_scenario_server.url)
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    return {"server": server, "token": AgentTokenFactory(team=team).plain}


def test_a_lone_surrogate_in_the_arguments_is_a_400_at_the_gateway(gateway, agent):
    answer = httpx2.post(
        f"{gateway.base}/api/v1/tools/echo__echo/call",
        content=LONE_SURROGATE_BODY,
        headers={"Authorization": f"Bearer {agent['token']}", "Content-Type": "application/json"},
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "invalid"
    assert "surrogate" in answer.json()["error"]["message"]


def test_a_lone_surrogate_in_the_arguments_is_a_400_at_the_web_app(
    gateway, agent, api_client, settings
):
    settings.TOOLROOM_GATEWAY_INTERNAL_URL = gateway.base
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {agent['token']}")
    answer = api_client.post(
        "/api/v1/tools/echo__echo/call", LONE_SURROGATE_BODY, content_type="application/json"
    )
    assert answer.status_code == 400, answer.content
    assert answer.json()["error"]["code"] == "parse_error"
    assert "surrogate" in answer.json()["error"]["message"]


def test_a_pair_of_surrogates_is_one_character_and_passes(gateway, agent):
    answer = httpx2.post(
        f"{gateway.base}/api/v1/tools/echo__echo/call",
        content=b'{"arguments": {"text": "\\ud83d\\ude00"}}',
        headers={"Authorization": f"Bearer {agent['token']}", "Content-Type": "application/json"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["content"][0]["text"] == "\N{GRINNING FACE}"


def test_an_upstream_failure_names_the_server_not_its_url(gateway, agent):
    url = f"http://127.0.0.1:{free_port()}/{PATH_TOKEN}/mcp"  # nothing listens there
    McpServer.objects.filter(pk=agent["server"].pk).update(url=url)
    answer = httpx2.post(
        f"{gateway.base}/api/v1/tools/echo__echo/call",
        json={"arguments": {"text": "hi"}},
        headers={"Authorization": f"Bearer {agent['token']}"},
        timeout=60,
    )
    assert answer.status_code in (502, 503), answer.text
    message = answer.json()["error"]["message"]
    assert message.startswith("echo: ")
    assert PATH_TOKEN not in message
    assert "127.0.0.1" not in message


def test_any_text_that_echoes_the_url_is_masked():
    """Beyond the messages Toolroom writes itself (which name the server): an upstream or library
    error that quotes the URL, its path or its query shows none of them."""
    from registry.core.secret_fields import secret_redact
    from registry.gateway.secrets import url_secrets

    url = f"https://mcp.example.com/{PATH_TOKEN}/mcp?key=abcdef123456"
    text = (
        f"Client error '404 Not Found' for url '{url}'; GET /{PATH_TOKEN}/mcp?key=abcdef123456 "
        f"(key=abcdef123456)"
    )
    masked = secret_redact(text, url_secrets(url))
    assert PATH_TOKEN not in masked
    assert "abcdef123456" not in masked
