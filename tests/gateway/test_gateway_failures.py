"""The gateway when servers misbehave: a server killed mid-call, a slow server, a dead one (the
circuit opens, is shared with the health state, and closes after a successful probe), a server at
its concurrency limit, and 100 concurrent sessions. Real servers, real processes."""

from __future__ import annotations

import time

import anyio
import pytest
from mcp import MCPError

from registry.gateway.services import server_gateway_policy_set
from registry.servers.jobs.launch import LaunchPlan
from registry.servers.models import CircuitState, Health, ServerStatus
from tests.factories import (
    AgentTokenFactory,
    GrantFactory,
)
from tests.gateway_helpers import discovered_http_server, gateway_client, text_of
from tests.mcp_fixtures import free_port, http_scenario_server, start_http_scenario  # noqa: F401
from workers.adapters.mcp_client import McpFailure
from workers.health import run_health_batch
from workers.session_pool import UpstreamPool

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_cache"),
    pytest.mark.processes,
]


@pytest.fixture
def token(team):
    return AgentTokenFactory(team=team).plain


@pytest.fixture
def echo(http_scenario_server, team):  # noqa: F811 (the fixture imported above)
    server = discovered_http_server("echo", http_scenario_server.url)
    GrantFactory(team=team, server=server)
    return server


@pytest.fixture
def victim(team):
    """A server of its own, which a test may kill."""
    running = start_http_scenario()
    server = discovered_http_server("victim", running.url)
    GrantFactory(team=team, server=server)
    yield server, running
    running.stop()


async def _timed_call(client, name, arguments):
    start = time.monotonic()
    try:
        result = await client.call_tool(name, arguments)
    except MCPError as error:
        return error, time.monotonic() - start
    return result, time.monotonic() - start


def test_a_server_killed_mid_call_answers_within_the_deadline_while_others_keep_answering(
    gateway, token, echo, victim
):
    _, running = victim
    outcome = {}

    async def run():
        async with (
            gateway_client(gateway.url, token) as slow,
            gateway_client(gateway.url, token) as fast,
        ):

            async def doomed():
                outcome["doomed"] = await _timed_call(slow, "victim__sleep", {"seconds": 30})

            async with anyio.create_task_group() as group:
                group.start_soon(doomed)
                await anyio.sleep(0.5)
                # While the slow call is in flight, another server answers at once.
                outcome["during"] = [
                    await _timed_call(fast, "echo__echo", {"text": str(i)}) for i in range(5)
                ]
                running.process.kill()
                running.process.wait()
                outcome["after"] = [
                    await _timed_call(fast, "echo__echo", {"text": str(i)}) for i in range(5)
                ]

    anyio.run(run)

    result, elapsed = outcome["doomed"]
    assert result.is_error is True
    assert elapsed <= 5.0 + 1.0  # the default deadline + 1 s, never a hang
    assert result.meta["toolroom/error"]["server"] == "victim"
    assert text_of(result).startswith("Toolroom: victim: ")
    for during_or_after in ("during", "after"):
        answers = outcome[during_or_after]
        assert [text_of(result) for result, _ in answers] == ["0", "1", "2", "3", "4"]
        assert max(seconds for _, seconds in answers) < 1.0


def test_a_dead_server_opens_the_circuit_shared_with_health_and_a_good_probe_closes_it(
    gateway, team, token
):
    port = free_port()
    # Discovered from the real server, so that the health check that closes the circuit finds
    # the approved definitions unchanged (it compares them: a rug pull would end the approval).
    running = start_http_scenario(port=port)
    try:
        server = discovered_http_server("flaky", f"http://127.0.0.1:{port}/mcp")
    finally:
        running.stop()
    server_gateway_policy_set(actor="test", server=server, call_deadline_seconds=0.5)
    GrantFactory(team=team, server=server)
    gateway.app.state.gateway.breaker_threshold = 3

    async def calls(count):
        async with gateway_client(gateway.url, token) as client:
            return [(await client.call_tool("flaky__echo", {"text": "x"})) for _ in range(count)]

    failures = anyio.run(calls, 4)

    codes = [result.meta["toolroom/error"]["code"] for result in failures]
    assert codes == ["upstream_unreachable"] * 3 + ["circuit_open"]
    status = ServerStatus.objects.get(server=server)
    assert (status.circuit_state, status.health) == (CircuitState.OPEN, Health.UNHEALTHY)
    assert "Gateway calls failed" in status.last_error

    running = start_http_scenario(port=port)  # the server comes back
    try:
        [probe] = run_health_batch([server.pk])  # a health check closes it too
        assert probe.ok
        assert ServerStatus.objects.get(server=server).circuit_state == CircuitState.CLOSED
        [result] = anyio.run(calls, 1)
    finally:
        running.stop()
    assert result.is_error is False


