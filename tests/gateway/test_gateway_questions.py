"""Questions an upstream asks mid-call (elicitation), through the real gateway to a real SDK
server whose tool asks, whether the upstream asks with `elicitation/create` (handshake) or
`input_required` (2026-07-28): a handshake client that declared elicitation gets the question
on its session, a 2026-07-28 client gets the gateway's own `input_required`, and either's answer
goes back upstream; a caller whose protocol cannot carry it gets a clear error naming the server
at once, never a hang."""

from __future__ import annotations

import time

import anyio
import httpx2
import mcp_types as types
import pytest

from registry.servers.models import ServerStatus
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import discovered_http_server, gateway_client, text_of
from tests.mcp_fixtures import start_http_scenario

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_cache"),
    pytest.mark.processes,
]

# A refused question ends the call well before the 5 s deadline.
REFUSED_WITHIN = 3.0


@pytest.fixture
def asking_server():
    upstream = start_http_scenario("--elicit")
    yield upstream
    upstream.stop()


def _granted(url, *, upstream_protocol=None):
    server = discovered_http_server("asks", url)
    if upstream_protocol is not None:  # how the gateway's pooled session talks to it
        ServerStatus.objects.filter(server=server).update(protocol_version=upstream_protocol)
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    return AgentTokenFactory(team=team).plain


@pytest.mark.parametrize(
    "mode", ["legacy", "auto"], ids=["client elicitation/create", "client input_required"]
)
@pytest.mark.parametrize(
    "upstream_protocol", ["2025-11-25", None], ids=["upstream handshake", "upstream 2026-07-28"]
)
def test_the_client_is_asked_and_its_answer_goes_upstream(
    gateway, asking_server, upstream_protocol, mode
):
    token = _granted(asking_server.url, upstream_protocol=upstream_protocol)
    asked = []

    async def answer(context, params):
        asked.append(params)
        return types.ElicitResult(action="accept", content={"ok": True, "note": "ship it"})

    async def run():
        async with gateway_client(
            gateway.url, token, mode=mode, elicitation_callback=answer
        ) as client:
            return await client.call_tool("asks__confirm", {"what": "the deploy"})

    result = anyio.run(run)

    assert result.is_error is False, text_of(result)
    assert text_of(result) == 'accept:{"note": "ship it", "ok": true}'
    assert [params.message for params in asked] == ["Go ahead with the deploy?"]
    assert asked[0].requested_schema["required"] == ["ok"]


def test_a_declined_question_goes_upstream_as_declined(gateway, asking_server):
    token = _granted(asking_server.url, upstream_protocol="2025-11-25")

    async def decline(context, params):
        return types.ElicitResult(action="decline")

    async def run():
        async with gateway_client(
            gateway.url, token, mode="legacy", elicitation_callback=decline
        ) as client:
            return await client.call_tool("asks__confirm", {"what": "it"})

    assert text_of(anyio.run(run)) == "decline:null"


@pytest.mark.parametrize("upstream_protocol", ["2025-11-25", None])
def test_a_client_that_cannot_be_asked_gets_a_clear_error_at_once(
    gateway, asking_server, upstream_protocol
):
    token = _granted(asking_server.url, upstream_protocol=upstream_protocol)
    reason = "this client did not declare the elicitation capability"

    async def run():
        async with gateway_client(gateway.url, token, mode="legacy") as client:
            started = time.monotonic()
            result = await client.call_tool("asks__confirm", {"what": "it"})
            return result, time.monotonic() - started

    result, took = anyio.run(run)

    assert result.is_error is True
    assert result.meta["toolroom/error"]["code"] == "input_not_carried"
    assert result.meta["toolroom/error"]["server"] == "asks"
    assert text_of(result).startswith(
        "Toolroom: asks: the server asked the caller for input mid-call (elicitation), but "
    )
    assert reason in text_of(result)
    assert took < REFUSED_WITHIN


def test_the_rest_endpoint_answers_a_question_with_a_clear_error(gateway, asking_server):
    token = _granted(asking_server.url, upstream_protocol="2025-11-25")

    with httpx2.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        answer = http.post(
            f"{gateway.base}/api/v1/tools/asks__confirm/call", json={"arguments": {"what": "x"}}
        )

    assert answer.status_code == 502
    error = answer.json()["error"]
    assert error["code"] == "input_not_carried"
    assert "the REST call endpoint cannot carry questions to the caller" in error["message"]


def test_a_forged_or_foreign_request_state_is_refused(gateway, asking_server):
    from mcp import MCPError

    token = _granted(asking_server.url)

    async def never(context, params):  # declares elicitation; the test drives the rounds itself
        raise AssertionError("not called")

    async def run():
        async with gateway_client(gateway.url, token, elicitation_callback=never) as client:
            first = await client.session.call_tool(
                "asks__confirm", {"what": "a"}, allow_input_required=True
            )
            answer = {"toolroom": types.ElicitResult(action="accept", content={"ok": True})}
            errors = []
            for state, arguments in (
                ("forged." + "0" * 64, {"what": "a"}),
                (first.request_state, {"what": "something else"}),  # another call's state
            ):
                with pytest.raises(MCPError) as refused:
                    await client.session.call_tool(
                        "asks__confirm",
                        arguments,
                        input_responses=answer,
                        request_state=state,
                        allow_input_required=True,
                    )
                errors.append(refused.value.message)
            return first, errors

    first, errors = anyio.run(run)

    assert isinstance(first, types.InputRequiredResult)
    assert list(first.input_requests) == ["toolroom"]
    assert first.input_requests["toolroom"].params.message == "Go ahead with a?"
    assert errors == [
        "Toolroom: The requestState was not issued by Toolroom.",
        "Toolroom: The requestState belongs to another call.",
    ]
