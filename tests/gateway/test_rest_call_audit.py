"""The REST call endpoint records the calls the web app answers itself (refused, or the gateway
out of reach) in the call audit, as the gateway records the same calls made over MCP."""

from __future__ import annotations

import socket

import pytest

from registry.access import rules
from registry.gateway import checks
from registry.gateway.models import CallOutcome, ToolCall
from registry.servers.services import tool_revoke
from tests.catalogue_helpers import READ, WRITE, approved_server
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("redis_cache")]


@pytest.fixture
def setup(committed, api_client):
    checks._tables.clear()
    with committed():
        team = TeamFactory(slug="alpha")
        server = approved_server("files", {"read_file": READ, "write_file": WRITE})
        GrantFactory(team=team, server=server)
        token = AgentTokenFactory(team=team)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token.plain}")
    return team, server, token


def _post(api_client, name, arguments, **headers):
    return api_client.post(
        f"/api/v1/tools/{name}/call", {"arguments": arguments}, format="json", **headers
    )


def test_a_refused_rest_call_is_in_the_call_audit(setup, api_client):
    team, _, token = setup

    unknown = _post(api_client, "files__delete_everything", {})
    invalid = _post(api_client, "files__read_file", {"value": 3}, HTTP_MCP_CONVERSATION_ID="c1")

    assert (unknown.status_code, invalid.status_code) == (404, 400)
    records = {record.error_class: record for record in ToolCall.objects.all()}
    assert set(records) == {rules.UNKNOWN_TOOL, checks.INVALID_ARGUMENTS}
    for record in records.values():
        assert (record.via, record.outcome) == ("rest", CallOutcome.REFUSED)
        assert (record.token_id, record.team_id) == (token.pk, team.pk)
    assert records[checks.INVALID_ARGUMENTS].name == "files__read_file"
    assert records[checks.INVALID_ARGUMENTS].server_slug == "files"
    assert records[checks.INVALID_ARGUMENTS].argument_bytes == len('{"value":3}')
    assert records[checks.INVALID_ARGUMENTS].conversation not in ("", "c1")  # hashed
    assert "is not of type 'string'" in records[checks.INVALID_ARGUMENTS].error


def test_a_rest_call_of_a_tool_no_longer_approved_is_recorded_with_the_reason(
    setup, api_client, committed
):
    _, server, _ = setup
    with committed():
        tool_revoke(actor="test", tool=server.tools.get(name="read_file"), reason="leaks")

    response = _post(api_client, "files__read_file", {"value": "x"})

    assert response.status_code == 403
    record = ToolCall.objects.get()
    assert record.error_class == response.json()["error"]["code"]
    assert record.outcome == CallOutcome.REFUSED


def test_a_rest_call_the_gateway_cannot_take_is_recorded_as_failed(setup, api_client, settings):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    settings.TOOLROOM_GATEWAY_INTERNAL_URL = f"http://127.0.0.1:{port}"

    response = _post(api_client, "files__read_file", {"value": "x"})

    assert response.status_code == 503
    record = ToolCall.objects.get()
    assert (record.outcome, record.error_class) == (CallOutcome.FAILED, "gateway_unavailable")