def test_a_server_at_its_concurrency_limit_queues_then_refuses(gateway, token, victim):
    server, _ = victim
    server_gateway_policy_set(actor="test", server=server, max_concurrency=1, queue_limit=1)

    async def run():
        async with gateway_client(gateway.url, token) as client:
            results = []

            async def one():
                results.append(await client.call_tool("victim__sleep", {"seconds": 1}))

            async with anyio.create_task_group() as group:
                for _ in range(3):
                    group.start_soon(one)
                    await anyio.sleep(0.1)
            return results

    results = anyio.run(run)

    busy = [r for r in results if r.is_error]
    assert len(busy) == 1
    assert busy[0].meta["toolroom/error"]["code"] == "server_busy"
    assert sorted(text_of(r) for r in results if not r.is_error) == ["slept", "slept"]


# The call deadline of the servers the 100-session tests call. They test that 100 sessions
# calling at once each get their own answer, not how fast: the 100 SDK clients run in this process
# beside the gateway, so on a loaded two-core machine the 100 calls take seconds of CPU here and in
# the server (measured at load 6-7: 1.6-9.5 s per call from the gateway to the server and back,
# evenly spread, none stalled), and the default 5 s deadline failed a third to half of them and
# then opened the circuit. A call that stalls still fails the test, at this deadline.
LOADED_MACHINE_DEADLINE = 60


