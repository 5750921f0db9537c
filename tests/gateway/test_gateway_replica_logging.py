"""A handshake session's log level across gateway replicas: two real gateway processes behind a
real HAProxy (round robin, no stickiness), an SDK client in `mode="legacy"` that sets its level
once (`logging/setLevel`, answered by one replica) and then calls a real SDK server's logging tool
several times, on both replicas: every call's messages at that level or above reach the client,
whichever replica ran the call (the level is kept with the session's record in Redis)."""

from __future__ import annotations

import warnings

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
from tests.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

CALLS = 6
MAX_CALLS = 20
PER_CALL = [("info", "info from chatty"), ("warning", "warning from chatty")]
MESSAGES_WITHIN = 10.0  # after its answer, a call's messages have this long to arrive


@pytest.fixture
def chatty_token(redis_cache):
    upstream = start_http_scenario("--log")
    try:
        team = TeamFactory(slug="alpha")
        GrantFactory(team=team, server=discovered_http_server("logs", upstream.url))
        yield AgentTokenFactory(team=team).plain
    finally:
        upstream.stop()


class Heard:
    """The log messages the client got, and a wait until there are so many (or a while)."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, object]] = []
        self.more: anyio.Event | None = None  # set by the next message

    async def collect(self, params: types.LoggingMessageNotificationParams) -> None:
        self.messages.append((params.level, params.data))
        if self.more is not None:
            self.more.set()

    async def until(self, count: int) -> None:
        """Until `count` messages came; after MESSAGES_WITHIN without them, go on (the test's
        assertion says what is missing)."""
        with anyio.move_on_after(MESSAGES_WITHIN):
            while len(self.messages) < count:
                self.more = anyio.Event()
                await self.more.wait()


def _per_replica(ran_on: list[tuple[str, ...]]) -> list[int]:
    """How many of the calls each of the two replicas (HAProxy's names for them) ran."""
    return [sum(name in names for names in ran_on) for name in ("gateway1", "gateway2")]


def streams(replica: Replica) -> int:
    """The GET streams the replica holds (its /healthz)."""
    answer = httpx2.get(f"http://127.0.0.1:{replica.port}/healthz", timeout=10, trust_env=False)
    return int(answer.json()["streams"])


def test_a_level_set_on_one_replica_holds_for_calls_on_every_replica(
    chatty_token, tmp_path, settings
):
    env = replica_env(settings, tmp_path)
    replicas = [Replica(env, tmp_path, "a"), Replica(env, tmp_path, "b")]
    balancer = LoadBalancer([replica.port for replica in replicas], tmp_path)
    wire = Wire(chatty_token)
    heard = Heard()

    async def run() -> list[tuple[str, ...]]:
        ran_on: list[tuple[str, ...]] = []
        transport = streamable_http_client(balancer.url, http_client=wire.http)
        async with Client(transport, mode="legacy", logging_callback=heard.collect) as client:
            assert client.protocol_version == LEGACY
            with warnings.catch_warnings():  # deprecated by 2026-07-28; handshake clients use it
                warnings.simplefilter("ignore")
                await client.set_logging_level("info")
            # The session's GET stream is open (on one of the replicas) before the first call.
            await anyio.to_thread.run_sync(
                lambda: wait_for(
                    lambda: sum(streams(replica) for replica in replicas) == 1,
                    timeout=20,
                    what="the session's GET stream open on a replica",
                )
            )
            # Round robin puts every other call on each replica; should the balancer take one
            # out for a moment (its health check missed on a loaded machine), more calls come
            # until each replica has run at least two.
            call = 0
            while call < CALLS or (call < MAX_CALLS and min(_per_replica(ran_on)) < 2):
                call += 1
                before = balancer.answered()
                result = await client.call_tool("logs__chatty", {})
                after = balancer.answered()
                ran_on.append(tuple(name for name in after if after[name] > before[name]))
                assert result.is_error is False, text_of(result)
                await heard.until(len(PER_CALL) * call)
        return ran_on

    try:
        balancer.wait_up(2)
        ran_on = anyio.run(run)
    finally:
        balancer.stop()
        for replica in replicas:
            replica.stop()

    # Every call's info and warning messages, in order, none of the debug ones.
    assert heard.messages == PER_CALL * len(ran_on), ran_on
    # The calls ran on both replicas (round robin): one of them never received the setLevel.
    assert min(_per_replica(ran_on)) >= 2, ran_on
    assert 404 not in wire.statuses
