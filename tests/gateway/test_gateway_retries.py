"""Retries through the real gateway, timed by what really arrived: up to 3 retries with 1 s / 2 s
/ 4 s pauses, only where the request provably never reached the server (connections a listening
socket closed unread) or the tool is read-class (calls the server recorded); a write-class tool
whose call reached the server is not retried."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import anyio
import pytest

from registry.gateway.services import server_gateway_policy_set
from registry.servers.models import McpServer, ServerStatus
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import discovered_http_server, gateway_client, text_of
from tests.mcp_fixtures import start_http_scenario
from tests.tcp_faults import FaultyProxy

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_cache"),
    pytest.mark.processes,
]

# The pauses, each measured between two arrivals; the shared CPU adds a little to each.
BACKOFF = [1.0, 2.0, 4.0]
SLACK = 0.6


@pytest.fixture
def upstream(tmp_path):
    arrivals = tmp_path / "arrivals.txt"
    server = start_http_scenario("--arrivals", str(arrivals))
    server.arrivals = arrivals
    yield server
    server.stop()


def _arrivals(path: Path, tool: str) -> list[float]:
    if not path.exists():
        return []
    return [float(line.split()[0]) for line in path.read_text().splitlines() if line.endswith(tool)]


def _through(proxy_url, upstream_url, *, protocol=None):
    """The server discovered directly, then reached by the gateway through the proxy, with a
    deadline long enough for every pause (1 + 2 + 4 s)."""
    server = discovered_http_server("flaky", upstream_url)
    McpServer.objects.filter(pk=server.pk).update(url=proxy_url)
    if protocol is not None:  # how the gateway's session talks to it
        ServerStatus.objects.filter(server=server).update(protocol_version=protocol)
    server_gateway_policy_set(actor="test", server=server, call_deadline_seconds=12)
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    return AgentTokenFactory(team=team).plain


def _call(gateway, token, name, arguments):
    async def run():
        async with gateway_client(gateway.url, token) as client:
            started = time.monotonic()
            result = await client.call_tool(name, arguments)
            return result, time.monotonic() - started

    return anyio.run(run)


def _assert_backoff(intervals):
    assert len(intervals) == len(BACKOFF), intervals  # the first try and exactly 3 retries
    for measured, expected in zip(intervals, BACKOFF, strict=True):
        assert expected <= measured <= expected + SLACK, intervals


def test_connections_that_never_reached_the_server_are_retried_after_1_2_4_seconds(
    gateway, upstream
):
    proxy = FaultyProxy(0, mode="refuse")
    try:
        # On the handshake the session opens (initialize) before the call is sent: a session
        # that cannot be opened proves the call never went out.
        token = _through(proxy.url, upstream.url, protocol="2025-11-25")
        # A write-class tool: retried all the same, as the call never reached the server.
        result, took = _call(gateway, token, "flaky__add", {"a": 1, "b": 2})
    finally:
        proxy.stop()

    assert result.meta["toolroom/error"]["code"] == "upstream_unreachable", text_of(result)
    _assert_backoff(proxy.intervals())
    assert result.is_error is True
    assert took < 12
    assert _arrivals(upstream.arrivals, "add") == []


def test_a_read_tool_whose_call_reached_the_server_is_retried_after_1_2_4_seconds(
    gateway, upstream
):
    proxy = FaultyProxy(int(upstream.url.split(":")[2].split("/")[0]), mode="drop_calls")
    try:
        token = _through(proxy.url, upstream.url)
        result, _ = _call(gateway, token, "flaky__echo", {"text": "hi"})
    finally:
        proxy.stop()

    arrivals = _arrivals(upstream.arrivals, "echo")
    _assert_backoff([round(b - a, 2) for a, b in itertools.pairwise(arrivals)])
    assert proxy.calls_dropped == 4
    # Two connections per try: the reopened session's tools/list (its definitions checked on
    # open, workers/definitions.py), then the call, which the server got.
    assert len(proxy.accepted) == 8
    assert result.is_error is True
    assert result.meta["toolroom/error"]["code"] == "upstream_closed"


def test_a_write_tool_whose_call_reached_the_server_is_not_retried(gateway, upstream):
    proxy = FaultyProxy(int(upstream.url.split(":")[2].split("/")[0]), mode="drop_calls")
    try:
        token = _through(proxy.url, upstream.url)
        result, took = _call(gateway, token, "flaky__add", {"a": 1, "b": 2})
        anyio.run(anyio.sleep, 1.5)  # a retry would have arrived by now
    finally:
        proxy.stop()

    assert len(_arrivals(upstream.arrivals, "add")) == 1
    assert proxy.calls_dropped == 1
    assert result.is_error is True
    assert result.meta["toolroom/error"]["code"] == "upstream_closed", text_of(result)
    assert took < 1.0  # no pause either