class _Released:
    """Sessions opened, then released to call at once: the release waits until every session
    is open (a fixed pause did not cover the openings on a loaded machine)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.opened = 0
        self.all_open = anyio.Event()
        self.go = anyio.Event()

    async def open_then_wait(self) -> None:
        self.opened += 1
        if self.opened == self.count:
            self.all_open.set()
        await self.go.wait()

    async def release(self) -> None:
        await self.all_open.wait()
        self.go.set()


def test_100_concurrent_sessions_call_at_once_without_an_error(gateway, token, echo):
    server_gateway_policy_set(
        actor="test", server=echo, call_deadline_seconds=LOADED_MACHINE_DEADLINE
    )
    released = _Released(100)

    async def session(index):
        mode = "legacy" if index % 2 else "auto"  # half with Mcp-Session-Id, half stateless
        async with gateway_client(gateway.url, token, mode=mode) as client:
            await released.open_then_wait()
            return text_of(await client.call_tool("echo__echo", {"text": f"s{index}"}))

    async def run():
        results = {}

        async def one(index):
            results[index] = await session(index)

        async with anyio.create_task_group() as group:
            for index in range(100):
                group.start_soon(one, index)
            await released.release()
        return results

    results = anyio.run(run)

    assert results == {index: f"s{index}" for index in range(100)}


def _restarting_handshake_server(team, url):
    """The server `restarting` at `url`, granted to `team`, as if discovery had negotiated the
    handshake: the gateway's pooled session then has an Mcp-Session-Id, which the server does
    not know once restarted (HTTP 404)."""
    server = discovered_http_server("restarting", url)
    ServerStatus.objects.filter(server=server).update(protocol_version="2025-11-25")
    GrantFactory(team=team, server=server)
    return server


def test_a_session_the_upstream_dropped_is_reopened_transparently(gateway, team, token):
    port = free_port()
    running = start_http_scenario(port=port)
    try:
        _restarting_handshake_server(team, running.url)

        async def call():
            async with gateway_client(gateway.url, token) as client:
                return await client.call_tool("restarting__add", {"a": 1, "b": 2})

        first = anyio.run(call)
        pooled = dict(gateway.app.state.pool.sessions)
        running.stop()  # the upstream restarts: the pooled session is gone with it
        running = start_http_scenario(port=port)
        second = anyio.run(call)
    finally:
        running.stop()

    assert len(pooled) == 1
    assert text_of(first) == "3"
    # A write-class tool: reopening is safe only because the dead session's request never
    # reached the tool (the server answered 404 for the unknown session).
    assert second.is_error is False, text_of(second)
    assert text_of(second) == "3"
    assert list(gateway.app.state.pool.sessions.values()) != list(pooled.values())


def test_a_drained_pooled_session_finishes_its_calls_and_refuses_later_ones_as_not_sent(
    http_scenario_server,  # noqa: F811 (the fixture imported above)
):
    """A session dropped with `drain` (the upstream forgot it: HTTP 404) still answers the 100
    calls it had taken; a call handed to it afterwards is answered at once as never sent (kind
    `connect`, which the gateway may retry), not left waiting for its deadline."""
    plan = LaunchPlan(
        server_id=1,
        slug="echo",
        name="Echo",
        transport="streamable_http",
        url=http_scenario_server.url,
        protocol_version="2026-07-28",
        allowed_networks=("127.0.0.0/8",),
    )

    async def load_plan():
        return plan

    async def run():
        pool = UpstreamPool(idle_seconds=300)
        answers: dict[int, object] = {}
        async with anyio.create_task_group() as group:
            pool.attach(group)
            session, _ = await pool.session((1, "shared"), load_plan)

            async def call(index):
                try:
                    answers[index] = await session.request(
                        lambda c: c.call_tool("echo", {"text": f"c{index}"})
                    )
                except McpFailure as failure:
                    answers[index] = failure

            with anyio.move_on_after(20):  # far beyond "at once"
                async with anyio.create_task_group() as calls:
                    for index in range(100):
                        calls.start_soon(call, index)
                    await anyio.sleep(0)  # the 100 calls are queued
                    await pool.drop((1, "shared"), session, drain=True)
                    calls.start_soon(call, 100)  # behind the drain
            group.cancel_scope.cancel()
        return answers

    answers = anyio.run(run)

    assert sorted(answers) == list(range(101))
    texts = [answers[i]["content"][0]["text"] for i in range(100)]
    assert texts == [f"c{i}" for i in range(100)]
    late = answers[100]
    assert isinstance(late, McpFailure)
    assert late.kind == "connect"
    assert "before the call was sent" in late.message


def test_100_sessions_calling_when_the_upstream_dropped_the_pooled_session(gateway, team, token):
    """The upstream restarted and forgot the pooled handshake session; 100 sessions then call at
    once, each getting HTTP 404 for it. The dead session is reopened once for all of them: no
    call drops the session another call has just reopened, none waits for its deadline."""
    port = free_port()
    running = start_http_scenario(port=port)
    try:
        server = _restarting_handshake_server(team, running.url)
        server_gateway_policy_set(
            actor="test", server=server, call_deadline_seconds=LOADED_MACHINE_DEADLINE
        )

        async def calls(count):
            results = {}
            released = _Released(count)

            async def one(index):
                async with gateway_client(gateway.url, token) as client:
                    await released.open_then_wait()
                    results[index] = await client.call_tool("restarting__add", {"a": index, "b": 1})

            async with anyio.create_task_group() as group:
                for index in range(count):
                    group.start_soon(one, index)
                await released.release()
            return results

        anyio.run(calls, 20)  # the pooled session is open and used by several calls
        running.stop()
        running = start_http_scenario(port=port)
        results = anyio.run(calls, 100)
    finally:
        running.stop()

    errors = {i: text_of(r) for i, r in results.items() if r.is_error}
    assert errors == {}
    assert {i: text_of(r) for i, r in results.items()} == {i: str(i + 1) for i in range(100)}
