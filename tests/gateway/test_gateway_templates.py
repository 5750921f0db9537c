"""Resource templates through the real gateway: `resources/templates/list` offers the templates of
granted, approved servers, namespaced like resources, and a URI expanded from one reads through."""

from __future__ import annotations

import anyio
import pytest
from mcp import MCPError

from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import discovered_http_server, gateway_client
from tests.mcp_fixtures import start_http_scenario

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_cache"),
    pytest.mark.processes,
]


@pytest.fixture
def notes_server():
    upstream = start_http_scenario("--templates", "--name", "notes-server")
    yield upstream
    upstream.stop()


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_templates_are_listed_namespaced_and_an_expanded_uri_reads_through(
    gateway, notes_server, mode
):
    server = discovered_http_server("notes", notes_server.url)
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    token = AgentTokenFactory(team=team).plain
    other = AgentTokenFactory(team=TeamFactory(slug="beta")).plain

    async def run():
        async with gateway_client(gateway.url, token, mode=mode) as client:
            templates = (await client.list_resource_templates()).resource_templates
            concrete = [str(r.uri) for r in (await client.list_resources()).resources]
            expanded = templates[0].uri_template.replace("{id}", "42")
            read = await client.read_resource(expanded)
            with pytest.raises(MCPError) as outside:
                # The server's URI must match one of its templates: nothing else is read.
                await client.read_resource("toolroom://notes/file%3A%2F%2F%2Fetc%2Fpasswd")
            return templates, concrete, expanded, read, outside.value

    async def other_team():
        async with gateway_client(gateway.url, other, mode=mode) as client:
            templates = (await client.list_resource_templates()).resource_templates
            with pytest.raises(MCPError) as refused:
                await client.read_resource("toolroom://notes/memo%3A%2F%2Fnotes%2F42")
            return templates, refused.value

    templates, concrete, expanded, read, outside = anyio.run(run)
    other_templates, other_refused = anyio.run(other_team)

    assert [(t.uri_template, t.name) for t in templates] == [
        ("toolroom://notes/memo%3A%2F%2Fnotes%2F{id}", "notes__note")
    ]
    assert concrete == ["toolroom://notes/memo%3A%2F%2Fgreeting"]  # templates are not resources
    assert read.contents[0].text == "note 42 of notes-server"
    assert str(read.contents[0].uri) == expanded
    assert "No resource 'toolroom://notes/file%3A%2F%2F%2Fetc%2Fpasswd'" in outside.message
    assert other_templates == []  # another team is offered nothing
    assert "is offered to this team" in other_refused.message
