"""Log messages a real SDK server sends during a tool call (`notifications/message`) reach the SDK
client that made the call through the real gateway, when it asked for them (a handshake session's
`logging/setLevel`, a 2026-07-28 request's log level), at its level or above, in both protocol
generations on either side; another client, and a caller who did not ask, hear nothing."""

from __future__ import annotations

import warnings

import anyio
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

EXPECTED = [("info", "info from chatty"), ("warning", "warning from chatty")]


@pytest.fixture
def chatty_server():
    upstream = start_http_scenario("--log")
    yield upstream
    upstream.stop()


def _granted(url, upstream_protocol):
    server = discovered_http_server("logs", url)
    if upstream_protocol is not None:  # how the gateway's pooled session talks to it
        ServerStatus.objects.filter(server=server).update(protocol_version=upstream_protocol)
    team = TeamFactory(slug="alpha")
    GrantFactory(team=team, server=server)
    return AgentTokenFactory(team=team).plain, AgentTokenFactory(team=team).plain


async def _set_level(client, level):
    with warnings.catch_warnings():  # deprecated by 2026-07-28; handshake clients still use it
        warnings.simplefilter("ignore")
        await client.set_logging_level(level)


async def _settle(heard, count):
    with anyio.move_on_after(3):  # a handshake client hears on its GET stream: may come later
        while len(heard) < count:
            await anyio.sleep(0.05)
    await anyio.sleep(0.3)  # nothing more comes


async def _scenario(url, token, other_token, mode):
    heard: list[tuple[str, object]] = []
    other_heard: list[tuple[str, object]] = []
    silent_heard: list[tuple[str, object]] = []

    def collect(into):
        async def callback(params):
            into.append((params.level, params.data))

        return callback

    asking = {"log_level": "info"} if mode != "legacy" else {}
    async with (
        gateway_client(
            url, other_token, mode="legacy", logging_callback=collect(other_heard)
        ) as other,
        gateway_client(url, token, mode=mode, logging_callback=collect(heard), **asking) as client,
        gateway_client(url, token, mode=mode, logging_callback=collect(silent_heard)) as silent,
    ):
        await _set_level(other, "debug")  # asks for everything, but makes no call
        await other.list_tools()
        if mode == "legacy":
            await _set_level(client, "info")
        result = await client.call_tool("logs__chatty", {"pause": 0.1})
        unasked = await silent.call_tool("logs__chatty", {})
        await _settle(heard, len(EXPECTED))
    return result, unasked, heard, other_heard, silent_heard


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["client handshake", "client 2026"])
@pytest.mark.parametrize(
    "upstream_protocol", ["2025-11-25", None], ids=["upstream handshake", "upstream 2026"]
)
def test_log_messages_reach_only_the_caller_who_asked(
    gateway, chatty_server, upstream_protocol, mode
):
    token, other_token = _granted(chatty_server.url, upstream_protocol)

    result, unasked, heard, other_heard, silent_heard = anyio.run(
        _scenario, gateway.url, token, other_token, mode
    )

    assert result.is_error is False, text_of(result)
    assert unasked.is_error is False, text_of(unasked)
    assert heard == EXPECTED  # at its level (info) or above: not the debug one
    assert other_heard == []  # asked for everything, made no call
    assert silent_heard == []  # made the call, did not ask
