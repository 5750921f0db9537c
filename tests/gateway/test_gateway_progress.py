"""Long calls through the real gateway to a real SDK server whose tool reports progress: the
reports reach the SDK client that made the call, with its own progress token, in both protocol
generations on either side (a stdio server's through its runtime worker:
test_gateway_runtime_progress.py); they stretch the call deadline up to the server's maximum; the
timeout names the deadline that ended the call; a client that cancels cancels the call upstream."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from registry.gateway.services import server_gateway_policy_set
from registry.servers.models import ServerStatus
from tests.factories import AgentTokenFactory, GrantFactory, TeamFactory
from tests.gateway_helpers import discovered_http_server, gateway_client, text_of
from tests.mcp_fixtures import start_http_scenario

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("redis_cache"),
    pytest.mark.processes,
]


@pytest.fixture
def arrivals(tmp_path: Path) -> Path:
    return tmp_path / "arrivals"


@pytest.fixture
def counting_server(arrivals):
    upstream = start_http_scenario("--progress", "--arrivals", str(arrivals))
    yield upstream
    upstream.stop()


def _granted(url, *, upstream_protocol=None, **policy):
    server = discovered_http_server("progress", url)
    if upstream_protocol is not None:  # how the gateway's pooled session talks to it
        ServerStatus.objects.filter(server=server).update(protocol_version=upstream_protocol)
    if policy:
        server_gateway_policy_set(actor="test", server=server, **policy)
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    return AgentTokenFactory(team=team).plain


async def _countdown(url, token, mode, arguments, reports):
    async def on_progress(progress, total, message):
        reports.append((progress, total, message))

    async with gateway_client(url, token, mode=mode) as client:
        return await client.call_tool(
            "progress__countdown", arguments, progress_callback=on_progress
        )


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["client handshake", "client 2026"])
@pytest.mark.parametrize(
    "upstream_protocol", ["2025-11-25", None], ids=["upstream handshake", "upstream 2026"]
)
def test_the_servers_progress_reaches_the_caller(gateway, counting_server, upstream_protocol, mode):
    token = _granted(counting_server.url, upstream_protocol=upstream_protocol)
    reports: list[tuple[float, float | None, str | None]] = []

    result = anyio.run(_countdown, gateway.url, token, mode, {"steps": 3, "pause": 0.2}, reports)

    assert result.is_error is False, text_of(result)
    assert text_of(result) == "counted 3 (token given)"
    assert reports == [(1, 3, "step 1 of 3"), (2, 3, "step 2 of 3"), (3, 3, "step 3 of 3")]


def test_a_caller_who_did_not_ask_for_progress_hears_none(gateway, counting_server):
    token = _granted(counting_server.url)
    heard = []

    async def listen(message):
        heard.append(message)

    async def run():
        async with gateway_client(gateway.url, token, mode="legacy", message_handler=listen) as c:
            return await c.call_tool("progress__countdown", {"steps": 2, "pause": 0.1})

    result = anyio.run(run)

    assert text_of(result) == "counted 2 (token given)"  # the gateway asked upstream
    assert not [m for m in heard if "progress" in type(m).__name__.lower()], heard


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_progress_stretches_the_deadline_up_to_the_servers_maximum(gateway, counting_server, mode):
    token = _granted(counting_server.url, call_deadline_seconds=1.0, max_call_seconds=3.0)
    # 2 s of work reporting every 0.4 s: past the 1 s deadline, within the maximum.
    long = {"steps": 5, "pause": 0.4}
    reports: list[tuple[float, float | None, str | None]] = []
    result = anyio.run(_countdown, gateway.url, token, mode, long, reports)
    assert result.is_error is False, text_of(result)
    assert len(reports) == 5

    # The same work without progress: the 1 s deadline ends it, and says so.
    quiet = anyio.run(_countdown, gateway.url, token, mode, {**long, "quiet": True}, [])
    assert quiet.is_error is True
    assert "no answer within the call deadline of 1 s" in text_of(quiet), text_of(quiet)

    # Reporting, but running past the maximum: the maximum ends it, and says so.
    started = time.monotonic()
    endless = anyio.run(_countdown, gateway.url, token, mode, {"steps": 20, "pause": 0.4}, [])
    assert endless.is_error is True
    assert "maximum call time of 3 s" in text_of(endless), text_of(endless)
    assert time.monotonic() - started < 6


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_client_that_cancels_cancels_the_call_upstream(gateway, counting_server, arrivals, mode):
    token = _granted(counting_server.url, call_deadline_seconds=30.0, max_call_seconds=60.0)

    async def run():
        async with gateway_client(gateway.url, token, mode=mode) as client:
            with anyio.move_on_after(1.0):
                await client.call_tool(
                    "progress__countdown",
                    {"steps": 100, "pause": 0.2},
                    progress_callback=lambda *a: anyio.lowlevel.checkpoint(),
                )
            # The upstream call ends soon after, well before its 20 s of work.
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if arrivals.exists() and "cancelled" in arrivals.read_text():
                    return True
                await anyio.sleep(0.1)
            return False

    assert anyio.run(run), arrivals.read_text() if arrivals.exists() else "no arrivals"
