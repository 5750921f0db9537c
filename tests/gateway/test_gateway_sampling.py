"""Sampling and roots requests an upstream makes mid-call, through the real gateway to a real SDK
server whose tools ask for them, whether the upstream asks with `sampling/createMessage` and
`roots/list` (handshake) or `input_required` (2026-07-28): a client that declared the capability
gets the request (on its session, or as the gateway's own `input_required`) and its answer goes
back upstream; a client that did not declare it, or the REST endpoint, gets a clear error at
once."""

from __future__ import annotations

import json
import time

import anyio
import httpx2
import mcp_types as types
import pytest

from registry.servers.models import ServerStatus
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import discovered_http_server, gateway_client, text_of
from tests.mcp_fixtures import SAMPLING_SERVER, start_http_scenario

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_cache"),
    pytest.mark.processes,
]

REFUSED_WITHIN = 3.0
ROOTS = ["file:///home/ada/project", "file:///home/ada/notes"]
MODES = pytest.mark.parametrize(
    "mode", ["legacy", "auto"], ids=["client handshake", "client 2026-07-28"]
)
UPSTREAMS = pytest.mark.parametrize(
    "upstream_protocol", ["2025-11-25", None], ids=["upstream handshake", "upstream 2026-07-28"]
)


@pytest.fixture
def sampler():
    upstream = start_http_scenario("--sampling-only", "--roots-only", script=SAMPLING_SERVER)
    yield upstream
    upstream.stop()


def _granted(url, *, upstream_protocol=None):
    server = discovered_http_server("sampler", url)
    assert {tool.name for tool in server.tools.all()} >= {"summarize", "where"}
    if upstream_protocol is not None:  # how the gateway's pooled session talks to it
        ServerStatus.objects.filter(server=server).update(protocol_version=upstream_protocol)
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    return AgentTokenFactory(team=team).plain


def _arguments(tool):
    return {"text": "x"} if tool == "summarize" else {}


async def _model(context, params):
    said = params.messages[0].content.text
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=f"short ({len(said)} chars asked)"),
        model="tiny-model",
    )


async def _roots(context):
    return types.ListRootsResult(roots=[types.Root(uri=uri) for uri in ROOTS])


@MODES
@UPSTREAMS
def test_the_client_samples_and_its_answer_goes_upstream(gateway, sampler, upstream_protocol, mode):
    token = _granted(sampler.url, upstream_protocol=upstream_protocol)
    asked = []

    async def model(context, params):
        asked.append(params)
        return await _model(context, params)

    async def run():
        async with gateway_client(gateway.url, token, mode=mode, sampling_callback=model) as client:
            return await client.call_tool("sampler__summarize", {"text": "a long story"})

    result = anyio.run(run)

    assert result.is_error is False, text_of(result)
    assert text_of(result) == "tiny-model: short (23 chars asked)"
    assert [params.messages[0].content.text for params in asked] == ["Summarise: a long story"]
    assert asked[0].max_tokens == 50


@MODES
@UPSTREAMS
def test_the_client_lists_its_roots_to_the_server(gateway, sampler, upstream_protocol, mode):
    token = _granted(sampler.url, upstream_protocol=upstream_protocol)

    async def run():
        async with gateway_client(
            gateway.url, token, mode=mode, list_roots_callback=_roots
        ) as client:
            return await client.call_tool("sampler__where", {})

    result = anyio.run(run)

    assert result.is_error is False, text_of(result)
    assert json.loads(text_of(result)) == ROOTS


@MODES
@UPSTREAMS
@pytest.mark.parametrize(
    "need",
    [("summarize", "sampling", "for a completion"), ("where", "roots", "for its roots")],
    ids=["sampling", "roots"],
)
def test_a_client_that_did_not_declare_it_gets_a_clear_error_at_once(
    gateway, sampler, upstream_protocol, mode, need
):
    tool, capability, asked_for = need
    token = _granted(sampler.url, upstream_protocol=upstream_protocol)
    # It declares the other capabilities: only the one the server needs is missing.
    others = {"sampling_callback": _model, "list_roots_callback": _roots}
    others.pop("sampling_callback" if capability == "sampling" else "list_roots_callback")

    async def run():
        async with gateway_client(gateway.url, token, mode=mode, **others) as client:
            started = time.monotonic()
            result = await client.call_tool(f"sampler__{tool}", _arguments(tool))
            return result, time.monotonic() - started

    result, took = anyio.run(run)

    assert result.is_error is True
    assert result.meta["toolroom/error"]["code"] == "input_not_carried"
    assert text_of(result) == (
        f"Toolroom: sampler: the server asked the caller {asked_for} mid-call ({capability}), "
        f"but this client did not declare the {capability} capability."
    )
    assert took < REFUSED_WITHIN


@pytest.mark.parametrize("tool", ["summarize", "where"])
def test_the_rest_endpoint_answers_with_a_clear_error(gateway, sampler, tool):
    token = _granted(sampler.url, upstream_protocol="2025-11-25")

    with httpx2.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        url = f"{gateway.base}/api/v1/tools/sampler__{tool}/call"
        answer = http.post(url, json={"arguments": _arguments(tool)})

    assert answer.status_code == 502
    error = answer.json()["error"]
    assert error["code"] == "input_not_carried"
    assert "the REST call endpoint cannot carry questions to the caller" in error["message"]
