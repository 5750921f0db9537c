"""Questions mid-call (elicitation) of handshake sessions across gateway replicas: two real gateway
processes behind a real HAProxy (round robin, no stickiness), an SDK client in `mode="legacy"`
answering through its elicitation callback, an upstream whose tool asks. Wherever the session's
GET stream, its calls and its answers land, the `elicitation/create` reaches the client's GET
stream and its answer reaches the replica running the call, through Redis."""

from __future__ import annotations

import time

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway.test_gateway_replicas import LEGACY, Replica, Wire, replica_env
from tests.gateway_helpers import discovered_http_server, text_of
from tests.load_balancer import LoadBalancer
from tests.mcp_fixtures import start_http_scenario

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

CALLS = 8
# A call whose question or answer is lost fails at its deadline (5 s); relayed, far less.
ALL_WITHIN = 20.0


@pytest.fixture
def asking_token(redis_cache):
    upstream = start_http_scenario("--elicit")
    try:
        team = TeamFactory(slug="alpha")
        GrantFactory(team=team, server=discovered_http_server("asks", upstream.url))
        yield AgentTokenFactory(team=team).plain
    finally:
        upstream.stop()


def relayed(replica: Replica) -> dict[str, int]:
    """What the replica passed to another through Redis (its /healthz)."""
    answer = httpx2.get(f"http://127.0.0.1:{replica.port}/healthz", timeout=10, trust_env=False)
    return dict(answer.json()["relayed"])


def test_questions_reach_the_client_and_answers_reach_the_call_on_any_replica(
    asking_token, tmp_path, settings
):
    env = replica_env(settings, tmp_path)
    replicas = [Replica(env, tmp_path, "a"), Replica(env, tmp_path, "b")]
    balancer = LoadBalancer([replica.port for replica in replicas], tmp_path)
    wire = Wire(asking_token)
    asked: list[str] = []

    async def answer(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"ok": True, "note": params.message})

    async def run() -> tuple[list[str], float]:
        started = time.monotonic()
        texts = []
        transport = streamable_http_client(balancer.url, http_client=wire.http)
        async with Client(transport, mode="legacy", elicitation_callback=answer) as client:
            assert client.protocol_version == LEGACY
            for call in range(CALLS):  # a call whose answer is lost ends at its 5 s deadline
                result = await client.call_tool("asks__confirm", {"what": f"step {call}"})
                texts.append(text_of(result))
        return texts, time.monotonic() - started

    try:
        balancer.wait_up(2)
        texts, took = anyio.run(run)
        counts = [relayed(replica) for replica in replicas]
    finally:
        balancer.stop()
        for replica in replicas:
            replica.stop()

    assert texts == [
        f'accept:{{"note": "Go ahead with step {call}?", "ok": true}}' for call in range(CALLS)
    ]
    assert asked == [f"Go ahead with step {call}?" for call in range(CALLS)]
    assert 404 not in wire.statuses
    # Both ways were taken: questions to the replica holding the GET stream, answers back to the
    # replica running the call (round robin puts a call and its answer on different replicas).
    assert sum(count["questions"] for count in counts) > 0, counts
    assert sum(count["answers"] for count in counts) > 0, counts
    assert took < ALL_WITHIN


def test_an_answer_from_another_principal_is_refused_before_it_is_passed_on(
    asking_token, tmp_path, settings
):
    """Only the principal that opened a session may answer its questions: a forged answer on
    someone else's session is refused as if the session did not exist, before any replica
    sees it (the SDK's own owner check comes after the relay's)."""
    other_token = AgentTokenFactory(team=TeamFactory(slug="beta")).plain
    replica = Replica(replica_env(settings, tmp_path), tmp_path, "a")
    url = f"http://127.0.0.1:{replica.port}/mcp"
    accept = {"Accept": "application/json, text/event-stream"}

    def post(token: str, body: dict[str, object], session: str | None = None) -> httpx2.Response:
        headers = {**accept, "Authorization": f"Bearer {token}", "MCP-Protocol-Version": LEGACY}
        if session is not None:
            headers["Mcp-Session-Id"] = session
        return httpx2.post(url, json=body, headers=headers, timeout=30, trust_env=False)

    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "victim", "version": "1"},
        },
    }
    # An answer to a question another replica asked (the id names that replica).
    forged = {"jsonrpc": "2.0", "id": "toolroom-ask-elsewhere-1", "result": {"action": "decline"}}
    try:
        opened = post(asking_token, initialize)
        session = opened.headers["mcp-session-id"]
        assert post(other_token, forged, session).status_code == 404
        assert relayed(replica)["answers"] == 0
        assert post(asking_token, forged, session).status_code == 202  # its owner's is passed on
    finally:
        replica.stop()
