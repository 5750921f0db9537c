"""Secret masking at the gateway: an upstream that echoes the server's secret (the API key the
gateway sends it) in an error result or an MCP error never shows it to the agent (MCP or REST)."""

from __future__ import annotations

import anyio
import httpx2
import pytest

from registry.core.secret_fields import MASK
from registry.servers.models import McpServer
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import discovered_http_server, gateway_client, text_of
from tests.mcp_fixtures import start_http_scenario

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_cache"),
    pytest.mark.processes,
]

SECRET = "sk-live-0f9e8d7c6b5a4321"


def test_an_upstream_error_that_echoes_the_server_secret_is_masked(gateway):
    upstream = start_http_scenario("--leak-secret")
    try:
        server = discovered_http_server("careless", upstream.url)
        server = McpServer.objects.get(pk=server.pk)
        server.headers = {"Authorization": f"Bearer {SECRET}"}
        server.save()
        team = TeamFactory(slug="alpha")
        GrantFactory(team=team, server=server)
        token = AgentTokenFactory(team=team).plain

        tool_error, failure = [
            (result, text_of(result)) for result in anyio.run(_calls, gateway, token)
        ]
        with httpx2.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            rest = http.post(
                f"{gateway.base}/api/v1/tools/careless__leak_failure/call", json={"arguments": {}}
            )
    finally:
        upstream.stop()

    # The call reached the server with the secret, and the server echoed it back ...
    assert tool_error[0].is_error is True
    assert f"credentials '{MASK}'" in tool_error[1]
    assert failure[0].meta["toolroom/error"]["code"] == "upstream_protocol_error"
    assert f"the upstream API refused the credentials '{MASK}'" in failure[1]
    assert failure[0].meta["toolroom/error"]["message"].count(MASK) == 1
    # ... but the agent never sees it, over MCP or REST.
    for text in (tool_error[1], failure[1], str(failure[0].meta), rest.text):
        assert SECRET not in text
    assert rest.status_code == 502
    assert MASK in rest.json()["error"]["message"]


async def _calls(gateway, token):
    async with gateway_client(gateway.url, token) as client:
        return [
            await client.call_tool(f"careless__{name}", {})
            for name in ("leak_error", "leak_failure")
        ]
