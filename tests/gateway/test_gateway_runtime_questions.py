"""A stdio server whose tool asks (elicitation), or asks for a completion (sampling) or the caller's
roots, held by a runtime worker and called through the gateway: the request crosses the runtime
worker's private endpoint to the gateway's caller and the answer goes back, in per-team sessions
and in the warm shared session alike (every upstream session declares elicitation, sampling and
roots: the tools are ones the server offers only to clients that do)."""

from __future__ import annotations

import anyio
import mcp_types as types
import pytest

from registry.gateway.services import server_gateway_policy_set
from registry.servers import services as server_services
from registry.servers.jobs.runtime import runtime_request
from registry.servers.models import Tool
from tests.discovery_helpers import discover_inline
from tests.factories import AgentTokenFactory, GrantFactory, McpServerFactory, TeamFactory
from tests.gateway.test_gateway_runtime import gateway, shared_cache  # noqa: F401 (fixtures)
from tests.gateway_helpers import gateway_client, text_of
from tests.mcp_fixtures import SAMPLING_SERVER, scenario_argv
from workers.runtime import RuntimeManager

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


async def _confirm(url, token, mode, answer=None):
    options = {"elicitation_callback": answer} if answer is not None else {}
    async with gateway_client(url, token, mode=mode, **options) as client:
        return await client.call_tool("asks__confirm", {"what": "the restart"})


def _approved(slug, command):
    server = McpServerFactory(slug=slug, command=command)
    discover_inline(server)
    server_services.server_submit_for_review(actor="test", server=server)
    server_services.server_approve(actor="test", server=server)
    for tool in Tool.objects.filter(server=server):
        server_services.tool_approve(actor="test", tool=tool)
    # Cold starts of Python servers on a busy 2-core machine: a generous deadline.
    server_gateway_policy_set(actor="test", server=server, call_deadline_seconds=60)
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    return server, AgentTokenFactory(team=team).plain


def test_a_question_crosses_the_runtime_endpoint_to_the_caller_and_back(
    gateway,  # noqa: F811 (the fixture imported above)
):
    server, token = _approved("asks", scenario_argv("--elicit", "--elicit-only"))
    asked = []

    async def answer(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"ok": True})

    runtime_request(server=server, action="start", actor="test")
    manager = RuntimeManager("gateway-questions@host", heartbeat_seconds=0.5)
    manager.start()
    try:
        assert manager.command(server.pk, "start") == "running"
        per_team = {
            mode: anyio.run(_confirm, gateway.url, token, mode, answer)
            for mode in ("legacy", "auto")
        }
        not_declared = anyio.run(_confirm, gateway.url, token, "legacy")
        server_gateway_policy_set(actor="test", server=server, isolation_scope="shared")
        shared = anyio.run(_confirm, gateway.url, token, "legacy", answer)
    finally:
        manager.shutdown()

    for result in per_team.values():
        assert result.is_error is False, text_of(result)
        assert text_of(result) == 'accept:{"ok": true}'
    assert shared.is_error is False, text_of(shared)
    assert text_of(shared) == 'accept:{"ok": true}'
    assert asked == ["Go ahead with the restart?"] * 3
    assert not_declared.is_error is True
    assert not_declared.meta["toolroom/error"]["code"] == "input_not_carried"
    assert "did not declare the elicitation capability" in text_of(not_declared)


async def _call(url, token, mode, tool, callbacks=None):
    async with gateway_client(url, token, mode=mode, **(callbacks or {})) as client:
        return await client.call_tool(
            f"sampler__{tool}", {"text": "the log"} if tool == "summarize" else {}
        )


async def _model(context, params):
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="fine"), model="m1"
    )


async def _roots(context):
    return types.ListRootsResult(roots=[types.Root(uri="file:///srv/app")])


def test_sampling_and_roots_cross_the_runtime_endpoint_to_the_caller_and_back(
    gateway,  # noqa: F811 (the fixture imported above)
):
    argv = scenario_argv("--sampling-only", "--roots-only", script=SAMPLING_SERVER)
    server, token = _approved("sampler", argv)
    assert set(server.tools.values_list("name", flat=True)) == {
        "echo",
        "hold",
        "summarize",
        "where",
    }
    both = {"sampling_callback": _model, "list_roots_callback": _roots}

    runtime_request(server=server, action="start", actor="test")
    manager = RuntimeManager("gateway-sampling@host", heartbeat_seconds=0.5)
    manager.start()
    try:
        assert manager.command(server.pk, "start") == "running"
        results = [
            anyio.run(_call, gateway.url, token, mode, tool, both)
            for mode in ("legacy", "auto")
            for tool in ("summarize", "where")
        ]
        not_declared = anyio.run(_call, gateway.url, token, "legacy", "summarize")
        server_gateway_policy_set(actor="test", server=server, isolation_scope="shared")
        results.append(anyio.run(_call, gateway.url, token, "legacy", "where", both))
    finally:
        manager.shutdown()

    assert [text_of(result) for result in results] == [
        "m1: fine",
        '["file:///srv/app"]',
        "m1: fine",
        '["file:///srv/app"]',
        '["file:///srv/app"]',
    ]
    assert not_declared.is_error is True
    assert not_declared.meta["toolroom/error"]["code"] == "input_not_carried"
    assert "did not declare the sampling capability" in text_of(not_declared)
